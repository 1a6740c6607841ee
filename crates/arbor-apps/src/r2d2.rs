//! `cargo run --release --example r2d2 -- <pretrain|eval|parse>`: R2D2 pretraining on
//! WikiText-2 (bidirectional LM), pseudo-perplexity evaluation, and unsupervised parsing.

use arbor_cells::ArborBackend;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arbor_data::metrics::PseudoPerplexity;
use arbor_data::parseval::load_gold;
use arbor_data::tree::{BinaryTree, TreePrep};
use arbor_data::wordpiece::{
    save_vocab_txt, train_wordpiece, WordPieceTokenizer, WordPieceTrainConfig,
};
use arbor_encoders::r2d2::{
    word_tree, CompositionConfig, R2d2Config, R2d2Lm, R2d2LmConfig, R2d2SpecialIds, TreeRule,
};
use arbor_encoders::Decisions;
use arbor_train::{load_model_from, seed_everything, train_on, CheckpointFile, OptimizerKind};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use clap::{Args, Parser, Subcommand};

use crate::cli::EngineArgs;
use arbor_tasks::{R2d2LmTask, R2d2Meta};
use arbor_train::device::{resolve, run_on, BackendJob};

/// R2D2: pretraining, pseudo-perplexity, parsing.
#[derive(Debug, Clone, Parser)]
#[command(name = "r2d2", about = "R2D2: pretrain, evaluate (PPPL) and parse")]
pub struct R2d2Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Pretrain the bidirectional LM on WikiText-2-style text.
    Pretrain(Box<PretrainArgs>),
    /// Pseudo-perplexity of a checkpoint on a text file.
    Eval(EvalArgs),
    /// Trees for a file of sentences, or for the sentences of a gold treebank.
    Parse(ParseArgs),
}

