//! Helpers the example programs share.

use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arbor_data::tree::BinaryTree;
use arbor_data::vocab::{load_text_vectors, Vocab};
use arbor_encoders::{Decisions, Encoder, EncoderInput, EncoderKind, SentenceEncoder};
use arbor_heads::{NliClassifierConfig, SentenceBatch, TokenEmbedding, TokenEmbeddingConfig};
use arbor_tasks::{
    ClassificationTask, Classifier, ClassifierKind, ClassifyData, Examples, ModelConfig, NliData,
};
use arbor_train::{seed_everything, train_on, Task, TrainOutcome};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;

use crate::result::RunResult;

/// The checkpoint to load from a run directory (or a checkpoint file): `best.ckpt` when it
/// exists, else `last.ckpt`.
pub fn checkpoint_in(path: &Path) -> Result<PathBuf> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    for name in ["best.ckpt", "last.ckpt"] {
        let p = path.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "no checkpoint in {} (expected best.ckpt or last.ckpt; train first, or pass --checkpoint)",
        path.display()
    )
}

/// The word embedding: random `N(0, init_std²)` with `<pad>` and `<unk>` at zero, or from
/// pretrained vectors (whose width wins).
pub fn embedding<B: ArborBackend>(
    vocab: &Vocab,
    d_embed: usize,
    init_std: f64,
    glove: Option<&Path>,
    device: &B::Device,
) -> Result<(TokenEmbeddingConfig, TokenEmbedding<B>)> {
    match glove {
        None => {
            let config = TokenEmbeddingConfig::new(vocab.len(), d_embed).with_init_std(init_std);
            // `<pad>` and `<unk>` start at zero: `<unk>` never occurs in a vocabulary built from
            // the training data, so its row would stay at its random start (docs/init.md).
            let specials: Vec<usize> = [arbor_data::vocab::PAD, arbor_data::vocab::UNK]
                .iter()
                .filter_map(|t| vocab.get(t))
                .map(|id| id as usize)
                .collect();
            let e = config.init(device).with_zero_rows(&specials);
            Ok((config, e))
        }
        Some(path) => {
            let vectors = load_text_vectors(path, vocab, 0.1, 0)
                .with_context(|| format!("loading vectors from {}", path.display()))?;
            eprintln!(
                "{}: {} of {} vocabulary words covered ({:.1}%), width {}",
                path.display(),
                vectors.coverage.exact + vectors.coverage.lowercase,
                vocab.len(),
                100.0 * vectors.coverage.fraction(),
                vectors.dim
            );
            let config = TokenEmbeddingConfig::new(vocab.len(), vectors.dim);
            let e = config.init_pretrained(vectors.data, device);
            Ok((config, e))
        }
    }
}

/// Splits raw text into tokens the way the corpora are tokenised: on white space, with
/// punctuation at word edges split off.
pub fn tokenize(text: &str, lowercase: bool) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let word = if lowercase {
            word.to_lowercase()
        } else {
            word.to_string()
        };
        let start = word
            .find(|c: char| c.is_alphanumeric())
            .unwrap_or(word.len());
        let end = word
            .rfind(|c: char| c.is_alphanumeric())
            .map_or(start, |i| {
                i + word[i..].chars().next().map_or(1, char::len_utf8)
            });
        out.extend(word[..start].chars().map(String::from));
        if start < end {
            out.push(word[start..end].to_string());
        }
        if end < word.len() && end >= start {
            out.extend(word[end..].chars().map(String::from));
        }
    }
    out
}

/// The tree an encoder builds for one sentence (argmax decisions), or `None` when it builds
/// none.
pub fn parse_one<B: ArborBackend>(
    embedding: &TokenEmbedding<B>,
    encoder: &Encoder<B>,
    ids: &[u32],
    device: &B::Device,
) -> Option<BinaryTree> {
    let batch = SentenceBatch::<B>::from_ids(&[ids], 0, device);
    let x = embedding.forward(batch.ids);
    let out = encoder.encode(EncoderInput::new(x, batch.lengths), Decisions::Argmax);
    out.trees.and_then(|mut t| t.pop())
}

