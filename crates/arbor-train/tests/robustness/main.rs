//! The engine's robustness: warm-up, plateau decay, clipping, time budget, scheduled
//! checkpoints, the stop on a non-finite loss or gradient, the resume checks, training curves,
//! and a checkpoint loader that refuses damaged files without panicking.

use std::path::Path;

use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::TensorData;

type Ad = Autodiff<Flex>;

/// The backend's generator is process-global: runs must not interleave.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self::with_hidden(8, device)
    }
    fn with_hidden(hidden: usize, device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(4, hidden).init(device),
            l2: LinearConfig::new(hidden, 2).init(device),
        }
    }
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(relu(self.l1.forward(x)))
    }
}

/// How a [`Probe`] spoils one step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Spoil {
    /// The loss is NaN.
    Loss,
    /// The loss is finite, the gradients NaN (`sqrt` at 0, times 0).
    Gradient,
}

/// 64 training examples (label: x0 + x1 > x2), 32 validation ones; optionally a constant
/// validation metric, a data fingerprint, and one spoiled step.
struct Probe {
    xs: Vec<[f32; 4]>,
    ys: Vec<i64>,
    /// The run's seed (to recognise a step from its noise seed).
    seed: u64,
    /// Spoil step `.0` this way.
    spoil: Option<(u64, Spoil)>,
    /// Evaluation reports this many correct out of 100 instead of the real accuracy.
    constant_correct: Option<usize>,
    fingerprint: Option<String>,
}

impl Probe {
    fn new(seed: u64) -> Self {
        let mut s = 99u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let xs: Vec<[f32; 4]> = (0..96).map(|_| [next(), next(), next(), next()]).collect();
        let ys = xs.iter().map(|x| i64::from(x[0] + x[1] > x[2])).collect();
        Self {
            xs,
            ys,
            seed,
            spoil: None,
            constant_correct: None,
            fingerprint: None,
        }
    }
    fn tensors<Bk: Backend>(&self, idx: &[usize]) -> (Tensor<Bk, 2>, Tensor<Bk, 1, Int>) {
        let d = Default::default();
        let x: Vec<f32> = idx.iter().flat_map(|&i| self.xs[i]).collect();
        let y: Vec<i64> = idx.iter().map(|&i| self.ys[i]).collect();
        (
            Tensor::from_data(TensorData::new(x, [idx.len(), 4]), &d),
            Tensor::from_data(TensorData::new(y, [idx.len()]), &d),
        )
    }
}

impl Task<Ad> for Probe {
    type Model = Mlp<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        vec![1; 64]
    }
    fn step(
        &self,
        model: &Mlp<Ad>,
        batch: &[usize],
        ctx: StepContext,
        _device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        let noise_seed = ctx.noise_seed;
        let (x, y) = self.tensors::<Ad>(batch);
        let logits = model.forward(x);
        let mut loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(&Default::default())
            .forward(logits.clone(), y);
        match self.spoil {
            Some((step, how)) if step_seed(self.seed, step, 1) == noise_seed => match how {
                Spoil::Loss => loss = loss.mul_scalar(f64::NAN),
                Spoil::Gradient => {
                    loss = loss.add(logits.mul_scalar(0.0).sqrt().sum().reshape([1]));
                }
            },
            _ => {}
        }
        StepOutput {
            loss,
            correct: None,
            total: 0,
        }
    }
    fn eval_splits(&self) -> Vec<String> {
        vec!["valid".into(), "test".into()]
    }
    fn evaluate(&self, model: &Mlp<Flex>, _split: &str) -> EvalReport {
        if let Some(correct) = self.constant_correct {
            return EvalReport {
                correct,
                total: 100,
                ..Default::default()
            };
        }
        let idx: Vec<usize> = (64..96).collect();
        let (x, y) = self.tensors::<Flex>(&idx);
        let pred = model.forward(x).argmax(1).squeeze_dim::<1>(1);
        let correct = pred.equal(y).int().sum().into_scalar().elem::<i64>() as usize;
        EvalReport {
            correct,
            total: idx.len(),
            ..Default::default()
        }
    }
    fn data_fingerprint(&self) -> Option<String> {
        self.fingerprint.clone()
    }
}

