//! The Gumbel Tree-LSTM's layer update (Choi et al. 2018, eq. 7): `select_mix`,
//! `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` with `cum = cumsum(s)` along the nodes.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The Gumbel Tree-LSTM's layer update `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r`, with
/// `cum = cumsum(s)` over the `K` nodes, one op (and one autodiff node).
///
/// # Shapes
/// - `s`: `[batch, K]`, the selection (one-hot forward, soft gradient when straight-through)
/// - `parent`, `left`, `right`: `[batch, K, D]`
/// - output: `[batch, K, D]`
pub fn select_mix<B: ArborBackend>(
    s: Tensor<B, 2>,
    parent: Tensor<B, 3>,
    left: Tensor<B, 3>,
    right: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let [b, k, _] = parent.dims();
    assert_eq!(s.dims(), [b, k], "selection shape");
    assert!(
        left.dims() == parent.dims() && right.dims() == parent.dims(),
        "parent, left and right must have one shape"
    );
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::select_mix(
        s.into_primitive().tensor(),
        p(parent),
        p(left),
        p(right),
    )))
}

/// The mix in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorPrimitive;

    use crate::reference::t3;

    fn mix_weights<B: Backend>(s: FloatTensor<B>) -> [Tensor<B, 3>; 3] {
        let s = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(s)).unsqueeze_dim::<3>(2);
        let cum = s.clone().cumsum(1);
        let keep_left = cum.clone().neg().add_scalar(1.0);
        let take_right = cum.sub(s.clone());
        [s, keep_left, take_right]
    }

    /// `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` in plain ops.
    pub fn select_mix<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let [s, keep_left, take_right] = mix_weights::<B>(s);
        s.mul(t3(parent))
            .add(keep_left.mul(t3(left)))
            .add(take_right.mul(t3(right)))
            .into_primitive()
            .tensor()
    }

    /// The gradients of [`select_mix`] in plain ops: `∂/∂s_j = Σ_D g_j (p_j − r_j) +
    /// Σ_{k ≥ j} Σ_D g_k (r_k − l_k)`.
    pub fn select_mix_backward<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let [sw, keep_left, take_right] = mix_weights::<B>(s);
        let (p, l, r, g) = (
            t3::<B>(parent),
            t3::<B>(left),
            t3::<B>(right),
            t3::<B>(grad),
        );
        let [b, k, _] = p.dims();
        let own = g.clone().mul(p.sub(r.clone())).sum_dim(2).reshape([b, k]);
        let shift = g.clone().mul(r.sub(l)).sum_dim(2).reshape([b, k]);
        // Σ_{k ≥ j}: a reversed cumulative sum.
        let tail = shift.flip([1]).cumsum(1).flip([1]);
        let d_s = own.add(tail);
        let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
        [
            d_s.into_primitive().tensor(),
            prim(g.clone().mul(sw)),
            prim(g.clone().mul(keep_left)),
            prim(g.mul(take_right)),
        ]
    }
}

