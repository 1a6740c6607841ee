//! Training steps read nothing back from the device (issue 14, item 5), counted on the counting
//! backend (`arbor_kernels::counting`): the classification task's step, its backward pass,
//! global-norm clipping and the optimizer step, for every encoder kind, and the engine around
//! them, which reads once per logging interval.
//!
//! SPINN (all three variants, trained on gold transitions) uploads the indices of its thin
//! stack but reads nothing back; the Gumbel Tree-LSTM keeps its sampled selections on the
//! device and builds no trees in training; R2D2 runs its pruned chart's FIND and merges on the
//! device (as a classifier's encoder and in its own LM pretraining task).

use crate::common;

use std::sync::Mutex;

use arbor_encoders::{EncoderConfig, EncoderKind};
use arbor_heads::{SentenceClassifierConfig, TokenEmbeddingConfig};
use arbor_kernels::counting::{reads, Counting, ReadCounter};
use arbor_tasks::{ClassifyData, ClassifyTask, ModelConfig, ModelMeta};
use arbor_train::{
    clip_on_device, grad_norm_on_device, seed_everything, train, EvalReport, StepContext,
    StepOutput, Task, TrainConfig,
};
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};

type C = Counting<Flex>;
type Ad = Autodiff<C>;

const DIM: usize = 8;
const BATCH: usize = 6;

/// `n` sentences of 2 to 7 tokens (see `common::sentences`).
fn data(n: usize, seed: u64) -> ClassifyData {
    common::sentences(n, 7, seed)
}

fn task(kind: EncoderKind) -> ClassifyTask<Ad> {
    let embedding = TokenEmbeddingConfig::new(6, DIM);
    let encoder = EncoderConfig::of_kind(kind, DIM, DIM);
    let head = SentenceClassifierConfig::new(encoder.d_output()).with_dropout(0.0);
    ClassifyTask::<Ad> {
        train: data(8 * BATCH, 1),
        splits: vec![("valid".into(), data(12, 2))],
        eval_batch_size: 6,
        meta: ModelMeta {
            model: ModelConfig::Classify {
                embedding,
                encoder,
                head,
            },
            vocab: ["<pad>", "<unk>", "a", "b", "c", "d"]
                .map(String::from)
                .to_vec(),
            labels: vec!["no".into(), "yes".into()],
            lowercase: false,
            case_fallback: false,
        },
        device: Default::default(),
    }
}

type Model = <ClassifyTask<Ad> as Task<Ad>>::Model;

fn model(task: &ClassifyTask<Ad>) -> Model {
    let device = Default::default();
    seed_everything::<Ad>(&device, 3);
    let ModelConfig::Classify {
        embedding,
        encoder,
        head,
    } = &task.meta.model
    else {
        unreachable!()
    };
    head.init(
        encoder.init::<Ad>(&device),
        embedding.init::<Ad>(&device),
        &device,
    )
}

/// The reads of each of `steps` training steps of `kind` as the engine runs them: the task's
/// step, backward, global-norm clipping, an Adam step.
fn reads_per_step(kind: EncoderKind, steps: usize) -> Vec<u64> {
    let task = task(kind);
    let mut model = model(&task);
    let mut optim = AdamConfig::new().init::<Ad, Model>();
    (0..steps)
        .map(|s| {
            let idx: Vec<usize> = (s * BATCH..(s + 1) * BATCH).collect();
            let reads;
            (model, reads) = counted_step(&task, model.clone(), &mut optim, &idx, s as u64);
            reads
        })
        .collect()
}

/// One training step of `task` on the examples `idx` as the engine runs it (the task's step,
/// backward, global-norm clipping, an Adam step): the model after it, and the reads it made.
fn counted_step<T: Task<Ad>>(
    task: &T,
    model: T::Model,
    optim: &mut impl Optimizer<T::Model, Ad>,
    idx: &[usize],
    seed: u64,
) -> (T::Model, u64) {
    let counter = ReadCounter::start();
    let out = task.step(&model, idx, StepContext::seeded(seed), &Default::default());
    let mut grads = GradientsParams::from_grads(out.loss.backward(), &model);
    let norm = grad_norm_on_device::<Ad, _>(&model, &grads).expect("gradients");
    clip_on_device::<Ad, _>(&model, &mut grads, norm, 1.0);
    let model = optim.step(1e-3, model, grads);
    (model, counter.reads())
}