/// Flags of `pretrain`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("lr", |a| a.default_value("5e-4")),
    mut_arg("weight_decay", |a| a.default_value("0.01")),
    mut_arg("clip", |a| a.default_value("1.0")),
    mut_arg("epochs", |a| a.default_value("1")),
    mut_arg("eval_every", |a| a.default_value("200")),
    mut_arg("out", |a| a.default_value("runs/r2d2")),
    mut_arg("warmup_steps", |a| a.default_value("100").visible_alias("warmup")),
)]
pub struct PretrainArgs {
    /// Training text (WikiText-2 format: ` = Heading = ` lines, empty lines, paragraphs).
    #[arg(long, default_value = "../shared/data/wikitext2/train.txt")]
    pub train: PathBuf,
    /// Validation text (same format); the LM loss on it selects the best checkpoint.
    #[arg(long, default_value = "../shared/data/wikitext2/valid.txt")]
    pub valid: PathBuf,
    /// A WordPiece `vocab.txt`; without it a vocabulary is trained on the training text.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Size of the trained vocabulary.
    #[arg(long, default_value_t = 8000)]
    pub vocab_size: usize,
    /// How the texts become sentences: arbor's, or the R2D2 reference's (with `--vocab`).
    #[arg(long, value_enum, default_value_t = Prep::Arbor)]
    pub prep: Prep,
    /// Model width.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Transformer layers.
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Pruning window m.
    #[arg(long, default_value_t = 4)]
    pub window: usize,
    /// Exhaustive CKY instead of pruned induction.
    #[arg(long)]
    pub no_pruning: bool,
    /// Keep training sentences of 2..=this many word pieces (longer ones are dropped).
    #[arg(long, default_value_t = 40)]
    pub max_len: usize,
    /// Use at most this many training sentences (0: all).
    #[arg(long, default_value_t = 0)]
    pub max_sentences: usize,
    /// Validation sentences used for model selection (0: all).
    #[arg(long, default_value_t = 500)]
    pub valid_sentences: usize,
    /// Cap on padded tokens per batch (length-bucketed batches).
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
    /// The engine's flags (batch, epochs, learning rate, checkpoints…).
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl PretrainArgs {
    /// The model configuration these flags describe, over a vocabulary of `vocab_size`.
    pub fn model_config(&self, vocab_size: usize) -> R2d2LmConfig {
        let composition = CompositionConfig::new(self.dim)
            .with_n_layers(self.layers)
            .with_n_heads(self.heads);
        R2d2LmConfig::new(vocab_size).with_encoder(
            R2d2Config::new(self.dim, composition)
                .with_window(self.window)
                .with_pruning(!self.no_pruning),
        )
    }

    /// Checks every flag before any work, with errors naming the flag and the rule.
    pub fn check(&self) -> Result<()> {
        crate::cli::check_engine(&self.engine)?;
        if self.vocab.is_none() && self.vocab_size == 0 {
            bail!("--vocab-size must be at least 1");
        }
        if self.prep == Prep::Reference && self.vocab.is_none() {
            bail!(
                "--prep reference needs --vocab: the reference's sentence splitting counts word \
                 pieces of its BERT-uncased vocab.txt (e.g. ../shared/data/wordpiece/vocab.txt)"
            );
        }
        if self.max_len < 2 || self.max_tokens == 0 {
            bail!("--max-len must be at least 2 and --max-tokens at least 1");
        }
        self.model_config(self.vocab_size.max(1))
            .validate()
            .map_err(|e| {
                anyhow::anyhow!(
                    "invalid flags: {}",
                    e.named(&[
                        ("d_model", "--dim"),
                        ("d_input", "--dim"),
                        ("n_layers", "--layers"),
                        ("n_heads", "--heads"),
                        ("window", "--window"),
                        ("vocab_size", "--vocab-size"),
                    ])
                )
            })?;
        Ok(())
    }
}

/// How WikiText becomes sentences (docs/results.md, "R2D2").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Prep {
    /// arbor's: headings and empty lines dropped, paragraphs split after `.`, `?` and `!`,
    /// `@-@` written `-` ([`arbor_data::readers::wikitext_sentences`]).
    Arbor,
    /// The R2D2 reference's: every non-blank line, headings included, split after ` . ` only
    /// when it has 128 or more word pieces, `@-@` kept
    /// ([`arbor_data::readers::wikitext_sentences_reference`]); training keeps sentences of
    /// more than 2 pieces (its `--min_len 2`). Needs `--vocab` (the reference uses BERT-uncased's
    /// `vocab.txt`, e.g. `../shared/data/wordpiece/vocab.txt`).
    Reference,
}

/// A count flag's parser: a whole number of at least 1 (clap names the flag in its error).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Pieces at which the reference splits a line into sentences.
pub const REFERENCE_SPLIT_AT: usize = 128;

/// Sentences of a WikiText text under `prep`, pieces counted with `tok`.
fn sentences(prep: Prep, text: &str, tok: &WordPieceTokenizer) -> Vec<String> {
    match prep {
        Prep::Arbor => arbor_data::readers::wikitext_sentences(text),
        Prep::Reference => arbor_data::readers::wikitext_sentences_reference(
            text,
            // An encoding error is reported when the sentence is encoded; here it splits.
            |l| tok.encode(l).map_or(usize::MAX, |e| e.ids.len()),
            REFERENCE_SPLIT_AT,
        ),
    }
}

/// Flags of `eval`.
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Checkpoint (`best.ckpt` or `last.ckpt` of a pretraining run).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Text to evaluate (WikiText-2 format).
    #[arg(long, default_value = "../shared/data/wikitext2/valid.txt")]
    pub text: PathBuf,
    /// Skip sentences longer than this many word pieces (0: none).
    #[arg(long, default_value_t = 0)]
    pub max_len: usize,
    /// How the text becomes sentences: arbor's, or the R2D2 reference's (every non-blank line,
    /// headings included, as its `lm_eval_buckets.py` scores them).
    #[arg(long, value_enum, default_value_t = Prep::Arbor)]
    pub prep: Prep,
    /// Evaluate at most this many sentences (0: all), taken in file order.
    #[arg(long, default_value_t = 0)]
    pub max_sentences: usize,
    /// Sentences whose contexts are encoded together.
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    pub batch_size: usize,
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
}

