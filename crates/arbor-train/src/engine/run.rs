//! The loop: [`train`], what it keeps ([`TrainState`]) and returns ([`TrainOutcome`]), why it
//! stops early ([`TrainError`]), and [`load_model`] to read trained weights back.
//!
//! [`train`] is a short sequence of private steps, in this order: open the metrics log,
//! initialise or resume the model, optimizer and state ([`start`]), run epochs
//! ([`Run::run_epoch`], each step being [`Run::optimizer_step`]) with evaluations and
//! checkpoints on schedule ([`Run::evaluate`]), then [`Run::finish`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arbor_data::batch::{make_batches, BatchConfig};
use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use super::config::TrainConfig;
use super::optim::{plateau_decay, seed_everything, step_seed, warmed_up, Optim};
use super::progress::{print_summary, Progress, Window};
use super::task::{EvalReport, Task};
use crate::checkpoint::{CheckpointError, CheckpointFile};
use crate::clip::clip_global_norm;
use crate::log::{MetricsLog, MetricsRecord};

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
    /// The loss became NaN or infinite.
    #[error("the loss became {value} at step {step}; lower the learning rate or check the data")]
    NonFinite {
        /// The step.
        step: u64,
        /// The loss value.
        value: f64,
    },
    /// The training set is empty.
    #[error("the training set is empty")]
    NoData,
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
}

fn model_bytes<B: Backend, M: Module<B>>(model: &M) -> Vec<u8> {
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    Recorder::<B>::record(&rec, model.clone().into_record(), ())
        .expect("in-memory recording cannot fail")
}

/// Loads model weights from a checkpoint file into `model` (built with the same configuration).
/// Returns the model and the checkpoint's metadata.
pub fn load_model<B: Backend, M: Module<B>>(
    model: M,
    path: &Path,
    device: &B::Device,
) -> Result<(M, serde_json::Value), CheckpointError> {
    let file = CheckpointFile::load(path)?;
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    let record =
        Recorder::<B>::load(&rec, file.model, device).map_err(|e| CheckpointError::Record {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok((model.load_record(record), file.meta))
}

/// Trains `model` on `task` as `config` says, resuming from `out_dir/last.ckpt` when
/// `config.resume` is set and that file exists.
///
/// # Errors
/// A refused checkpoint, an unwritable log or checkpoint, an empty training set, or a
/// non-finite loss.
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
    let lengths = task.train_lengths();
    if lengths.is_empty() {
        return Err(TrainError::NoData);
    }
    let log_path = config.metrics_log();
    std::fs::create_dir_all(&config.out_dir).map_err(log_error(&log_path))?;
    let log = MetricsLog::new(&log_path).map_err(log_error(&log_path))?;
    let mut training = start::<B, T::Model>(model, config, &log, device)?;
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
    };
    while run.more_epochs(&training.state) {
        let stop;
        (training, stop) = run.run_epoch(training)?;
        if stop {
            break;
        }
    }
    run.finish(training)
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
    model: M,
    optim: Optim<B, M>,
    state: TrainState,
    /// The last evaluation of every split.
    evals: BTreeMap<String, EvalReport>,
    /// The step of the last scheduled evaluation.
    last_eval_step: Option<u64>,
}

/// A fresh optimizer and state for `model`, or, when `config.resume` is set and
/// `out_dir/last.ckpt` exists, the model, optimizer and state stored there (and the metrics log
/// cut back to that step).
fn start<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: M,
    config: &TrainConfig,
    log: &MetricsLog,
    device: &B::Device,
) -> Result<Training<B, M>, TrainError> {
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
    };
    let last_path = config.last_checkpoint();
    if config.resume && last_path.exists() {
        let file = CheckpointFile::load(&last_path)?;
        let rec_err = |message: String| CheckpointError::Record {
            path: last_path.clone(),
            message,
        };
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        let record =
            Recorder::<B>::load(&rec, file.model, device).map_err(|e| rec_err(e.to_string()))?;
        model = model.load_record(record);
        optim = optim.load_bytes(file.optim, device).map_err(rec_err)?;
        state = serde_json::from_value(file.meta["state"].clone()).map_err(|e| {
            CheckpointError::Metadata {
                path: last_path.clone(),
                message: e.to_string(),
            }
        })?;
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
    } else if config.resume && !config.quiet {
        eprintln!("no checkpoint at {}; starting fresh", last_path.display());
    }
    Ok(Training {
        model,
        optim,
        state,
        evals: BTreeMap::new(),
        last_eval_step: None,
    })
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
}

