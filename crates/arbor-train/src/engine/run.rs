//! The loop: [`train`], what it keeps ([`TrainState`]) and returns ([`TrainOutcome`]), why it
//! stops early ([`TrainError`]), and [`load_model`] to read trained weights back.
//!
//! [`train`] is a short sequence of private steps, in this order: open the metrics log,
//! initialise or resume the model, optimizer and state ([`start`]), run epochs
//! ([`Run::run_epoch`], each step being [`Run::optimizer_step`]) with evaluations and
//! checkpoints on schedule ([`Run::evaluate`], [`Run::save_last`]), then [`Run::finish`], and
//! last draws the metrics log as `curves.svg`.
//!
//! # Reads: once per logging interval, not per step
//!
//! A training step reads nothing back from the device. It leaves `[loss, global gradient norm,
//! correct predictions]` on the device as one three-element tensor ([`StepOutput`] keeps the
//! task's loss and correct count there; clipping computes its scale factor from the norm on the
//! device, [`clip_on_device`]). The engine concatenates the pending steps' tensors and reads
//! them in **one** transfer at each logging point: every [`TrainConfig::log_every`] steps, and
//! before anything that needs the values or must not outlive a bad step — the `train` record of
//! the metrics log, an evaluation, a checkpoint, the end of an epoch or of the run. The values
//! read are each step's own, as when they were read step by step, so the progress bar and the
//! metrics log show the same numbers.
//!
//! A NaN or infinite loss or gradient norm is therefore found at the next read, at most one
//! logging interval late: [`TrainError::NonFinite`] names the first bad step (its step, epoch,
//! batch), but the optimizer has meanwhile applied it and the steps after it to the model in
//! memory. That model is dropped with the error; no checkpoint or metrics record is written
//! between the bad step and the read that finds it (every one of them comes after a read), so
//! `last.ckpt` and `best.ckpt` on disk hold the last good model, as before. The norm costs a few
//! small reductions per parameter tensor on the device, also when clipping is off.
//!
//! [`StepOutput`]: super::task::StepOutput

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arbor_data::batch::{make_batches, BatchConfig};
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use super::config::{CheckpointEvery, TrainConfig};
use super::curves::{draw_curves, SELECTION_METRIC};
use super::optim::{plateau_decay, step_seed, warmed_up, Optim};
use super::parallel::{self, WorkerStep, Workers};
use super::progress::{print_summary, Progress, Window};
use super::resume::{self, CONFIG_KEY, FINGERPRINT_KEY};
use super::task::{EvalReport, Task};
use crate::checkpoint::{CheckpointError, CheckpointFile};
use crate::log::{MetricsLog, MetricsRecord};
use crate::outdir::{self, new_run_id, OutDirError, StartMode};

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
    /// read once per logging interval ([`TrainConfig::log_every`]), so training stopped at the
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

/// Why [`train`] returned normally.
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

/// The result of [`train`].
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

fn model_bytes<B: Backend, M: Module<B>>(model: &M) -> Vec<u8> {
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    Recorder::<B>::record(&rec, model.clone().into_record(), ())
        .expect("in-memory recording cannot fail")
}

/// Runs `decode`, Burn's decoding of a record, turning a panic into an error: Burn panics on
/// some malformed records (an invalid parameter id, for one), which a checkpoint with a valid
/// checksum can still hold when it was written by other code or altered on purpose, and its
/// derived enum modules panic on a record of another variant (a Gumbel run resumed with
/// `--encoder lstm`). The panic's message becomes the error's, and is not also printed by the
/// panic hook: see [`quiet_panics`].
fn decode_record<R>(decode: impl FnOnce() -> Result<R, String>) -> Result<R, String> {
    quiet_panics(decode).unwrap_or_else(|why| Err(format!("malformed record: {why}")))
}

thread_local! {
    /// Whether a panic on this thread is being caught as an error (not printed).
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic on this thread as `Err(its message)` without the panic hook
/// printing it: a hook installed once passes every other panic (other threads, or this one
/// outside `f`) on to the hook that was there before it.
fn quiet_panics<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the decoder panicked".into())
    })
}

/// The shapes of `model`'s parameters, in visiting order (without initialising lazy ones).
fn param_shapes<B: Backend, M: Module<B>>(model: &M) -> Vec<Vec<usize>> {
    struct Shapes(Vec<Vec<usize>>);
    impl<B: Backend> ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
        fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
    }
    let mut shapes = Shapes(Vec::new());
    model.visit(&mut shapes);
    shapes.0
}