/// Flags of `parse`.
#[derive(Debug, Clone, Args)]
pub struct ParseArgs {
    /// Checkpoint.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Sentences, one per line, words separated by spaces.
    #[arg(long, conflicts_with = "gold")]
    pub input: Option<PathBuf>,
    /// A gold treebank (one tree per line, e.g. `wsj_gold_trees/22.auto.clean`): parse its
    /// sentences after the evaluation preprocessing (punctuation removed), one output line per
    /// kept sentence, at word level, ready for `arbor-parse-f1 --gold FILE --pred OUTPUT`.
    #[arg(long)]
    pub gold: Option<PathBuf>,
    /// Word-level trees (pieces of a word kept together, then collapsed).
    #[arg(long)]
    pub word_level: bool,
    /// How trees are read off the chart: the R2D2 reference's `get_token_tree` (each cell's
    /// best split as ranked when it was composed) or arbor's (the best split that cuts no
    /// terminal merged by pruning); docs/r2d2.md, "Tree recovery". Default: the rule the
    /// checkpoint records (reference for imported checkpoints, arbor for arbor-trained ones).
    #[arg(long, value_parser = crate::cli::kind_parser::<TreeRule>())]
    pub tree_rule: Option<TreeRule>,
    /// Output file (default: stdout).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Sentences per batch.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    pub batch_size: usize,
    /// Longest sentence parsed, in word pieces: a longer one is refused before parsing starts,
    /// naming it (the chart's time and memory grow with the length; a 5,000-token line took
    /// minutes). The longest WSJ sentence is about 200 pieces.
    #[arg(long, default_value_t = 512, value_parser = at_least_one)]
    pub max_len: usize,
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Piece ids of `sentences`, keeping those of `min_len..=max_len` pieces (`max_len` 0: no cap).
fn encode_all(
    tok: &WordPieceTokenizer,
    sentences: &[String],
    min_len: usize,
    max_len: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut out = Vec::new();
    for s in sentences {
        let ids = tok.encode(s)?.ids;
        if ids.len() >= min_len && (max_len == 0 || ids.len() <= max_len) {
            out.push(ids);
        }
    }
    Ok(out)
}

struct PretrainJob {
    args: PretrainArgs,
}

impl BackendJob for PretrainJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let a = &self.args;
        let train_text = read_text(&a.train)?;
        let valid_text = read_text(&a.valid)?;
        // This run's output folder (created by the claim, after the data were read), held
        // from before the vocabulary is written until the result is (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        // arbor's sentences can train the vocabulary; the reference's need the given one first
        // (`check` requires `--vocab` for them), so they are made after it.
        let arbor_sents =
            (a.prep == Prep::Arbor).then(|| arbor_data::readers::wikitext_sentences(&train_text));
        let vocab_path = a.engine.out.join("vocab.txt");
        let (tok, vocab) = match &a.vocab {
            Some(p) => {
                let tok = WordPieceTokenizer::from_vocab_file(p, true)?;
                let pieces = read_text(p)?
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>();
                (tok, pieces)
            }
            None if a.engine.resume && vocab_path.exists() => {
                let pieces = read_text(&vocab_path)?
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>();
                (WordPieceTokenizer::from_pieces(&pieces, true)?, pieces)
            }
            None => {
                eprintln!("training a WordPiece vocabulary of {} pieces", a.vocab_size);
                // R2D2's own special tokens join the usual ones, so that, as in the reference,
                // they are rows of the tied embedding (R2d2SpecialIds::from_vocab).
                let mut config = WordPieceTrainConfig {
                    vocab_size: a.vocab_size,
                    ..WordPieceTrainConfig::default()
                };
                config
                    .special_tokens
                    .extend(["[BOS]", "[EOS]", "[SUM]"].map(String::from));
                let pieces =
                    train_wordpiece(arbor_sents.iter().flatten().map(String::as_str), &config)?;
                save_vocab_txt(&pieces, &vocab_path)?;
                (WordPieceTokenizer::from_pieces(&pieces, true)?, pieces)
            }
        };
        let mut train_sents = match arbor_sents {
            Some(sents) => sents,
            None => sentences(a.prep, &train_text, &tok),
        };
        let valid_sents = sentences(a.prep, &valid_text, &tok);
        if a.max_sentences > 0 {
            train_sents.truncate(a.max_sentences);
        }
        // The reference keeps training lines of more than `--min_len 2` pieces.
        let min_len = match a.prep {
            Prep::Arbor => 2,
            Prep::Reference => 3,
        };
        let train_ids = encode_all(&tok, &train_sents, min_len, a.max_len)?;
        let mut valid_ids = encode_all(&tok, &valid_sents, min_len, a.max_len)?;
        if a.valid_sentences > 0 {
            valid_ids.truncate(a.valid_sentences);
        }
        if train_ids.is_empty() || valid_ids.is_empty() {
            bail!(
                "no training or validation sentence of {min_len}..={} pieces",
                a.max_len
            );
        }
        // [CLS], [SUM], [MASK], [BOS], [EOS] are vocabulary rows when the vocabulary has them.
        let mut model_config = a
            .model_config(tok.vocab_size())
            .with_special_ids(R2d2SpecialIds::from_vocab(&vocab));
        // A resumed run keeps the configuration its checkpoint was written with (runs from
        // before per-layer role tables and tied special tokens keep their layout).
        let last = a.engine.out.join("last.ckpt");
        if a.engine.resume && last.exists() {
            let file = CheckpointFile::load(&last)?;
            model_config = R2d2Meta::from_checkpoint(&file.meta)
                .map_err(|e| anyhow::anyhow!("{}: {e}", last.display()))?
                .model;
        }
        seed_everything::<Ad<B>>(&device, a.engine.seed);
        let model = model_config.init::<Ad<B>>(&device);
        match &model_config.special_ids {
            Some(ids) => eprintln!(
                "special tokens tied to vocabulary rows: [CLS] {}, [SUM] {}, [MASK] {}, \
                 [BOS] {}, [EOS] {}",
                ids.cls, ids.sum, ids.mask, ids.bos, ids.eos
            ),
            None => eprintln!("special tokens: separate parameters (not in the vocabulary)"),
        }
        let tokens: usize = train_ids.iter().map(Vec::len).sum();
        eprintln!(
            "R2D2 pretraining: {} training sentences ({} pieces, ≤ {} each), {} validation; \
             vocabulary {}; dim {}, {} layers, {} heads, window {}, pruning {}; device {}",
            train_ids.len(),
            tokens,
            a.max_len,
            valid_ids.len(),
            tok.vocab_size(),
            a.dim,
            a.layers,
            a.heads,
            a.window,
            !a.no_pruning,
            a.device
        );
        let task = R2d2LmTask::<Ad<B>> {
            train: train_ids,
            valid: valid_ids,
            meta: R2d2Meta {
                model: model_config,
                vocab,
                tree_rule: TreeRule::Arbor,
            },
            eval_batch: 32,
            gumbel_noise: true,
            device: device.clone(),
        };
        let mut config = a.engine.train_config(OptimizerKind::AdamW);
        config.max_tokens = Some(a.max_tokens);
        let outcome = train_on(&task, model, &config, &a.engine.workers::<Ad<B>>(&device))?;
        if let Some(r) = outcome.evals.get("valid") {
            println!(
                "valid LM loss {:.4} (perplexity of the chart-context LM {:.2}) over {} tokens",
                r.loss().unwrap_or(f64::NAN),
                r.loss().unwrap_or(f64::NAN).exp(),
                r.loss_count
            );
        }
        let _ = &task.device;
        let inner = outcome.model.valid();
        let refs: Vec<&[u32]> = task.valid.iter().take(3).map(Vec::as_slice).collect();
        let chart = inner.chart(&refs, None, Decisions::Argmax);
        for (t, ids) in chart.trees_with(task.meta.tree_rule).iter().zip(&refs) {
            let pieces: Vec<String> = ids
                .iter()
                .map(|&i| tok.id_piece(i).unwrap_or_default())
                .collect();
            println!("{}", t.to_bracketed(&pieces));
        }
        println!("checkpoints: {}", outcome.last_checkpoint.display());
        Ok(())
    }
}

