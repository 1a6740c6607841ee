//! Small tensor helpers of the chart: tensors from host values, index ranges, a first argmax.

use arbor_cells::ArborBackend;
use burn::prelude::*;
use burn::tensor::TensorData;

/// Row indices as an index tensor.
pub(in crate::r2d2) fn index_tensor<B: ArborBackend>(
    rows: &[usize],
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    ints(
        rows.iter().map(|&r| r as i64).collect(),
        [rows.len()],
        device,
    )
}

/// An integer tensor from host values.
pub(super) fn ints<B: Backend, const D: usize>(
    v: Vec<i64>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// A boolean tensor from host values (made by a comparison: Flex stores booleans from data
/// in another dtype than those from comparisons, and will not combine the two).
pub(super) fn bools<B: Backend, const D: usize>(
    v: Vec<bool>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Bool> {
    ints::<B, D>(v.into_iter().map(i64::from).collect(), shape, device).equal_elem(1)
}

/// `0, 1, …, n − 1` along `dim`, broadcast to `dims`.
pub(super) fn iota<B: Backend, const D: usize>(
    dims: [usize; D],
    dim: usize,
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let mut shape = [1; D];
    shape[dim] = dims[dim];
    Tensor::<B, 1, Int>::arange(0..dims[dim] as i64, device)
        .reshape(shape)
        .expand(dims)
}

/// The index of the first maximum along `dim` (size 1 there), like the host's strict `>` scan.
pub(super) fn first_argmax<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    dim: usize,
) -> Tensor<B, D, Int> {
    let dims = x.dims();
    let device = x.device();
    let max = x.clone().max_dim(dim).expand(dims);
    let n = dims[dim] as i64;
    iota::<B, D>(dims, dim, &device)
        .mask_fill(x.equal(max).bool_not(), n)
        .min_dim(dim)
        // A NaN row has no maximum: take its first entry rather than an index out of range.
        .clamp(0, n - 1)
}
