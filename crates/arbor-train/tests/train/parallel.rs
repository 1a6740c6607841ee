//! Data-parallel training (`train_on` with several devices): workers on split batches end with
//! the parameters of one worker on the whole batch; a failing worker stops the run instead of
//! leaving the others waiting; a stopped two-worker run resumes to the same parameters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use arbor_train::*;
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::TensorData;

type Ad = Autodiff<Flex>;

use crate::serial;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
    /// Reached only by examples with a negative first feature: some shares leave it without a
    /// gradient, which the reduction must still line up.
    rare: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(4, 16).init(device),
            l2: LinearConfig::new(16, 3).init(device),
            rare: LinearConfig::new(4, 3).init(device),
        }
    }
}

/// 3-way labels from 4 features; 120 training examples, 40 validation. `panic_on` makes the
/// step of any share holding that example panic.
struct Toy {
    xs: Vec<[f32; 4]>,
    ys: Vec<i64>,
    panic_on: Option<usize>,
}

impl Toy {
    fn new() -> Self {
        let mut s = 99u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let xs: Vec<[f32; 4]> = (0..160).map(|_| [next(), next(), next(), next()]).collect();
        let ys = xs
            .iter()
            .map(|x| i64::from(x[0] + x[1] > 0.0) + i64::from(x[2] > 0.5))
            .collect();
        Self {
            xs,
            ys,
            panic_on: None,
        }
    }

    fn logits<Bk: Backend>(
        &self,
        model: &Mlp<Bk>,
        idx: &[usize],
        device: &Bk::Device,
    ) -> (Tensor<Bk, 2>, Tensor<Bk, 1, Int>) {
        let x: Vec<f32> = idx.iter().flat_map(|&i| self.xs[i]).collect();
        let y: Vec<i64> = idx.iter().map(|&i| self.ys[i]).collect();
        let x = Tensor::<Bk, 2>::from_data(TensorData::new(x, [idx.len(), 4]), device);
        let y = Tensor::from_data(TensorData::new(y, [idx.len()]), device);
        let mut logits = model.l2.forward(relu(model.l1.forward(x.clone())));
        // `rare` joins the graph only when the share has a negative first feature.
        let rare: Vec<usize> = idx
            .iter()
            .enumerate()
            .filter(|(_, &i)| self.xs[i][0] < -0.9)
            .map(|(k, _)| k)
            .collect();
        if !rare.is_empty() {
            let mask: Vec<f32> = (0..idx.len())
                .map(|k| if rare.contains(&k) { 1.0 } else { 0.0 })
                .collect();
            let mask = Tensor::<Bk, 1>::from_data(TensorData::new(mask, [idx.len()]), device);
            logits = logits.add(model.rare.forward(x).mul(mask.unsqueeze_dim(1)));
        }
        (logits, y)
    }
}

impl Task<Ad> for Toy {
    type Model = Mlp<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        vec![1; 120]
    }
    fn step(
        &self,
        model: &Mlp<Ad>,
        batch: &[usize],
        _ctx: StepContext,
        device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        if let Some(p) = self.panic_on {
            assert!(!batch.contains(&p), "the task fails on example {p}");
        }
        let (logits, y) = self.logits(model, batch, device);
        let correct = logits
            .clone()
            .argmax(1)
            .squeeze_dim::<1>(1)
            .equal(y.clone())
            .int()
            .sum();
        let loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(device)
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
    fn evaluate(&self, model: &Mlp<Flex>, _split: &str) -> EvalReport {
        let idx: Vec<usize> = (120..160).collect();
        let (logits, y) = self.logits(model, &idx, &Default::default());
        let pred = logits.argmax(1).squeeze_dim::<1>(1);
        let correct = pred.equal(y).int().sum().into_scalar().elem::<i64>() as usize;
        EvalReport {
            correct,
            total: idx.len(),
            ..Default::default()
        }
    }
}

fn config(dir: &std::path::Path, batch: usize) -> TrainConfig {
    let mut c = TrainConfig::new(dir);
    c.epochs = 2;
    c.batch_size = batch;
    c.max_steps = Some(12);
    c.eval_every = 5;
    c.lr = 1e-2;
    // Small enough to clip most steps: the norm must be the reduced gradients'.
    c.clip_norm = Some(0.3);
    c.quiet = true;
    c.seed = 3;
    c
}

/// The same initial weights every call, initialised now (Burn initialises a parameter at its
/// first use, which is not at the same point of the generator's stream with one worker and
/// with several).
fn fresh() -> Mlp<Ad> {
    let device = Default::default();
    seed_everything::<Ad>(&device, 11);
    // `fork` initialises every parameter, in module order.
    Mlp::new(&device).fork(&device)
}

