//! `causal_windows`: each step beside the `k − 1` steps before it, the input of a causal
//! convolution over time as one matrix product.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// Each step's window of the last `k` steps, `[x_{t−k+1}; …; x_{t−1}; x_t]` (zeros before the
/// first step), one op (and one autodiff node) whose backward pass adds each window block's
/// gradient back to its step.
///
/// A causal 1-D convolution over time with kernel width `k` (left padding `k − 1`, stride and
/// dilation 1) is then one product of these windows, `[batch·time, k·d]`, with the weight laid
/// out `[k·d, c_out]` (block `j` holds the taps that read `x_{t−k+1+j}`): every row of the batch
/// in one product, where Burn's own `Conv1d` (0.21, Flex) runs many small products over a
/// transposed copy of the input and walks transposed views in its backward pass.
///
/// # Shapes
/// - `x`: `[batch, time, d]`
/// - output: `[batch, time, k·d]`
///
/// # Panics
/// If `k` is 0.
pub fn causal_windows<B: ArborBackend>(x: Tensor<B, 3>, k: usize) -> Tensor<B, 3> {
    assert!(k > 0, "causal_windows: the window needs at least one step");
    Tensor::from_primitive(TensorPrimitive::Float(B::causal_windows(
        x.into_primitive().tensor(),
        k,
    )))
}

/// The windows in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use crate::reference::t3;

    /// `x` delayed by `s` steps along time (the first `s` steps zeros).
    fn delayed<B: Backend>(x: &Tensor<B, 3>, s: usize) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        if s == 0 {
            return x.clone();
        }
        // Zeros in `x`'s own float type (a constructor's default type may differ).
        let zeros = |len: usize| x.clone().narrow(1, 0, 1).zeros_like().expand([b, len, d]);
        if s >= t {
            return zeros(t);
        }
        Tensor::cat(vec![zeros(s), x.clone().narrow(1, 0, t - s)], 1)
    }

    /// `[x_{t−k+1}; …; x_t]` for every step, in plain ops.
    pub fn causal_windows<B: Backend>(x: FloatTensor<B>, k: usize) -> FloatTensor<B> {
        let x = t3::<B>(x);
        if x.dims()[1] == 0 {
            let [b, _, d] = x.dims();
            return Tensor::<B, 3>::zeros([b, 0, k * d], &x.device())
                .into_primitive()
                .tensor();
        }
        let blocks = (0..k).map(|j| delayed(&x, k - 1 - j)).collect();
        Tensor::cat(blocks, 2).into_primitive().tensor()
    }

    /// The gradient of [`causal_windows`] in plain ops: `dx_s = Σ_j g_{s+k−1−j}[block j]`.
    pub fn causal_windows_backward<B: Backend>(grad: FloatTensor<B>, k: usize) -> FloatTensor<B> {
        let g = t3::<B>(grad);
        let [b, t, kd] = g.dims();
        let d = kd / k;
        if t == 0 {
            return Tensor::<B, 3>::zeros([b, 0, d], &g.device())
                .into_primitive()
                .tensor();
        }
        let mut dx = g.clone().narrow(2, (k - 1) * d, d);
        for j in 0..k - 1 {
            // Block `j` of step `s` read `x_{s−(k−1−j)}`: its gradient moves that many steps
            // earlier (and falls off the end for the last steps).
            let shift = k - 1 - j;
            if shift >= t {
                continue;
            }
            let block = g.clone().narrow(2, j * d, d).narrow(1, shift, t - shift);
            let zeros = block
                .clone()
                .narrow(1, 0, 1)
                .zeros_like()
                .expand([b, shift, d]);
            dx = dx + Tensor::cat(vec![block, zeros], 1);
        }
        dx.into_primitive().tensor()
    }
}

