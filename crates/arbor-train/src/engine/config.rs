//! What the loop is told: [`TrainConfig`], [`OptimizerKind`] and [`CheckpointEvery`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::schedule::{LrSchedule, TauAnneal};

/// Which optimizer to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam with L2 weight decay (coupled).
    Adam,
    /// AdamW (decoupled weight decay).
    AdamW,
}

/// How often `last.ckpt` is written besides evaluations (see [`TrainConfig::checkpoint_every`]).
///
/// As text (the `--checkpoint-every` flag), a plain integer is a number of steps (`500`) and a
/// number followed by `m` a number of minutes (`10m`, `0.5m`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointEvery {
    /// Every this many optimizer steps (counted from the start of the run, across resumes;
    /// 0: never).
    Steps(u64),
    /// Whenever this many minutes of wall-clock time have passed since `last.ckpt` was last
    /// written by this process (a non-positive value: after every step; NaN: never).
    Minutes(f64),
}

impl fmt::Display for CheckpointEvery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointEvery::Steps(n) => write!(f, "{n}"),
            CheckpointEvery::Minutes(m) => write!(f, "{m}m"),
        }
    }
}

impl FromStr for CheckpointEvery {
    type Err = String;

    /// `500` (steps) or `10m` (minutes); zero, negative and non-numeric values are refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let bad = || {
            format!(
                "expected a positive number of steps (e.g. 500) or of minutes (e.g. 10m), got '{s}'"
            )
        };
        if let Some(minutes) = t.strip_suffix('m') {
            match minutes.trim().parse::<f64>() {
                Ok(m) if m.is_finite() && m > 0.0 => Ok(CheckpointEvery::Minutes(m)),
                _ => Err(bad()),
            }
        } else {
            match t.parse::<u64>() {
                Ok(n) if n > 0 => Ok(CheckpointEvery::Steps(n)),
                _ => Err(bad()),
            }
        }
    }
}

/// The default of [`TrainConfig::log_every`].
pub const DEFAULT_LOG_EVERY: u64 = 20;

fn default_log_every() -> u64 {
    DEFAULT_LOG_EVERY
}

/// Everything the loop needs to know. Saved in every checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Optimizer.
    pub optimizer: OptimizerKind,
    /// Initial learning rate.
    pub lr: f64,
    /// Weight decay (0 for none).
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value.
    pub clip_norm: Option<f64>,
    /// Examples per batch.
    pub batch_size: usize,
    /// Optional cap on padded tokens per batch.
    pub max_tokens: Option<usize>,
    /// Epochs to train.
    pub epochs: usize,
    /// Stop after this many optimizer steps in total (across resumes).
    pub max_steps: Option<u64>,
    /// Stop once this many minutes of training steps (evaluation excluded, across resumes) have
    /// run: a time budget for comparing models at equal wall-clock cost.
    #[serde(default)]
    pub max_minutes: Option<f64>,
    /// Evaluate (and checkpoint) every this many steps; 0 = at the end of every epoch.
    pub eval_every: u64,
    /// Read the training statistics (loss, gradient norm, accuracy) back from the device every
    /// this many steps, to refresh the progress bar and check for non-finite values; they are
    /// also read before every metrics record, evaluation and checkpoint, and at the end of
    /// every epoch. 0: only then. Steps between reads read nothing back.
    #[serde(default = "default_log_every")]
    pub log_every: u64,
    /// Seed of initialisation, data order, dropout and Gumbel noise.
    pub seed: u64,
    /// Multiply the learning rate by this factor when the validation metric stalls.
    pub plateau_factor: f64,
    /// Evaluations without improvement before the learning rate decays.
    pub plateau_patience: u32,
    /// Lower bound of the learning rate.
    pub min_lr: f64,
    /// Linear learning-rate warm-up over this many optimizer steps (0: none): step `s` uses
    /// `lr · min(1, (s + 1)/warmup_steps)`.
    #[serde(default)]
    pub warmup_steps: u64,
    /// How the learning rate moves (plateau decay by default; cosine, step, constant).
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Stop once this many evaluations in a row have not improved the validation metric
    /// (`None`: never stop early). The best model is in `best.ckpt`.
    #[serde(default)]
    pub early_stopping: Option<u32>,
    /// Anneal the Gumbel-softmax temperature (`None`: each model's own fixed τ).
    #[serde(default)]
    pub tau_anneal: Option<TauAnneal>,
    /// Also write `last.ckpt` on this schedule, independently of evaluation (`None`: only at
    /// evaluations and at the end of the run).
    #[serde(default)]
    pub checkpoint_every: Option<CheckpointEvery>,
    /// Where checkpoints and the metrics log go.
    pub out_dir: PathBuf,
    /// Continue from `out_dir/last.ckpt` (which must exist: see [`crate::outdir`]).
    pub resume: bool,
    /// Resume even when the checkpoint was saved with settings that change the run (batch,
    /// seed, optimizer, learning-rate schedule…) or with different data: the differences are
    /// printed as a warning instead of refused with [`TrainError::ResumeMismatch`].
    ///
    /// [`TrainError::ResumeMismatch`]: crate::TrainError::ResumeMismatch
    #[serde(default)]
    pub force_resume: bool,
    /// Replace the run `out_dir` holds (its checkpoints, metrics log, curves and result are
    /// deleted first) instead of refusing to start there; contradicts `resume`. See
    /// [`crate::outdir`].
    #[serde(default)]
    pub overwrite: bool,
    /// No progress bars (logs and the summary are still written).
    pub quiet: bool,
}

impl TrainConfig {
    /// A configuration with common defaults: Adam, lr 1e-3, clip 5, batch 32, one epoch,
    /// evaluation per epoch, statistics read every 20 steps, seed 0, plateau factor 0.5 with
    /// patience 1.
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        Self {
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            weight_decay: 0.0,
            clip_norm: Some(5.0),
            batch_size: 32,
            max_tokens: None,
            epochs: 1,
            max_steps: None,
            max_minutes: None,
            eval_every: 0,
            log_every: DEFAULT_LOG_EVERY,
            seed: 0,
            plateau_factor: 0.5,
            plateau_patience: 1,
            min_lr: 1e-6,
            warmup_steps: 0,
            lr_schedule: LrSchedule::Plateau,
            early_stopping: None,
            tau_anneal: None,
            checkpoint_every: None,
            out_dir: out_dir.into(),
            resume: false,
            force_resume: false,
            overwrite: false,
            quiet: false,
        }
    }

    /// Path of the last checkpoint.
    pub fn last_checkpoint(&self) -> PathBuf {
        self.out_dir.join("last.ckpt")
    }

    /// Path of the best checkpoint.
    pub fn best_checkpoint(&self) -> PathBuf {
        self.out_dir.join("best.ckpt")
    }

    /// Path of the metrics log.
    pub fn metrics_log(&self) -> PathBuf {
        self.out_dir.join("metrics.jsonl")
    }

    /// Path of the training curves drawn from the metrics log at the end of a run.
    pub fn curves(&self) -> PathBuf {
        self.out_dir.join("curves.svg")
    }
}
