//! `linear_scan`: the linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` over every step of a
//! sequence in one op (Faster FastTrees, whose gates read the input only).

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` along the time axis, `c_{−1} = c0`, for
/// every step in one op (and one autodiff node): the scan of QRNN-style cells such as Faster
/// FastTrees, whose gates come from the input alone.
///
/// `a` and `u` are the two halves of `au`'s last axis, as one op computes them (Faster
/// FastTrees' `ordered_gates`). The op reads them where they are, and its backward writes the
/// gradient of `au` as one tensor: split into two views first, each view's backward would be a
/// zero tensor of `au`'s whole shape with its half written in, then summed.
///
/// # Shapes
/// - `au`: `[batch, time, 2H]`: `a` the first `H` columns, `u` the last `H`
/// - `c0`: `[batch, H]`
/// - output `c`: `[batch, time, H]`, every step's state
///
/// # Panics
/// If `au`'s last axis is odd or `c0` is not `[batch, H]`.
pub fn linear_scan<B: ArborBackend>(au: Tensor<B, 3>, c0: Tensor<B, 2>) -> Tensor<B, 3> {
    let [b, _, w] = au.dims();
    assert_eq!(
        w % 2,
        0,
        "au's last axis holds a and u: it must be even, not {w}"
    );
    assert_eq!(c0.dims(), [b, w / 2], "c0 must be [batch, H]");
    Tensor::from_primitive(TensorPrimitive::Float(B::linear_scan(
        au.into_primitive().tensor(),
        c0.into_primitive().tensor(),
    )))
}

/// The scan in plain Burn ops, one step per time step.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use crate::reference::{t2, t3};

    /// `a` and `u`, the halves of `au`'s last axis.
    fn halves<B: Backend>(au: FloatTensor<B>) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let au = t3::<B>(au);
        let h = au.dims()[2] / 2;
        (au.clone().narrow(2, 0, h), au.narrow(2, h, h))
    }

    /// `c_t = a_t ⊙ c_{t−1} + u_t` along dimension 1 (`c_{−1} = c0`, `a` and `u` the halves of
    /// `au`'s last axis) in plain ops: one step per time step.
    pub fn linear_scan<B: Backend>(au: FloatTensor<B>, c0: FloatTensor<B>) -> FloatTensor<B> {
        let ((a, u), mut c) = (halves::<B>(au), t2::<B>(c0));
        let [b, t, h] = a.dims();
        if t == 0 {
            return u.into_primitive().tensor();
        }
        let step = |x: &Tensor<B, 3>, s: usize| x.clone().narrow(1, s, 1).reshape([b, h]);
        let mut out = Vec::with_capacity(t);
        for s in 0..t {
            c = step(&a, s).mul(c).add(step(&u, s));
            out.push(c.clone().unsqueeze_dim::<3>(1));
        }
        Tensor::cat(out, 1).into_primitive().tensor()
    }

    /// The gradients of [`linear_scan`] with respect to `au` and `c0`, given the gradient `grad`
    /// of its output: with `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`, `∂a_t = δ_t ⊙ c_{t−1}`,
    /// `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0`.
    pub fn linear_scan_backward<B: Backend>(
        au: FloatTensor<B>,
        c0: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 2] {
        let c = t3::<B>(linear_scan::<B>(au.clone(), c0.clone()));
        let ((a, _), c0, g) = (halves::<B>(au), t2::<B>(c0), t3::<B>(grad));
        let [b, t, h] = a.dims();
        if t == 0 {
            return [
                Tensor::cat(vec![a.clone(), a], 2).into_primitive().tensor(),
                c0.zeros_like().into_primitive().tensor(),
            ];
        }
        let step = |x: &Tensor<B, 3>, s: usize| x.clone().narrow(1, s, 1).reshape([b, h]);
        let mut carry = c0.zeros_like();
        let mut deltas = vec![None; t];
        for s in (0..t).rev() {
            let delta = step(&g, s).add(carry);
            carry = step(&a, s).mul(delta.clone());
            deltas[s] = Some(delta.unsqueeze_dim::<3>(1));
        }
        let du = Tensor::cat(deltas.into_iter().flatten().collect(), 1);
        let first = c0.unsqueeze_dim::<3>(1);
        let prev = if t == 1 {
            first
        } else {
            Tensor::cat(vec![first, c.narrow(1, 0, t - 1)], 1)
        };
        [
            Tensor::cat(vec![du.clone().mul(prev), du], 2)
                .into_primitive()
                .tensor(),
            carry.into_primitive().tensor(),
        ]
    }
}

/// The loops over `f32` rows. `au` is read where it is ([`Rows`]), and the gradient of `a` and
/// `u` is written into one `[·, 2H]` buffer: no copy of either half is made.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use crate::host::Rows;

    /// `c_t = a_t ⊙ c_{t−1} + u_t` for examples `first..first + b`: row `e·t + s` of `au`
    /// (`2h` wide) is example `e`'s `a` then `u` at step `s`; `c_{−1}` from `c0` `[b, h]`. The
    /// states go to `out`, row `e·t + s` of which starts at `(e·t + s)·stride` (`stride ≥ h`;
    /// the other columns are left alone).
    pub fn linear_scan(
        au: Rows<'_>,
        first: usize,
        c0: &[f32],
        (b, t, h): (usize, usize, usize),
        out: &mut [f32],
        stride: usize,
    ) {
        for bi in 0..b {
            for s in 0..t {
                let o = (bi * t + s) * stride;
                let (done, rest) = out.split_at_mut(o);
                let prev = if s == 0 {
                    &c0[bi * h..(bi + 1) * h]
                } else {
                    &done[o - stride..o - stride + h]
                };
                let (a, u) = au.row((first + bi) * t + s).split_at(h);
                let dst = &mut rest[..h];
                for j in 0..h {
                    dst[j] = a[j] * prev[j] + u[j];
                }
            }
        }
    }

    /// The gradients of [`linear_scan`] for examples `first..first + b`, into `d_au` `[b, t,
    /// 2h]` (`a`'s then `u`'s) and `d_c0`: `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`,
    /// `∂a_t = δ_t ⊙ c_{t−1}`, `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0`. `grad` and `c0` hold these
    /// examples only.
    pub fn linear_scan_backward(
        au: Rows<'_>,
        first: usize,
        c0: &[f32],
        grad: &[f32],
        (b, t, h): (usize, usize, usize),
        d_au: &mut [f32],
        d_c0: &mut [f32],
    ) {
        // The states `c`, recomputed into `d_au`'s `u` columns, which hold step `s`'s until
        // its `∂u` is written there: going backwards, step `s` reads `c_{s−1}` first, so no
        // buffer of its own is needed.
        let skip = h.min(d_au.len());
        linear_scan(au, first, c0, (b, t, h), &mut d_au[skip..], 2 * h);
        for bi in 0..b {
            let carry = &mut d_c0[bi * h..(bi + 1) * h];
            carry.fill(0.0);
            for s in (0..t).rev() {
                let o = (bi * t + s) * 2 * h;
                let a = &au.row((first + bi) * t + s)[..h];
                let (done, rest) = d_au.split_at_mut(o);
                let prev = if s == 0 {
                    &c0[bi * h..(bi + 1) * h]
                } else {
                    &done[o - h..o]
                };
                let (d_a, d_u) = rest[..2 * h].split_at_mut(h);
                let g = &grad[(bi * t + s) * h..][..h];
                for j in 0..h {
                    let delta = g[j] + carry[j];
                    d_u[j] = delta;
                    d_a[j] = delta * prev[j];
                    carry[j] = a[j] * delta;
                }
            }
        }
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;

    use super::{cpu, reference};
    use crate::host::{dims3, rows_of, HostTensor};
    use crate::par;

    /// The CPU kernel on `f32` memory, [`reference::linear_scan`] otherwise.
    pub(crate) fn linear_scan<B: Backend>(au: FloatTensor<B>, c0: FloatTensor<B>) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        linear_scan_f32(&au, &c0).unwrap_or_else(|| reference::linear_scan::<B>(au, c0))
    }

    fn linear_scan_f32<T: HostTensor>(au: &T, c0: &T) -> Option<T> {
        let mut copy = None;
        let rows = rows_of(au, &mut copy)?;
        let cc = c0.host()?;
        let (b, t, w) = dims3(au);
        let h = w / 2;
        let mut out = vec![0f32; b * t * h];
        par::rows(b, 3 * t * h, vec![(&mut out, t * h)], &|r, o| {
            let c0 = par::at(&cc, &r, h);
            cpu::linear_scan(rows, r.start, c0, (r.len(), t, h), o[0], h);
        });
        Some(T::from_f32(out, [b, t, h].into()))
    }

    /// The CPU kernel on `f32` memory, [`reference::linear_scan_backward`] otherwise.
    pub(crate) fn linear_scan_backward<B: Backend>(
        au: FloatTensor<B>,
        c0: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 2]
    where
        FloatTensor<B>: HostTensor,
    {
        linear_scan_backward_f32(&au, &c0, &grad)
            .unwrap_or_else(|| reference::linear_scan_backward::<B>(au, c0, grad))
    }

    fn linear_scan_backward_f32<T: HostTensor>(au: &T, c0: &T, grad: &T) -> Option<[T; 2]> {
        let mut copy = None;
        let rows = rows_of(au, &mut copy)?;
        let (cc, g) = (c0.host()?, grad.host()?);
        let (shape, c_shape) = (au.shape(), c0.shape());
        let (b, t, w) = dims3(au);
        let h = w / 2;
        let mut d_au = vec![0f32; shape.num_elements()];
        let mut d_c0 = vec![0f32; c_shape.num_elements()];
        let outs = vec![(&mut d_au[..], t * w), (&mut d_c0[..], h)];
        par::rows(b, 7 * t * h, outs, &|r, o| {
            let [d_au, d_c0] = o else {
                unreachable!("two outputs")
            };
            let (c0, g) = (par::at(&cc, &r, h), par::at(&g, &r, t * h));
            cpu::linear_scan_backward(rows, r.start, c0, g, (r.len(), t, h), d_au, d_c0);
        });
        Some([T::from_f32(d_au, shape), T::from_f32(d_c0, c_shape)])
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

    /// The backward step of `linear_scan(au, c0)`.
    #[derive(Debug)]
    pub(crate) struct LinearScan;

    impl<B: ArborBackend> Backward<B, 2> for LinearScan {
        type State = [FloatTensor<B>; 2];

        fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 2, _>(ops, grads, |[au, c0], grad| {
                B::linear_scan_backward(au, c0, grad)
            });
        }
    }

    /// `linear_scan` as one node that keeps its inputs.
    pub(crate) fn linear_scan<B: ArborBackend, C: CheckpointStrategy>(
        au: FloatTensor<Autodiff<B, C>>,
        c0: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(LinearScan, [au, c0], |[au, c0]| B::linear_scan(au, c0))
    }
}