/// Loads a pretraining (or imported) checkpoint: model, tokenizer, the tree rule it records.
fn load<B: ArborBackend>(
    path: &Path,
    device: &B::Device,
) -> Result<(R2d2Lm<B>, WordPieceTokenizer, TreeRule)> {
    let file = CheckpointFile::load(path)?;
    let meta = R2d2Meta::from_checkpoint(&file.meta)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let tok = WordPieceTokenizer::from_pieces(&meta.vocab, true)?;
    let (model, _) = load_model_from(meta.model.init::<B>(device), file, path, device)?;
    Ok((model, tok, meta.tree_rule))
}

struct EvalJob {
    args: EvalArgs,
}

impl BackendJob for EvalJob {
    type Output = Result<PseudoPerplexity>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<PseudoPerplexity> {
        let a = &self.args;
        let (model, tok, _) = load::<B>(&a.checkpoint, &device)?;
        let sents = sentences(a.prep, &read_text(&a.text)?, &tok);
        let mut ids: Vec<Vec<u32>> = Vec::new();
        let mut skipped = 0;
        for s in &sents {
            let p = tok.encode(s)?.ids;
            if p.is_empty() {
                continue;
            }
            if a.max_len > 0 && p.len() > a.max_len {
                skipped += 1;
                continue;
            }
            ids.push(p);
        }
        if a.max_sentences > 0 {
            ids.truncate(a.max_sentences);
        }
        let mut pppl = PseudoPerplexity::default();
        let started = std::time::Instant::now();
        for (k, chunk) in ids.chunks(a.batch_size).enumerate() {
            let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
            for nll in model.pseudo_nll(&refs) {
                pppl.add_sentence(&nll);
            }
            if k % 25 == 0 {
                eprintln!(
                    "{} sentences, {:.0} s, corpus PPPL so far {:.2}",
                    pppl.sentences,
                    started.elapsed().as_secs_f64(),
                    pppl.corpus_pppl()
                );
            }
        }
        println!(
            "{}: {} sentences, {} pieces ({} sentences over --max-len skipped)",
            a.text.display(),
            pppl.sentences,
            pppl.tokens,
            skipped
        );
        println!(
            "corpus PPPL exp(Σ NLL / Σ tokens): {:.3}",
            pppl.corpus_pppl()
        );
        println!(
            "mean over sentences of the per-sentence mean NLL (what the reference's \
             lm_eval_buckets.py prints): {:.4}, exp: {:.3}",
            pppl.mean_sentence_nll(),
            pppl.mean_sentence_nll().exp()
        );
        Ok(pppl)
    }
}

