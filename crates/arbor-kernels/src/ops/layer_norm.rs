//! `layer_norm`: layer normalisation over the last dimension as one op and one autodiff node;
//! the forward pass is the backend's own, the backward pass one row loop on the CPU backends.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// Layer normalisation over the last dimension, `(x − mean) / sqrt(var + ε) ⊙ γ + β` (the
/// biased variance, as Burn's `LayerNorm` and PyTorch's), as one op and one autodiff node.
///
/// Burn's `LayerNorm::forward` is about ten ops, and two of them reshape `γ` and `β`: an op
/// whose only tracked input is a parameter starts an autodiff graph of its own, which the next
/// op merges into the model's graph, at a cost that grows with the graph (Burn 0.21 moves
/// either graph into the other). Here `x`, `γ` and `β` are the node's direct inputs, so no
/// graph is started and none merged. The backward pass recomputes the statistics from `x`:
/// `dx = (ĝ − mean(ĝ) − x̂ ⊙ mean(ĝ ⊙ x̂)) / σ` with `ĝ = g ⊙ γ`, `dγ = Σ g ⊙ x̂`, `dβ = Σ g`,
/// one row loop on the CPU backends. The forward pass is Burn's own ops on every backend: Flex
/// runs them as vectorised whole-tensor passes, which measured faster than a row loop
/// (`cargo run --release -p arbor-bench --example layer_norm_vs_burn`).
///
/// `affine`: `(γ, β)`, or `None` for no affine map (R2D2's `LayerNorm(elementwise_affine =
/// False)`).
///
/// # Shapes
/// - `x`, output: `[..., d]`
/// - `γ`, `β`: `[d]`
pub fn layer_norm<B: ArborBackend, const D: usize>(
    x: Tensor<B, D>,
    affine: Option<(Tensor<B, 1>, Tensor<B, 1>)>,
    epsilon: f64,
) -> Tensor<B, D> {
    let dims = x.dims();
    let d = dims[D - 1];
    if let Some((g, b)) = &affine {
        assert!(
            g.dims() == [d] && b.dims() == [d],
            "layer_norm: gamma {:?} and beta {:?} for width {d}",
            g.dims(),
            b.dims()
        );
    }
    let rows = dims[..D - 1].iter().product::<usize>();
    let x2 = x.reshape([rows, d]);
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::layer_norm_rows(
        x2.into_primitive().tensor(),
        affine.map(|(g, b)| (g.into_primitive().tensor(), b.into_primitive().tensor())),
        epsilon,
    )));
    y.reshape(dims)
}

/// Layer normalisation in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{TensorMetadata, TensorPrimitive};

    use crate::reference::t2;

    /// Layer normalisation of `[rows, d]`: the backend's own `layer_norm` module op (Flex and
    /// CubeCL run it as one kernel), with `γ = 1` and no `β` when there is no affine map.
    pub fn layer_norm<B: Backend>(
        x: FloatTensor<B>,
        affine: Option<(FloatTensor<B>, FloatTensor<B>)>,
        epsilon: f64,
    ) -> FloatTensor<B> {
        let (gamma, beta) = match affine {
            Some((g, b)) => (g, Some(b)),
            None => {
                let d = x.shape()[1];
                // In `x`'s own float type: the device's default need not be the backend's.
                let ones = Tensor::<B, 1>::ones([d], (&B::float_device(&x), x.dtype()));
                (ones.into_primitive().tensor(), None)
            }
        };
        B::layer_norm(x, gamma, beta, epsilon)
    }

    /// `x̂ = (x − mean) / σ` and `1 / σ` (`[rows, 1]`) of `[rows, d]`.
    fn normalized<B: Backend>(x: Tensor<B, 2>, epsilon: f64) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let centered = x.clone().sub(x.mean_dim(1));
        let var = centered.clone().mul(centered.clone()).mean_dim(1);
        let rstd = var.add_scalar(epsilon).sqrt().recip();
        (centered.mul(rstd.clone()), rstd)
    }

    /// The gradients of [`layer_norm`] in plain ops.
    #[allow(clippy::type_complexity)]
    pub fn layer_norm_backward<B: Backend>(
        x: FloatTensor<B>,
        gamma: Option<FloatTensor<B>>,
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> (FloatTensor<B>, Option<(FloatTensor<B>, FloatTensor<B>)>) {
        let (xhat, rstd) = normalized::<B>(t2::<B>(x), epsilon);
        let g = t2::<B>(grad);
        let d = xhat.dims()[1];
        let (gh, affine) = match gamma {
            Some(gamma) => {
                let gamma = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(gamma));
                let d_gamma = g.clone().mul(xhat.clone()).sum_dim(0).reshape([d]);
                let d_beta = g.clone().sum_dim(0).reshape([d]);
                (
                    g.mul(gamma.reshape([1, d])),
                    Some((
                        d_gamma.into_primitive().tensor(),
                        d_beta.into_primitive().tensor(),
                    )),
                )
            }
            None => (g, None),
        };
        let dx = gh
            .clone()
            .sub(gh.clone().mean_dim(1))
            .sub(xhat.clone().mul(gh.mul(xhat).mean_dim(1)))
            .mul(rstd);
        (dx.into_primitive().tensor(), affine)
    }
}

