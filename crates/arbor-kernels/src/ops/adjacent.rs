//! `adjacent_pairs`: every node beside its right neighbour, `[x_k ; x_{k+1}]`, the input of a
//! binary composition over all adjacent pairs (the Gumbel Tree-LSTM's layer).

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// Every node beside its right neighbour: `out[:, k] = [x[:, k] ; x[:, k + 1]]`, the input of a
/// binary composition over all adjacent pairs (the Gumbel Tree-LSTM's layer), one op (and one
/// autodiff node) instead of two strided views and a concatenation.
///
/// # Shapes
/// - `x`: `[batch, m, D]`, `m ≥ 2`
/// - output: `[batch, m − 1, 2D]`
pub fn adjacent_pairs<B: ArborBackend>(x: Tensor<B, 3>) -> Tensor<B, 3> {
    assert!(x.dims()[1] >= 2, "adjacent_pairs needs at least two nodes");
    Tensor::from_primitive(TensorPrimitive::Float(B::adjacent_pairs(
        x.into_primitive().tensor(),
    )))
}

/// The pairs in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use crate::reference::t3;

    /// `[x[:, k] ; x[:, k + 1]]` for every adjacent pair, in plain ops.
    pub fn adjacent_pairs<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
        let x = t3::<B>(x);
        let m = x.dims()[1];
        Tensor::cat(
            vec![x.clone().narrow(1, 0, m - 1), x.narrow(1, 1, m - 1)],
            2,
        )
        .into_primitive()
        .tensor()
    }

    /// The gradient of [`adjacent_pairs`] in plain ops: each node gets the left half of its own
    /// pair's gradient and the right half of its left neighbour's.
    pub fn adjacent_pairs_backward<B: Backend>(grad: FloatTensor<B>) -> FloatTensor<B> {
        let g = t3::<B>(grad);
        let [b, _, d2] = g.dims();
        let d = d2 / 2;
        let zero = Tensor::<B, 3>::zeros([b, 1, d], &g.device()).cast(g.dtype());
        let as_left = Tensor::cat(vec![g.clone().narrow(2, 0, d), zero.clone()], 1);
        let as_right = Tensor::cat(vec![zero, g.narrow(2, d, d)], 1);
        as_left.add(as_right).into_primitive().tensor()
    }
}

/// The loops over contiguous `f32` rows.
pub(crate) mod cpu {

    /// `out[b, k] = [x[b, k] ; x[b, k + 1]]` for `x` `[b, m, d]`.
    pub fn adjacent_pairs(x: &[f32], (b, m, d): (usize, usize, usize), out: &mut [f32]) {
        for bi in 0..b {
            for k in 0..m - 1 {
                let src = &x[(bi * m + k) * d..(bi * m + k + 2) * d];
                let o = (bi * (m - 1) + k) * 2 * d;
                out[o..o + 2 * d].copy_from_slice(src);
            }
        }
    }

    /// The gradient of [`adjacent_pairs`]: `dx[b, k] = g[b, k][..d] + g[b, k − 1][d..]`.
    pub fn adjacent_pairs_backward(g: &[f32], (b, m, d): (usize, usize, usize), dx: &mut [f32]) {
        dx.fill(0.0);
        for bi in 0..b {
            for k in 0..m - 1 {
                let o = (bi * (m - 1) + k) * 2 * d;
                let (left, right) = g[o..o + 2 * d].split_at(d);
                let (l, r) = ((bi * m + k) * d, (bi * m + k + 1) * d);
                for j in 0..d {
                    dx[l + j] += left[j];
                    dx[r + j] += right[j];
                }
            }
        }
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, reference};
    use crate::host::{dims3, HostTensor};
    use crate::par;

    /// The CPU kernel on `f32` memory, [`reference::adjacent_pairs`] otherwise.
    pub(crate) fn adjacent_pairs<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        adjacent_pairs_f32(&x).unwrap_or_else(|| reference::adjacent_pairs::<B>(x))
    }

    fn adjacent_pairs_f32<T: HostTensor>(x: &T) -> Option<T> {
        let xx = x.host()?;
        let (b, m, d) = dims3(x);
        if m < 2 {
            return None;
        }
        let mut out = vec![0f32; b * (m - 1) * 2 * d];
        par::rows(b, 3 * m * d, vec![(&mut out, (m - 1) * 2 * d)], &|r, o| {
            cpu::adjacent_pairs(par::at(&xx, &r, m * d), (r.len(), m, d), o[0]);
        });
        Some(T::from_f32(out, Shape::new([b, m - 1, 2 * d])))
    }

    /// The CPU kernel on `f32` memory, [`reference::adjacent_pairs_backward`] otherwise.
    pub(crate) fn adjacent_pairs_backward<B: Backend>(grad: FloatTensor<B>) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        adjacent_pairs_backward_f32(&grad)
            .unwrap_or_else(|| reference::adjacent_pairs_backward::<B>(grad))
    }

    fn adjacent_pairs_backward_f32<T: HostTensor>(grad: &T) -> Option<T> {
        let g = grad.host()?;
        let (b, m1, d2) = dims3(grad);
        let (m, d) = (m1 + 1, d2 / 2);
        let mut dx = vec![0f32; b * m * d];
        par::rows(b, 3 * m * d, vec![(&mut dx, m * d)], &|r, o| {
            cpu::adjacent_pairs_backward(par::at(&g, &r, m1 * d2), (r.len(), m, d), o[0]);
        });
        Some(T::from_f32(dx, Shape::new([b, m, d])))
    }
}

/// One autodiff node.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use crate::autodiff::{backward_with, unary};
    use crate::ArborBackend;

    /// The backward step of `adjacent_pairs`: its fused backward kernel.
    #[derive(Debug)]
    pub(crate) struct AdjacentPairs;

    impl<B: ArborBackend> Backward<B, 1> for AdjacentPairs {
        type State = ();

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |(), grad| [B::adjacent_pairs_backward(grad)]);
        }
    }

    /// `adjacent_pairs` as one node without state.
    pub(crate) fn adjacent_pairs<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        unary::<B, C, _>(AdjacentPairs, x, B::adjacent_pairs)
    }
}
