use arbor_cells::ArborBackend;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;

/// Mean cross-entropy of `logits` against integer `targets`.
///
/// # Shapes
/// - `logits`: `[batch, classes]`
/// - `targets`: `[batch]`
/// - output: `[1]`
pub fn cross_entropy<B: ArborBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, targets)
}

/// The arg-max class of every row.
///
/// # Shapes
/// - `logits`: `[batch, classes]`
/// - output: `[batch]`
pub fn predictions<B: ArborBackend>(logits: Tensor<B, 2>) -> Tensor<B, 1, Int> {
    logits.argmax(1).squeeze_dim(1)
}

/// How many rows' arg-max equals the target, left on the device (no read; a training step
/// hands it to the engine, which reads it at its logging points).
///
/// # Shapes
/// - `logits`: `[batch, classes]`
/// - `targets`: `[batch]`
/// - output: `[1]`
pub fn correct_on_device<B: ArborBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1, Int> {
    predictions(logits).equal(targets).int().sum()
}

/// How many rows' arg-max equals the target (one device read: [`correct_on_device`] read
/// back).
pub fn count_correct<B: ArborBackend>(logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> usize {
    correct_on_device(logits, targets)
        .into_scalar()
        .elem::<i64>() as usize
}