/// The backward row loops over contiguous `f32` memory (AVX-512 or AVX2 + FMA at run time).
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use crate::isa::widest;
    use crate::lanes::{sum8, sum_dot8, sum_sq8};

    /// Mean and `1 / sqrt(var + ε)` of one row (two passes).
    #[inline(always)]
    fn row_stats(x: &[f32], epsilon: f32) -> (f32, f32) {
        let n = x.len().max(1) as f32;
        let mean = sum8(x) / n;
        let var = sum_sq8(x, mean) / n;
        (mean, 1.0 / (var + epsilon).sqrt())
    }

    #[inline(always)]
    fn layer_norm_backward_body(
        dx: &mut [f32],
        stats: &mut [f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
        gamma: Option<&[f32]>,
        epsilon: f32,
    ) {
        let mut gh = vec![0f32; d];
        for (((o, st), x), g) in dx
            .chunks_exact_mut(d)
            .zip(stats.chunks_exact_mut(2))
            .zip(x.chunks_exact(d))
            .zip(grad.chunks_exact(d))
        {
            let (mean, rstd) = row_stats(x, epsilon);
            st.copy_from_slice(&[mean, rstd]);
            match gamma {
                Some(gamma) => {
                    for ((h, &g), &w) in gh.iter_mut().zip(g).zip(gamma) {
                        *h = g * w;
                    }
                }
                None => gh.copy_from_slice(g),
            }
            let mean_g = sum8(&gh) / d as f32;
            let mean_gx = sum_dot8(&gh, x, mean) * rstd / d as f32;
            for ((o, &x), &h) in o.iter_mut().zip(x).zip(&gh) {
                let xhat = (x - mean) * rstd;
                *o = (h - mean_g - xhat * mean_gx) * rstd;
            }
        }
    }

    #[inline(always)]
    fn layer_norm_affine_backward_body(
        d_gamma: &mut [f32],
        d_beta: &mut [f32],
        stats: &[f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
    ) {
        d_gamma.fill(0.0);
        d_beta.fill(0.0);
        for ((st, x), g) in stats
            .chunks_exact(2)
            .zip(x.chunks_exact(d))
            .zip(grad.chunks_exact(d))
        {
            let (mean, rstd) = (st[0], st[1]);
            for (((dg, db), &x), &g) in d_gamma.iter_mut().zip(d_beta.iter_mut()).zip(x).zip(g) {
                *dg += g * (x - mean) * rstd;
                *db += g;
            }
        }
    }

    /// The layer-norm backward loops, one copy per instruction set
    /// ([`crate::isa::simd_copies`]), chosen at run time like sigmoid and tanh.
    #[cfg(target_arch = "x86_64")]
    mod norm_copies {
        use super::{layer_norm_affine_backward_body, layer_norm_backward_body};

        crate::isa::simd_copies! {
            fn layer_norm_backward(
                dx: &mut [f32],
                stats: &mut [f32],
                x: &[f32],
                grad: &[f32],
                d: usize,
                gamma: Option<&[f32]>,
                epsilon: f32,
            ) {
                layer_norm_backward_body(dx, stats, x, grad, d, gamma, epsilon)
            }

            fn layer_norm_affine_backward(
                d_gamma: &mut [f32],
                d_beta: &mut [f32],
                stats: &[f32],
                x: &[f32],
                grad: &[f32],
                d: usize,
            ) {
                layer_norm_affine_backward_body(d_gamma, d_beta, stats, x, grad, d)
            }
        }
    }

    /// `dx` of layer normalisation (width `d`, `f32` statistics) for the rows of `x` (statistics
    /// recomputed, and written to `stats` as `(mean, 1/σ)` per row for
    /// [`layer_norm_affine_backward`]): `dx = (ĝ − mean(ĝ) − x̂ ⊙ mean(ĝ ⊙ x̂)) / σ`, `ĝ = g ⊙ γ`
    /// (`g` without `γ`).
    pub fn layer_norm_backward(
        dx: &mut [f32],
        stats: &mut [f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
        gamma: Option<&[f32]>,
        epsilon: f64,
    ) {
        if d == 0 {
            return;
        }
        let epsilon = epsilon as f32;
        widest!(
            norm_copies,
            layer_norm_backward(dx, stats, x, grad, d, gamma, epsilon)
                else layer_norm_backward_body(dx, stats, x, grad, d, gamma, epsilon)
        )
    }

    /// `dγ = Σ_rows g ⊙ x̂` and `dβ = Σ_rows g` of layer normalisation, with each row's
    /// `(mean, 1/σ)` from [`layer_norm_backward`].
    pub fn layer_norm_affine_backward(
        d_gamma: &mut [f32],
        d_beta: &mut [f32],
        stats: &[f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
    ) {
        if d == 0 {
            return;
        }
        widest!(
            norm_copies,
            layer_norm_affine_backward(d_gamma, d_beta, stats, x, grad, d)
                else layer_norm_affine_backward_body(d_gamma, d_beta, stats, x, grad, d)
        )
    }
}

/// The CPU backends' entry point.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, reference};
    use crate::host::HostTensor;
    use crate::par;

    #[allow(clippy::type_complexity)]
    /// The CPU kernel on `f32` memory, [`reference::layer_norm_backward`] otherwise.
    pub(crate) fn layer_norm_backward<B: Backend>(
        x: FloatTensor<B>,
        gamma: Option<FloatTensor<B>>,
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> (FloatTensor<B>, Option<(FloatTensor<B>, FloatTensor<B>)>)
    where
        FloatTensor<B>: HostTensor,
    {
        layer_norm_backward_f32(&x, gamma.as_ref(), epsilon, &grad)
            .unwrap_or_else(|| reference::layer_norm_backward::<B>(x, gamma, epsilon, grad))
    }

    /// The gradients of layer normalisation: `dx` (rows in parallel) and, with `gamma`, `(dγ, dβ)`.
    #[allow(clippy::type_complexity)]
    fn layer_norm_backward_f32<T: HostTensor>(
        x: &T,
        gamma: Option<&T>,
        epsilon: f64,
        grad: &T,
    ) -> Option<(T, Option<(T, T)>)> {
        let shape = x.shape();
        let d = *shape.as_slice().last()?;
        let (xx, g) = (x.host()?, grad.host()?);
        let gamma = match gamma {
            Some(gm) => Some(gm.host()?),
            None => None,
        };
        let rows = xx.len().checked_div(d).unwrap_or(0);
        let mut dx = vec![0f32; xx.len()];
        // Each row's (mean, 1/σ), computed once for both passes.
        let mut stats = vec![0f32; 2 * rows];
        par::rows(rows, 2 * d, vec![(&mut dx, d), (&mut stats, 2)], &|r, o| {
            let [dx, stats] = o else {
                unreachable!("two outputs")
            };
            cpu::layer_norm_backward(
                dx,
                stats,
                par::at(&xx, &r, d),
                par::at(&g, &r, d),
                d,
                gamma.as_deref(),
                epsilon,
            );
        });
        let affine = gamma.map(|_| {
            let (mut dg, mut db) = (vec![0f32; d], vec![0f32; d]);
            cpu::layer_norm_affine_backward(&mut dg, &mut db, &stats, &xx, &g, d);
            (
                T::from_f32(dg, Shape::new([d])),
                T::from_f32(db, Shape::new([d])),
            )
        });
        Some((T::from_f32(dx, shape), affine))
    }
}

/// One autodiff node.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use crate::ArborBackend;

    /// The backward step of `layer_norm` (`N = 3` with `γ` and `β`, 1 without): the input is
    /// kept and the statistics recomputed.
    #[derive(Debug)]
    struct LayerNorm;

    impl<B: ArborBackend, const N: usize> Backward<B, N> for LayerNorm {
        type State = (FloatTensor<B>, Option<FloatTensor<B>>, f64);

        fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad = grads.consume::<B>(&ops.node);
            let (x, gamma, epsilon) = ops.state;
            let (dx, affine) = B::layer_norm_rows_backward(x, gamma, epsilon, grad);
            let mut parents = ops.parents.into_iter();
            if let Some(node) = parents.next().flatten() {
                grads.register::<B>(node.id, dx);
            }
            if let Some((d_gamma, d_beta)) = affine {
                if let Some(node) = parents.next().flatten() {
                    grads.register::<B>(node.id, d_gamma);
                }
                if let Some(node) = parents.next().flatten() {
                    grads.register::<B>(node.id, d_beta);
                }
            }
        }
    }

    /// `layer_norm_rows` as one node that keeps the input (and `γ`).
    #[allow(clippy::type_complexity)]
    pub(crate) fn layer_norm_rows<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        affine: Option<(FloatTensor<Autodiff<B, C>>, FloatTensor<Autodiff<B, C>>)>,
        epsilon: f64,
    ) -> FloatTensor<Autodiff<B, C>> {
        let out = B::layer_norm_rows(
            x.primitive.clone(),
            affine
                .as_ref()
                .map(|(g, b)| (g.primitive.clone(), b.primitive.clone())),
            epsilon,
        );
        match affine {
            Some((g, b)) => match LayerNorm
                .prepare::<C>([x.node, g.node, b.node])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => {
                    prep.finish((x.primitive, Some(g.primitive), epsilon), out)
                }
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
            None => match LayerNorm.prepare::<C>([x.node]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish((x.primitive, None, epsilon), out),
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
        }
    }
}
