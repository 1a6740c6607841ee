//! Ready-made training tasks for the engine ([`arbor_train::Task`]): NLI pairs and single
//! sentence classification, over any encoder of [`arbor_encoders`]. The examples are thin
//! command-line wrappers around these.

mod classify;
mod model;
mod nli;

pub use classify::{evaluate_classify, ClassifyData, ClassifyTask};
pub use model::{ModelConfig, ModelMeta};
pub use nli::{evaluate_nli, NliData, NliTask};

/// Batches of example indices for evaluation: sorted by `lengths` so padding stays small, in
/// chunks of `batch_size`. Every index appears exactly once.
pub fn eval_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}