/// `model` with the weights of the record `bytes`, refused unless every parameter keeps its
/// shape (a record of a model built with another configuration would otherwise load and fail
/// later, inside a step).
fn load_weights<B: Backend, M: Module<B>>(
    model: M,
    bytes: Vec<u8>,
    device: &B::Device,
) -> Result<M, String> {
    let expected = param_shapes::<B, _>(&model);
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    let record = Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?;
    let model = model.load_record(record);
    let got = param_shapes::<B, _>(&model);
    if got.len() != expected.len() {
        return Err(format!(
            "{} parameters in the checkpoint, {} in the model",
            got.len(),
            expected.len()
        ));
    }
    for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
        if g != e {
            return Err(format!(
                "parameter {k} has shape {g:?} in the checkpoint but {e:?} in the model (built \
                 with another configuration?)"
            ));
        }
    }
    Ok(model)
}

/// Loads model weights from a checkpoint file into `model` (built with the same configuration).
/// Returns the model and the checkpoint's metadata.
///
/// # Errors
/// The file is missing, damaged ([`CheckpointError`] says how) or holds a record that does not
/// decode.
pub fn load_model<B: Backend, M: Module<B>>(
    model: M,
    path: &Path,
    device: &B::Device,
) -> Result<(M, serde_json::Value), CheckpointError> {
    let file = CheckpointFile::load(path)?;
    let bytes = file.model;
    let model =
        decode_record(|| load_weights::<B, M>(model, bytes, device)).map_err(|message| {
            CheckpointError::Record {
                path: path.to_path_buf(),
                message,
            }
        })?;
    Ok((model, file.meta))
}

/// Trains `model` on `task` as `config` says, resuming from `out_dir/last.ckpt` when
/// `config.resume` is set and that file exists.
///
/// At the end (also when a step fails), the metrics log is drawn as `out_dir/curves.svg`; a
/// failure to draw is only a warning.
///
/// # Errors
/// A refused checkpoint (damaged, or from a run with other settings or data: see
/// [`TrainError::ResumeMismatch`]), an unwritable log or checkpoint, an empty training set, a
/// non-finite loss or gradient, or a failing device.
pub fn train<B, T>(
    task: &T,
    model: T::Model,
    config: &TrainConfig,
    device: &B::Device,
) -> Result<TrainOutcome<T::Model>, TrainError>
where
    B: AutodiffBackend,
    T: Task<B>,
{
    train_on(task, model, config, std::slice::from_ref(device))
}

/// [`train`] with data parallelism over `devices`: one worker per device (the same device may
/// be named more than once), each taking its share of every batch, the gradients summed across
/// workers by Burn's collective (see the `parallel` module). `model` must be on `devices[0]`;
/// the metrics log, checkpoints and the returned model are worker 0's. One device is exactly
/// [`train`].
///
/// # Errors
/// As [`train`]; [`TrainError::Config`] for an empty `devices`; [`TrainError::Device`] when
/// the workers cannot register with the collective or reduce.
pub fn train_on<B, T>(
    task: &T,
    model: T::Model,
    config: &TrainConfig,
    devices: &[B::Device],
) -> Result<TrainOutcome<T::Model>, TrainError>
where
    B: AutodiffBackend,
    T: Task<B>,
{
    validate(config).map_err(TrainError::Config)?;
    let Some(device) = devices.first() else {
        return Err(TrainError::Config("no device to train on".into()));
    };
    // Held until training and its curves are done; a program that wrote into the folder
    // before (and claimed it then) keeps holding it after.
    let _lock = outdir::claim(
        &config.out_dir,
        StartMode::from_flags(config.resume, config.overwrite)?,
    )?;
    let lengths = task.train_lengths();
    if lengths.is_empty() {
        return Err(TrainError::NoData);
    }
    let log_path = config.metrics_log();
    std::fs::create_dir_all(&config.out_dir).map_err(log_error(&log_path))?;
    let log = MetricsLog::new(&log_path).map_err(log_error(&log_path))?;
    let fingerprint = task.data_fingerprint();
    let training = start::<B, T::Model>(model, config, fingerprint.as_deref(), &log, devices)?;
    if devices.len() > 1 && !config.quiet {
        eprintln!(
            "data-parallel training: {} workers ({}), each taking its share of every batch of {}",
            devices.len(),
            devices
                .iter()
                .map(|d| format!("{d:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            config.batch_size
        );
    }
    let run = Run {
        task,
        config,
        device,
        lengths,
        log,
        last_path: config.last_checkpoint(),
        best_path: config.best_checkpoint(),
        splits: task.eval_splits(),
        batch_config: BatchConfig {
            batch_size: config.batch_size.max(1),
            max_tokens: config.max_tokens,
            bucket: true,
            shuffle: true,
            seed: config.seed,
        },
        max_steps: config.max_steps.unwrap_or(u64::MAX),
        fingerprint,
        run_steps: 0,
    };
    let run = Run {
        run_steps: run.run_steps(),
        ..run
    };
    let outcome = run.run_all(training);
    let curves = config.curves();
    let drawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        draw_curves(run.log.path(), &curves)
    }));
    match drawn {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn(&format!("training curves not drawn: {e}")),
        Err(_) => warn(&format!(
            "training curves not drawn: the plotting library failed on {}",
            curves.display()
        )),
    }
    outcome
}

