//! The training loop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arbor_data::batch::{make_batches, BatchConfig};
use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{Adam, AdamConfig, AdamW, AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{CheckpointError, CheckpointFile};
use crate::clip::clip_global_norm;
use crate::log::{MetricsLog, MetricsRecord};

/// Which optimizer to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam with L2 weight decay (coupled).
    Adam,
    /// AdamW (decoupled weight decay).
    AdamW,
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
    /// Where checkpoints and the metrics log go.
    pub out_dir: PathBuf,
    /// Continue from `out_dir/last.ckpt` when it exists.
    pub resume: bool,
    /// No progress bars (logs and the summary are still written).
    pub quiet: bool,
}

impl TrainConfig {
    /// A configuration with common defaults: Adam, lr 1e-3, clip 5, batch 32, one epoch,
    /// evaluation per epoch, seed 0, plateau factor 0.5 with patience 1.
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
            seed: 0,
            plateau_factor: 0.5,
            plateau_patience: 1,
            min_lr: 1e-6,
            warmup_steps: 0,
            out_dir: out_dir.into(),
            resume: false,
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
}

/// What one training step produced.
#[derive(Debug)]
pub struct StepOutput<B: Backend> {
    /// The loss to minimise.
    pub loss: Tensor<B, 1>,
    /// Correct predictions in the batch (for the running accuracy).
    pub correct: usize,
    /// Predictions made in the batch.
    pub total: usize,
}

/// The result of evaluating on a whole split.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    /// Correct predictions over the whole split.
    pub correct: usize,
    /// Predictions over the whole split.
    pub total: usize,
    /// Summed loss.
    pub loss_sum: f64,
    /// Number of terms in `loss_sum`.
    pub loss_count: usize,
    /// Task-specific values (per-group accuracy, transition accuracy…).
    pub extra: BTreeMap<String, f64>,
}

impl EvalReport {
    /// Exact accuracy `correct / total` (0 when empty).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }

    /// Mean loss.
    pub fn loss(&self) -> Option<f64> {
        (self.loss_count > 0).then(|| self.loss_sum / self.loss_count as f64)
    }
}

/// A task the engine can train: it owns the data and knows how to run the model on it.
pub trait Task<B: AutodiffBackend> {
    /// The model being trained.
    type Model: AutodiffModule<B>;

    /// Size of every training example (for length bucketing).
    fn train_lengths(&self) -> Vec<usize>;

    /// Forward pass and loss on the training examples `batch` (indices into the training set).
    ///
    /// `noise_seed` is this step's seed for any noise the task draws itself (e.g. a
    /// `GumbelSampler::seeded(noise_seed)`): it depends only on the run's seed and the step, so
    /// a resumed run draws the same noise as an uninterrupted one.
    fn step(&self, model: &Self::Model, batch: &[usize], noise_seed: u64) -> StepOutput<B>;

    /// Splits to evaluate; the first is used for model selection and plateau decay.
    fn eval_splits(&self) -> Vec<String>;

    /// Evaluates the model (without autodiff) on a whole split.
    fn evaluate(
        &self,
        model: &<Self::Model as AutodiffModule<B>>::InnerModule,
        split: &str,
    ) -> EvalReport;

    /// The value model selection maximises (default: accuracy).
    fn selection_metric(&self, report: &EvalReport) -> f64 {
        report.accuracy()
    }