fn weights(m: &Mlp<Ad>) -> Vec<f32> {
    let m: Mlp<Flex> = m.valid();
    let mut v = Vec::new();
    for l in [&m.l1, &m.l2, &m.rare] {
        v.extend(l.weight.val().into_data().to_vec::<f32>().unwrap());
        v.extend(
            l.bias
                .as_ref()
                .unwrap()
                .val()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    v
}

fn train_losses(dir: &std::path::Path) -> Vec<f64> {
    MetricsLog::new(&dir.join("metrics.jsonl"))
        .unwrap()
        .read()
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == "train")
        .filter_map(|r| r.loss)
        .collect()
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len());
    let (at, worst) = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
        .enumerate()
        .fold((0, 0.0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
    assert!(
        worst < 2e-5,
        "{what}: largest relative difference {worst} at {at} of {}: {} vs {}",
        a.len(),
        a[at],
        b[at]
    );
}

/// Runs `f` on a thread and fails the test after `secs` seconds (a data-parallel bug can
/// leave workers waiting on each other forever).
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("no result after {secs} s: the workers are stuck"),
    }
}

#[test]
fn workers_on_split_batches_end_with_the_parameters_of_one_worker_on_the_whole_batch() {
    let _guard = serial();
    // 7 examples per batch: uneven shares for 2 and 3 workers; 2 per batch with 3 workers: one
    // worker has an empty share every step.
    for (batch, workers) in [(7, 2), (7, 3), (2, 3)] {
        let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let single = train(
            &Toy::new(),
            fresh(),
            &config(one.path(), batch),
            &Default::default(),
        )
        .unwrap();
        let path = many.path().to_path_buf();
        let parallel = within(120, move || {
            let devices = vec![Default::default(); workers];
            train_on(&Toy::new(), fresh(), &config(&path, batch), &devices).unwrap()
        });
        let what = format!("batch {batch}, {workers} workers");
        assert_eq!(parallel.state.step, single.state.step, "{what}");
        assert_eq!(parallel.state.examples, single.state.examples, "{what}");
        assert_close(&weights(&parallel.model), &weights(&single.model), &what);
        assert_ne!(
            weights(&parallel.model),
            weights(&fresh()),
            "{what}: the run trained"
        );
        // The logged loss and accuracy are the whole batch's.
        let (a, b) = (train_losses(one.path()), train_losses(many.path()));
        assert_eq!(a.len(), b.len(), "{what}");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() < 1e-5 * (1.0 + x.abs()),
                "{what}: loss {x} vs {y}"
            );
        }
        assert_eq!(
            parallel.evals["valid"].correct, single.evals["valid"].correct,
            "{what}"
        );
    }
}

#[test]
fn a_worker_that_fails_stops_the_run_instead_of_leaving_the_others_waiting() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let outcome = within(120, move || {
        let mut task = Toy::new();
        // Batches are shuffled: some step's second share holds example 5.
        task.panic_on = Some(5);
        let devices = vec![Default::default(); 2];
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            train_on(&task, fresh(), &config(&path, 7), &devices)
        }))
    });
    let message = outcome
        .expect_err("the task's panic reaches the caller")
        .downcast::<String>()
        .map(|m| *m)
        .unwrap_or_default();
    assert!(message.contains("fails on example 5"), "{message}");
    // The collective is usable again after the failed run.
    let again = tempfile::tempdir().unwrap();
    let path = again.path().to_path_buf();
    within(120, move || {
        let devices = vec![Default::default(); 2];
        train_on(&Toy::new(), fresh(), &config(&path, 7), &devices).unwrap()
    });
}

#[test]
fn a_stopped_two_worker_run_resumes_to_the_parameters_of_an_uninterrupted_one() {
    let _guard = serial();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
    let (whole, resumed) = within(240, move || {
        let devices = vec![Default::default(); 2];
        let mut c = config(&pa, 7);
        c.max_steps = Some(20);
        let whole = train_on(&Toy::new(), fresh(), &c, &devices).unwrap();
        // Stopped at step 8 (mid-epoch, between evaluations), as a kill after its checkpoint.
        let mut first = config(&pb, 7);
        first.max_steps = Some(8);
        train_on(&Toy::new(), fresh(), &first, &devices).unwrap();
        let mut again = config(&pb, 7);
        again.max_steps = Some(20);
        again.resume = true;
        let resumed = train_on(&Toy::new(), fresh(), &again, &devices).unwrap();
        (whole, resumed)
    });
    assert_eq!(resumed.state.step, 20);
    // Two workers sum in a fixed order: the resumed run is the uninterrupted one, bit for bit.
    assert_eq!(weights(&resumed.model), weights(&whole.model));
}

#[test]
fn no_device_is_a_configuration_error() {
    // `fresh` draws from the backend's process-wide generator.
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let err = train_on::<Ad, _>(&Toy::new(), fresh(), &config(dir.path(), 7), &[]).unwrap_err();
    assert!(matches!(err, TrainError::Config(_)), "{err}");
}

