//! The engine: determinism, kill-and-resume equality, refusal of damaged checkpoints.

use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::TensorData;

type Ad = Autodiff<Flex>;

use crate::serial;

#[derive(Module, Debug)]
struct Toy<B: Backend> {
    l1: Linear<B>,
    drop: Dropout,
    l2: Linear<B>,
}

impl<B: Backend> Toy<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(4, 16).init(device),
            drop: DropoutConfig::new(0.2).init(),
            l2: LinearConfig::new(16, 2).init(device),
        }
    }
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(self.drop.forward(relu(self.l1.forward(x))))
    }
}

/// Label = whether x0 + x1 > x2 (learnable by the MLP); 200 train, 100 valid examples.
struct ToyTask {
    xs: Vec<[f32; 4]>,
    ys: Vec<i64>,
}

impl ToyTask {
    fn new() -> Self {
        let mut s = 12345u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let xs: Vec<[f32; 4]> = (0..300).map(|_| [next(), next(), next(), next()]).collect();
        let ys = xs.iter().map(|x| i64::from(x[0] + x[1] > x[2])).collect();
        Self { xs, ys }
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

impl Task<Ad> for ToyTask {
    type Model = Toy<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        vec![1; 200]
    }
    fn step(
        &self,
        model: &Toy<Ad>,
        batch: &[usize],
        ctx: StepContext,
        _device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        let noise_seed = ctx.noise_seed;
        let (x, y) = self.tensors::<Ad>(batch);
        // Noise on the logits drawn from the step's noise seed makes the test depend on that
        // stream too.
        let noise = {
            use rand::{RngExt, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(noise_seed);
            let u: Vec<f32> = (0..batch.len() * 2).map(|_| rng.random::<f32>()).collect();
            Tensor::<Ad, 2>::from_data(TensorData::new(u, [batch.len(), 2]), &Default::default())
        };
        let logits = model.forward(x).add(noise.mul_scalar(0.1));
        let correct = logits
            .clone()
            .argmax(1)
            .squeeze_dim::<1>(1)
            .equal(y.clone())
            .int()
            .sum();
        let loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(&Default::default())
            .forward(logits, y);
        StepOutput {
            loss,
            correct: Some(correct),
            total: batch.len(),
        }
    }
    fn eval_splits(&self) -> Vec<String> {
        vec!["valid".into()]
    }
    fn evaluate(&self, model: &Toy<Flex>, _split: &str) -> EvalReport {
        let idx: Vec<usize> = (200..300).collect();
        let (x, y) = self.tensors::<Flex>(&idx);
        let pred = model.forward(x).argmax(1).squeeze_dim::<1>(1);
        let correct = pred.equal(y).int().sum().into_scalar().elem::<i64>() as usize;
        EvalReport {
            correct,
            total: idx.len(),
            ..Default::default()
        }
    }
}

fn config(dir: &std::path::Path) -> TrainConfig {
    let mut c = TrainConfig::new(dir);
    c.epochs = 3;
    c.batch_size = 16;
    c.eval_every = 5;
    c.lr = 1e-2;
    c.quiet = true;
    c.seed = 7;
    c
}

fn weights(m: &Toy<Ad>) -> Vec<f32> {
    let m: Toy<Flex> = m.valid();
    let mut v = m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
    v.extend(m.l2.weight.val().into_data().to_vec::<f32>().unwrap());
    v
}

fn fresh(seed: u64) -> Toy<Ad> {
    let device = Default::default();
    seed_everything::<Ad>(&device, seed);
    Toy::new(&device)
}

#[test]
fn trains_deterministically_and_learns() {
    let _guard = serial();
    let task = ToyTask::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ra = train(&task, fresh(1), &config(a.path()), &Default::default()).unwrap();
    let rb = train(&task, fresh(1), &config(b.path()), &Default::default()).unwrap();
    assert_eq!(
        weights(&ra.model),
        weights(&rb.model),
        "same seed, same numbers"
    );
    assert!(
        ra.evals["valid"].accuracy() > 0.8,
        "{:?}",
        ra.evals["valid"]
    );
    assert_eq!(ra.state.step, 3 * 13);
    assert!(ra.best_checkpoint.is_some());
}

#[test]
fn kill_and_resume_gives_the_same_parameters_and_log() {
    let _guard = serial();
    let task = ToyTask::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let full = train(&task, fresh(1), &config(a.path()), &Default::default()).unwrap();

    // Run B stops at step 17 (mid-epoch, not at an evaluation), as a kill would after its
    // checkpoint; lines it logged past the checkpoint must be dropped on resume.
    let mut first = config(b.path());
    first.max_steps = Some(17);
    train(&task, fresh(1), &first, &Default::default()).unwrap();
    let log = MetricsLog::new(&first.metrics_log()).unwrap();
    let mut ghost = log.read().unwrap().pop().unwrap();
    ghost.step = 19;
    log.append(&ghost).unwrap();

    let mut resumed_cfg = config(b.path());
    resumed_cfg.resume = true;
    // A different initialisation proves the weights come from the checkpoint.
    let resumed = train(&task, fresh(99), &resumed_cfg, &Default::default()).unwrap();
    assert_eq!(weights(&resumed.model), weights(&full.model));
    assert_eq!(resumed.state.step, full.state.step);

    let strip = |dir: &std::path::Path| -> Vec<(String, u64, Option<f64>)> {
        MetricsLog::new(&dir.join("metrics.jsonl"))
            .unwrap()
            .read()
            .unwrap()
            .into_iter()
            .filter(|r| r.kind != "train")
            .map(|r| (r.kind, r.step, r.accuracy))
            .collect()
    };
    let (la, mut lb) = (strip(a.path()), strip(b.path()));
    // B evaluated once more, at its stop (step 17).
    lb.retain(|r| r.1 != 17);
    assert_eq!(la, lb);
}

#[test]
fn damaged_checkpoints_are_refused() {
    let _guard = serial();
    let task = ToyTask::new();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_steps = Some(5);
    train(&task, fresh(1), &c, &Default::default()).unwrap();
    let path = c.last_checkpoint();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    c.resume = true;
    c.max_steps = None;
    let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("truncated") && msg.contains("last.ckpt"),
        "{msg}"
    );
    // A model-only load of a damaged file is refused too.
    let err = load_model::<Flex, _>(
        Toy::<Flex>::new(&Default::default()),
        &path,
        &Default::default(),
    )
    .unwrap_err();
    assert!(matches!(err, CheckpointError::Truncated(_)));
}
