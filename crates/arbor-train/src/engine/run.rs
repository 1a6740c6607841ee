//! The loop: `Run`, what stays fixed for a whole call of [`train`], drives it, epoch by epoch
//! ([`Run::run_epoch`], each step being [`Run::optimizer_step`]) with evaluations and
//! checkpoints on schedule ([`Run::evaluate`], [`Run::save_last`]), then [`Run::finish`].
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
//! [`clip_on_device`]: crate::clip_on_device
//! [`train`]: super::train::train

use std::path::{Path, PathBuf};
use std::time::Instant;

use arbor_data::batch::{make_batches, BatchConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use super::config::{CheckpointEvery, TrainConfig};
use super::error::{log_error, warn, NonFiniteTensor, TrainError};
use super::optim::{warmed_up, Optim};
use super::parallel::{self, Replica, WorkerOutput, WorkerStep, Workers};
use super::progress::{print_summary, Progress, Window};
use super::records::model_bytes;
use super::resume::{CONFIG_KEY, FINGERPRINT_KEY};
use super::state::{StopReason, TrainOutcome, TrainState, Training};
use super::task::Task;
use crate::checkpoint::{CheckpointError, CheckpointFile};
use crate::log::MetricsLog;

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

/// What stays fixed for a whole call of [`train`](super::train::train).
pub(super) struct Run<'a, B: AutodiffBackend, T: Task<B>> {
    pub(super) task: &'a T,
    pub(super) config: &'a TrainConfig,
    device: &'a B::Device,
    /// Size of every training example.
    lengths: Vec<usize>,
    pub(super) log: MetricsLog,
    last_path: PathBuf,
    pub(super) best_path: PathBuf,
    /// The splits to evaluate; the first drives model selection and plateau decay.
    pub(super) splits: Vec<String>,
    batch_config: BatchConfig,
    /// `config.max_steps`, or no limit.
    max_steps: u64,
    /// The task's data fingerprint, stored in every checkpoint.
    fingerprint: Option<String>,
    /// The run's length in optimizer steps (`max_steps`, or epochs × the first epoch's
    /// batches when smaller): the default length of a cosine schedule.
    run_steps: u64,
}

impl<'a, B: AutodiffBackend, T: Task<B>> Run<'a, B, T> {
    /// The run of `task` as `config` says, with worker 0 on `device`, over training examples of
    /// the sizes `lengths`, logging to `log`; `fingerprint` is the task's data fingerprint.
    pub(super) fn new(
        task: &'a T,
        config: &'a TrainConfig,
        device: &'a B::Device,
        lengths: Vec<usize>,
        log: MetricsLog,
        fingerprint: Option<String>,
    ) -> Self {
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
        Run {
            run_steps: run.run_steps(),
            ..run
        }
    }

    /// The metrics log's path.
    pub(super) fn log_path(&self) -> &Path {
        self.log.path()
    }

    /// Runs epochs until one of the budgets is spent, then [`Run::finish`].
    pub(super) fn run_all(
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
            skip_epoch(&mut t.state, batches.len());
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
                self.read_interval(&mut t.state, &mut pending, &mut window, &progress)?;
            }
            if close_window {
                self.log_window(&t.state, &window)?;
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

    /// The one read of the interval (see "Reads" in the module docs): the `pending` steps'
    /// values into `window` ([`Run::read_pending`]), then the window's statistics on the
    /// progress bar. On a device that runs asynchronously the read waits for the steps' work,
    /// so it counts as training time in `state`.
    fn read_interval(
        &self,
        state: &mut TrainState,
        pending: &mut Vec<PendingStep<B::InnerBackend>>,
        window: &mut Window,
        progress: &Progress,
    ) -> Result<(), TrainError> {
        let started = Instant::now();
        self.read_pending(pending, window)?;
        state.elapsed_sec += started.elapsed().as_secs_f64();
        let secs = window.secs();
        progress
            .bar
            .set_message(window.message(secs, self.lr(state)));
        Ok(())
    }

    /// Appends the training `window`, closed at `state`, to the metrics log, with the learning
    /// rate and the temperature of its last step.
    fn log_window(&self, state: &TrainState, window: &Window) -> Result<(), TrainError> {
        let secs = window.secs();
        let last = state.step.saturating_sub(1);
        let tau = self.config.tau_anneal.map(|a| a.tau_at(last));
        let lr = self.lr(&TrainState {
            step: last,
            ..state.clone()
        });
        let record = window.record(state, secs, lr, tau);
        self.log
            .append(&record)
            .map_err(log_error(self.log.path()))?;
        Ok(())
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
        let out = self.run_workers(job, model, optim, replicas, step)?;
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

    /// Runs `job`, one worker's part of optimizer step `step`, on every worker: worker 0 with
    /// `model` and `optim` on this thread, each of the other `replicas` on a thread of its own
    /// (their updated models go back into the replicas). Returns worker 0's output, with the
    /// predictions of all the workers; a worker's panic is raised again here, once every worker
    /// is done.
    fn run_workers<'j>(
        &self,
        job: impl Fn(usize) -> WorkerStep<'j, T>,
        model: T::Model,
        optim: &mut Optim<B, T::Model>,
        replicas: &mut [Replica<B, T::Model>],
        step: u64,
    ) -> Result<WorkerOutput<B, T::Model>, TrainError>
    where
        T: 'j,
    {
        let collective = |e: parallel::CollectiveFailure| TrainError::Device {
            step,
            message: e.to_string(),
        };
        let mut out = if replicas.is_empty() {
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
        if let Some(p) = out.panic.take() {
            std::panic::resume_unwind(p);
        }
        Ok(out)
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
    pub(super) fn save_checkpoint(
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

/// Ends epoch `state.epoch` at once: a resume (forced) with settings that make the epoch
/// shorter, `batches` batches, than the position saved in the checkpoint.
fn skip_epoch(state: &mut TrainState, batches: usize) {
    warn(&format!(
        "the checkpoint's position (batch {}) is past the {} batches of epoch {}; \
         continuing with the next epoch",
        state.batch_in_epoch + 1,
        batches,
        state.epoch + 1
    ));
    state.epoch += 1;
    state.batch_in_epoch = 0;
}
