//! The training loop.
//!
//! - `config`: [`TrainConfig`], [`OptimizerKind`] and [`CheckpointEvery`], what the loop is
//!   told (saved in every checkpoint);
//! - `task`: the [`Task`] interface a trainable task implements, with [`StepOutput`] and
//!   [`EvalReport`];
//! - `optim`: the optimizer, learning-rate warm-up ([`warmed_up`]) and plateau decay, and
//!   seeding ([`seed_everything`], [`step_seed`]);
//! - `schedule`: the learning-rate schedule ([`LrSchedule`], burn-optim's schedulers) and the
//!   Gumbel temperature annealing ([`TauAnneal`]);
//! - `train`: the entry points, [`train()`] and [`train_on`], and the start of a run (settings
//!   checked, output folder claimed, model, optimizer and state initialised or resumed);
//! - `run`: the loop itself, the private `Run` (epochs, optimizer steps, the reads of their
//!   values, checkpoints, the end of the run);
//! - `evaluate`: evaluation of every split and model selection (best checkpoint, plateau decay,
//!   early stopping);
//! - `state`: what a run keeps and returns, [`TrainState`] and [`TrainOutcome`] (and its
//!   [`StopReason`]);
//! - `error`: [`TrainError`] (and its [`NonFiniteTensor`]);
//! - `records`: a checkpoint's model record, written and read back, with [`load_model`] to read
//!   weights back from a checkpoint;
//! - `resume`: the check that a resumed run keeps the settings and data of the run its
//!   checkpoint comes from;
//! - `curves`: the metrics log drawn as `curves.svg` at the end of a run;
//! - `progress`: what a run shows and logs as it goes (progress bar, the running window of
//!   training statistics, the summary table).

mod config;
mod curves;
mod error;
mod evaluate;
mod optim;
mod parallel;
mod progress;
mod records;
mod resume;
mod run;
mod schedule;
mod state;
mod task;
mod train;

pub use config::{CheckpointEvery, OptimizerKind, TrainConfig, DEFAULT_LOG_EVERY};
pub use error::{NonFiniteTensor, TrainError};
pub use optim::{plateau_decay, seed_everything, step_seed, warmed_up};
pub use parallel::shares;
pub use records::{load_model, load_model_from};
pub use schedule::{LrSchedule, TauAnneal};
pub use state::{StopReason, TrainOutcome, TrainState};
pub use task::{EvalReport, StepContext, StepOutput, Task};
pub use train::{train, train_on};
