//! Learning tests: one per task type (pair classification, sentence classification, language
//! modelling). Each trains a small model through the engine, with the library's default
//! initialisation, on a fixture where a correct model learns fast, and asserts the bound it
//! reaches within a fixed number of steps. They are what would have caught random word
//! embeddings starting at `N(0, 0.1)` instead of `N(0, 1)` (see docs/init.md): with that
//! start both classification tests fail (measured numbers on each test).
//!
//! The fixtures are propositional-logic formulas written here: variables `a`–`d`, the
//! operators `not`, `and`, `or`, in the bracketed binary form of Bowman et al.'s data, with
//! labels computed from truth tables.

use arbor_apps::logic::{to_data, LogicInput};
use arbor_cells::CellKind;
use arbor_data::readers::logic::{parse_logic_line, LogicPair, Relation};
use arbor_data::vocab::{Vocab, VocabConfig};
use arbor_data::BinaryTree;
use arbor_encoders::{EncoderConfig, EncoderKind};
use arbor_heads::{NliClassifierConfig, SentenceClassifierConfig, TokenEmbeddingConfig};
use arbor_lm::{Batchified, RnnLmConfig};
use arbor_tasks::LmTask;
use arbor_tasks::{ClassifyData, ClassifyTask, ModelConfig, ModelMeta, NliTask};
use arbor_train::{seed_everything, train, TrainConfig};
use burn::backend::{Autodiff, Flex};

type Ad = Autodiff<Flex>;

const VARIABLES: usize = 4;
/// Every assignment of the variables, as the bits of a truth table.
const ROWS: u32 = 1 << VARIABLES;

/// A small deterministic generator (the fixtures must not depend on a crate's RNG stream).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A random formula with exactly `ops` operators: its bracketed text and its truth table (bit
/// `r` is its value under assignment `r`, where variable `v` is bit `v` of `r`).
fn formula(rng: &mut Lcg, ops: usize) -> (String, u32) {
    if ops == 0 {
        let v = rng.below(VARIABLES as u64) as usize;
        let table = (0..ROWS)
            .filter(|r| (r >> v) & 1 == 1)
            .fold(0, |t, r| t | 1 << r);
        return (["a", "b", "c", "d"][v].to_string(), table);
    }
    let all = (1u32 << ROWS) - 1;
    match rng.below(3) {
        0 => {
            let (x, t) = formula(rng, ops - 1);
            (format!("( not {x} )"), !t & all)
        }
        op => {
            let left = rng.below(ops as u64) as usize;
            let (x, tx) = formula(rng, left);
            let (y, ty) = formula(rng, ops - 1 - left);
            let (name, t) = if op == 1 {
                ("and", tx & ty)
            } else {
                ("or", tx | ty)
            };
            (format!("( {x} ( {name} {y} ) )"), t)
        }
    }
}

/// The natural-logic relation between two truth tables.
fn relation(l: u32, r: u32) -> Relation {
    let all = (1u32 << ROWS) - 1;
    let (disjoint, exhaustive) = (l & r == 0, l | r == all);
    if l == r {
        Relation::Equivalent
    } else if disjoint && exhaustive {
        Relation::Negation
    } else if l & !r == 0 {
        Relation::Forward
    } else if r & !l == 0 {
        Relation::Reverse
    } else if disjoint {
        Relation::Alternation
    } else if exhaustive {
        Relation::Cover
    } else {
        Relation::Independent
    }
}

/// `n` logic pairs with 0–`max_ops` operators per formula, parsed by the real reader.
fn logic_pairs(n: usize, max_ops: u64, seed: u64) -> Vec<LogicPair> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            let ops = rng.below(max_ops + 1) as usize;
            let (l, tl) = formula(&mut rng, ops);
            let ops = rng.below(max_ops + 1) as usize;
            let (r, tr) = formula(&mut rng, ops);
            let line = format!("{}\t{l}\t{r}", relation(tl, tr).symbol());
            parse_logic_line(&line).expect("the fixture writes valid lines")
        })
        .collect()
}

