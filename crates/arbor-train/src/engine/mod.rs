//! The training loop.
//!
//! - `config`: [`TrainConfig`] and [`OptimizerKind`], what the loop is told (saved in every
//!   checkpoint);
//! - `task`: the [`Task`] interface a trainable task implements, with [`StepOutput`] and
//!   [`EvalReport`];
//! - `optim`: the optimizer, learning-rate warm-up ([`warmed_up`]) and plateau decay, and
//!   seeding ([`seed_everything`], [`step_seed`]);
//! - `run`: the loop itself, [`train`], with [`TrainState`], [`TrainOutcome`], [`TrainError`],
//!   and [`load_model`] to read weights back from a checkpoint;
//! - `progress`: what a run shows and logs as it goes (progress bar, the running window of
//!   training statistics, the summary table).

mod config;
mod optim;
mod progress;
mod run;
mod task;

pub use config::{OptimizerKind, TrainConfig};
pub use optim::{seed_everything, step_seed, warmed_up};
pub use run::{load_model, train, TrainError, TrainOutcome, TrainState};
pub use task::{EvalReport, StepOutput, Task};
