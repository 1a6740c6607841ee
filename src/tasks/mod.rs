//! Ready-made training tasks for the engine ([`arbor_train::Task`]): NLI pairs and single
//! sentence classification, over any encoder of [`arbor_encoders`]. The examples are thin
//! command-line wrappers around these.

mod classify;
mod model;
mod nli;

pub use classify::{evaluate_classify, ClassifyData, ClassifyTask};
pub use model::{ModelConfig, ModelMeta};
pub use nli::{evaluate_nli, NliData, NliTask};

/// The training step shared by the classification tasks: cross-entropy of the logits (plus the
/// encoder's auxiliary loss, when it has one) and the batch's correct count.
fn classification_step<B: burn::prelude::Backend>(
    logits: burn::prelude::Tensor<B, 2>,
    labels: burn::prelude::Tensor<B, 1, burn::prelude::Int>,
    aux_loss: Option<burn::prelude::Tensor<B, 1>>,
) -> arbor_train::StepOutput<B> {
    let total = labels.dims()[0];
    let correct = arbor_heads::count_correct(logits.clone().detach(), labels.clone());
    let mut loss = arbor_heads::cross_entropy(logits, labels);
    if let Some(aux) = aux_loss {
        loss = loss.add(aux);
    }
    arbor_train::StepOutput {
        loss,
        correct,
        total,
    }
}

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
