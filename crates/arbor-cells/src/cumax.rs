use crate::ArborBackend;
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// `cumax(x) = cumsum(softmax(x))` along the last axis (docs/models.md §1; ON-LSTM §4.1).
///
/// The result is non-decreasing along the last axis, lies in `[0, 1]`, and its last entry is 1
/// up to rounding. ON-LSTM-style cells use `f̃ = cumax(·)` and `ĩ = 1 − cumax(·)`.
///
/// # Shapes
/// - `x`: `[..., n]`
/// - output: `[..., n]`
pub fn cumax<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    softmax(x, D - 1).cumsum(D - 1)
}