/// Checks the settings that no type rules out: the learning-rate schedule against the learning
/// rate, the temperature annealing, a positive early-stopping patience.
fn validate(config: &TrainConfig) -> Result<(), String> {
    config
        .lr_schedule
        .validate(config.lr, config.min_lr)
        .map_err(|e| format!("lr_schedule: {e}"))?;
    if let Some(a) = &config.tau_anneal {
        a.validate().map_err(|e| format!("tau_anneal: {e}"))?;
    }
    if config.early_stopping == Some(0) {
        return Err("early_stopping: the patience must be at least 1 evaluation".into());
    }
    Ok(())
}

/// Prints a warning (also when quiet: it concerns the correctness of the run).
fn warn(message: &str) {
    eprintln!("warning: {message}");
}

/// A [`TrainError::Log`] for an I/O error on the metrics log at `path`.
fn log_error(path: &Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Log {
        path: path.to_path_buf(),
        source,
    }
}

/// What changes as training goes.
struct Training<B: AutodiffBackend, M: AutodiffModule<B>> {
    /// Worker 0's model: the one evaluated and checkpointed.
    model: M,
    optim: Optim<B, M>,
    /// The other workers' replicas (none with one device).
    workers: Workers<B, M>,
    state: TrainState,
    /// The last evaluation of every split.
    evals: BTreeMap<String, EvalReport>,
    /// The step of the last scheduled evaluation.
    last_eval_step: Option<u64>,
    /// When this process last wrote `last.ckpt` (or started).
    last_save: Instant,
}

/// A fresh optimizer and state for `model`, or, when `config.resume` is set and
/// `out_dir/last.ckpt` exists, the model, optimizer and state stored there (and the metrics log
/// cut back to that step), after checking that the checkpoint comes from a run with the same
/// settings and data (`fingerprint`).
fn start<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: M,
    config: &TrainConfig,
    fingerprint: Option<&str>,
    log: &MetricsLog,
    devices: &[B::Device],
) -> Result<Training<B, M>, TrainError> {
    let device = &devices[0];
    let mut model = model;
    let mut optim = Optim::<B, M>::new(config);
    let mut state = TrainState {
        step: 0,
        epoch: 0,
        batch_in_epoch: 0,
        lr: config.lr,
        best_metric: None,
        best_step: None,
        bad_evals: 0,
        elapsed_sec: 0.0,
        examples: 0,
        evals_since_best: 0,
        stopped_early: false,
        run_id: new_run_id(),
    };
    let last_path = config.last_checkpoint();
    if config.resume {
        let file = CheckpointFile::load(&last_path)?;
        let check = resume::compare(&file.meta, config, fingerprint);
        for w in &check.warnings {
            warn(&format!("{}: {w}", last_path.display()));
        }
        if !check.differences.is_empty() {
            if !config.force_resume {
                return Err(TrainError::ResumeMismatch {
                    path: last_path,
                    differences: check.differences,
                });
            }
            warn(&format!(
                "{} was written with different settings; resuming anyway (force_resume):\n  {}",
                last_path.display(),
                check.differences.join("\n  ")
            ));
        }
        let rec_err = |message: String| CheckpointError::Record {
            path: last_path.clone(),
            message,
        };
        (model, optim) = decode_record(|| {
            let model = load_weights::<B, M>(model, file.model, device)?;
            let optim = optim.load_bytes(file.optim, device)?;
            optim.check_shapes(&model)?;
            Ok((model, optim))
        })
        .map_err(rec_err)?;
        let run_id = std::mem::take(&mut state.run_id);
        state = serde_json::from_value(file.meta["state"].clone()).map_err(|e| {
            CheckpointError::Metadata {
                path: last_path.clone(),
                message: e.to_string(),
            }
        })?;
        if state.run_id.is_empty() {
            state.run_id = run_id;
        }
        log.truncate_after(state.step)
            .map_err(log_error(log.path()))?;
        if !config.quiet {
            eprintln!(
                "resuming from {} at step {} (epoch {}, batch {})",
                last_path.display(),
                state.step,
                state.epoch + 1,
                state.batch_in_epoch
            );
        }
    }
    let seed = step_seed(config.seed, state.step, 0);
    let (model, workers) =
        Workers::start(model, &optim, config, devices, seed).map_err(|e| TrainError::Device {
            step: state.step,
            message: e.to_string(),
        })?;
    Ok(Training {
        model,
        optim,
        workers,
        state,
        evals: BTreeMap::new(),
        last_eval_step: None,
        last_save: Instant::now(),
    })
}

