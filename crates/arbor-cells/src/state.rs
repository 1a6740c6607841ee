use crate::ArborBackend;
use burn::prelude::*;

/// The `(h, c)` pair carried by LSTM-style cells and produced by Tree-LSTM composition.
///
/// `D` is the tensor rank: `[batch, hidden]` states are `LstmState<B, 2>`, a layer of tree
/// nodes `[batch, nodes, hidden]` is `LstmState<B, 3>`.
#[derive(Debug, Clone)]
pub struct LstmState<B: Backend, const D: usize> {
    /// Hidden state `h`.
    pub h: Tensor<B, D>,
    /// Memory cell `c`.
    pub c: Tensor<B, D>,
}

impl<B: ArborBackend, const D: usize> LstmState<B, D> {
    /// Pairs a hidden state with a memory cell of the same shape.
    pub fn new(h: Tensor<B, D>, c: Tensor<B, D>) -> Self {
        Self { h, c }
    }

    /// Both parts filled with zeros.
    pub fn zeros(shape: [usize; D], device: &B::Device) -> Self {
        Self {
            h: arbor_kernels::zeros(shape, device),
            c: arbor_kernels::zeros(shape, device),
        }
    }

    /// Rows `start..start + len` of both tensors (the first dimension).
    pub fn rows(self, start: usize, len: usize) -> Self {
        Self {
            h: arbor_kernels::narrow(self.h, 0, start, len),
            c: arbor_kernels::narrow(self.c, 0, start, len),
        }
    }

    /// Keeps `new` where `keep_new` is true and `self` elsewhere. `keep_new` must broadcast to
    /// the state's shape (e.g. `[batch, 1]` for a `[batch, hidden]` state).
    pub fn select(self, keep_new: Tensor<B, D, Bool>, new: Self) -> Self {
        let shape = new.h.shape();
        let mask = keep_new.expand(shape);
        Self {
            h: self.h.mask_where(mask.clone(), new.h),
            c: self.c.mask_where(mask, new.c),
        }
    }

    /// Cuts the state from the autodiff graph (truncated BPTT).
    pub fn detach(self) -> Self {
        Self {
            h: self.h.detach(),
            c: self.c.detach(),
        }
    }

    /// `[h; c]` concatenated along the last axis.
    pub fn concat(self) -> Tensor<B, D> {
        Tensor::cat(vec![self.h, self.c], D - 1)
    }

    /// Splits `[h; c]` (last axis of width `2·hidden`) back into a state (as `chunk(2)`: an
    /// odd width gives `h` the extra column).
    ///
    /// # Panics
    /// If the last axis is narrower than 2.
    pub fn split(hc: Tensor<B, D>) -> Self {
        let width = hc.dims()[D - 1];
        assert!(width >= 2, "LstmState::split: a last axis of width {width}");
        let half = width.div_ceil(2);
        Self {
            h: arbor_kernels::narrow(hc.clone(), D - 1, 0, half),
            c: arbor_kernels::narrow(hc, D - 1, half, width - half),
        }
    }
}