/// Batches of 8 (8 steps per epoch), evaluation per epoch, seed 7, no clipping.
fn config(dir: &Path) -> TrainConfig {
    let mut c = TrainConfig::new(dir);
    c.epochs = 2;
    c.batch_size = 8;
    c.eval_every = 0;
    c.lr = 1e-2;
    c.clip_norm = None;
    c.quiet = true;
    c.seed = 7;
    c
}

fn fresh(seed: u64) -> Mlp<Ad> {
    let device = Default::default();
    seed_everything::<Ad>(&device, seed);
    Mlp::new(&device)
}

fn weights(m: &Mlp<Ad>) -> Vec<f32> {
    let m: Mlp<Flex> = m.valid();
    let mut v = m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
    v.extend(m.l2.weight.val().into_data().to_vec::<f32>().unwrap());
    v
}

/// The step stored in a checkpoint.
fn saved_step(path: &Path) -> u64 {
    let file = CheckpointFile::load(path).unwrap();
    file.meta["state"]["step"].as_u64().unwrap()
}

fn log(dir: &Path) -> Vec<MetricsRecord> {
    MetricsLog::new(&dir.join("metrics.jsonl"))
        .unwrap()
        .read()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Learning rate and clipping

#[test]
fn warm_up_ramps_linearly_then_holds() {
    let mut c = TrainConfig::new("unused");
    c.warmup_steps = 4;
    let lrs: Vec<f64> = (0..7).map(|s| warmed_up(&c, s, 0.01)).collect();
    let expected = [0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01, 0.01];
    for (got, want) in lrs.iter().zip(expected) {
        assert!((got - want).abs() < 1e-15, "{lrs:?}");
    }
    // The ramp follows the learning rate in force (after a plateau decay, for instance).
    assert!((warmed_up(&c, 1, 0.004) - 0.002).abs() < 1e-15);
    c.warmup_steps = 0;
    assert_eq!(warmed_up(&c, 0, 0.01), 0.01);
}

#[test]
fn plateau_decay_multiplies_after_patience_and_stops_at_min_lr() {
    let mut c = TrainConfig::new("unused");
    c.plateau_factor = 0.5;
    c.plateau_patience = 2;
    c.min_lr = 3e-3;
    let (mut bad, mut lr) = (0u32, 1e-2);
    let mut lrs = Vec::new();
    for _ in 0..9 {
        plateau_decay(&c, &mut bad, &mut lr);
        lrs.push(lr);
    }
    // Two stalled evaluations are tolerated; the third halves; the next halving is clamped.
    let expected = [1e-2, 1e-2, 5e-3, 5e-3, 5e-3, 3e-3, 3e-3, 3e-3, 3e-3];
    for (got, want) in lrs.iter().zip(expected) {
        assert!((got - want).abs() < 1e-15, "{lrs:?}");
    }
}

#[test]
fn plateau_decay_in_a_run_follows_the_validation_metric() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.constant_correct = Some(50);
    let mut c = config(dir.path());
    c.epochs = 1;
    c.eval_every = 1;
    c.plateau_factor = 0.5;
    c.plateau_patience = 1;
    c.min_lr = 2.5e-3;
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    // The lr logged with each evaluation is the one in force before it: the first sets the
    // best; then every second stalled evaluation halves, down to min_lr.
    let lrs: Vec<f64> = log(dir.path())
        .into_iter()
        .filter(|r| r.kind == "eval:valid")
        .map(|r| r.lr)
        .collect();
    assert_eq!(lrs, [1e-2, 1e-2, 1e-2, 5e-3, 5e-3, 2.5e-3, 2.5e-3, 2.5e-3]);
    assert_eq!(out.state.lr, 2.5e-3);
    assert_eq!(out.state.best_step, Some(1));
}

