//! What the engine needs from a task: the [`Task`] trait, [`StepOutput`] and [`EvalReport`].

use std::collections::BTreeMap;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

/// What one training step produced, left on the device.
///
/// A step must not read anything back to the host: the engine keeps the loss and the correct
/// count on the device and reads them (with the gradients' global norm) once per logging
/// interval, all pending steps in one transfer (see [`TrainConfig::log_every`]).
///
/// [`TrainConfig::log_every`]: crate::TrainConfig::log_every
#[derive(Debug)]
pub struct StepOutput<B: Backend> {
    /// The loss to minimise (one element).
    pub loss: Tensor<B, 1>,
    /// Correct predictions in the batch, one element (for the running accuracy), or `None`
    /// when the task has no accuracy.
    pub correct: Option<Tensor<B, 1, Int>>,
    /// Predictions made in the batch (known on the host from the batch's shape; 0 with
    /// `correct: None`).
    pub total: usize,
}

/// Where a training step stands, for [`Task::step`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepContext {
    /// The optimizer step (0-based; steps done before this one).
    pub step: u64,
    /// This step's seed for the task's own noise.
    pub noise_seed: u64,
    /// The annealed Gumbel-softmax temperature in force (`None`: the model's own).
    pub temperature: Option<f64>,
}

impl StepContext {
    /// A context with only a noise seed (step 0, no temperature override).
    pub fn seeded(noise_seed: u64) -> Self {
        Self {
            step: 0,
            noise_seed,
            temperature: None,
        }
    }
}

/// The result of evaluating on a whole split.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    /// Correct predictions over the whole split.
    pub correct: usize,
    /// Predictions over the whole split.
    pub total: usize,
    /// Summed loss.
    pub loss_sum: f64,
    /// Number of terms in `loss_sum`.
    pub loss_count: usize,
    /// Task-specific values (per-group accuracy, transition accuracy…).
    pub extra: BTreeMap<String, f64>,
}

impl EvalReport {
    /// Exact accuracy `correct / total` (0 when empty).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }

    /// Mean loss.
    pub fn loss(&self) -> Option<f64> {
        (self.loss_count > 0).then(|| self.loss_sum / self.loss_count as f64)
    }
}

/// A task the engine can train: it owns the data and knows how to run the model on it.
pub trait Task<B: AutodiffBackend>: Sync {
    /// The model being trained.
    type Model: AutodiffModule<B>;

    /// Size of every training example (for length bucketing).
    fn train_lengths(&self) -> Vec<usize>;

    /// Forward pass and loss on the training examples `batch` (indices into the training set),
    /// at the optimizer step `ctx` describes.
    ///
    /// `ctx.noise_seed` is this step's seed for any noise the task draws itself (e.g. a
    /// `GumbelSampler::seeded(ctx.noise_seed)`): it depends only on the run's seed and the step,
    /// so a resumed run draws the same noise as an uninterrupted one. `ctx.temperature`, when
    /// set, is the annealed Gumbel-softmax temperature the task's sampling must use instead of
    /// the model's own.
    ///
    /// `device` is where the step's tensors go: the model's device. With several workers
    /// (data-parallel training) each worker calls `step` on its own device with its share of
    /// the batch, from its own thread, hence `Sync`; a task that keeps state from one step to
    /// the next keeps it per share (see `arbor_tasks::LmTask`).
    fn step(
        &self,
        model: &Self::Model,
        batch: &[usize],
        ctx: StepContext,
        device: &B::Device,
    ) -> StepOutput<B>;

    /// How many terms the loss of `share` averages over (default: its number of examples).
    ///
    /// With several workers, each worker's loss is multiplied by its share's weight divided by
    /// the whole batch's before the gradients are summed, so that the sum is the gradient of
    /// the whole batch's mean loss. A task whose loss is a mean over something else (tokens)
    /// says so here.
    fn loss_weight(&self, share: &[usize]) -> f64 {
        share.len() as f64
    }

    /// Splits to evaluate; the first is used for model selection and plateau decay.
    fn eval_splits(&self) -> Vec<String>;

    /// Evaluates the model (without autodiff) on a whole split.
    fn evaluate(
        &self,
        model: &<Self::Model as AutodiffModule<B>>::InnerModule,
        split: &str,
    ) -> EvalReport;

    /// The value model selection maximises (default: accuracy).
    fn selection_metric(&self, report: &EvalReport) -> f64 {
        report.accuracy()
    }

    /// Metadata stored in every checkpoint (model configuration, vocabulary…).
    fn metadata(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// A short text identifying the training data (e.g. a hex hash of the examples' lengths
    /// and labels), or `None` (the default) when the task does not give one.
    ///
    /// The engine stores it in every checkpoint and, on resume, refuses to continue on other
    /// data (unless [`TrainConfig::force_resume`](crate::TrainConfig::force_resume)) when both
    /// the checkpoint and the task have one.
    fn data_fingerprint(&self) -> Option<String> {
        None
    }

    /// The batches of epoch `epoch`, in order, when the task fixes them itself (e.g. the
    /// consecutive segments of truncated BPTT, which must not be shuffled); `None` (the default)
    /// lets the engine bucket and shuffle [`Task::train_lengths`].
    fn batches(&self, epoch: u64) -> Option<Vec<Vec<usize>>> {
        let _ = epoch;
        None
    }
}