/// `--parse SENTENCE` of a trained classifier: tokenizes the sentence as the checkpoint says
/// (`lowercase`), and prints the tree the encoder builds for it, or that it builds none.
///
/// # Errors
/// When the sentence has no words.
pub fn print_parse<B: ArborBackend>(
    embedding: &TokenEmbedding<B>,
    encoder: &Encoder<B>,
    meta: &arbor_tasks::ModelMeta,
    vocab: &Vocab,
    sentence: &str,
    device: &B::Device,
) -> Result<()> {
    let words = tokenize(sentence, meta.lowercase);
    if words.is_empty() {
        bail!("--parse: the sentence has no words");
    }
    let ids = vocab.encode_with(&words, meta.case_fallback);
    match parse_one(embedding, encoder, &ids, device) {
        Some(tree) => print_tree("tree", &tree, &words),
        None => println!("the {} encoder builds no tree", meta.model.encoder().kind()),
    }
    Ok(())
}

/// Prints trees for people: bracketed and as an indented drawing.
pub fn print_tree(title: &str, tree: &BinaryTree, words: &[String]) {
    // Words come from the user's input: control characters (ESC, BEL, a terminal's set-title
    // sequence) are printed escaped, never sent to the terminal.
    let words: Vec<String> = words.iter().map(|w| printable(w)).collect();
    println!("{title}: {}", tree.to_bracketed(&words));
    for line in tree.to_ascii(&words).lines() {
        println!("    {line}");
    }
}

/// `text` with every control character written as an escape (`\u{1b}`, `\n`), the rest as is.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// How a program turns words into vocabulary ids: its own convention when training, the
/// checkpoint's ([`WordLookup::of`]) when evaluating one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordLookup {
    /// Lower-case every word first.
    pub lowercase: bool,
    /// A missing word is tried lower-cased, then upper-cased, before `<unk>`
    /// (`Vocab::id_case_fallback`; imported SPINN vocabularies).
    pub case_fallback: bool,
}

impl WordLookup {
    /// A program's own convention: lower-casing or not, no fallback.
    pub fn plain(lowercase: bool) -> WordLookup {
        WordLookup {
            lowercase,
            case_fallback: false,
        }
    }

    /// The convention a checkpoint records.
    pub fn of(meta: &arbor_tasks::ModelMeta) -> WordLookup {
        WordLookup {
            lowercase: meta.lowercase,
            case_fallback: meta.case_fallback,
        }
    }

    /// Ids of a sentence's words.
    pub fn encode(&self, vocab: &Vocab, tokens: &[String]) -> Vec<u32> {
        vocab.encode_with(&words(tokens, self.lowercase), self.case_fallback)
    }
}

/// A sentence's words, lower-cased when `lowercase` is set.
pub fn words(tokens: &[String], lowercase: bool) -> Vec<String> {
    if lowercase {
        tokens.iter().map(|t| t.to_lowercase()).collect()
    } else {
        tokens.to_vec()
    }
}

/// Before training an encoder that follows gold trees (SPINN): checks that `transitions` exist
/// and fit `sentences` (one valid sequence of `2n − 1` steps per sentence of `n` tokens).
/// `what` names the data in the error, e.g. `"valid premises"`. Other encoders pass.
pub fn check_gold_transitions(
    kind: arbor_encoders::EncoderKind,
    what: &str,
    sentences: &[Vec<u32>],
    transitions: Option<&[Vec<arbor_data::tree::Transition>]>,
) -> Result<()> {
    if !kind.needs_transitions() {
        return Ok(());
    }
    let Some(ts) = transitions else {
        bail!("{what}: the {kind} encoder needs gold trees (transitions), and this data has none");
    };
    let lengths: Vec<usize> = sentences.iter().map(Vec::len).collect();
    arbor_encoders::spinn::check_batch_transitions(&lengths, ts)
        .with_context(|| format!("{what}: gold transitions do not fit the sentences"))
}

/// Word-embedding scale of the Transformer encoders when `--embed-init-std` is not given (the
/// encoder registry's, [`EncoderKind::embed_init_std`]).
pub use arbor_encoders::TRANSFORMER_EMBED_INIT_STD;