impl<B: AutodiffBackend, T: Task<B>> Run<'_, B, T> {
    /// Whether another epoch may start: epochs, steps and training time are all left.
    fn more_epochs(&self, state: &TrainState) -> bool {
        (state.epoch as usize) < self.config.epochs
            && state.step < self.max_steps
            && self
                .config
                .max_minutes
                .is_none_or(|m| state.elapsed_sec < 60.0 * m)
    }

    /// Runs epoch `state.epoch` from batch `state.batch_in_epoch` to its end, logging the
    /// training window, evaluating and checkpointing on schedule. Returns whether training
    /// must stop now (the step or time budget is spent).
    fn run_epoch(
        &self,
        mut t: Training<B, T::Model>,
    ) -> Result<(Training<B, T::Model>, bool), TrainError> {
        let config = self.config;
        let batches = self
            .task
            .batches(t.state.epoch)
            .unwrap_or_else(|| make_batches(&self.lengths, &self.batch_config, t.state.epoch));
        let progress = Progress::new(batches.len() as u64, t.state.epoch, config.quiet);
        progress.bar.set_position(t.state.batch_in_epoch as u64);
        let mut window = Window::new();
        while t.state.batch_in_epoch < batches.len() {
            let batch = &batches[t.state.batch_in_epoch];
            let (loss, correct, total);
            (t.model, loss, correct, total) =
                self.optimizer_step(t.model, &mut t.optim, &mut t.state, batch)?;
            window.add(loss, correct, total, batch.len());
            let secs = window.secs();
            progress.bar.set_position(t.state.batch_in_epoch as u64);
            progress.bar.set_message(window.message(secs, t.state.lr));
            let eval_now = config.eval_every > 0 && t.state.step.is_multiple_of(config.eval_every);
            let out_of_time = config
                .max_minutes
                .is_some_and(|m| t.state.elapsed_sec >= 60.0 * m);
            let stop = t.state.step >= self.max_steps || out_of_time;
            if eval_now || stop || t.state.batch_in_epoch == batches.len() {
                let record = window.record(&t.state, secs);
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
                self.save_last(&t)?;
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
    /// computes the loss (refusing a non-finite one), back-propagates, clips the gradients,
    /// updates the model at the warmed-up learning rate and advances `state`. Returns the new
    /// model, the loss and the batch's correct and total predictions.
    fn optimizer_step(
        &self,
        model: T::Model,
        optim: &mut Optim<B, T::Model>,
        state: &mut TrainState,
        batch: &[usize],
    ) -> Result<(T::Model, f64, usize, usize), TrainError> {
        let config = self.config;
        let started = Instant::now();
        seed_everything::<B>(self.device, step_seed(config.seed, state.step, 0));
        let out = self
            .task
            .step(&model, batch, step_seed(config.seed, state.step, 1));
        let loss_value = out.loss.clone().into_scalar().elem::<f64>();
        if !loss_value.is_finite() {
            return Err(TrainError::NonFinite {
                step: state.step,
                value: loss_value,
            });
        }
        let mut grads = GradientsParams::from_grads(out.loss.backward(), &model);
        if let Some(max) = config.clip_norm {
            clip_global_norm::<B, _>(&model, &mut grads, max);
        }
        let model = optim.step(warmed_up(config, state.step, state.lr), model, grads);
        state.step += 1;
        state.batch_in_epoch += 1;
        state.examples += batch.len() as u64;
        state.elapsed_sec += started.elapsed().as_secs_f64();
        Ok((model, loss_value, out.correct, out.total))
    }

    /// A checkpoint of `model` (with the optimizer state `optim`, empty for `best.ckpt`) at
    /// `state`.
    fn checkpoint(&self, model: &T::Model, optim: Vec<u8>, state: &TrainState) -> CheckpointFile {
        CheckpointFile {
            meta: serde_json::json!({
                "state": state,
                "train_config": self.config,
                "task": self.task.metadata(),
            }),
            model: model_bytes::<B, _>(model),
            optim,
        }
    }

    /// Writes `last.ckpt`: model, optimizer and state.
    fn save_last(&self, t: &Training<B, T::Model>) -> Result<(), CheckpointError> {
        self.checkpoint(&t.model, t.optim.to_bytes(), &t.state)
            .save(&self.last_path)
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
            self.report(split, &report, state)?;
            if k == 0 && select {
                self.select(model, &report, state)?;
            }
            evals.insert(split.clone(), report);
        }
        Ok(())
    }

    /// Appends the evaluation of `split` to the metrics log and prints it.
    fn report(
        &self,
        split: &str,
        report: &EvalReport,
        state: &TrainState,
    ) -> Result<(), TrainError> {
        let mut extra = serde_json::Map::new();
        for (key, v) in &report.extra {
            extra.insert(key.clone(), serde_json::json!(v));
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
            self.checkpoint(model, Vec::new(), state)
                .save(&self.best_path)?;
        } else if plateau_decay(self.config, &mut state.bad_evals, &mut state.lr)
            && !self.config.quiet
        {
            eprintln!("validation stalled: learning rate now {:.2e}", state.lr);
        }
        Ok(())
    }

    /// Ends the run: evaluates the final model unless that step was just evaluated (selecting
    /// only when every epoch ran), writes `last.ckpt` and prints the summary.
    fn finish(self, mut t: Training<B, T::Model>) -> Result<TrainOutcome<T::Model>, TrainError> {
        if t.last_eval_step != Some(t.state.step) {
            let finished = t.state.epoch as usize >= self.config.epochs;
            self.evaluate(&t.model, &mut t.state, &mut t.evals, finished)?;
        }
        self.save_last(&t)?;
        if !self.config.quiet {
            print_summary(&t.state, &t.evals, self.config);
        }
        Ok(TrainOutcome {
            model: t.model,
            state: t.state,
            evals: t.evals,
            last_checkpoint: self.last_path,
            best_checkpoint: self.best_path.exists().then_some(self.best_path.clone()),
        })
    }
}
