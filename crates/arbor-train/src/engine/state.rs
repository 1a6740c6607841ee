//! What a run keeps and returns: [`TrainState`] (stored in every checkpoint), [`TrainOutcome`]
//! with its [`StopReason`], and the private `Training`, everything that changes as training
//! goes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use super::optim::Optim;
use super::parallel::Workers;
use super::task::EvalReport;

/// Where training stands; stored in every checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainState {
    /// Optimizer steps done.
    pub step: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Index of the next batch within the epoch.
    pub batch_in_epoch: usize,
    /// Learning rate in force.
    pub lr: f64,
    /// Best validation metric so far.
    pub best_metric: Option<f64>,
    /// Step at which the best metric was reached.
    pub best_step: Option<u64>,
    /// Evaluations since the last improvement.
    pub bad_evals: u32,
    /// Seconds of training so far.
    pub elapsed_sec: f64,
    /// Examples seen so far.
    pub examples: u64,
    /// Evaluations since the best one (for early stopping; unlike `bad_evals`, not reset when
    /// the learning rate decays).
    #[serde(default)]
    pub evals_since_best: u32,
    /// Whether early stopping ended the run (a resumed run then does nothing more).
    #[serde(default)]
    pub stopped_early: bool,
    /// The run's id ([`new_run_id`](crate::outdir::new_run_id)), kept across resumes and
    /// written into every metrics record and checkpoint (empty in checkpoints from before ids:
    /// such a run gets a new one when it resumes).
    #[serde(default)]
    pub run_id: String,
}

/// Why [`train`](super::train::train) returned normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Every epoch ran.
    Finished,
    /// `max_steps` optimizer steps were done.
    MaxSteps,
    /// `max_minutes` of training were spent.
    MaxMinutes,
    /// The validation metric did not improve for `early_stopping` evaluations in a row.
    EarlyStopping,
}

impl StopReason {
    /// The name used in logs and result files: `finished`, `max_steps`, `max_minutes`,
    /// `early_stopping`.
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Finished => "finished",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxMinutes => "max_minutes",
            StopReason::EarlyStopping => "early_stopping",
        }
    }
}

/// The result of [`train`](super::train::train).
#[derive(Debug)]
pub struct TrainOutcome<M> {
    /// The model after the last step.
    pub model: M,
    /// The final training state.
    pub state: TrainState,
    /// The last evaluation of every split.
    pub evals: BTreeMap<String, EvalReport>,
    /// Where the last checkpoint is.
    pub last_checkpoint: PathBuf,
    /// Where the best checkpoint is (if any evaluation ran).
    pub best_checkpoint: Option<PathBuf>,
    /// Why training stopped; `last_checkpoint` resumes it in every case.
    pub stopped: StopReason,
}

/// What changes as training goes.
pub(super) struct Training<B: AutodiffBackend, M: AutodiffModule<B>> {
    /// Worker 0's model: the one evaluated and checkpointed.
    pub(super) model: M,
    pub(super) optim: Optim<B, M>,
    /// The other workers' replicas (none with one device).
    pub(super) workers: Workers<B, M>,
    pub(super) state: TrainState,
    /// The last evaluation of every split.
    pub(super) evals: BTreeMap<String, EvalReport>,
    /// The step of the last scheduled evaluation.
    pub(super) last_eval_step: Option<u64>,
    /// When this process last wrote `last.ckpt` (or started).
    pub(super) last_save: Instant,
}
