//! The fused ops written in plain Burn tensor ops: the trait's defaults, and the reference the
//! fused kernels are tested against. Each op's definitions live in its module under `src/ops/`,
//! beside its kernels and backward pass; this module re-exports them, and holds the helpers they
//! share.

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata, TensorPrimitive};

pub use crate::ops::activation::reference::{activation, activation_backward};
pub use crate::ops::adjacent::reference::{adjacent_pairs, adjacent_pairs_backward};
pub use crate::ops::attention::reference::{grouped_attention, grouped_attention_backward};
pub use crate::ops::gated_cell::reference::{
    gated_cell, gated_cell_backward, gated_output, gated_output_backward,
};
pub use crate::ops::layer_norm::reference::{layer_norm, layer_norm_backward};
pub use crate::ops::linear::reference::{linear, linear_pair};
pub use crate::ops::linear_scan::reference::{linear_scan, linear_scan_backward};
pub use crate::ops::lstm::reference::{lstm_sequence, lstm_sequence_backward};
pub use crate::ops::memory::reference::zeros;
pub use crate::ops::ordered_cell::reference::{
    ordered_cell, ordered_cell_backward, ordered_gates, ordered_gates_backward,
};
pub use crate::ops::rows::reference::{
    narrow, narrow_backward, select_rows, select_rows_backward, write_rows,
};
pub use crate::ops::select_mix::reference::{select_mix, select_mix_backward};
pub use crate::ops::window::reference::{causal_windows, causal_windows_backward};

/// A primitive of any rank as a `[rows, last]` tensor.
pub(crate) fn rows<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    let shape = t.shape();
    let last = shape.as_slice().last().copied().unwrap_or(1);
    let n = shape.num_elements();
    let rows = n.checked_div(last).unwrap_or(0);
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(
        t,
        Shape::new([rows, last]),
    )))
}

/// A `[rows, last]` tensor back in `shape`.
pub(crate) fn unrows<B: Backend>(t: Tensor<B, 2>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(t.into_primitive().tensor(), shape)
}

/// Block `b` (`h` wide) of `[rows, blocks·h]` gates.
pub(crate) fn block<B: Backend>(gates: &Tensor<B, 2>, b: usize, h: usize) -> Tensor<B, 2> {
    gates.clone().narrow(1, b * h, h)
}

/// Places `parts` (block index, `[rows, H]` tensor) into a zero `[rows, blocks·H]` tensor.
pub(crate) fn assemble<B: Backend>(
    parts: Vec<(usize, Tensor<B, 2>)>,
    rows: usize,
    h: usize,
    blocks: usize,
    like: &Tensor<B, 2>,
) -> Tensor<B, 2> {
    let (device, dtype) = (like.device(), like.dtype());
    let mut slots: Vec<Option<Tensor<B, 2>>> = (0..blocks).map(|_| None).collect();
    for (b, t) in parts {
        slots[b] = Some(match slots[b].take() {
            Some(prev) => prev.add(t),
            None => t,
        });
    }
    let blocks: Vec<Tensor<B, 2>> = slots
        .into_iter()
        .map(|s| s.unwrap_or_else(|| Tensor::zeros([rows, h], (&device, dtype))))
        .collect();
    Tensor::cat(blocks, 1)
}

/// A primitive as a rank-3 tensor.
pub(crate) fn t3<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 3> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A primitive as a rank-2 tensor.
pub(crate) fn t2<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}