/// The default word-embedding scale for `encoder` in a program whose default is
/// `program_default`: the encoder's own ([`EncoderKind::embed_init_std`]: the Transformers'
/// [`TRANSFORMER_EMBED_INIT_STD`]) where it has one, else the program's (its reference code's).
pub fn embed_std_for(encoder: EncoderKind, program_default: f64) -> f64 {
    encoder.embed_init_std().unwrap_or(program_default)
}

/// The word embedding the training flags describe (`--embed-dim`, `--embed-init-std` with the
/// program's `default_std`, `--glove`) and the encoder configuration over its width.
fn embedding_and_encoder<B: ArborBackend>(
    a: &crate::cli::TrainArgs,
    vocab: &Vocab,
    default_std: f64,
    device: &B::Device,
) -> Result<(
    TokenEmbeddingConfig,
    TokenEmbedding<B>,
    arbor_encoders::EncoderConfig,
)> {
    let d_embed = a.embed_dim.unwrap_or(a.dim);
    let std = a
        .embed_init_std
        .unwrap_or_else(|| embed_std_for(a.encoder, default_std));
    let (emb_config, emb) = embedding::<B>(vocab, d_embed, std, a.glove.as_deref(), device)?;
    let enc_config = a.encoder_config(emb_config.d_embed);
    Ok((emb_config, emb, enc_config))
}

/// The metadata saved beside a classifier.
fn model_meta(
    model: ModelConfig,
    vocab: &Vocab,
    labels: Vec<String>,
    lookup: WordLookup,
) -> arbor_tasks::ModelMeta {
    arbor_tasks::ModelMeta {
        model,
        vocab: vocab.tokens().to_vec(),
        labels,
        lowercase: lookup.lowercase,
        case_fallback: lookup.case_fallback,
    }
}

/// What a classification program tells [`classification_task`] about its labels and words.
#[derive(Debug, Clone)]
pub struct Labels {
    /// Label names, id order.
    pub names: Vec<String>,
    /// How words become ids (recorded in the checkpoint).
    pub lookup: WordLookup,
    /// The program's default `--embed-init-std`.
    pub default_embed_std: f64,
}

/// The examples of a classification program: pairs ([`NliData`]) or single sentences
/// ([`ClassifyData`]), with the classifier that reads them.
pub trait ProgramData: Examples + Sized {
    /// The configuration of the classifier that reads these examples: `embedding` and
    /// `encoder` under the MLP head the shared training flags describe (`--mlp-dim`,
    /// `--dropout`), with `n_classes` classes over `vocab`.
    fn model_config(
        a: &crate::cli::TrainArgs,
        vocab: &Vocab,
        embedding: TokenEmbeddingConfig,
        encoder: arbor_encoders::EncoderConfig,
        n_classes: usize,
    ) -> ModelConfig;

    /// Checks that the gold trees fit the sentences when `kind` follows them
    /// ([`check_gold_transitions`]); `what` names the data in the error.
    fn check_gold(&self, kind: arbor_encoders::EncoderKind, what: &str) -> Result<()>;
}

impl ProgramData for NliData {
    fn model_config(
        a: &crate::cli::TrainArgs,
        vocab: &Vocab,
        embedding: TokenEmbeddingConfig,
        encoder: arbor_encoders::EncoderConfig,
        n_classes: usize,
    ) -> ModelConfig {
        let head =
            NliClassifierConfig::new(vocab.len(), embedding.d_embed, a.mlp_dim.unwrap_or(a.dim))
                .with_n_classes(n_classes)
                .with_dropout(a.dropout);
        ModelConfig::Nli {
            embedding,
            encoder,
            head,
        }
    }

    fn check_gold(&self, kind: arbor_encoders::EncoderKind, what: &str) -> Result<()> {
        let (left, right) = match &self.transitions {
            Some((l, r)) => (Some(&l[..]), Some(&r[..])),
            None => (None, None),
        };
        check_gold_transitions(kind, &format!("{what} (left)"), &self.premises, left)?;
        check_gold_transitions(kind, &format!("{what} (right)"), &self.hypotheses, right)
    }
}

