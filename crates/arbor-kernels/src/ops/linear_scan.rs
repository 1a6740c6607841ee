//! `linear_scan`: the linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` over every step of a
//! sequence in one op (Faster FastTrees, whose gates read the input only).

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` along the time axis, `c_{−1} = c0`, for
/// every step in one op (and one autodiff node): the scan of QRNN-style cells such as Faster
/// FastTrees, whose gates come from the input alone.
///
/// # Shapes
/// - `a`, `u`: `[batch, time, H]`
/// - `c0`: `[batch, H]`
/// - output `c`: `[batch, time, H]`, every step's state
pub fn linear_scan<B: ArborBackend>(
    a: Tensor<B, 3>,
    u: Tensor<B, 3>,
    c0: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let [b, _, h] = a.dims();
    assert_eq!(a.dims(), u.dims(), "a and u must have one shape");
    assert_eq!(c0.dims(), [b, h], "c0 must be [batch, H]");
    Tensor::from_primitive(TensorPrimitive::Float(B::linear_scan(
        a.into_primitive().tensor(),
        u.into_primitive().tensor(),
        c0.into_primitive().tensor(),
    )))
}

/// The scan in plain Burn ops, one step per time step.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use crate::reference::{t2, t3};

    /// `c_t = a_t ⊙ c_{t−1} + u_t` along dimension 1 (`c_{−1} = c0`) in plain ops: one step per
    /// time step.
    pub fn linear_scan<B: Backend>(
        a: FloatTensor<B>,
        u: FloatTensor<B>,
        c0: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let (a, u, mut c) = (t3::<B>(a), t3::<B>(u), t2::<B>(c0));
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

    /// The gradients of [`linear_scan`] with respect to `a`, `u` and `c0`, given the gradient
    /// `grad` of its output: with `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`, `∂a_t = δ_t ⊙ c_{t−1}`,
    /// `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0`.
    pub fn linear_scan_backward<B: Backend>(
        a: FloatTensor<B>,
        u: FloatTensor<B>,
        c0: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let c = t3::<B>(linear_scan::<B>(a.clone(), u, c0.clone()));
        let (a, c0, g) = (t3::<B>(a), t2::<B>(c0), t3::<B>(grad));
        let [b, t, h] = a.dims();
        if t == 0 {
            return [
                a.into_primitive().tensor(),
                g.into_primitive().tensor(),
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
            du.clone().mul(prev).into_primitive().tensor(),
            du.into_primitive().tensor(),
            carry.into_primitive().tensor(),
        ]
    }
}

/// The loops over contiguous `f32` rows.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {

    /// `c_t = a_t ⊙ c_{t−1} + u_t` over `[b, t, h]` rows, `c_{−1}` from `c0` `[b, h]`.
    pub fn linear_scan(
        a: &[f32],
        u: &[f32],
        c0: &[f32],
        (b, t, h): (usize, usize, usize),
        out: &mut [f32],
    ) {
        for bi in 0..b {
            for s in 0..t {
                let o = (bi * t + s) * h;
                let (done, rest) = out.split_at_mut(o);
                let prev = if s == 0 {
                    &c0[bi * h..(bi + 1) * h]
                } else {
                    &done[o - h..o]
                };
                let (a, u, dst) = (&a[o..o + h], &u[o..o + h], &mut rest[..h]);
                for j in 0..h {
                    dst[j] = a[j] * prev[j] + u[j];
                }
            }
        }
    }

    /// The gradients of [`linear_scan`]: `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`,
    /// `∂a_t = δ_t ⊙ c_{t−1}`, `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0` (the outputs `c` are recomputed).
    #[allow(clippy::too_many_arguments)]
    pub fn linear_scan_backward(
        a: &[f32],
        u: &[f32],
        c0: &[f32],
        grad: &[f32],
        (b, t, h): (usize, usize, usize),
        d_a: &mut [f32],
        d_u: &mut [f32],
        d_c0: &mut [f32],
    ) {
        let mut c = vec![0f32; b * t * h];
        linear_scan(a, u, c0, (b, t, h), &mut c);
        for bi in 0..b {
            let carry = &mut d_c0[bi * h..(bi + 1) * h];
            carry.fill(0.0);
            for s in (0..t).rev() {
                let o = (bi * t + s) * h;
                let prev = if s == 0 {
                    &c0[bi * h..(bi + 1) * h]
                } else {
                    &c[o - h..o]
                };
                for j in 0..h {
                    let delta = grad[o + j] + carry[j];
                    d_u[o + j] = delta;
                    d_a[o + j] = delta * prev[j];
                    carry[j] = a[o + j] * delta;
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
    use crate::host::{dims3, HostTensor};
    use crate::par;

    /// The CPU kernel on `f32` memory, [`reference::linear_scan`] otherwise.
    pub(crate) fn linear_scan<B: Backend>(
        a: FloatTensor<B>,
        u: FloatTensor<B>,
        c0: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        linear_scan_f32(&a, &u, &c0).unwrap_or_else(|| reference::linear_scan::<B>(a, u, c0))
    }

    fn linear_scan_f32<T: HostTensor>(a: &T, u: &T, c0: &T) -> Option<T> {
        let (aa, uu, cc) = (a.host()?, u.host()?, c0.host()?);
        let shape = a.shape();
        let (b, t, h) = dims3(a);
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(b, 3 * t * h, vec![(&mut out, t * h)], &|r, o| {
            let (a, u) = (par::at(&aa, &r, t * h), par::at(&uu, &r, t * h));
            cpu::linear_scan(a, u, par::at(&cc, &r, h), (r.len(), t, h), o[0]);
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`reference::linear_scan_backward`] otherwise.
    pub(crate) fn linear_scan_backward<B: Backend>(
        a: FloatTensor<B>,
        u: FloatTensor<B>,
        c0: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3]
    where
        FloatTensor<B>: HostTensor,
    {
        linear_scan_backward_f32(&a, &u, &c0, &grad)
            .unwrap_or_else(|| reference::linear_scan_backward::<B>(a, u, c0, grad))
    }

    fn linear_scan_backward_f32<T: HostTensor>(a: &T, u: &T, c0: &T, grad: &T) -> Option<[T; 3]> {
        let (aa, uu, cc, g) = (a.host()?, u.host()?, c0.host()?, grad.host()?);
        let (shape, c_shape) = (a.shape(), c0.shape());
        let (b, t, h) = dims3(a);
        let n = shape.num_elements();
        let (mut d_a, mut d_u) = (vec![0f32; n], vec![0f32; n]);
        let mut d_c0 = vec![0f32; c_shape.num_elements()];
        let outs = vec![
            (&mut d_a[..], t * h),
            (&mut d_u[..], t * h),
            (&mut d_c0[..], h),
        ];
        par::rows(b, 7 * t * h, outs, &|r, o| {
            let [d_a, d_u, d_c0] = o else {
                unreachable!("three outputs")
            };
            let (a, u, g) = (
                par::at(&aa, &r, t * h),
                par::at(&uu, &r, t * h),
                par::at(&g, &r, t * h),
            );
            cpu::linear_scan_backward(
                a,
                u,
                par::at(&cc, &r, h),
                g,
                (r.len(), t, h),
                d_a,
                d_u,
                d_c0,
            );
        });
        Some([
            T::from_f32(d_a, shape.clone()),
            T::from_f32(d_u, shape),
            T::from_f32(d_c0, c_shape),
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

    /// The backward step of `linear_scan(a, u, c0)`.
    #[derive(Debug)]
    pub(crate) struct LinearScan;

    impl<B: ArborBackend> Backward<B, 3> for LinearScan {
        type State = [FloatTensor<B>; 3];

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 3, _>(ops, grads, |[a, b, c], grad| {
                B::linear_scan_backward(a, b, c, grad)
            });
        }
    }

    /// `linear_scan` as one node that keeps its inputs.
    pub(crate) fn linear_scan<B: ArborBackend, C: CheckpointStrategy>(
        a: FloatTensor<Autodiff<B, C>>,
        u: FloatTensor<Autodiff<B, C>>,
        c0: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(LinearScan, [a, u, c0], |[a, u, c0]| {
            B::linear_scan(a, u, c0)
        })
    }
}