/// A step whose values have not been read back yet: where it stood (for
/// [`TrainError::NonFinite`]) and `[loss, global gradient norm, correct predictions]` on the
/// device.
struct PendingStep<B: Backend> {
    step: u64,
    epoch: u64,
    batch_in_epoch: usize,
    batch_examples: usize,
    /// Predictions made in the batch.
    total: usize,
    values: Tensor<B, 1>,
}

/// What stays fixed for a whole call of [`train`].
struct Run<'a, B: AutodiffBackend, T: Task<B>> {
    task: &'a T,
    config: &'a TrainConfig,
    device: &'a B::Device,
    /// Size of every training example.
    lengths: Vec<usize>,
    log: MetricsLog,
    last_path: PathBuf,
    best_path: PathBuf,
    /// The splits to evaluate; the first drives model selection and plateau decay.
    splits: Vec<String>,
    batch_config: BatchConfig,
    /// `config.max_steps`, or no limit.
    max_steps: u64,
    /// The task's data fingerprint, stored in every checkpoint.
    fingerprint: Option<String>,
    /// The run's length in optimizer steps (`max_steps`, or epochs × the first epoch's
    /// batches when smaller): the default length of a cosine schedule.
    run_steps: u64,
}

impl<B: AutodiffBackend, T: Task<B>> Run<'_, B, T> {
    /// Runs epochs until one of the budgets is spent, then [`Run::finish`].
    fn run_all(
        &self,
        mut training: Training<B, T::Model>,
    ) -> Result<TrainOutcome<T::Model>, TrainError> {
        while self.more_epochs(&training.state) {
            let stop;
            (training, stop) = self.run_epoch(training)?;
            if stop {
                break;
            }
        }
        self.finish(training)
    }

    /// The run's length in optimizer steps: `max_steps`, or epochs × the first epoch's
    /// batches when that is smaller.
    fn run_steps(&self) -> u64 {
        let per_epoch = self
            .task
            .batches(0)
            .map(|b| b.len())
            .unwrap_or_else(|| make_batches(&self.lengths, &self.batch_config, 0).len());
        (per_epoch as u64)
            .saturating_mul(self.config.epochs as u64)
            .min(self.max_steps)
            .max(1)
    }

    /// The learning rate of optimizer step `state.step`: the schedule, then the warm-up.
    fn lr(&self, state: &TrainState) -> f64 {
        let c = self.config;
        let scheduled = c
            .lr_schedule
            .lr_at::<B>(state.step, state.lr, c.min_lr, self.run_steps);
        warmed_up(c, state.step, scheduled)
    }

    /// Whether `config.checkpoint_every` asks for `last.ckpt` now.
    fn checkpoint_due(&self, t: &Training<B, T::Model>) -> bool {
        match self.config.checkpoint_every {
            None => false,
            Some(CheckpointEvery::Steps(n)) => n > 0 && t.state.step.is_multiple_of(n),
            Some(CheckpointEvery::Minutes(m)) => t.last_save.elapsed().as_secs_f64() >= 60.0 * m,
        }
    }

    /// Whether another epoch may start: epochs, steps and training time are all left.
    fn more_epochs(&self, state: &TrainState) -> bool {
        !state.stopped_early
            && (state.epoch as usize) < self.config.epochs
            && state.step < self.max_steps
            && self
                .config
                .max_minutes
                .is_none_or(|m| state.elapsed_sec < 60.0 * m)
    }

    /// Runs epoch `state.epoch` from batch `state.batch_in_epoch` to its end, logging the
    /// training window, evaluating and checkpointing on schedule (a checkpoint closes the
    /// training window in the log, so a resumed run logs every step once). Returns whether
    /// training must stop now (the step or time budget is spent).
    fn run_epoch(
        &self,
        mut t: Training<B, T::Model>,
    ) -> Result<(Training<B, T::Model>, bool), TrainError> {
        let config = self.config;
        let batches = self
            .task
            .batches(t.state.epoch)
            .unwrap_or_else(|| make_batches(&self.lengths, &self.batch_config, t.state.epoch));
        if batches.is_empty() {
            return Err(TrainError::NoData);
        }
        if t.state.batch_in_epoch >= batches.len() {
            // Resumed (forced) with settings that make this epoch shorter than the position
            // saved in the checkpoint: the epoch is over.
            warn(&format!(
                "the checkpoint's position (batch {}) is past the {} batches of epoch {}; \
                 continuing with the next epoch",
                t.state.batch_in_epoch + 1,
                batches.len(),
                t.state.epoch + 1
            ));
            t.state.epoch += 1;
            t.state.batch_in_epoch = 0;
            return Ok((t, false));
        }
        let progress = Progress::new(batches.len() as u64, t.state.epoch, config.quiet);
        progress.bar.set_position(t.state.batch_in_epoch as u64);
        let mut window = Window::new();
        let mut pending = Vec::new();
        while t.state.batch_in_epoch < batches.len() {
            let batch = &batches[t.state.batch_in_epoch];
            let stats;
            (t.model, stats) =
                self.optimizer_step(t.model, &mut t.optim, &mut t.workers, &mut t.state, batch)?;
            pending.push(stats);
            progress.bar.set_position(t.state.batch_in_epoch as u64);
            let eval_now = config.eval_every > 0 && t.state.step.is_multiple_of(config.eval_every);
            let out_of_time = config
                .max_minutes
                .is_some_and(|m| t.state.elapsed_sec >= 60.0 * m);
            let mut stop = t.state.step >= self.max_steps || out_of_time;
            let checkpoint_now = self.checkpoint_due(&t);
            let close_window =
                eval_now || stop || checkpoint_now || t.state.batch_in_epoch == batches.len();
            let log_now = config.log_every > 0 && t.state.step.is_multiple_of(config.log_every);
            if close_window || log_now {
                // The one read of the interval (see "Reads" above). On a device that runs
                // asynchronously it waits for the steps' work, so it counts as training time.
                let started = Instant::now();
                self.read_pending(&mut pending, &mut window)?;
                t.state.elapsed_sec += started.elapsed().as_secs_f64();
                let secs = window.secs();
                progress
                    .bar
                    .set_message(window.message(secs, self.lr(&t.state)));
            }
            if close_window {
                let secs = window.secs();
                let last = t.state.step.saturating_sub(1);
                let tau = config.tau_anneal.map(|a| a.tau_at(last));
                let lr = self.lr(&TrainState {
                    step: last,
                    ..t.state.clone()
                });
                let record = window.record(&t.state, secs, lr, tau);
                self.log
                    .append(&record)
                    .map_err(log_error(self.log.path()))?;
                window = Window::new();
            }
            let epoch_done = t.state.batch_in_epoch == batches.len();
            if epoch_done {
                t.state.epoch += 1;
                t.state.batch_in_epoch = 0;
            }
            if eval_now || (config.eval_every == 0 && epoch_done) {
                progress
                    .bar
                    .suspend(|| self.evaluate(&t.model, &mut t.state, &mut t.evals, true))?;
                t.last_eval_step = Some(t.state.step);
                self.save_last(&mut t)?;
                stop |= t.state.stopped_early;
            } else if checkpoint_now && !stop {
                // (When stopping, `finish` writes it.)
                self.save_last(&mut t)?;
            }
            if stop || epoch_done {
                progress.bar.finish_and_clear();
                return Ok((t, stop));
            }
        }
        progress.bar.finish_and_clear();
        Ok((t, false))
    }

    /// One optimizer step on `batch`: seeds the backend and the task's noise for this step,
    /// computes the loss, back-propagates, clips the gradients by their global norm, updates
    /// the model at the warmed-up learning rate and advances `state`, all without reading
    /// anything back. Returns the step's [`PendingStep`]: `[loss, gradient norm, correct]` on
    /// the device, for [`Run::read_pending`].
    ///
    /// With several workers (`parallel`), each takes its share of `batch` on its own thread and
    /// device, and the gradients, loss and correct count are summed across them by Burn's
    /// collective before the norm, the clipping and the (identical) updates.
    fn optimizer_step(
        &self,
        model: T::Model,
        optim: &mut Optim<B, T::Model>,
        workers: &mut Workers<B, T::Model>,
        state: &mut TrainState,
        batch: &[usize],
    ) -> Result<(T::Model, PendingStep<B::InnerBackend>), TrainError> {
        let config = self.config;
        let started = Instant::now();
        let step = state.step;
        let lr = self.lr(state);
        let replicas = &mut workers.replicas;
        let workers = replicas.len() + 1;
        let shares = parallel::shares(batch, workers);
        let weights: Vec<f64> = shares.iter().map(|s| self.task.loss_weight(s)).collect();
        let sum: f64 = weights.iter().sum();
        let presence = (workers > 1).then(|| parallel::Presence::new(workers));
        let job = |worker: usize| WorkerStep {
            task: self.task,
            config,
            step,
            lr,
            temperature: config.tau_anneal.map(|a| a.tau_at(step)),
            worker,
            workers,
            share: shares[worker],
            weight: if workers == 1 || sum <= 0.0 {
                1.0
            } else {
                weights[worker] / sum
            },
            presence: presence.as_ref(),
        };
        let collective = |e: parallel::CollectiveFailure| TrainError::Device {
            step,
            message: e.to_string(),
        };
        let out = if workers == 1 {
            parallel::worker_step(job(0), model, optim, self.device).map_err(collective)?
        } else {
            let device = self.device;
            let (first, rest) = std::thread::scope(|scope| {
                let others: Vec<_> = replicas
                    .iter_mut()
                    .enumerate()
                    .map(|(i, r)| {
                        let job = job(i + 1);
                        let model = r.model.take().expect("a replica between steps");
                        scope.spawn(move || {
                            parallel::worker_step(job, model, &mut r.optim, &r.device)
                        })
                    })
                    .collect();
                let first = parallel::worker_step(job(0), model, optim, device);
                let rest: Vec<_> = others.into_iter().map(|h| h.join()).collect();
                (first, rest)
            });
            let mut first = first.map_err(collective)?;
            for (r, out) in replicas.iter_mut().zip(rest) {
                let out = match out {
                    Ok(out) => out.map_err(collective)?,
                    Err(p) => std::panic::resume_unwind(p),
                };
                if let Some(p) = out.panic {
                    std::panic::resume_unwind(p);
                }
                r.model = Some(out.model);
                first.total += out.total;
            }
            first
        };
        if let Some(p) = out.panic {
            std::panic::resume_unwind(p);
        }
        let pending = PendingStep {
            step,
            epoch: state.epoch,
            batch_in_epoch: state.batch_in_epoch,
            batch_examples: batch.len(),
            total: out.total,
            values: out.values,
        };
        state.step += 1;
        state.batch_in_epoch += 1;
        state.examples += batch.len() as u64;
        state.elapsed_sec += started.elapsed().as_secs_f64();
        Ok((out.model, pending))
    }

    /// Reads the `pending` steps' values back in one transfer and adds them to `window`, in
    /// order; refuses the first step whose loss or gradient norm is not finite
    /// ([`TrainError::NonFinite`], naming that step).
    fn read_pending(
        &self,
        pending: &mut Vec<PendingStep<B::InnerBackend>>,
        window: &mut Window,
    ) -> Result<(), TrainError> {
        let Some(last) = pending.last().map(|p| p.step) else {
            return Ok(());
        };
        let steps = std::mem::take(pending);
        let all = Tensor::cat(steps.iter().map(|p| p.values.clone()).collect(), 0);
        let data = all.try_into_data().map_err(|e| TrainError::Device {
            step: last,
            message: e.to_string(),
        })?;
        let values: Vec<f64> = data.iter::<f64>().collect();
        for (p, v) in steps.iter().zip(values.chunks_exact(3)) {
            let (loss, norm, correct) = (v[0], v[1], v[2]);
            let non_finite = |tensor, value| TrainError::NonFinite {
                step: p.step,
                epoch: p.epoch,
                batch_in_epoch: p.batch_in_epoch,
                batch_examples: p.batch_examples,
                tensor,
                value,
            };
            if !loss.is_finite() {
                return Err(non_finite(NonFiniteTensor::Loss, loss));
            }
            if !norm.is_finite() {
                return Err(non_finite(NonFiniteTensor::GradientNorm, norm));
            }
            window.add(loss, correct as usize, p.total, p.batch_examples);
        }
        Ok(())
    }

    /// Writes a checkpoint of `model` (with the optimizer state `optim`, empty for
    /// `best.ckpt`) at `state` to `path`, with the configuration and the data fingerprint the
    /// resume check compares.
    fn save_checkpoint(
        &self,
        model: &T::Model,
        optim: Vec<u8>,
        state: &TrainState,
        path: &Path,
    ) -> Result<(), CheckpointError> {
        let json = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| CheckpointError::Metadata {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        };
        let mut meta = serde_json::Map::new();
        meta.insert("state".into(), json(serde_json::to_value(state))?);
        meta.insert(CONFIG_KEY.into(), json(serde_json::to_value(self.config))?);
        meta.insert(
            FINGERPRINT_KEY.into(),
            json(serde_json::to_value(&self.fingerprint))?,
        );
        meta.insert("task".into(), self.task.metadata());
        CheckpointFile {
            meta: serde_json::Value::Object(meta),
            model: model_bytes::<B, _>(model),
            optim,
        }
        .save(path)
    }

    /// Writes `last.ckpt`: model, optimizer and state.
    fn save_last(&self, t: &mut Training<B, T::Model>) -> Result<(), CheckpointError> {
        self.save_checkpoint(&t.model, t.optim.to_bytes(), &t.state, &self.last_path)?;
        t.last_save = Instant::now();
        Ok(())
    }

    /// Evaluates `model` on every split, logging and printing each report into `evals`.
    ///
    /// `select`: whether this evaluation drives model selection and plateau decay. The extra
    /// evaluation made when a run stops between scheduled evaluations (max_steps) only reports,
    /// so a stopped-and-resumed run follows exactly the same schedule as an uninterrupted one.
    fn evaluate(
        &self,
        model: &T::Model,
        state: &mut TrainState,
        evals: &mut BTreeMap<String, EvalReport>,
        select: bool,
    ) -> Result<(), TrainError> {
        let inner = model.valid();
        for (k, split) in self.splits.iter().enumerate() {
            let report = self.task.evaluate(&inner, split);
            let metric = (k == 0).then(|| self.task.selection_metric(&report));
            self.report(split, &report, metric, state)?;
            if k == 0 && select {
                self.select(model, &report, state)?;
            }
            evals.insert(split.clone(), report);
        }
        Ok(())
    }

    /// Appends the evaluation of `split` to the metrics log (with the `selection_metric` for
    /// the first split) and prints it.
    fn report(
        &self,
        split: &str,
        report: &EvalReport,
        selection_metric: Option<f64>,
        state: &TrainState,
    ) -> Result<(), TrainError> {
        let mut extra = serde_json::Map::new();
        for (key, v) in &report.extra {
            extra.insert(key.clone(), serde_json::json!(v));
        }
        if let Some(m) = selection_metric {
            extra.insert(SELECTION_METRIC.into(), serde_json::json!(m));
        }
        self.log
            .append(&MetricsRecord {
                kind: format!("eval:{split}"),
                step: state.step,
                epoch: state.epoch,
                loss: report.loss(),
                accuracy: (report.total > 0).then(|| report.accuracy()),
                lr: state.lr,
                examples_per_sec: None,
                elapsed_sec: state.elapsed_sec,
                run: Some(state.run_id.clone()),
                extra,
            })
            .map_err(log_error(self.log.path()))?;
        if !self.config.quiet {
            eprintln!(
                "step {:>7} {split:>8}: accuracy {:.4} ({}/{}){}",
                state.step,
                report.accuracy(),
                report.correct,
                report.total,
                report
                    .loss()
                    .map(|l| format!(", loss {l:.4}"))
                    .unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Model selection on the first split's `report`: a new best metric is recorded in `state`
    /// and `model` saved to `best.ckpt`; otherwise the plateau counter advances and the learning
    /// rate may decay.
    fn select(
        &self,
        model: &T::Model,
        report: &EvalReport,
        state: &mut TrainState,
    ) -> Result<(), TrainError> {
        let metric = self.task.selection_metric(report);
        if state.best_metric.is_none_or(|b| metric > b) {
            state.best_metric = Some(metric);
            state.best_step = Some(state.step);
            state.bad_evals = 0;
            state.evals_since_best = 0;
            self.save_checkpoint(model, Vec::new(), state, &self.best_path)?;
            return Ok(());
        }
        state.evals_since_best += 1;
        if self.config.lr_schedule.decays_on_plateau()
            && plateau_decay(self.config, &mut state.bad_evals, &mut state.lr)
            && !self.config.quiet
        {
            eprintln!("validation stalled: learning rate now {:.2e}", state.lr);
        }
        if let Some(patience) = self.config.early_stopping {
            if state.evals_since_best >= patience {
                state.stopped_early = true;
                if !self.config.quiet {
                    eprintln!(
                        "early stopping: no improvement in {} evaluations (best {:.4} at step {})",
                        state.evals_since_best,
                        state.best_metric.unwrap_or(f64::NAN),
                        state.best_step.unwrap_or(0)
                    );
                }
            }
        }
        Ok(())
    }

    /// Why the loop ended at `state`.
    fn stop_reason(&self, state: &TrainState) -> StopReason {
        if state.stopped_early {
            StopReason::EarlyStopping
        } else if state.epoch as usize >= self.config.epochs {
            StopReason::Finished
        } else if state.step >= self.max_steps {
            StopReason::MaxSteps
        } else if self
            .config
            .max_minutes
            .is_some_and(|m| state.elapsed_sec >= 60.0 * m)
        {
            StopReason::MaxMinutes
        } else {
            StopReason::Finished
        }
    }

    /// Ends the run: evaluates the final model unless that step was just evaluated (selecting
    /// only when every epoch ran), writes `last.ckpt` and prints the summary.
    fn finish(&self, mut t: Training<B, T::Model>) -> Result<TrainOutcome<T::Model>, TrainError> {
        let stopped = self.stop_reason(&t.state);
        if t.last_eval_step != Some(t.state.step) {
            let finished = t.state.epoch as usize >= self.config.epochs;
            self.evaluate(&t.model, &mut t.state, &mut t.evals, finished)?;
        }
        self.save_last(&mut t)?;
        if !self.config.quiet {
            if stopped == StopReason::MaxMinutes {
                eprintln!(
                    "time budget spent at step {}: {} resumes the run",
                    t.state.step,
                    self.last_path.display()
                );
            }
            print_summary(&t.state, &t.evals, self.config);
        }
        // Only a best checkpoint this run wrote (the folder's claim removed or refused any
        // other run's).
        let best_checkpoint = (t.state.best_step.is_some() && self.best_path.exists())
            .then(|| self.best_path.clone());
        Ok(TrainOutcome {
            model: t.model,
            state: t.state,
            evals: t.evals,
            last_checkpoint: self.last_path.clone(),
            best_checkpoint,
            stopped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child half of the test below: a caught decoding panic, in a process of its own so
    /// that its stderr can be read.
    #[test]
    fn quiet_panics_child() {
        if std::env::var_os("ARBOR_QUIET_PANICS_CHILD").is_none() {
            return;
        }
        let e = decode_record::<()>(|| panic!("record of another variant")).unwrap_err();
        eprintln!("error: {e}");
    }

    #[test]
    fn a_caught_decoding_panic_is_an_error_and_prints_nothing_else() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "engine::run::tests::quiet_panics_child",
                "--nocapture",
            ])
            .env("ARBOR_QUIET_PANICS_CHILD", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("error: malformed record: record of another variant"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked at"), "{stderr}");
        // Outside a decode, panics still reach the previous hook.
        assert!(quiet_panics(|| 1).is_ok());
        assert!(!CATCHING.with(std::cell::Cell::get));
    }
}