impl ProgramData for ClassifyData {
    fn model_config(
        a: &crate::cli::TrainArgs,
        _vocab: &Vocab,
        embedding: TokenEmbeddingConfig,
        encoder: arbor_encoders::EncoderConfig,
        n_classes: usize,
    ) -> ModelConfig {
        let head = arbor_heads::SentenceClassifierConfig::new(a.mlp_dim.unwrap_or(a.dim))
            .with_n_classes(n_classes)
            .with_dropout(a.dropout);
        ModelConfig::Classify {
            embedding,
            encoder,
            head,
        }
    }

    fn check_gold(&self, kind: arbor_encoders::EncoderKind, what: &str) -> Result<()> {
        check_gold_transitions(kind, what, &self.sentences, self.transitions.as_deref())
    }
}

/// Builds the classifier of `D`'s examples over `vocab` from the shared training flags
/// (embedding, encoder, MLP head with one class per label; [`ModelConfig::init_with_embedding`]),
/// with the metadata saved beside it.
///
/// # Errors
/// When `--glove` vectors cannot be read.
fn program_model<B: ArborBackend, D: ProgramData>(
    a: &crate::cli::TrainArgs,
    vocab: &Vocab,
    labels: &Labels,
    device: &B::Device,
) -> Result<(D::Model<B>, arbor_tasks::ModelMeta)> {
    let (embedding, emb, encoder) =
        embedding_and_encoder::<B>(a, vocab, labels.default_embed_std, device)?;
    let config = D::model_config(a, vocab, embedding, encoder, labels.names.len());
    let model = config
        .init_with_embedding(emb, device)
        .into_kind::<D::Model<B>>()?;
    let meta = model_meta(config, vocab, labels.names.clone(), labels.lookup);
    Ok((model, meta))
}

/// The shared start of every classification program (logic, SNLI, SST-2, ListOps): seeds the
/// run with `--seed`, checks that gold trees fit every split when the encoder follows them,
/// builds the classifier over `vocab` and the engine task over `train` and the evaluation
/// `splits` (the first selects the model), evaluated 256 examples at a time.
pub fn classification_task<B: ArborAutodiffBackend, D: ProgramData>(
    a: &crate::cli::TrainArgs,
    vocab: &Vocab,
    labels: &Labels,
    train: D,
    splits: Vec<(String, D)>,
    device: &B::Device,
) -> Result<(D::Model<B>, ClassificationTask<B, D>)> {
    seed_everything::<B>(device, a.engine.seed);
    train.check_gold(a.encoder, "train")?;
    for (name, data) in &splits {
        data.check_gold(a.encoder, name)?;
    }
    let (model, meta) = program_model::<B, D>(a, vocab, labels, device)?;
    // With --force the engine's own check decides (settings that leave the weights' shapes
    // alone, such as dropout, then resume).
    if a.engine.resume && !a.engine.force {
        check_resumed_model(&a.engine.out.join("last.ckpt"), &meta)?;
    }
    if !a.skip_memory_check {
        let spec = arbor_train::device::resolve(&a.device)?;
        if let Some(available) = spec.available_memory() {
            arbor_tasks::check_training_memory(
                &meta.model,
                &train.lengths(),
                a.engine.batch_size,
                available,
            )
            .map_err(anyhow::Error::msg)?;
        }
    }
    let task = ClassificationTask {
        train,
        splits,
        eval_batch_size: 256,
        meta,
        device: device.clone(),
    };
    Ok((model, task))
}

/// Refuses to resume `last` with a model other than the one it holds (another encoder, width or
/// vocabulary): its weights could not be loaded, and Burn's loader would fail on them with a
/// message about records, not flags.
fn check_resumed_model(last: &Path, now: &arbor_tasks::ModelMeta) -> Result<()> {
    if !last.is_file() {
        return Ok(());
    }
    let saved = checkpoint_meta(last)?;
    let (was, is) = (
        serde_json::to_value(&saved.model)?,
        serde_json::to_value(&now.model)?,
    );
    if let Some(path) = first_difference(&was, &is, String::new()) {
        bail!(
            "{}: holds a {} model, and these flags build a different {} model (first difference \
             at `{path}`): resume with the flags it was trained with (--force to try anyway), \
             or pass --overwrite to start a new run there",
            last.display(),
            saved.model.encoder().kind(),
            now.model.encoder().kind(),
        );
    }
    if saved.vocab.len() != now.vocab.len() {
        bail!(
            "{}: holds a model over a vocabulary of {} words, and this data gives {}: resume \
             on the data it was trained on, or pass --overwrite",
            last.display(),
            saved.vocab.len(),
            now.vocab.len()
        );
    }
    Ok(())
}

