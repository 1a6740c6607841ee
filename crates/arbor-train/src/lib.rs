//! # arbor-train
//!
//! The training engine every arbor example uses:
//!
//! - a loop generic over the backend with Adam or AdamW, global-norm gradient clipping,
//!   learning-rate decay on plateau, and per-step seeding, so the same seed on the same device
//!   gives the same numbers and a resumed run continues exactly where it stopped;
//! - evaluation every N steps with exact accuracy over a whole split (never a mean of batch
//!   accuracies), run without autodiff (`model.valid()`), and best-checkpoint keeping;
//! - atomic single-file checkpoints (model, optimizer, step, position in the epoch, learning
//!   rate, configuration and any task metadata such as the vocabulary), refused with a clear
//!   error when truncated or corrupt;
//! - progress bars (loss, accuracy, sentences/s, ETA), a JSON-lines metrics log, a summary
//!   table and the training curves (`curves.svg`);
//! - robustness: a NaN or infinite loss or gradient stops the run with an error naming the
//!   step and batch (one read-back per step covers both), `last.ckpt` can also be written on a
//!   step or time schedule, and a resume is refused when the checkpoint was written with other
//!   settings or data;
//! - one run per output folder ([`outdir`]): a lock refuses a second run, a folder holding a
//!   run is refused unless the run resumes or overwrites it, every metrics record and
//!   checkpoint carries the run's id.
//!
//! Burn's own `Learner` evaluates once per epoch, does not checkpoint atomically, and cannot
//! resume in the middle of an epoch or restore the Gumbel noise stream; this engine uses Burn's
//! optimizers, gradients and records, and writes only that loop by hand.

#![warn(missing_docs)]

pub mod alloc;
mod checkpoint;
mod clip;
pub mod device;
mod engine;
mod log;
pub mod outdir;
pub mod threads;

pub use checkpoint::{CheckpointError, CheckpointFile};
pub use clip::{
    clip_factor, clip_global_norm, clip_on_device, global_grad_norm, grad_norm_on_device,
};
pub use engine::{
    load_model, load_model_from, plateau_decay, seed_everything, shares, step_seed, train,
    train_on, warmed_up, CheckpointEvery, EvalReport, LrSchedule, NonFiniteTensor, OptimizerKind,
    StepContext, StepOutput, StopReason, Task, TauAnneal, TrainConfig, TrainError, TrainOutcome,
    TrainState, DEFAULT_LOG_EVERY,
};
pub use log::{MetricsLog, MetricsRecord};
pub use outdir::{claim, OutDirError, RunLock, StartMode};