/// The loops over contiguous `f32` rows.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {

    /// `out = s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` for `[batch, k]` selections and
    /// `[batch, k, d]` states.
    pub fn select_mix(
        s: &[f32],
        p: &[f32],
        l: &[f32],
        r: &[f32],
        k: usize,
        d: usize,
        out: &mut [f32],
    ) {
        for (b, sel) in s.chunks_exact(k).enumerate() {
            let mut cum = 0f32;
            for (j, &sj) in sel.iter().enumerate() {
                cum += sj;
                let (a, bl, c) = (sj, 1.0 - cum, cum - sj);
                let at = (b * k + j) * d;
                let (p, l, r) = (&p[at..at + d], &l[at..at + d], &r[at..at + d]);
                let o = &mut out[at..at + d];
                for e in 0..d {
                    o[e] = a * p[e] + bl * l[e] + c * r[e];
                }
            }
        }
    }

    /// The gradients of [`select_mix`], written into `d_s` `[batch, k]` and `d_p`, `d_l`, `d_r`
    /// `[batch, k, d]`.
    #[allow(clippy::too_many_arguments)]
    pub fn select_mix_backward(
        s: &[f32],
        p: &[f32],
        l: &[f32],
        r: &[f32],
        grad: &[f32],
        k: usize,
        d: usize,
        d_s: &mut [f32],
        d_p: &mut [f32],
        d_l: &mut [f32],
        d_r: &mut [f32],
    ) {
        let mut shift = vec![0f32; k];
        for (b, sel) in s.chunks_exact(k).enumerate() {
            let mut cum = 0f32;
            let ds = &mut d_s[b * k..(b + 1) * k];
            for (j, &sj) in sel.iter().enumerate() {
                cum += sj;
                let at = (b * k + j) * d;
                let (pp, ll, rr) = (&p[at..at + d], &l[at..at + d], &r[at..at + d]);
                let g = &grad[at..at + d];
                let (mut own, mut sh) = (0f32, 0f32);
                for e in 0..d {
                    own += g[e] * (pp[e] - rr[e]);
                    sh += g[e] * (rr[e] - ll[e]);
                    d_p[at + e] = g[e] * sj;
                    d_l[at + e] = g[e] * (1.0 - cum);
                    d_r[at + e] = g[e] * (cum - sj);
                }
                ds[j] = own;
                shift[j] = sh;
            }
            // ∂/∂s_j also gets Σ_{k ≥ j} shift_k: s_j enters every later `cum`.
            let mut tail = 0f32;
            for j in (0..k).rev() {
                tail += shift[j];
                ds[j] += tail;
            }
        }
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;

    use super::{cpu, reference};
    use crate::host::HostTensor;
    use crate::par;

    /// The CPU kernel on `f32` memory, [`reference::select_mix`] otherwise.
    pub(crate) fn select_mix<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_f32(&s, &parent, &left, &right)
            .unwrap_or_else(|| reference::select_mix::<B>(s, parent, left, right))
    }

    fn select_mix_f32<T: HostTensor>(s: &T, p: &T, l: &T, r: &T) -> Option<T> {
        let (ss, pp, ll, rr) = (s.host()?, p.host()?, l.host()?, r.host()?);
        let shape = p.shape();
        let (b, k, d) = (shape[0], shape[1], shape[2]);
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(b, 4 * k * d, vec![(&mut out, k * d)], &|rg, o| {
            let (p, l, r) = (
                par::at(&pp, &rg, k * d),
                par::at(&ll, &rg, k * d),
                par::at(&rr, &rg, k * d),
            );
            cpu::select_mix(par::at(&ss, &rg, k), p, l, r, k, d, o[0]);
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`reference::select_mix_backward`] otherwise.
    pub(crate) fn select_mix_backward<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4]
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_backward_f32(&s, &parent, &left, &right, &grad)
            .unwrap_or_else(|| reference::select_mix_backward::<B>(s, parent, left, right, grad))
    }

    fn select_mix_backward_f32<T: HostTensor>(
        s: &T,
        p: &T,
        l: &T,
        r: &T,
        grad: &T,
    ) -> Option<[T; 4]> {
        let (ss, pp, ll, rr, g) = (s.host()?, p.host()?, l.host()?, r.host()?, grad.host()?);
        let (s_shape, shape) = (s.shape(), p.shape());
        let (b, k, d) = (shape[0], shape[1], shape[2]);
        let n = shape.num_elements();
        let mut d_s = vec![0f32; s_shape.num_elements()];
        let (mut d_p, mut d_l, mut d_r) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
        let kd = k * d;
        let outs = vec![
            (&mut d_s[..], k),
            (&mut d_p[..], kd),
            (&mut d_l[..], kd),
            (&mut d_r[..], kd),
        ];
        par::rows(b, 7 * kd, outs, &|rg, o| {
            let [d_s, d_p, d_l, d_r] = o else {
                unreachable!("four outputs")
            };
            let (p, l, r, g) = (
                par::at(&pp, &rg, kd),
                par::at(&ll, &rg, kd),
                par::at(&rr, &rg, kd),
                par::at(&g, &rg, kd),
            );
            cpu::select_mix_backward(par::at(&ss, &rg, k), p, l, r, g, k, d, d_s, d_p, d_l, d_r);
        });
        Some([
            T::from_f32(d_s, s_shape),
            T::from_f32(d_p, shape.clone()),
            T::from_f32(d_l, shape.clone()),
            T::from_f32(d_r, shape),
        ])
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

    use crate::autodiff::{backward_with, record};
    use crate::ArborBackend;

    /// The backward step of `select_mix(s, p, l, r)`.
    #[derive(Debug)]
    pub(crate) struct SelectMix;

    impl<B: ArborBackend> Backward<B, 4> for SelectMix {
        type State = [FloatTensor<B>; 4];

        fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 4, _>(ops, grads, |[a, b, c, d], grad| {
                B::select_mix_backward(a, b, c, d, grad)
            });
        }
    }

    /// `select_mix` as one node that keeps its inputs.
    pub(crate) fn select_mix<B: ArborBackend, C: CheckpointStrategy>(
        s: FloatTensor<Autodiff<B, C>>,
        parent: FloatTensor<Autodiff<B, C>>,
        left: FloatTensor<Autodiff<B, C>>,
        right: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(SelectMix, [s, parent, left, right], |[s, p, l, r]| {
            B::select_mix(s, p, l, r)
        })
    }
}
