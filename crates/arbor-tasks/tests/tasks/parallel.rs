//! Data-parallel training of the real tasks (issue 36): two workers on split batches end with
//! the parameters of one worker on the whole batch, for a classification task (LSTM sentence
//! classifier), for R2D2's language-model pretraining (whose loss is a mean over tokens, so
//! the shares are weighted by their tokens) and for the recurrent LM (whose workers each carry
//! the state of their band of rows from one segment to the next), to f32 tolerance.

use crate::common;

use arbor_encoders::r2d2::{CompositionConfig, R2d2Config, R2d2LmConfig};
use arbor_encoders::{EncoderConfig, EncoderKind};
use arbor_heads::{SentenceClassifierConfig, TokenEmbeddingConfig};
use arbor_tasks::{ClassifyData, ClassifyTask, ModelConfig, ModelMeta, R2d2LmTask, R2d2Meta};
use arbor_train::{seed_everything, train, train_on, Task, TrainConfig, TrainOutcome};
use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::prelude::*;

type Ad = Autodiff<Flex>;

/// `n` sentences of 2 to 9 tokens (see `common::sentences`).
fn data(n: usize, seed: u64) -> ClassifyData {
    common::sentences(n, 9, seed)
}

fn config(dir: &std::path::Path, batch: usize) -> TrainConfig {
    let mut c = TrainConfig::new(dir);
    c.epochs = 2;
    c.batch_size = batch;
    c.max_steps = Some(8);
    c.eval_every = 4;
    c.lr = 5e-3;
    c.clip_norm = Some(0.5);
    c.quiet = true;
    c.seed = 4;
    c
}

/// Every float parameter of `model`, in module order, with the path of the parameter each
/// value belongs to (for the failure messages).
fn params<B: Backend, M: Module<B>>(model: &M) -> (Vec<f32>, Vec<String>) {
    #[derive(Default)]
    struct Collect {
        values: Vec<f32>,
        owners: Vec<String>,
        path: Vec<String>,
    }
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let values = param.val().into_data().to_vec::<f32>().unwrap_or_default();
            let owner = self.path.join(".");
            self.owners.extend(std::iter::repeat_n(owner, values.len()));
            self.values.extend(values);
        }
    }
    let mut all = Collect::default();
    model.visit(&mut all);
    (all.values, all.owners)
}

/// Trains `make()`'s model on `task` with one worker and with two, and compares.
fn one_and_two_workers<T, F>(task: &T, make: F, batch: usize)
where
    T: Task<Ad>,
    F: Fn() -> T::Model,
{
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let device = Default::default();
    let single: TrainOutcome<T::Model> =
        train(task, make(), &config(one.path(), batch), &device).unwrap();
    let parallel = train_on(task, make(), &config(two.path(), batch), &[device, device]).unwrap();
    assert_eq!(parallel.state.step, single.state.step);
    let ((a, owners), (b, _)) = (
        params(&single.model.valid()),
        params(&parallel.model.valid()),
    );
    let (start, _) = params(&make().valid());
    assert_ne!(a, start, "the run trained");
    let (at, worst) = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
        .enumerate()
        .fold(
            (0, 0.0f32),
            |best, (i, d)| if d > best.1 { (i, d) } else { best },
        );
    assert!(
        worst < 1e-4,
        "largest relative difference {worst}, at value {at} (in {}): {} with one worker, {} with two, {} at the start",
        owners[at],
        a[at],
        b[at],
        start[at]
    );
    let moved = a
        .iter()
        .zip(&start)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < moved / 100.0,
        "difference {worst} against a move of {moved}"
    );
}

