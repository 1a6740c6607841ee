//! Why training stops early: [`TrainError`] (and its [`NonFiniteTensor`]), with the helpers
//! that report a problem on the way.

use std::path::{Path, PathBuf};

use crate::checkpoint::CheckpointError;
use crate::outdir::OutDirError;

/// Why training stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A checkpoint could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The metrics log could not be written.
    #[error("metrics log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The loss or the gradients' global norm of a step became NaN or infinite. The values are
    /// read once per logging interval
    /// ([`TrainConfig::log_every`](crate::TrainConfig::log_every)), so training stopped at the
    /// first read after that step (the model in memory, which the optimizer updated with it,
    /// is dropped), and nothing was written after the last good checkpoint.
    #[error(
        "the {tensor} became {value} at step {step} (epoch {}, batch {} of the epoch, {batch_examples} \
         examples); training stopped and the last good checkpoint was kept. Lower the learning \
         rate, clip the gradients or check the data",
        epoch + 1,
        batch_in_epoch + 1
    )]
    NonFinite {
        /// The optimizer step that failed (steps done before it).
        step: u64,
        /// Its epoch (0-based; the message counts from 1).
        epoch: u64,
        /// Index of its batch within the epoch (0-based; the message counts from 1).
        batch_in_epoch: usize,
        /// Number of training examples in that batch.
        batch_examples: usize,
        /// Which value was not finite.
        tensor: NonFiniteTensor,
        /// The value.
        value: f64,
    },
    /// The backend failed to run the step or read its result back.
    #[error("the device failed at step {step}: {message}")]
    Device {
        /// The optimizer step.
        step: u64,
        /// The backend's error.
        message: String,
    },
    /// The checkpoint to resume from was written by a run with other settings or other data.
    #[error(
        "{path} was written by a run with different settings:\n  {}\nset force_resume \
         (--force) to resume anyway, or train into another directory",
        differences.join("\n  ")
    )]
    ResumeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// One `field: saved X, now Y` per difference.
        differences: Vec<String>,
    },
    /// The training set is empty.
    #[error("the training set is empty")]
    NoData,
    /// The configuration is invalid (a learning-rate schedule or temperature annealing with
    /// impossible settings).
    #[error("invalid training configuration: {0}")]
    Config(String),
    /// The output folder is another run's, holds a run this one would mix with, or holds
    /// nothing to resume (see [`crate::outdir`]).
    #[error(transparent)]
    OutDir(#[from] OutDirError),
}

/// Which value of a training step was NaN or infinite (see [`TrainError::NonFinite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFiniteTensor {
    /// The loss.
    Loss,
    /// The global L2 norm of all gradients.
    GradientNorm,
}

impl std::fmt::Display for NonFiniteTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NonFiniteTensor::Loss => "loss",
            NonFiniteTensor::GradientNorm => "gradient norm",
        })
    }
}

/// Prints a warning (also when quiet: it concerns the correctness of the run).
pub(super) fn warn(message: &str) {
    eprintln!("warning: {message}");
}

/// A [`TrainError::Log`] for an I/O error on the metrics log at `path`.
pub(super) fn log_error(path: &Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Log {
        path: path.to_path_buf(),
        source,
    }
}