#[test]
fn recurrent_transformer_spinn_and_gumbel_steps_read_nothing() {
    let _serial = crate::serial();
    for kind in [
        EncoderKind::Lstm,
        EncoderKind::OnLstm,
        EncoderKind::FastTrees,
        EncoderKind::FasterFastTrees,
        EncoderKind::ConvFastTrees,
        EncoderKind::Transformer,
        EncoderKind::TransformerFastTrees,
        EncoderKind::SpinnPiNt,
        EncoderKind::SpinnPi,
        EncoderKind::Spinn,
        EncoderKind::Gumbel,
        EncoderKind::R2d2,
    ] {
        assert_eq!(reads_per_step(kind, 3), vec![0; 3], "{kind}");
    }
}

#[test]
fn r2d2_pretraining_steps_read_nothing() {
    let _serial = crate::serial();
    use arbor_encoders::r2d2::{CompositionConfig, R2d2Config, R2d2LmConfig};
    use arbor_tasks::{R2d2LmTask, R2d2Meta};
    let device = Default::default();
    seed_everything::<Ad>(&device, 5);
    // Sentences of 1 to 9 pieces, so that steps mix sentences that prune (window 2) with ones
    // that do not.
    let sentences: Vec<Vec<u32>> = (0..12u32)
        .map(|i| (0..1 + (i * 7) % 9).map(|t| 1 + (i + t) % 11).collect())
        .collect();
    let config = R2d2LmConfig::new(12)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2));
    let task = R2d2LmTask::<Ad> {
        train: sentences.clone(),
        valid: sentences,
        meta: R2d2Meta {
            model: config.clone(),
            vocab: (0..12).map(|i| format!("t{i}")).collect(),
            tree_rule: Default::default(),
        },
        eval_batch: 4,
        gumbel_noise: true,
        device,
    };
    let mut model = config.init::<Ad>(&device);
    let mut optim = AdamConfig::new().init::<Ad, _>();
    for s in 0..3 {
        let idx: Vec<usize> = (s * 4..(s + 1) * 4).collect();
        let reads;
        (model, reads) = counted_step(&task, model, &mut optim, &idx, s as u64);
        assert_eq!(reads, 0, "step {s}");
    }
}

/// A task that records this thread's read count as each step starts.
struct Recording {
    inner: ClassifyTask<Ad>,
    at_step: Mutex<Vec<u64>>,
}

impl Task<Ad> for Recording {
    type Model = Model;
    fn train_lengths(&self) -> Vec<usize> {
        self.inner.train_lengths()
    }
    fn step(
        &self,
        model: &Model,
        batch: &[usize],
        ctx: StepContext,
        device: &burn::tensor::Device<Ad>,
    ) -> StepOutput<Ad> {
        self.at_step.lock().unwrap().push(reads());
        self.inner.step(model, batch, ctx, device)
    }
    fn eval_splits(&self) -> Vec<String> {
        self.inner.eval_splits()
    }
    fn evaluate(
        &self,
        model: &<Model as AutodiffModule<Ad>>::InnerModule,
        split: &str,
    ) -> EvalReport {
        self.inner.evaluate(model, split)
    }
}

#[test]
fn the_engine_reads_once_per_logging_interval_on_an_lstm_classifier() {
    let _serial = crate::serial();
    let inner = task(EncoderKind::Lstm);
    let m = model(&inner);
    let task = Recording {
        inner,
        at_step: Mutex::new(Vec::new()),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut c = TrainConfig::new(dir.path());
    c.batch_size = BATCH; // 8 steps
    c.log_every = 3;
    c.quiet = true;
    let out = train(&task, m, &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 8);
    let at = task.at_step.into_inner().unwrap();
    let per_step: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // Step s (0-based) is followed by a read when s + 1 steps are a multiple of 3.
    assert_eq!(per_step, [0, 0, 1, 0, 0, 1, 0]);
    assert!(out.evals["valid"].total == 12);
}