fn logic_vocab() -> Vocab {
    Vocab::build(
        ["a", "b", "c", "d", "not", "and", "or", "(", ")"]
            .iter()
            .map(|s| s.to_string()),
        &VocabConfig {
            min_freq: 1,
            max_size: None,
            extra_specials: Vec::new(),
        },
    )
}

fn majority(labels: &[usize]) -> f64 {
    let mut counts = [0usize; 8];
    for &l in labels {
        counts[l] += 1;
    }
    *counts.iter().max().unwrap() as f64 / labels.len() as f64
}

fn quiet_config(dir: &std::path::Path, batch: usize, lr: f64, steps: u64) -> TrainConfig {
    let mut config = TrainConfig::new(dir);
    config.batch_size = batch;
    config.lr = lr;
    config.epochs = 1000;
    config.max_steps = Some(steps);
    config.clip_norm = Some(5.0);
    config.quiet = true;
    config
}

/// Pair classification: the gold-tree Tree-LSTM (SPINN-PI-NT over the formulas' brackets) on
/// logic pairs with at most two operators, with the shape of the `logic` program (`[u; v; u−v;
/// u⊙v]`, MLP, Adam 2e-3, no dropout). Measured: with `N(0, 1)` embeddings 0.838 validation
/// accuracy after 300 steps (0.843 before global-norm clipping moved onto the device, where its
/// factor is computed in f32; majority class 0.592); with the old `N(0, 0.1)`, 0.593. The bar,
/// 20 points above the majority class, is what the stall never reaches.
#[test]
fn pair_classifier_learns_logic_relations() {
    let device = Default::default();
    seed_everything::<Ad>(&device, 0);
    let vocab = logic_vocab();
    let (train_pairs, valid_pairs) = (logic_pairs(4000, 2, 1), logic_pairs(600, 2, 2));
    let d = 32;
    let embedding = TokenEmbeddingConfig::new(vocab.len(), d);
    let encoder = EncoderConfig::of_kind(EncoderKind::SpinnPiNt, d, d);
    let head = NliClassifierConfig::new(vocab.len(), d, d)
        .with_n_classes(7)
        .with_dropout(0.0);
    let model = head.init(
        encoder.init::<Ad>(&device),
        embedding.init::<Ad>(&device),
        &device,
    );
    let valid = to_data(&valid_pairs, &vocab, LogicInput::Leaves);
    let base = majority(&valid.labels);
    let task = NliTask::<Ad> {
        train: to_data(&train_pairs, &vocab, LogicInput::Leaves),
        splits: vec![("valid".into(), valid)],
        eval_batch_size: 300,
        meta: ModelMeta {
            model: ModelConfig::Nli {
                embedding,
                encoder,
                head,
            },
            vocab: vocab.tokens().to_vec(),
            labels: Relation::ALL.iter().map(|r| r.symbol().into()).collect(),
            lowercase: false,
            case_fallback: false,
        },
        device,
    };
    let dir = tempfile::tempdir().unwrap();
    let config = quiet_config(dir.path(), 32, 2e-3, 300);
    let out = train(&task, model, &config, &Default::default()).unwrap();
    let acc = out.evals["valid"].accuracy();
    assert!(
        acc >= base + 0.20,
        "valid accuracy {acc:.3} after {} steps; majority class {base:.3}",
        out.state.step
    );
}

