//! The engine's schedules: the learning rate each step uses (cosine, step, plateau), the
//! annealed Gumbel temperature handed to the task, and early stopping (also across a resume).

use std::sync::Mutex;

use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

type Ad = Autodiff<Flex>;

#[derive(Module, Debug)]
struct Lin<B: Backend> {
    l: Linear<B>,
}

/// A task that records the context of every step and reports a fixed validation accuracy
/// (so validation never improves after the first evaluation).
struct Probe {
    seen: Mutex<Vec<StepContext>>,
}

impl Task<Ad> for Probe {
    type Model = Lin<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        vec![1; 40]
    }
    fn step(
        &self,
        model: &Lin<Ad>,
        batch: &[usize],
        ctx: StepContext,
        _device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        self.seen.lock().unwrap().push(ctx);
        let d = Default::default();
        let x = Tensor::<Ad, 2>::from_data(
            TensorData::new(vec![1.0f32; batch.len() * 2], [batch.len(), 2]),
            &d,
        );
        let loss = model.l.forward(x).powi_scalar(2).mean();
        StepOutput {
            loss,
            correct: None,
            total: 0,
        }
    }
    fn eval_splits(&self) -> Vec<String> {
        vec!["valid".into()]
    }
    fn evaluate(&self, _model: &Lin<Flex>, _split: &str) -> EvalReport {
        EvalReport {
            correct: 1,
            total: 2,
            ..Default::default()
        }
    }
}

fn probe() -> Probe {
    Probe {
        seen: Mutex::new(Vec::new()),
    }
}

fn model() -> Lin<Ad> {
    Lin {
        l: LinearConfig::new(2, 1).init(&Default::default()),
    }
}

fn config(dir: &std::path::Path) -> TrainConfig {
    let mut c = TrainConfig::new(dir);
    c.batch_size = 4; // 10 steps per epoch
    c.epochs = 2;
    c.lr = 0.1;
    c.quiet = true;
    c
}

/// The `lr` of every `train` record in the metrics log (one per step with eval_every = 1).
fn logged_lrs(dir: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "train")
        .map(|v| v["lr"].as_f64().unwrap())
        .collect()
}

#[test]
fn cosine_anneals_over_the_whole_run() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.lr_schedule = LrSchedule::Cosine { steps: None };
    c.min_lr = 0.0;
    c.eval_every = 1;
    let out = train(&probe(), model(), &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 20);
    let lrs = logged_lrs(dir.path());
    assert_eq!(lrs.len(), 20);
    for (k, lr) in lrs.iter().enumerate() {
        let want = 0.05 * (1.0 + (k as f64 / 20.0 * std::f64::consts::PI).cos());
        assert!((lr - want).abs() < 1e-9, "step {k}: {lr} vs {want}");
    }
    // The plateau decay is off under a cosine schedule: the base rate is untouched.
    assert_eq!(out.state.lr, 0.1);
}

#[test]
fn step_schedule_and_warmup_compose() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.lr_schedule = LrSchedule::Step {
        every: 5,
        gamma: 0.5,
    };
    c.warmup_steps = 2;
    c.eval_every = 1;
    c.epochs = 1;
    train(&probe(), model(), &c, &Default::default()).unwrap();
    let lrs = logged_lrs(dir.path());
    let want = [0.05, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05];
    assert_eq!(lrs.len(), want.len());
    for (got, want) in lrs.iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{lrs:?}");
    }
}

#[test]
fn the_task_receives_the_annealed_temperature() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.tau_anneal = Some(TauAnneal::new(0.1, 4));
    let task = probe();
    train(&task, model(), &c, &Default::default()).unwrap();
    let seen = task.seen.lock().unwrap();
    assert_eq!(seen.len(), 20);
    for (k, ctx) in seen.iter().enumerate() {
        assert_eq!(ctx.step, k as u64);
        let set_at = (k - k % 4) as f64;
        let want = (-0.1 * set_at).exp().max(0.5);
        assert_eq!(ctx.temperature, Some(want), "step {k}");
    }
    // Without annealing the models keep their own temperature.
    let plain = probe();
    train(
        &plain,
        model(),
        &config(tempfile::tempdir().unwrap().path()),
        &Default::default(),
    )
    .unwrap();
    assert!(plain
        .seen
        .lock()
        .unwrap()
        .iter()
        .all(|c| c.temperature.is_none()));
}

#[test]
fn early_stopping_ends_the_run_and_a_resume_stays_stopped() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.epochs = 50;
    c.eval_every = 3;
    c.early_stopping = Some(2);
    let out = train(&probe(), model(), &c, &Default::default()).unwrap();
    // Evaluations at steps 3 (best), 6 and 9 (no improvement): stop after the third.
    assert_eq!(out.stopped, StopReason::EarlyStopping);
    assert_eq!(out.state.step, 9);
    assert_eq!(out.state.best_step, Some(3));
    assert!(out.best_checkpoint.is_some());
    c.resume = true;
    let task = probe();
    let again = train(&task, model(), &c, &Default::default()).unwrap();
    assert_eq!(again.stopped, StopReason::EarlyStopping);
    assert_eq!(again.state.step, 9);
    assert!(
        task.seen.lock().unwrap().is_empty(),
        "a stopped run trained again"
    );
}

#[test]
fn impossible_schedules_are_refused_before_training() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.lr = 2.0;
    c.lr_schedule = LrSchedule::Cosine { steps: None };
    let e = train(&probe(), model(), &c, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("lr_schedule"), "{e}");
    let mut c = config(dir.path());
    c.early_stopping = Some(0);
    let e = train(&probe(), model(), &c, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("early_stopping"), "{e}");
    let mut c = config(dir.path());
    c.tau_anneal = Some(TauAnneal::new(-1.0, 1));
    let e = train(&probe(), model(), &c, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("tau_anneal"), "{e}");
}
