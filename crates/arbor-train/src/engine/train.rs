//! The entry points, [`train`] and [`train_on`], and the start of a run: the settings checked
//! ([`validate`]), the output folder claimed, the model, optimizer and state initialised or
//! resumed from `last.ckpt` ([`start`], [`resume_from`]).
//!
//! [`train`] is a short sequence of private steps, in this order: open the metrics log,
//! initialise or resume the model, optimizer and state ([`start`]), run epochs
//! ([`Run::run_epoch`], each step being [`Run::optimizer_step`]) with evaluations and
//! checkpoints on schedule ([`Run::evaluate`], [`Run::save_last`]), then [`Run::finish`], and
//! last draws the metrics log as `curves.svg`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use super::config::TrainConfig;
use super::curves::draw_curves;
use super::error::{log_error, warn, TrainError};
use super::optim::{step_seed, Optim};
use super::parallel::Workers;
use super::records::{decode_record, load_weights};
use super::resume;
use super::run::Run;
use super::state::{TrainOutcome, TrainState, Training};
use super::task::Task;
use crate::checkpoint::{CheckpointError, CheckpointFile};
use crate::log::MetricsLog;
use crate::outdir::{self, new_run_id, StartMode};

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
    let run = Run::new(task, config, device, lengths, log, fingerprint);
    let outcome = run.run_all(training);
    draw(run.log_path(), config);
    outcome
}

/// Draws the metrics log at `log` as `config.curves()`; a failure to draw (the plotting
/// library's panic included) is only a warning.
fn draw(log: &Path, config: &TrainConfig) {
    let curves = config.curves();
    let drawn =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| draw_curves(log, &curves)));
    match drawn {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn(&format!("training curves not drawn: {e}")),
        Err(_) => warn(&format!(
            "training curves not drawn: the plotting library failed on {}",
            curves.display()
        )),
    }
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

/// A fresh optimizer and state for `model`, or, when `config.resume` is set and
/// `out_dir/last.ckpt` exists, the model, optimizer and state stored there ([`resume_from`]).
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
    if config.resume {
        let run_id = std::mem::take(&mut state.run_id);
        (model, optim, state) =
            resume_from(model, optim, run_id, config, fingerprint, log, device)?;
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

/// The model, optimizer and state stored in `out_dir/last.ckpt`, loaded into `model` and
/// `optim`, and the metrics log cut back to that step, after checking that the checkpoint comes
/// from a run with the same settings and data (`fingerprint`). A checkpoint from before run
/// ids gets `run_id`, the new run's.
fn resume_from<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: M,
    optim: Optim<B, M>,
    run_id: String,
    config: &TrainConfig,
    fingerprint: Option<&str>,
    log: &MetricsLog,
    device: &B::Device,
) -> Result<(M, Optim<B, M>, TrainState), TrainError> {
    let last_path = config.last_checkpoint();
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
    let (model, optim) = decode_record(|| {
        let model = load_weights::<B, M>(model, file.model, device)?;
        let optim = optim.load_bytes(file.optim, device)?;
        optim.check_shapes(&model)?;
        Ok((model, optim))
    })
    .map_err(rec_err)?;
    let mut state: TrainState =
        serde_json::from_value(file.meta["state"].clone()).map_err(|e| {
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
    Ok((model, optim, state))
}