/// The first JSON path where `a` and `b` differ (`None`: equal).
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, at: String) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, here),
                    _ => Some(here),
                }
            })
        }
        _ if a == b => None,
        _ => Some(if at.is_empty() {
            "(the whole model)".into()
        } else {
            at
        }),
    }
}

/// The checkpoint to score after a run: `best.ckpt`, unless the last evaluation of the
/// selection split `split` beat the best metric without being considered for it (the final
/// evaluation of a run stopped by `--max-steps` or `--max-minutes` only reports, to keep the
/// schedule of a resumed run unchanged), in which case `None`: the last weights are the better
/// ones. Accuracy is the selection metric of every classification program.
pub fn scored_checkpoint<'a, M>(
    outcome: &'a arbor_train::TrainOutcome<M>,
    split: &str,
) -> Option<&'a Path> {
    let best = outcome.best_checkpoint.as_deref()?;
    match (outcome.evals.get(split), outcome.state.best_metric) {
        (Some(last), Some(best_metric)) if last.accuracy() > best_metric => None,
        _ => Some(best),
    }
}

/// The model to report after training: the best-on-validation checkpoint when the run wrote
/// one (loaded into `last`'s structure), else `last`; with a description of which it is.
///
/// # Errors
/// When the best checkpoint cannot be read.
pub fn best_or_last<B: ArborBackend, M: burn::module::Module<B>>(
    last: M,
    best: Option<&Path>,
    device: &B::Device,
) -> Result<(M, String)> {
    Ok(match best {
        Some(best) => (
            arbor_train::load_model(last, best, device)
                .with_context(|| format!("loading {}", best.display()))?
                .0,
            format!("best on valid, {}", best.display()),
        ),
        None => (last, "last model".to_string()),
    })
}

/// Rebuilds a trained classifier of kind `M` from a checkpoint file, with its metadata and
/// vocabulary ([`arbor_tasks::load_classifier`]).
///
/// # Errors
/// When the file cannot be read, holds the other kind of classifier, or its weights do not fit.
pub fn load_classifier<B: ArborBackend, M: ClassifierKind<B> + burn::module::Module<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<(M, arbor_tasks::ModelMeta, Vocab)> {
    let (model, meta) = arbor_tasks::load_classifier::<B, M>(path, device)?;
    let vocab = Vocab::from_tokens(meta.vocab.clone())?;
    Ok((model, meta, vocab))
}

/// A trained classifier, as [`load_checkpoint`] reads it.
#[derive(Debug)]
pub struct Trained<M> {
    /// The checkpoint file it was read from.
    pub path: PathBuf,
    /// The model with its trained weights.
    pub model: M,
    /// Its metadata.
    pub meta: arbor_tasks::ModelMeta,
    /// Its vocabulary.
    pub vocab: Vocab,
}

/// A trained classifier of kind `M`, as `--eval-only`, `--parse` and `listops eval` load one:
/// from `checkpoint`, a checkpoint file or a run directory ([`checkpoint_in`]), with
/// [`load_classifier`].
///
/// # Errors
/// When there is no checkpoint there, or it cannot be loaded as `M`.
pub fn load_checkpoint<B: ArborBackend, M: ClassifierKind<B> + burn::module::Module<B>>(
    checkpoint: &Path,
    device: &B::Device,
) -> Result<Trained<M>> {
    let path = checkpoint_in(checkpoint)?;
    let (model, meta, vocab) = load_classifier(&path, device)?;
    Ok(Trained {
        path,
        model,
        meta,
        vocab,
    })
}

