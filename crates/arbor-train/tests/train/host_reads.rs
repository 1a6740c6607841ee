//! The engine reads nothing back from the device during a training step: the statistics of the
//! steps are read in one transfer per logging interval (`TrainConfig::log_every`), counted on
//! the counting backend.

use std::sync::Mutex;

use arbor_kernels::counting::{reads, Counting};
use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

type C = Counting<Flex>;
type Ad = Autodiff<C>;

#[derive(Module, Debug)]
struct Lin<B: Backend> {
    l: Linear<B>,
}

/// 96 examples, label `x0 > x1`; records this thread's read count as each step starts.
struct Counted {
    xs: Vec<[f32; 2]>,
    at_step: Mutex<Vec<u64>>,
}

impl Counted {
    fn new() -> Self {
        let xs = (0..96)
            .map(|i| {
                let a = ((i * 37) % 17) as f32 / 17.0 - 0.5;
                let b = ((i * 11) % 13) as f32 / 13.0 - 0.5;
                [a, b]
            })
            .collect();
        Self {
            xs,
            at_step: Mutex::new(Vec::new()),
        }
    }
    fn tensors<Bk: Backend>(&self, idx: &[usize]) -> (Tensor<Bk, 2>, Tensor<Bk, 1, Int>) {
        let d = Default::default();
        let x: Vec<f32> = idx.iter().flat_map(|&i| self.xs[i]).collect();
        let y: Vec<i64> = idx
            .iter()
            .map(|&i| i64::from(self.xs[i][0] > self.xs[i][1]))
            .collect();
        (
            Tensor::from_data(TensorData::new(x, [idx.len(), 2]), &d),
            Tensor::from_data(TensorData::new(y, [idx.len()]), &d),
        )
    }
}

impl Task<Ad> for Counted {
    type Model = Lin<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        vec![1; 96]
    }
    fn step(
        &self,
        model: &Lin<Ad>,
        batch: &[usize],
        _ctx: StepContext,
        _device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        self.at_step.lock().unwrap().push(reads());
        let (x, y) = self.tensors::<Ad>(batch);
        let logits = model.l.forward(x);
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
    fn evaluate(&self, _model: &Lin<C>, _split: &str) -> EvalReport {
        EvalReport {
            correct: 1,
            total: 2,
            ..Default::default()
        }
    }
}

/// The reads made by each step but the last (from its start to the next step's start).
fn reads_per_step(log_every: u64, clip: Option<f64>) -> (Vec<u64>, Vec<MetricsRecord>) {
    let _guard = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = TrainConfig::new(dir.path());
    c.batch_size = 4; // 24 steps
    c.log_every = log_every;
    c.clip_norm = clip;
    c.lr = 0.05;
    c.quiet = true;
    let device = Default::default();
    seed_everything::<Ad>(&device, 1);
    let model = Lin {
        l: LinearConfig::new(2, 2).init(&device),
    };
    let task = Counted::new();
    let out = train(&task, model, &c, &device).unwrap();
    assert_eq!(out.state.step, 24);
    let at = task.at_step.into_inner().unwrap();
    assert_eq!(at.len(), 24);
    let per_step = at.windows(2).map(|w| w[1] - w[0]).collect();
    let log = MetricsLog::new(&c.metrics_log()).unwrap().read().unwrap();
    (per_step, log)
}

#[test]
fn a_step_reads_nothing_and_each_logging_interval_reads_once() {
    for clip in [None, Some(0.1)] {
        let (per_step, _) = reads_per_step(5, clip);
        // Step s (0-based) ends with s + 1 steps done: a read when that is a multiple of 5.
        let expected: Vec<u64> = (0..23).map(|s| u64::from((s + 1) % 5 == 0)).collect();
        assert_eq!(per_step, expected, "clip {clip:?}");
    }
}

#[test]
fn without_a_logging_interval_steps_read_nothing_until_the_epoch_ends() {
    let (per_step, log) = reads_per_step(0, Some(1.0));
    assert_eq!(per_step, vec![0; 23]);
    // The one window of the epoch was read in full: every step's loss and accuracy.
    let train: Vec<&MetricsRecord> = log.iter().filter(|r| r.kind == "train").collect();
    assert_eq!(train.len(), 1);
    assert_eq!(train[0].step, 24);
    assert!(train[0].loss.is_some_and(f64::is_finite));
    assert!(train[0].accuracy.is_some_and(|a| (0.0..=1.0).contains(&a)));
}

#[test]
fn the_read_values_do_not_depend_on_the_logging_interval() {
    let (_, every_step) = reads_per_step(1, Some(1.0));
    let (_, at_the_end) = reads_per_step(0, Some(1.0));
    let strip = |log: Vec<MetricsRecord>| -> Vec<(String, u64, Option<f64>, Option<f64>)> {
        log.into_iter()
            .map(|r| (r.kind, r.step, r.loss, r.accuracy))
            .collect()
    };
    assert_eq!(strip(every_step), strip(at_the_end));
}