fn gradient_values(model: &Mlp<Ad>, grads: &GradientsParams) -> Vec<f32> {
    let mut v = Vec::new();
    for id in [model.l1.weight.id, model.l2.weight.id] {
        v.extend(
            grads
                .get::<Flex, 2>(id)
                .unwrap()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    for b in [&model.l1.bias, &model.l2.bias] {
        let id = b.as_ref().unwrap().id;
        v.extend(
            grads
                .get::<Flex, 1>(id)
                .unwrap()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    v
}

#[test]
fn clipping_bounds_the_global_norm_and_leaves_small_gradients_alone() {
    let _guard = serial();
    let task = Probe::new(7);
    let model = fresh(3);
    let grads = |scale: f64| {
        let (x, y) = task.tensors::<Ad>(&(0..16).collect::<Vec<_>>());
        let loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(&Default::default())
            .forward(model.forward(x), y)
            .mul_scalar(scale);
        GradientsParams::from_grads(loss.backward(), &model)
    };
    let norm_of = |g: &[f32]| g.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();

    // Above the bound: rescaled onto it, direction kept.
    let mut big = grads(1000.0);
    let before = gradient_values(&model, &big);
    let norm = global_grad_norm::<Ad, _>(&model, &big);
    assert!((norm - norm_of(&before)).abs() < 1e-3 * norm, "{norm}");
    let bound = norm / 10.0;
    assert_eq!(clip_global_norm::<Ad, _>(&model, &mut big, bound), norm);
    let after = gradient_values(&model, &big);
    let clipped = global_grad_norm::<Ad, _>(&model, &big);
    assert!(
        (clipped - bound).abs() < 1e-5 * bound.max(1.0),
        "{clipped} vs {bound}"
    );
    assert!((norm_of(&after) - bound).abs() < 1e-5 * bound.max(1.0));
    for (a, b) in after.iter().zip(&before) {
        assert!((f64::from(*a) - f64::from(*b) / 10.0).abs() < 1e-4 * f64::from(b.abs()) + 1e-9);
    }

    // Below the bound: untouched, bit for bit.
    let mut small = grads(1.0);
    let before = gradient_values(&model, &small);
    let norm = global_grad_norm::<Ad, _>(&model, &small);
    clip_global_norm::<Ad, _>(&model, &mut small, norm * 10.0);
    assert_eq!(gradient_values(&model, &small), before);
}

// ---------------------------------------------------------------------------------------------
// Time budget and scheduled checkpoints

#[test]
fn a_tiny_time_budget_stops_early_with_a_resumable_checkpoint() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let task = Probe::new(7);
    let mut c = config(dir.path());
    c.max_minutes = Some(1e-9);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.stopped, StopReason::MaxMinutes);
    assert_eq!(
        out.state.step, 1,
        "the budget is spent after the first step"
    );
    assert_eq!(saved_step(&out.last_checkpoint), 1);

    c.max_minutes = None;
    c.resume = true;
    let resumed = train(&task, fresh(5), &c, &Default::default()).unwrap();
    assert_eq!(resumed.stopped, StopReason::Finished);
    assert_eq!(resumed.state.step, 16);

    // Also through max_steps.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_steps = Some(3);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!((out.stopped, out.state.step), (StopReason::MaxSteps, 3));
}

#[test]
fn checkpoint_every_steps_writes_last_between_evaluations_and_resumes_exactly() {
    let _guard = serial();
    let (a, b, none) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let mut task = Probe::new(7);
    let every = |dir: &Path| {
        let mut c = config(dir);
        c.checkpoint_every = Some(CheckpointEvery::Steps(3));
        c
    };
    let full = train(&task, fresh(1), &every(a.path()), &Default::default()).unwrap();

    // Step 10 (epoch 2, batch 3) fails: last.ckpt is the one written at step 9, between the
    // evaluations at steps 8 and 16.
    task.spoil = Some((10, Spoil::Loss));
    let err = train(&task, fresh(1), &every(b.path()), &Default::default()).unwrap_err();
    assert!(
        matches!(err, TrainError::NonFinite { step: 10, .. }),
        "{err}"
    );
    assert_eq!(saved_step(&b.path().join("last.ckpt")), 9);
    let train_steps: Vec<u64> = log(b.path())
        .into_iter()
        .filter(|r| r.kind == "train")
        .map(|r| r.step)
        .collect();
    assert_eq!(
        train_steps,
        [3, 6, 8, 9],
        "a checkpoint closes the logged window"
    );

    // Without the schedule, the last checkpoint is the evaluation's at step 8.
    train(&task, fresh(1), &config(none.path()), &Default::default()).unwrap_err();
    assert_eq!(saved_step(&none.path().join("last.ckpt")), 8);

    // Resuming from the mid-epoch checkpoint ends exactly where the uninterrupted run did.
    task.spoil = None;
    let mut c = every(b.path());
    c.resume = true;
    let resumed = train(&task, fresh(42), &c, &Default::default()).unwrap();
    assert_eq!(weights(&resumed.model), weights(&full.model));
    assert_eq!(resumed.state.step, full.state.step);
}

#[test]
fn checkpoint_every_minutes_writes_last_on_time() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.spoil = Some((4, Spoil::Loss));
    let mut c = config(dir.path());
    // A vanishing interval: due after every step.
    c.checkpoint_every = Some(CheckpointEvery::Minutes(1e-9));
    train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    assert_eq!(saved_step(&c.last_checkpoint()), 4);
    // A long one never comes due within a run.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.checkpoint_every = Some(CheckpointEvery::Minutes(60.0));
    train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    assert!(!c.last_checkpoint().exists());
}

#[test]
fn checkpoint_every_parses_steps_and_minutes_and_refuses_the_rest() {
    assert_eq!("500".parse(), Ok(CheckpointEvery::Steps(500)));
    assert_eq!("10m".parse(), Ok(CheckpointEvery::Minutes(10.0)));
    assert_eq!(" 0.5m".parse(), Ok(CheckpointEvery::Minutes(0.5)));
    for bad in [
        "", "0", "-3", "10s", "m", "0m", "-1m", "nanm", "infm", "1.5", "ten",
    ] {
        let err = bad.parse::<CheckpointEvery>().unwrap_err();
        assert!(err.contains("10m") && err.contains(bad), "{bad}: {err}");
    }
    for every in [CheckpointEvery::Steps(7), CheckpointEvery::Minutes(2.5)] {
        assert_eq!(every.to_string().parse(), Ok(every));
    }
}

// ---------------------------------------------------------------------------------------------
// Non-finite values

#[test]
fn a_nan_loss_stops_naming_step_epoch_batch_and_keeps_the_last_good_checkpoint() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.spoil = Some((10, Spoil::Loss));
    let mut c = config(dir.path());
    c.clip_norm = Some(1.0);
    let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    match &err {
        TrainError::NonFinite {
            step,
            epoch,
            batch_in_epoch,
            batch_examples,
            tensor,
            value,
        } => {
            assert_eq!((*step, *epoch, *batch_in_epoch), (10, 1, 2));
            assert_eq!((*batch_examples, *tensor), (8, NonFiniteTensor::Loss));
            assert!(value.is_nan());
        }
        other => panic!("expected NonFinite, got {other}"),
    }
    let msg = err.to_string();
    for part in [
        "loss became NaN",
        "step 10",
        "epoch 2",
        "batch 3",
        "8 examples",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    // The epoch-end checkpoint at step 8 is kept; nothing was written after the bad step.
    assert_eq!(saved_step(&c.last_checkpoint()), 8);
    assert!(log(dir.path()).iter().all(|r| r.step <= 8));
}

#[test]
fn a_nan_gradient_stops_with_and_without_clipping() {
    let _guard = serial();
    for clip in [None, Some(1.0)] {
        let dir = tempfile::tempdir().unwrap();
        let mut task = Probe::new(7);
        task.spoil = Some((5, Spoil::Gradient));
        let mut c = config(dir.path());
        c.clip_norm = clip;
        c.eval_every = 4;
        let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
        assert!(
            matches!(
                err,
                TrainError::NonFinite {
                    step: 5,
                    epoch: 0,
                    batch_in_epoch: 5,
                    tensor: NonFiniteTensor::GradientNorm,
                    ..
                }
            ),
            "clip {clip:?}: {err}"
        );
        assert!(
            err.to_string().contains("gradient norm became NaN"),
            "{err}"
        );
        assert_eq!(saved_step(&c.last_checkpoint()), 4);
        // The kept checkpoint holds finite weights.
        let (m, _) = load_model::<Flex, _>(
            Mlp::<Flex>::new(&Default::default()),
            &c.last_checkpoint(),
            &Default::default(),
        )
        .unwrap();
        let w = m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
        assert!(w.iter().all(|v| v.is_finite()));
    }
}

// ---------------------------------------------------------------------------------------------
// Resume checks

/// A run stopped at step 3 in a fresh directory, with data fingerprint `aaaa`.
fn stopped_run(task: &mut Probe) -> (tempfile::TempDir, TrainConfig) {
    let dir = tempfile::tempdir().unwrap();
    task.fingerprint = Some("aaaa".into());
    let mut c = config(dir.path());
    c.max_steps = Some(3);
    train(task, fresh(1), &c, &Default::default()).unwrap();
    c.max_steps = None;
    c.resume = true;
    (dir, c)
}

#[test]
fn a_resume_with_other_settings_or_data_is_refused_listing_each_difference() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, saved) = stopped_run(&mut task);
    let before = std::fs::read(saved.last_checkpoint()).unwrap();

    let mut c = saved.clone();
    c.batch_size = 4;
    c.seed = 8;
    c.lr = 0.02;
    c.warmup_steps = 10;
    // Budgets, schedules and verbosity may change freely.
    c.epochs = 5;
    c.max_steps = Some(20);
    c.max_minutes = Some(30.0);
    c.eval_every = 2;
    c.checkpoint_every = Some(CheckpointEvery::Steps(4));
    c.quiet = false;
    task.fingerprint = Some("bbbb".into());
    let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    let TrainError::ResumeMismatch { differences, path } = &err else {
        panic!("expected ResumeMismatch, got {err}");
    };
    assert_eq!(path, &saved.last_checkpoint());
    assert_eq!(
        differences,
        &[
            "batch_size: saved 8, now 4",
            "seed: saved 7, now 8",
            "lr: saved 0.01, now 0.02",
            "warmup_steps: saved 0, now 10",
            "data_fingerprint: saved aaaa, now bbbb",
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.contains("seed: saved 7, now 8") && msg.contains("--force"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(saved.last_checkpoint()).unwrap(),
        before,
        "a refused resume writes nothing"
    );

    // Forced: a warning, and the run continues from step 3.
    c.force_resume = true;
    c.quiet = true;
    c.max_steps = Some(6);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 6);
}