/// Sentence classification: the gold-tree Tree-LSTM reads a formula and says whether it is
/// true under the fixed assignment a = 1, b = 0, c = 1, d = 0. Measured: with `N(0, 1)`
/// embeddings 0.987 validation accuracy after 100 steps; with the old `N(0, 0.1)`, 0.822.
#[test]
fn sentence_classifier_learns_truth_values() {
    let device = Default::default();
    seed_everything::<Ad>(&device, 0);
    let vocab = logic_vocab();
    let assignment = 0b0101;
    let data = |n: usize, seed: u64| {
        let mut rng = Lcg(seed);
        let mut d = ClassifyData::default();
        let mut transitions = Vec::new();
        for _ in 0..n {
            let ops = rng.below(3) as usize;
            let (text, table) = formula(&mut rng, ops);
            let (tree, tokens) = BinaryTree::parse(&text).expect("the fixture writes trees");
            d.sentences.push(vocab.encode(&tokens));
            transitions.push(tree.to_transitions());
            d.labels.push(((table >> assignment) & 1) as usize);
        }
        d.transitions = Some(transitions);
        d
    };
    let d = 32;
    let embedding = TokenEmbeddingConfig::new(vocab.len(), d);
    let encoder = EncoderConfig::of_kind(EncoderKind::SpinnPiNt, d, d);
    let head = SentenceClassifierConfig::new(d).with_dropout(0.0);
    let model = head.init(
        encoder.init::<Ad>(&device),
        embedding.init::<Ad>(&device),
        &device,
    );
    let valid = data(600, 2);
    let base = majority(&valid.labels);
    let task = ClassifyTask::<Ad> {
        train: data(4000, 1),
        splits: vec![("valid".into(), valid)],
        eval_batch_size: 300,
        meta: ModelMeta {
            model: ModelConfig::Classify {
                embedding,
                encoder,
                head,
            },
            vocab: vocab.tokens().to_vec(),
            labels: vec!["false".into(), "true".into()],
            lowercase: false,
            case_fallback: false,
        },
        device,
    };
    let dir = tempfile::tempdir().unwrap();
    let config = quiet_config(dir.path(), 32, 2e-3, 100);
    let out = train(&task, model, &config, &Default::default()).unwrap();
    let acc = out.evals["valid"].accuracy();
    assert!(
        acc >= 0.95,
        "valid accuracy {acc:.3} after {} steps; majority class {base:.3}",
        out.state.step
    );
}

/// Language modelling: a 2-layer ON-LSTM LM (the `ptb_lm` model, AWD-style `U(−0.1, 0.1)`
/// embeddings, no dropout) on a stream of formulas. The stream is far from uniform (a bracket
/// is always followed by a variable, `not` or another bracket), so a model that learns gets
/// well under the uniform perplexity (the vocabulary size) within 150 steps (measured: 3.80
/// against 12). The LM's embeddings follow AWD-LSTM (`U(±0.1)`), not `TokenEmbedding`.
#[test]
fn language_model_learns_formula_stream() {
    let device = Default::default();
    seed_everything::<Ad>(&device, 0);
    let mut vocab_words = vec!["<eos>".to_string()];
    vocab_words.extend(
        ["a", "b", "c", "d", "not", "and", "or", "(", ")"]
            .iter()
            .map(|s| s.to_string()),
    );
    let vocab = Vocab::build(
        vocab_words.iter().cloned(),
        &VocabConfig {
            min_freq: 1,
            max_size: None,
            extra_specials: Vec::new(),
        },
    );
    let stream = |n: usize, seed: u64| {
        let mut rng = Lcg(seed);
        let mut words = Vec::new();
        for _ in 0..n {
            let ops = rng.below(4) as usize;
            words.extend(formula(&mut rng, ops).0.split(' ').map(String::from));
            words.push("<eos>".into());
        }
        vocab.encode(&words)
    };
    let config = RnnLmConfig::new(CellKind::OnLstm, vocab.len(), 32, 64)
        .with_n_layers(2)
        .with_chunk_size(8)
        .with_dropout(0.0)
        .with_dropout_hidden(0.0)
        .with_dropout_input(0.0)
        .with_dropout_embedding(0.0)
        .with_weight_drop(0.0)
        .with_alpha(0.0)
        .with_beta(0.0);
    let model = config.init::<Ad>(&device);
    let task = LmTask::<Ad>::new(
        Batchified::new(&stream(2000, 1), 16, 20),
        Batchified::new(&stream(200, 2), 4, 20),
        0.0,
        0.0,
        serde_json::Value::Null,
        device,
    );
    let dir = tempfile::tempdir().unwrap();
    let mut train_config = quiet_config(dir.path(), 1, 3e-3, 150);
    train_config.batch_size = 1;
    let out = train(&task, model, &train_config, &Default::default()).unwrap();
    let ppl = out.evals["valid"].extra["perplexity"];
    let uniform = vocab.len() as f64;
    assert!(
        ppl < 0.45 * uniform,
        "valid perplexity {ppl:.2} after {} steps; uniform {uniform}",
        out.state.step
    );
}