/// The loops over contiguous `f32` rows.
pub(crate) mod cpu {
    /// `out[b, s] = [x[b, s − k + 1]; …; x[b, s]]` (zeros before step 0) for `x` `[b, t, d]`.
    pub fn causal_windows(x: &[f32], (b, t, d): (usize, usize, usize), k: usize, out: &mut [f32]) {
        for bi in 0..b {
            for s in 0..t {
                let row = &mut out[(bi * t + s) * k * d..(bi * t + s + 1) * k * d];
                for (j, block) in row.chunks_exact_mut(d.max(1)).enumerate().take(k) {
                    match (s + j + 1).checked_sub(k) {
                        Some(src) => block.copy_from_slice(&x[(bi * t + src) * d..][..d]),
                        None => block.fill(0.0),
                    }
                }
            }
        }
    }

    /// The gradient of [`causal_windows`]: `dx[b, s] = Σ_j g[b, s + k − 1 − j][block j]`.
    pub fn causal_windows_backward(
        g: &[f32],
        (b, t, d): (usize, usize, usize),
        k: usize,
        dx: &mut [f32],
    ) {
        dx.fill(0.0);
        for bi in 0..b {
            for s in 0..t {
                let row = &g[(bi * t + s) * k * d..(bi * t + s + 1) * k * d];
                for (j, block) in row.chunks_exact(d.max(1)).enumerate().take(k) {
                    if let Some(src) = (s + j + 1).checked_sub(k) {
                        let dst = &mut dx[(bi * t + src) * d..][..d];
                        for (acc, &v) in dst.iter_mut().zip(block) {
                            *acc += v;
                        }
                    }
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

    /// The CPU kernel on `f32` memory, [`reference::causal_windows`] otherwise.
    pub(crate) fn causal_windows<B: Backend>(x: FloatTensor<B>, k: usize) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        causal_windows_f32(&x, k).unwrap_or_else(|| reference::causal_windows::<B>(x, k))
    }

    fn causal_windows_f32<T: HostTensor>(x: &T, k: usize) -> Option<T> {
        let xx = x.host()?;
        let (b, t, d) = dims3(x);
        let mut out = vec![0f32; b * t * k * d];
        if !out.is_empty() {
            par::rows(b, 2 * t * k * d, vec![(&mut out, t * k * d)], &|r, o| {
                cpu::causal_windows(par::at(&xx, &r, t * d), (r.len(), t, d), k, o[0]);
            });
        }
        Some(T::from_f32(out, Shape::new([b, t, k * d])))
    }

    /// The CPU kernel on `f32` memory, [`reference::causal_windows_backward`] otherwise.
    pub(crate) fn causal_windows_backward<B: Backend>(
        grad: FloatTensor<B>,
        k: usize,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        causal_windows_backward_f32(&grad, k)
            .unwrap_or_else(|| reference::causal_windows_backward::<B>(grad, k))
    }

    fn causal_windows_backward_f32<T: HostTensor>(grad: &T, k: usize) -> Option<T> {
        let g = grad.host()?;
        let (b, t, kd) = dims3(grad);
        let d = kd / k;
        let mut dx = vec![0f32; b * t * d];
        if !dx.is_empty() {
            par::rows(b, 2 * t * kd, vec![(&mut dx, t * d)], &|r, o| {
                cpu::causal_windows_backward(par::at(&g, &r, t * kd), (r.len(), t, d), k, o[0]);
            });
        }
        Some(T::from_f32(dx, Shape::new([b, t, d])))
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

    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// The backward step of `causal_windows` (the window width).
    #[derive(Debug)]
    struct CausalWindows;

    impl<B: ArborBackend> Backward<B, 1> for CausalWindows {
        type State = usize;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |k, grad| {
                [B::causal_windows_backward(grad, k)]
            });
        }
    }

    /// `causal_windows` as one node that keeps the window width.
    pub(crate) fn causal_windows<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        k: usize,
    ) -> FloatTensor<Autodiff<B, C>> {
        let out = B::causal_windows(x.primitive, k);
        match CausalWindows
            .prepare::<C>([x.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(k, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