/// `eval`: pseudo-perplexity of a checkpoint on a text, printed and returned.
///
/// # Errors
/// An unreadable checkpoint or text, an unknown device.
pub fn evaluate(mut args: EvalArgs) -> Result<PseudoPerplexity> {
    args.device = resolve(&args.device)?.to_string();
    let device = args.device.clone();
    run_on(&device, EvalJob { args })?
}

struct ParseJob {
    args: ParseArgs,
}

/// Piece ids and the word index of every piece; a word that yields no piece gets `[UNK]`.
fn pieces_of_words(tok: &WordPieceTokenizer, words: &[String]) -> Result<(Vec<u32>, Vec<usize>)> {
    let wp = tok.encode_words(words)?;
    let unk = tok.piece_id("[UNK]").unwrap_or(0);
    let (mut ids, mut word_of) = (Vec::new(), Vec::new());
    let mut at = 0;
    for w in 0..words.len() {
        let start = at;
        while at < wp.ids.len() && wp.word_ids[at] == w {
            ids.push(wp.ids[at]);
            word_of.push(w);
            at += 1;
        }
        if at == start {
            ids.push(unk);
            word_of.push(w);
        }
    }
    Ok((ids, word_of))
}

impl BackendJob for ParseJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        let a = &self.args;
        let (model, tok, recorded) = load::<B>(&a.checkpoint, &device)?;
        let rule = a.tree_rule.unwrap_or(recorded);
        eprintln!(
            "tree rule: {rule:?}{}",
            if a.tree_rule.is_some() {
                " (--tree-rule)"
            } else {
                " (recorded in the checkpoint)"
            }
        );
        let (sentences, word_level): (Vec<Vec<String>>, bool) = match (&a.gold, &a.input) {
            (Some(gold), _) => {
                let g = load_gold(gold, &TreePrep::evaluation(), None)?;
                (g.sentences.into_iter().map(|s| s.words).collect(), true)
            }
            (None, Some(input)) => (
                read_text(input)?
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| l.split_whitespace().map(str::to_string).collect())
                    .collect(),
                a.word_level,
            ),
            (None, None) => bail!("give --input FILE or --gold TREEBANK"),
        };
        let mut out: Box<dyn Write> = match &a.output {
            Some(p) => Box::new(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            )),
            None => Box::new(std::io::stdout().lock()),
        };
        // Every sentence in pieces first, so that one too long stops the run before any work.
        let mut ids = Vec::with_capacity(sentences.len());
        let mut word_of = Vec::with_capacity(sentences.len());
        for (k, words) in sentences.iter().enumerate() {
            let (i, w) = pieces_of_words(&tok, words)?;
            if i.len() > a.max_len {
                let source = match (&a.gold, &a.input) {
                    (Some(p), _) | (None, Some(p)) => p.display().to_string(),
                    (None, None) => "the input".to_string(),
                };
                bail!(
                    "{source}: sentence {} has {} word pieces, over --max-len {}: raise --max-len \
                     to parse it (its chart grows with its length)",
                    k + 1,
                    i.len(),
                    a.max_len
                );
            }
            ids.push(i);
            word_of.push(w);
        }
        let started = std::time::Instant::now();
        let batches = sentences
            .chunks(a.batch_size)
            .zip(ids.chunks(a.batch_size))
            .zip(word_of.chunks(a.batch_size));
        for (k, ((chunk, ids), word_of)) in batches.enumerate() {
            let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
            let constraint = word_level.then_some(word_of);
            let trees = model
                .chart(&refs, constraint, Decisions::Argmax)
                .trees_with(rule);
            for (((t, words), piece_ids), w) in trees.iter().zip(chunk).zip(ids).zip(word_of) {
                let line = if word_level {
                    let wt: BinaryTree =
                        word_tree(t, w).context("internal: a word's pieces were split")?;
                    wt.to_bracketed(words)
                } else {
                    let pieces: Vec<String> = piece_ids
                        .iter()
                        .map(|&i| tok.id_piece(i).unwrap_or_default())
                        .collect();
                    t.to_bracketed(&pieces)
                };
                writeln!(out, "{line}")?;
            }
            if k % 20 == 0 {
                eprintln!(
                    "{} / {} sentences, {:.0} s",
                    ((k + 1) * a.batch_size).min(sentences.len()),
                    sentences.len(),
                    started.elapsed().as_secs_f64()
                );
            }
        }
        out.flush()?;
        Ok(())
    }
}

/// Runs the program.
pub fn run(args: R2d2Args) -> Result<()> {
    match args.command {
        Command::Pretrain(mut a) => {
            a.check()?;
            a.device = a.engine.main_device(&a.device)?;
            let device = a.device.clone();
            run_on(&device, PretrainJob { args: *a })?
        }
        Command::Eval(a) => evaluate(a).map(|_| ()),
        Command::Parse(mut a) => {
            a.device = resolve(&a.device)?.to_string();
            let device = a.device.clone();
            run_on(&device, ParseJob { args: a })?
        }
    }
}