    /// Metadata stored in every checkpoint (model configuration, vocabulary…).
    fn metadata(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// The batches of epoch `epoch`, in order, when the task fixes them itself (e.g. the
    /// consecutive segments of truncated BPTT, which must not be shuffled); `None` (the default)
    /// lets the engine bucket and shuffle [`Task::train_lengths`].
    fn batches(&self, epoch: u64) -> Option<Vec<Vec<usize>>> {
        let _ = epoch;
        None
    }
}

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

/// Seeds the backend's generator (initialisation, dropout) on `device`.
pub fn seed_everything<B: Backend>(device: &B::Device, seed: u64) {
    B::seed(device, seed);
}

/// The seed used for step `step` of a run seeded with `seed` (splitmix64 of both).
pub fn step_seed(seed: u64, step: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

enum Optim<B: AutodiffBackend, M: AutodiffModule<B>> {
    Adam(OptimizerAdaptor<Adam, M, B>),
    AdamW(OptimizerAdaptor<AdamW, M, B>),
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Optim<B, M> {
    fn new(config: &TrainConfig) -> Self {
        match config.optimizer {
            OptimizerKind::Adam => {
                let decay = (config.weight_decay > 0.0)
                    .then(|| WeightDecayConfig::new(config.weight_decay as f32));
                Optim::Adam(AdamConfig::new().with_weight_decay(decay).init())
            }
            OptimizerKind::AdamW => Optim::AdamW(
                AdamWConfig::new()
                    .with_weight_decay(config.weight_decay as f32)
                    .init(),
            ),
        }
    }

    fn step(&mut self, lr: f64, model: M, grads: GradientsParams) -> M {
        match self {
            Optim::Adam(o) => o.step(lr, model, grads),
            Optim::AdamW(o) => o.step(lr, model, grads),
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        match self {
            Optim::Adam(o) => Recorder::<B>::record(&rec, o.to_record(), ()),
            Optim::AdamW(o) => Recorder::<B>::record(&rec, o.to_record(), ()),
        }
        .expect("in-memory recording cannot fail")
    }

    fn load_bytes(self, bytes: Vec<u8>, device: &B::Device) -> Result<Self, String> {
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        Ok(match self {
            Optim::Adam(o) => Optim::Adam(
                o.load_record(Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?),
            ),
            Optim::AdamW(o) => Optim::AdamW(
                o.load_record(Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?),
            ),
        })
    }
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

struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(len: u64, epoch: u64, quiet: bool) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(len)
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} eta {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("epoch {}", epoch + 1));
        Self { bar }
    }
}

/// The learning rate used at optimizer step `step` (0-based): `lr` after the linear warm-up.
pub fn warmed_up(config: &TrainConfig, step: u64, lr: f64) -> f64 {
    if config.warmup_steps == 0 || step >= config.warmup_steps {
        lr
    } else {
        lr * (step + 1) as f64 / config.warmup_steps as f64
    }
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
    let log_err = |source| TrainError::Log {
        path: log_path.clone(),
        source,
    };
    std::fs::create_dir_all(&config.out_dir).map_err(log_err)?;
    let log = MetricsLog::new(&log_path).map_err(log_err)?;

    let mut model = model;
    let mut optim = Optim::<B, T::Model>::new(config);
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
    let best_path = config.best_checkpoint();
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
        log.truncate_after(state.step).map_err(log_err)?;
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

    let batch_config = BatchConfig {
        batch_size: config.batch_size.max(1),
        max_tokens: config.max_tokens,
        bucket: true,
        shuffle: true,
        seed: config.seed,
    };
    let mut evals = BTreeMap::new();
    let splits = task.eval_splits();
    // A checkpoint of the model (and the optimizer state, for `last.ckpt`) at `state`.
    let checkpoint = |model: &T::Model, optim: Vec<u8>, state: &TrainState| CheckpointFile {
        meta: serde_json::json!({
            "state": state,
            "train_config": config,
            "task": task.metadata(),
        }),
        model: model_bytes::<B, _>(model),
        optim,
    };
    let save_last = |model: &T::Model, optim: &Optim<B, T::Model>, state: &TrainState| {
        checkpoint(model, optim.to_bytes(), state).save(&last_path)
    };

    // `select`: whether this evaluation drives model selection and plateau decay. The extra
    // evaluation made when a run stops between scheduled evaluations (max_steps) only reports,
    // so a stopped-and-resumed run follows exactly the same schedule as an uninterrupted one.
    let evaluate = |model: &T::Model,
                    state: &mut TrainState,
                    evals: &mut BTreeMap<String, EvalReport>,
                    select: bool|
     -> Result<(), TrainError> {
        let inner = model.valid();
        for (k, split) in splits.iter().enumerate() {
            let report = task.evaluate(&inner, split);
            let mut extra = serde_json::Map::new();
            for (key, v) in &report.extra {
                extra.insert(key.clone(), serde_json::json!(v));
            }
            log.append(&MetricsRecord {
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
            .map_err(log_err)?;
            if !config.quiet {
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
            if k == 0 && select {
                let metric = task.selection_metric(&report);
                if state.best_metric.is_none_or(|b| metric > b) {
                    state.best_metric = Some(metric);
                    state.best_step = Some(state.step);
                    state.bad_evals = 0;
                    checkpoint(model, Vec::new(), state).save(&best_path)?;
                } else {
                    state.bad_evals += 1;
                    if state.bad_evals > config.plateau_patience {
                        state.lr = (state.lr * config.plateau_factor).max(config.min_lr);
                        state.bad_evals = 0;
                        if !config.quiet {
                            eprintln!("validation stalled: learning rate now {:.2e}", state.lr);
                        }
                    }
                }
            }
            evals.insert(split.clone(), report);
        }
        Ok(())
    };

    let max_steps = config.max_steps.unwrap_or(u64::MAX);
    let mut last_eval_step = None;
    let in_time = |state: &TrainState| {
        config
            .max_minutes
            .is_none_or(|m| state.elapsed_sec < 60.0 * m)
    };
    'epochs: while (state.epoch as usize) < config.epochs
        && state.step < max_steps
        && in_time(&state)
    {
        let batches = task
            .batches(state.epoch)
            .unwrap_or_else(|| make_batches(&lengths, &batch_config, state.epoch));
        let progress = Progress::new(batches.len() as u64, state.epoch, config.quiet);
        progress.bar.set_position(state.batch_in_epoch as u64);
        let (mut win_loss, mut win_steps, mut win_correct, mut win_total) = (0.0, 0u64, 0, 0);
        let mut win_start = Instant::now();
        let mut win_examples = 0usize;
        while state.batch_in_epoch < batches.len() {
            let batch = &batches[state.batch_in_epoch];
            let started = Instant::now();
            seed_everything::<B>(device, step_seed(config.seed, state.step, 0));
            let out = task.step(&model, batch, step_seed(config.seed, state.step, 1));
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
            model = optim.step(warmed_up(config, state.step, state.lr), model, grads);
            state.step += 1;
            state.batch_in_epoch += 1;
            state.examples += batch.len() as u64;
            state.elapsed_sec += started.elapsed().as_secs_f64();
            win_loss += loss_value;
            win_steps += 1;
            win_correct += out.correct;
            win_total += out.total;
            win_examples += batch.len();
            let secs = win_start.elapsed().as_secs_f64().max(1e-9);
            progress.bar.set_position(state.batch_in_epoch as u64);
            progress.bar.set_message(format!(
                "loss {:.4} acc {:.3} {:.0} ex/s lr {:.1e}",
                win_loss / win_steps as f64,
                if win_total > 0 {
                    win_correct as f64 / win_total as f64
                } else {
                    0.0
                },
                win_examples as f64 / secs,
                state.lr
            ));
            let eval_now = config.eval_every > 0 && state.step.is_multiple_of(config.eval_every);
            let out_of_time = config
                .max_minutes
                .is_some_and(|m| state.elapsed_sec >= 60.0 * m);
            let stop = state.step >= max_steps || out_of_time;
            if eval_now || stop || state.batch_in_epoch == batches.len() {
                log.append(&MetricsRecord {
                    kind: "train".into(),
                    step: state.step,
                    epoch: state.epoch,
                    loss: Some(win_loss / win_steps as f64),
                    accuracy: (win_total > 0).then(|| win_correct as f64 / win_total as f64),
                    lr: state.lr,
                    examples_per_sec: Some(win_examples as f64 / secs),
                    elapsed_sec: state.elapsed_sec,
                    extra: serde_json::Map::new(),
                })
                .map_err(log_err)?;
                (win_loss, win_steps, win_correct, win_total, win_examples) = (0.0, 0, 0, 0, 0);
                win_start = Instant::now();
            }
            let epoch_done = state.batch_in_epoch == batches.len();
            if epoch_done {
                state.epoch += 1;
                state.batch_in_epoch = 0;
            }
            if eval_now || (config.eval_every == 0 && epoch_done) {
                progress
                    .bar
                    .suspend(|| evaluate(&model, &mut state, &mut evals, true))?;
                last_eval_step = Some(state.step);
                save_last(&model, &optim, &state)?;
            }
            if stop {
                progress.bar.finish_and_clear();
                break 'epochs;
            }
            if epoch_done {
                break;
            }
        }
        progress.bar.finish_and_clear();
    }
    if last_eval_step != Some(state.step) {
        let finished = state.epoch as usize >= config.epochs;
        evaluate(&model, &mut state, &mut evals, finished)?;
    }
    save_last(&model, &optim, &state)?;
    if !config.quiet {
        print_summary(&state, &evals, config);
    }
    Ok(TrainOutcome {
        model,
        state,
        evals,
        last_checkpoint: last_path,
        best_checkpoint: best_path.exists().then_some(best_path.clone()),
    })
}

fn print_summary(state: &TrainState, evals: &BTreeMap<String, EvalReport>, config: &TrainConfig) {
    eprintln!();
    eprintln!("| split | accuracy | correct / total | loss |");
    eprintln!("| --- | --- | --- | --- |");
    for (split, r) in evals {
        eprintln!(
            "| {split} | {:.4} | {} / {} | {} |",
            r.accuracy(),
            r.correct,
            r.total,
            r.loss()
                .map(|l| format!("{l:.4}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    eprintln!(
        "\n{} steps, {} examples in {:.1} s ({:.1} examples/s); best {} at step {}; checkpoints in {}",
        state.step,
        state.examples,
        state.elapsed_sec,
        state.examples as f64 / state.elapsed_sec.max(1e-9),
        state
            .best_metric
            .map(|m| format!("{m:.4}"))
            .unwrap_or_else(|| "-".into()),
        state.best_step.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
        config.out_dir.display()
    );
}