/// Rebuilds a trained sentence classifier (`sst`, `listops`) from a checkpoint file, with its
/// metadata and vocabulary ([`load_classifier`]).
///
/// # Errors
/// When the file cannot be read, holds a pair classifier, or its weights do not fit.
pub fn load_sentence_classifier<B: ArborBackend>(
    path: &Path,
    device: &B::Device,
) -> Result<(
    arbor_heads::SentenceClassifier<B, Encoder<B>>,
    arbor_tasks::ModelMeta,
    Vocab,
)> {
    load_classifier(path, device)
}

/// The model metadata stored in a checkpoint file ([`arbor_tasks::ModelMeta::load`]).
///
/// # Errors
/// When the file cannot be read or holds no arbor classifier metadata.
pub fn checkpoint_meta(path: &Path) -> Result<arbor_tasks::ModelMeta> {
    Ok(arbor_tasks::ModelMeta::load(path)?)
}

/// How a classification program closes a training run: see [`train_and_report`].
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    /// The program, as `result.json` records it (`logic`, `snli`, `sst`, `listops`).
    pub program: &'a str,
    /// Its training flags.
    pub args: &'a crate::cli::TrainArgs,
    /// Print every split's last evaluation before scoring (`snli`, `sst`).
    pub print_evals: bool,
    /// The selection split after which the closing `checkpoints:` line names the best
    /// checkpoint too (`snli`); `None`: the line names the last checkpoint only.
    pub best_on: Option<&'a str>,
}

impl<'a> RunEnd<'a> {
    /// The end of a run of `program` with `args`: no evaluations printed first, the last
    /// checkpoint named alone.
    pub fn new(program: &'a str, args: &'a crate::cli::TrainArgs) -> Self {
        Self {
            program,
            args,
            print_evals: false,
            best_on: None,
        }
    }

    /// Prints every split's last evaluation first ([`RunEnd::print_evals`]).
    pub fn with_evals(self) -> Self {
        Self {
            print_evals: true,
            ..self
        }
    }

    /// Names the best checkpoint, selected on `split`, in the `checkpoints:` line
    /// ([`RunEnd::best_on`]).
    pub fn with_best_on(self, split: &'a str) -> Self {
        Self {
            best_on: Some(split),
            ..self
        }
    }
}

/// The scoring of [`train_and_report`] for a program with no tables of its own: every split of
/// `splits`, whole ([`RunResult::score_splits`]).
pub fn score_every_split<'t, B: ArborBackend, M: Classifier<B>, D: Examples, O>(
    splits: &'t [(String, D)],
    score_parses: bool,
    device: &'t B::Device,
) -> impl FnOnce(&M, &str, &TrainOutcome<O>, &mut RunResult) -> Result<()> + 't {
    move |model, which, _, result| {
        result.score_splits(model, splits, score_parses, which, device);
        Ok(())
    }
}

/// The evaluation-mode model of a task trained on `Autodiff<B>`.
type Inner<B, T> = <<T as Task<Autodiff<B>>>::Model as AutodiffModule<Autodiff<B>>>::InnerModule;