/// On the only thread of a rayon pool (`ARBOR_POOL=main` with one thread makes the main thread
/// that), several workers would deadlock: their threads hand their parallel work to the pool
/// while this thread waits for them. The engine refuses instead, naming the fix.
#[test]
fn several_workers_are_refused_on_the_only_thread_of_a_rayon_pool() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let err = within(120, move || {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a one-thread pool");
        let devices = vec![Default::default(); 2];
        pool.install(|| train_on(&Toy::new(), fresh(), &config(&path, 7), &devices))
            .map(|_| ())
            .unwrap_err()
    });
    assert!(matches!(err, TrainError::Device { .. }), "{err}");
    assert!(err.to_string().contains("rayon's only thread"), "{err}");
    assert!(err.to_string().contains("RAYON_NUM_THREADS"), "{err}");
}

/// What the workers of [`Watched`] saw: forward passes building now, backward passes running
/// now, and how often one worker's backward pass ran while another built its graph or
/// back-propagated.
static BUILDING: AtomicUsize = AtomicUsize::new(0);
static BACKWARDS: AtomicUsize = AtomicUsize::new(0);
static OVERLAPS: AtomicUsize = AtomicUsize::new(0);
static ENTERED: AtomicUsize = AtomicUsize::new(0);

/// The identity, as an autodiff node whose backward step counts itself as running for 30 ms
/// and notes any graph being built meanwhile.
#[derive(Debug)]
struct Probe;

impl burn::backend::autodiff::ops::Backward<Flex, 1> for Probe {
    type State = ();

    fn backward(
        self,
        ops: burn::backend::autodiff::ops::Ops<(), 1>,
        grads: &mut burn::backend::autodiff::grads::Gradients,
        _: &mut burn::backend::autodiff::checkpoint::base::Checkpointer,
    ) {
        if BACKWARDS.fetch_add(1, Ordering::SeqCst) > 0 || BUILDING.load(Ordering::SeqCst) > 0 {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(30));
        if BUILDING.load(Ordering::SeqCst) > 0 {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        BACKWARDS.fetch_sub(1, Ordering::SeqCst);
        burn::backend::autodiff::ops::unary::<Flex, _>(ops.parents, ops.node, grads, |g| g);
    }
}

fn probe(x: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::ops::Backward;
    use burn::tensor::TensorPrimitive;
    let x = x.into_primitive().tensor();
    let out = Probe
        .prepare::<NoCheckpointing>([x.node.clone()])
        .compute_bound()
        .stateless(x.primitive.clone());
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// [`Toy`] whose logits pass through [`Probe`], and whose forward pass (every second one to
/// start: one worker of each two-worker step) takes 50 ms longer than the other's.
struct Watched(Toy);

impl Task<Ad> for Watched {
    type Model = Mlp<Ad>;
    fn train_lengths(&self) -> Vec<usize> {
        self.0.train_lengths()
    }
    fn step(
        &self,
        model: &Mlp<Ad>,
        batch: &[usize],
        _ctx: StepContext,
        device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        BUILDING.fetch_add(1, Ordering::SeqCst);
        if BACKWARDS.load(Ordering::SeqCst) > 0 {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        let (logits, y) = self.0.logits(model, batch, device);
        if ENTERED.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(device)
            .forward(probe(logits), y);
        if BACKWARDS.load(Ordering::SeqCst) > 0 {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        BUILDING.fetch_sub(1, Ordering::SeqCst);
        StepOutput {
            loss,
            correct: None,
            total: 0,
        }
    }
    fn eval_splits(&self) -> Vec<String> {
        self.0.eval_splits()
    }
    fn evaluate(&self, model: &Mlp<Flex>, split: &str) -> EvalReport {
        self.0.evaluate(model, split)
    }
}

/// Burn 0.21's autodiff ends every backward pass with a sweep of every graph of the process,
/// which can free a step of a graph another thread is building (Burn issues #5573, #5645): a
/// worker's gradient then silently misses a part (one two-worker R2D2 run in about a hundred
/// here). So no worker back-propagates while another builds its graph or back-propagates.
#[test]
fn no_worker_back_propagates_while_another_builds_its_graph() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 8);
    c.max_steps = Some(6);
    c.eval_every = 100;
    let device = Default::default();
    OVERLAPS.store(0, Ordering::SeqCst);
    let run = within(60, move || {
        train_on(&Watched(Toy::new()), fresh(), &c, &[device, device]).map(|r| r.state.step)
    });
    assert_eq!(run.unwrap(), 6);
    assert_eq!(BUILDING.load(Ordering::SeqCst), 0);
    assert_eq!(
        OVERLAPS.load(Ordering::SeqCst),
        0,
        "a worker back-propagated while another built its graph or back-propagated"
    );
}