#[test]
fn a_forced_resume_past_the_end_of_a_shorter_epoch_moves_on() {
    let _guard = serial();
    let mut task = Probe::new(7);
    // Saved at batch 4 of 8; with batches of 32 an epoch has 2.
    let (_dir, mut c) = stopped_run(&mut task);
    c.batch_size = 32;
    c.force_resume = true;
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!((out.state.epoch, out.state.step), (2, 3 + 2));
}

#[test]
fn a_resume_changing_only_budgets_and_schedules_is_accepted() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, mut c) = stopped_run(&mut task);
    c.epochs = 1;
    c.eval_every = 2;
    c.checkpoint_every = Some(CheckpointEvery::Minutes(5.0));
    c.max_minutes = Some(10.0);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 8);
}

#[test]
fn an_old_checkpoint_without_settings_or_fingerprint_resumes_with_a_warning() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, mut c) = stopped_run(&mut task);
    let path = c.last_checkpoint();
    let mut file = CheckpointFile::load(&path).unwrap();
    let meta = file.meta.as_object_mut().unwrap();
    assert!(meta.remove("train_config").is_some());
    assert!(meta.remove("data_fingerprint").is_some());
    file.save(&path).unwrap();
    c.batch_size = 4;
    task.fingerprint = Some("other".into());
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.epoch, 2);
}