/// Trains `model` on `task` with the program's flags ([`train_on`]) and reports the run, the
/// part every classification program shares: a blank line; every split's last evaluation when
/// `end.print_evals`; the weights to score ([`best_or_last`] of [`scored_checkpoint`] on
/// `valid`), which `score` evaluates, prints and records in the [`RunResult`] (with which
/// weights they are, and the training run); `result: OUT/result.json` once written; the trees
/// `show` draws with those weights; and `checkpoints: …`.
///
/// # Errors
/// When training fails, the best checkpoint cannot be read, `score` fails, or the result
/// cannot be written.
pub fn train_and_report<B, T>(
    end: RunEnd<'_>,
    task: &T,
    model: T::Model,
    device: &B::Device,
    score: impl FnOnce(&Inner<B, T>, &str, &TrainOutcome<T::Model>, &mut RunResult) -> Result<()>,
    show: impl FnOnce(&Inner<B, T>, &TrainOutcome<T::Model>),
) -> Result<()>
where
    B: ArborBackend,
    T: Task<Autodiff<B>>,
{
    let a = end.args;
    let outcome = train_on(
        task,
        model,
        &a.train_config(),
        &a.engine.workers::<Autodiff<B>>(device),
    )?;
    println!();
    if end.print_evals {
        for (split, r) in &outcome.evals {
            println!(
                "{split:>8} accuracy {:.4} ({} / {})",
                r.accuracy(),
                r.correct,
                r.total
            );
        }
    }
    let (best, which) = best_or_last(
        outcome.model.valid(),
        scored_checkpoint(&outcome, "valid"),
        device,
    )?;
    let mut result = RunResult::new(end.program, a, &outcome);
    score(&best, &which, &outcome, &mut result)?;
    println!("result: {}", result.write(&a.engine.out)?.display());
    show(&best, &outcome);
    let last = outcome.last_checkpoint.display();
    match end.best_on {
        Some(split) => println!(
            "checkpoints: {last} (last){}",
            outcome
                .best_checkpoint
                .as_ref()
                .map(|p| format!(", {} (best on {split})", p.display()))
                .unwrap_or_default()
        ),
        None => println!("checkpoints: {last}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_printed_escaped() {
        assert_eq!(
            printable("a\u{1b}]0;pwned\u{7}b"),
            "a\\u{1b}]0;pwned\\u{7}b"
        );
        assert_eq!(printable("naïve word"), "naïve word");
    }

    #[test]
    fn word_lookup_lowercases_or_falls_back_by_case() {
        let v = Vocab::from_tokens(["<pad>", "<unk>", "dog", "NASA"].map(String::from).to_vec())
            .unwrap();
        let words: Vec<String> = ["Dog", "nasa", "cat"].map(String::from).to_vec();
        assert_eq!(WordLookup::plain(false).encode(&v, &words), vec![1, 1, 1]);
        assert_eq!(WordLookup::plain(true).encode(&v, &words), vec![2, 1, 1]);
        let port = WordLookup {
            lowercase: false,
            case_fallback: true,
        };
        assert_eq!(port.encode(&v, &words), vec![2, 3, 1]);
    }

    fn outcome(best_metric: Option<f64>, last_correct: usize) -> arbor_train::TrainOutcome<()> {
        let mut evals = std::collections::BTreeMap::new();
        evals.insert(
            "valid".to_string(),
            arbor_train::EvalReport {
                correct: last_correct,
                total: 100,
                ..Default::default()
            },
        );
        arbor_train::TrainOutcome {
            model: (),
            state: arbor_train::TrainState {
                step: 10,
                epoch: 1,
                batch_in_epoch: 0,
                lr: 1e-3,
                best_metric,
                best_step: best_metric.map(|_| 5),
                bad_evals: 0,
                elapsed_sec: 1.0,
                examples: 10,
                evals_since_best: 0,
                stopped_early: false,
                run_id: "test-run".into(),
            },
            evals,
            last_checkpoint: "out/last.ckpt".into(),
            best_checkpoint: best_metric.map(|_| "out/best.ckpt".into()),
            stopped: arbor_train::StopReason::MaxMinutes,
        }
    }

    #[test]
    fn the_last_weights_are_scored_when_their_unselected_evaluation_is_better() {
        let best = Some(Path::new("out/best.ckpt"));
        assert_eq!(scored_checkpoint(&outcome(Some(0.80), 80), "valid"), best);
        assert_eq!(scored_checkpoint(&outcome(Some(0.80), 70), "valid"), best);
        assert_eq!(scored_checkpoint(&outcome(Some(0.80), 81), "valid"), None);
        assert_eq!(scored_checkpoint(&outcome(None, 81), "valid"), None);
        assert_eq!(scored_checkpoint(&outcome(Some(0.80), 81), "test"), best);
    }

    #[test]
    fn transformers_get_unit_scale_embeddings_by_default() {
        assert_eq!(embed_std_for(EncoderKind::Transformer, 0.01), 1.0);
        assert_eq!(embed_std_for(EncoderKind::TransformerFastTrees, 0.01), 1.0);
        assert_eq!(embed_std_for(EncoderKind::Gumbel, 0.01), 0.01);
        assert_eq!(embed_std_for(EncoderKind::Lstm, 1.0), 1.0);
    }
}
