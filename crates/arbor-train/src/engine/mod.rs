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
//! - `run`: the loop itself, [`train`], with [`TrainState`], [`TrainOutcome`] (and its
//!   [`StopReason`]), [`TrainError`] (and its [`NonFiniteTensor`]), and [`load_model`] to read
//!   weights back from a checkpoint;
//! - `resume`: the check that a resumed run keeps the settings and data of the run its
//!   checkpoint comes from;
//! - `curves`: the metrics log drawn as `curves.svg` at the end of a run;
//! - `progress`: what a run shows and logs as it goes (progress bar, the running window of
//!   training statistics, the summary table).

mod config;
mod curves;
mod optim;
mod parallel;
mod progress;
mod resume;
mod run;
mod schedule;
mod task;

pub use config::{CheckpointEvery, OptimizerKind, TrainConfig, DEFAULT_LOG_EVERY};
pub use optim::{plateau_decay, seed_everything, step_seed, warmed_up};
pub use parallel::shares;
pub use run::{
    load_model, train, train_on, NonFiniteTensor, StopReason, TrainError, TrainOutcome, TrainState,
};
pub use schedule::{LrSchedule, TauAnneal};
pub use task::{EvalReport, StepContext, StepOutput, Task};