#[test]
fn an_lstm_classifier_trains_the_same_on_two_workers() {
    let _serial = crate::serial();
    let dim = 8;
    let embedding = TokenEmbeddingConfig::new(6, dim);
    let encoder = EncoderConfig::of_kind(EncoderKind::Lstm, dim, dim);
    let head = SentenceClassifierConfig::new(encoder.d_output()).with_dropout(0.0);
    let task = ClassifyTask::<Ad> {
        train: data(40, 1),
        splits: vec![("valid".into(), data(12, 2))],
        eval_batch_size: 6,
        meta: ModelMeta {
            model: ModelConfig::Classify {
                embedding: embedding.clone(),
                encoder: encoder.clone(),
                head: head.clone(),
            },
            vocab: ["<pad>", "<unk>", "a", "b", "c", "d"]
                .map(String::from)
                .to_vec(),
            labels: vec!["no".into(), "yes".into()],
            lowercase: false,
            case_fallback: false,
        },
        device: Default::default(),
    };
    let make = || {
        let device = Default::default();
        seed_everything::<Ad>(&device, 3);
        // `fork` initialises every parameter now, in module order (Burn initialises a
        // parameter at its first use otherwise, at another point of the generator's stream
        // with one worker than with two).
        head.init(
            encoder.init::<Ad>(&device),
            embedding.init::<Ad>(&device),
            &device,
        )
        .fork(&device)
    };
    // 7 sentences per batch: shares of 4 and 3.
    one_and_two_workers(&task, make, 7);
}

#[test]
fn r2d2_pretraining_trains_the_same_on_two_workers() {
    let _serial = crate::serial();
    // Sentences of 1 to 9 pieces: the shares hold different numbers of tokens (a share weight
    // of 1 instead of its tokens gives a difference of 2e-2). This test failed in about one
    // run in twenty (2e-3 to 3e-2; CI saw 7e-4 and 3.5e-3) until the engine stopped the
    // workers' backward passes from overlapping each other's graph building (Burn 0.21's
    // sweep of every graph at the end of a backward pass could drop a part of another
    // worker's gradient; `Graphs` in arbor-train's engine/parallel.rs): 300 runs in a row
    // passed after it, 6 of 100 failed without it.
    let sentences: Vec<Vec<u32>> = (0..30u32)
        .map(|i| (0..1 + (i * 7) % 9).map(|t| 1 + (i + t) % 11).collect())
        .collect();
    let lm = R2d2LmConfig::new(12)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2));
    let task = R2d2LmTask::<Ad> {
        train: sentences.clone(),
        valid: sentences,
        meta: R2d2Meta {
            model: lm.clone(),
            vocab: (0..12).map(|i| format!("t{i}")).collect(),
            tree_rule: Default::default(),
        },
        eval_batch: 8,
        // Noise drawn for a whole batch cannot equal noise drawn for its shares.
        gumbel_noise: false,
        device: Default::default(),
    };
    let make = || {
        let device = Default::default();
        seed_everything::<Ad>(&device, 5);
        lm.init::<Ad>(&device).fork(&device)
    };
    one_and_two_workers(&task, make, 5);
}

#[test]
fn the_recurrent_lm_trains_the_same_on_two_workers() {
    let _serial = crate::serial();
    use arbor_cells::CellKind;
    use arbor_lm::{Batchified, RnnLmConfig};
    use arbor_tasks::LmTask;
    // A stream with structure (a counter modulo 7 and its successor), 6 rows: the workers carry
    // rows 0..3 and 3..6 across the segments.
    let stream: Vec<u32> = (0..600u32).map(|i| (i % 7) + (i / 7) % 3).collect();
    let config = RnnLmConfig::new(CellKind::Lstm, 10, 8, 12)
        .with_n_layers(2)
        .with_dropout(0.0)
        .with_dropout_hidden(0.0)
        .with_dropout_input(0.0)
        .with_dropout_embedding(0.0)
        .with_weight_drop(0.0)
        .with_alpha(0.0)
        .with_beta(0.0);
    let task = LmTask::<Ad>::new(
        Batchified::new(&stream, 6, 10),
        Batchified::new(&stream[..120], 2, 10),
        0.0,
        0.0,
        serde_json::Value::Null,
        Default::default(),
    );
    let make = || {
        let device = Default::default();
        seed_everything::<Ad>(&device, 7);
        config.init::<Ad>(&device).fork(&device)
    };
    one_and_two_workers(&task, make, 1);
}
