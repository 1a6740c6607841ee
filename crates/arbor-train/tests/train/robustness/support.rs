//! What the robustness tests share: a small model and task whose steps can be spoiled, the
//! run configuration, readers of checkpoints and logs, and the serial guard.

use std::path::Path;

use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::TensorData;

pub type Ad = Autodiff<Flex>;

pub use crate::serial;

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub l1: Linear<B>,
    pub l2: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    pub fn new(device: &B::Device) -> Self {
        Self::with_hidden(8, device)
    }
    pub fn with_hidden(hidden: usize, device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(4, hidden).init(device),
            l2: LinearConfig::new(hidden, 2).init(device),
        }
    }
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(relu(self.l1.forward(x)))
    }
}

/// How a [`Probe`] spoils one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spoil {
    /// The loss is NaN.
    Loss,
    /// The loss is finite, the gradients NaN (`sqrt` at 0, times 0).
    Gradient,
}

/// 64 training examples (label: x0 + x1 > x2), 32 validation ones; optionally a constant
/// validation metric, a data fingerprint, and one spoiled step.
pub struct Probe {
    xs: Vec<[f32; 4]>,
    ys: Vec<i64>,
    /// The run's seed (to recognise a step from its noise seed).
    seed: u64,
    /// Spoil step `.0` this way.
    pub spoil: Option<(u64, Spoil)>,
    /// Evaluation reports this many correct out of 100 instead of the real accuracy.
    pub constant_correct: Option<usize>,
    pub fingerprint: Option<String>,
}

impl Probe {
    pub fn new(seed: u64) -> Self {
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
    pub fn tensors<Bk: Backend>(&self, idx: &[usize]) -> (Tensor<Bk, 2>, Tensor<Bk, 1, Int>) {
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
pub fn config(dir: &Path) -> TrainConfig {
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

pub fn fresh(seed: u64) -> Mlp<Ad> {
    let device = Default::default();
    seed_everything::<Ad>(&device, seed);
    Mlp::new(&device)
}

pub fn weights(m: &Mlp<Ad>) -> Vec<f32> {
    let m: Mlp<Flex> = m.valid();
    let mut v = m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
    v.extend(m.l2.weight.val().into_data().to_vec::<f32>().unwrap());
    v
}

/// The step stored in a checkpoint.
pub fn saved_step(path: &Path) -> u64 {
    let file = CheckpointFile::load(path).unwrap();
    file.meta["state"]["step"].as_u64().unwrap()
}

pub fn log(dir: &Path) -> Vec<MetricsRecord> {
    MetricsLog::new(&dir.join("metrics.jsonl"))
        .unwrap()
        .read()
        .unwrap()
}