#[test]
fn a_checkpoint_of_another_model_is_refused_not_loaded() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, c) = stopped_run(&mut task);
    // Same settings, but a hidden layer of 16 instead of 8.
    let wider = Mlp::<Ad>::with_hidden(16, &Default::default());
    let err = train(&task, wider, &c, &Default::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("last.ckpt")
            && msg.contains("does not match this model")
            && msg.contains("16"),
        "{msg}"
    );
    let err = load_model::<Flex, _>(
        Mlp::<Flex>::with_hidden(16, &Default::default()),
        &c.last_checkpoint(),
        &Default::default(),
    )
    .unwrap_err();
    assert!(matches!(err, CheckpointError::Record { .. }), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Training curves

#[test]
fn a_run_draws_its_curves_as_svg() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let task = Probe::new(7);
    let mut c = config(dir.path());
    c.eval_every = 3;
    train(&task, fresh(1), &c, &Default::default()).unwrap();
    let svg = std::fs::read_to_string(c.curves()).unwrap();
    assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("training loss") && svg.contains("valid selection metric"));
    assert!(
        svg.matches("<polyline").count() >= 2,
        "both curves are drawn"
    );
    // Only the first split carries the selection metric in the log.
    let records = log(dir.path());
    assert!(records
        .iter()
        .filter(|r| r.kind == "eval:valid")
        .all(|r| r.extra.contains_key("selection_metric")));
    assert!(records
        .iter()
        .filter(|r| r.kind == "eval:test")
        .all(|r| !r.extra.contains_key("selection_metric")));

    // An unwritable destination is only a warning: the run still succeeds.
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    std::fs::create_dir_all(c.curves().join("blocker")).unwrap();
    train(&task, fresh(1), &c, &Default::default()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Damaged checkpoints: errors, never panics

mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// The bytes of a real `last.ckpt` (a two-step run).
    fn real_checkpoint() -> &'static [u8] {
        static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
        BYTES.get_or_init(|| {
            let _guard = serial();
            let dir = tempfile::tempdir().unwrap();
            let mut c = config(dir.path());
            c.max_steps = Some(2);
            train(&Probe::new(7), fresh(1), &c, &Default::default()).unwrap();
            std::fs::read(c.last_checkpoint()).unwrap()
        })
    }

    /// Every loader refuses `bytes`, without panicking: the file reader, the model loader and
    /// a resume.
    fn all_refuse(bytes: &[u8]) -> Result<(), TestCaseError> {
        let _guard = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last.ckpt");
        std::fs::write(&path, bytes).unwrap();
        prop_assert!(CheckpointFile::load(&path).is_err());
        let model = load_model::<Flex, _>(
            Mlp::<Flex>::new(&Default::default()),
            &path,
            &Default::default(),
        );
        prop_assert!(model.is_err());
        let mut c = config(dir.path());
        c.resume = true;
        let err = train(&Probe::new(7), fresh(1), &c, &Default::default()).unwrap_err();
        prop_assert!(err.to_string().contains("last.ckpt"), "{}", err);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_are_refused(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            magic in any::<bool>(),
        ) {
            let mut data = if magic { b"ARBOR-CKPT v1\n".to_vec() } else { Vec::new() };
            data.extend(bytes);
            all_refuse(&data)?;
        }

        #[test]
        fn truncations_are_refused(cut in 0.0f64..1.0) {
            let real = real_checkpoint();
            let len = ((real.len() as f64) * cut) as usize;
            all_refuse(&real[..len.min(real.len() - 1)])?;
        }

        #[test]
        fn bit_flips_are_refused(flips in proptest::collection::vec((0.0f64..1.0, 0u8..8), 1..4)) {
            let mut data = real_checkpoint().to_vec();
            let mut seen = std::collections::HashSet::new();
            for (at, bit) in flips {
                let i = ((data.len() as f64) * at) as usize % data.len();
                // Flipping the same bit twice would restore it.
                if seen.insert((i, bit)) {
                    data[i] ^= 1 << bit;
                }
            }
            all_refuse(&data)?;
        }

        /// A corrupted body with a recomputed checksum reaches Burn's record decoder (which
        /// panics on some malformed records): loading the model or resuming may succeed (other
        /// weights) or fail, but never panics.
        #[test]
        fn resealed_corruption_never_panics(at in 0.0f64..1.0, byte in any::<u8>()) {
            let real = real_checkpoint();
            let body_end = real.len() - 4;
            let mut data = real[..body_end].to_vec();
            // Past the magic line and the metadata length.
            let i = 22 + ((((body_end - 22) as f64) * at) as usize).min(body_end - 23);
            data[i] = byte;
            let crc = crc32(&data);
            data.extend_from_slice(&crc.to_le_bytes());
            let _guard = serial();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("last.ckpt");
            std::fs::write(&path, &data).unwrap();
            let _ = load_model::<Flex, _>(
                Mlp::<Flex>::new(&Default::default()),
                &path,
                &Default::default(),
            );
            let mut c = config(dir.path());
            c.resume = true;
            c.max_steps = Some(3);
            // Refused, or stopped by the damaged weights (a non-finite loss), or trained on.
            let _ = train(&Probe::new(7), fresh(1), &c, &Default::default());
        }
    }

    /// CRC-32 (IEEE), as the checkpoint format uses.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
