//! `cargo run --release --example ptb_lm`: word-level language models on Penn Treebank with any
//! recurrent cell, trained by arbor-train's engine with truncated BPTT; perplexity of a trained
//! model on any file (`--eval`); unsupervised parsing from its per-layer syntactic distances
//! (`--parse`), scored against gold trees. See `docs/lm.md`.

use arbor_cells::ArborBackend;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use arbor_cells::CellKind;
use arbor_data::metrics::{baseline_f1, Baseline, F1Convention, ParsingF1};
use arbor_data::parseval::load_gold;
use arbor_data::readers::{build_stream_vocab, read_token_stream};
use arbor_data::tree::{BinaryTree, DigitNorm, TextNorm, TreePrep};
use arbor_data::vocab::Vocab;
use arbor_lm::{Batchified, RnnLm, RnnLmConfig};
use arbor_tasks::{evaluate_stream, LmTask};
use arbor_train::{
    load_model_from, seed_everything, train_on, CheckpointFile, OptimizerKind, TrainConfig,
};
use burn::backend::Autodiff;
use clap::Parser;

use crate::cli::EngineArgs;
use crate::common::checkpoint_in;
use arbor_train::device::{run_on, BackendJob};

/// Train (or evaluate, or parse with) a recurrent language model on PTB.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "ptb_lm",
    about = "Word-level language models on PTB with any recurrent cell",
    mut_arg("batch_size", |a| a.default_value("20").help("Parallel streams of the batchified text")),
    mut_arg("epochs", |a| a.default_value("1")),
    mut_arg("lr", |a| a.default_value("2e-3")),
    mut_arg("weight_decay", |a| a.default_value("1.2e-6")),
    mut_arg("clip", |a| a.default_value("0.25")),
    mut_arg("out", |a| a.default_value("runs/ptb_lm")),
)]
pub struct PtbLmArgs {
    /// Training text (one sentence per line; `<eos>` is appended to every line).
    #[arg(long, default_value = "../shared/data/ptb_lm/ptb.train.txt")]
    pub train: PathBuf,
    /// Validation text.
    #[arg(long, default_value = "../shared/data/ptb_lm/ptb.valid.txt")]
    pub valid: PathBuf,
    /// Evaluate the perplexity of `--checkpoint` on this file instead of training.
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Parse this one-tree-per-line gold treebank with `--checkpoint`'s syntactic distances and
    /// print parsing F1 per layer, instead of training.
    #[arg(long)]
    pub parse: Option<PathBuf>,
    /// Run directory or checkpoint file for `--eval` / `--parse` (default: `--out`).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Write the predicted trees of the best layer here (`--parse`), one per gold sentence.
    #[arg(long)]
    pub trees_out: Option<PathBuf>,
    /// Recurrent cell: lstm, on-lstm, fasttrees, faster-fasttrees, conv-fasttrees.
    #[arg(long, default_value = "on-lstm", value_parser = parse_cell)]
    pub cell: CellKind,
    /// Embedding width (= the top layer's width, tied decoder).
    #[arg(long, default_value_t = 200)]
    pub emb: usize,
    /// Hidden width of the lower layers.
    #[arg(long, default_value_t = 400)]
    pub hidden: usize,
    /// Layers.
    #[arg(long, default_value_t = 3)]
    pub layers: usize,
    /// Neurons per master-gate chunk (divides --emb and --hidden).
    #[arg(long, default_value_t = 10)]
    pub chunk_size: usize,
    /// Conv FastTrees kernel width.
    #[arg(long, default_value_t = 3)]
    pub kernel_size: usize,
    /// Output locked dropout.
    #[arg(long, default_value_t = 0.45)]
    pub dropout: f64,
    /// Locked dropout between layers.
    #[arg(long, default_value_t = 0.3)]
    pub dropout_hidden: f64,
    /// Input locked dropout.
    #[arg(long, default_value_t = 0.5)]
    pub dropout_input: f64,
    /// Embedding (word) dropout.
    #[arg(long, default_value_t = 0.1)]
    pub dropout_embedding: f64,
    /// DropConnect on hidden-to-hidden weights.
    #[arg(long, default_value_t = 0.45)]
    pub weight_drop: f64,
    /// AR weight α.
    #[arg(long, default_value_t = 2.0)]
    pub alpha: f64,
    /// TAR weight β.
    #[arg(long, default_value_t = 1.0)]
    pub beta: f64,
    /// Rows in evaluation.
    #[arg(long, default_value_t = 10)]
    pub eval_batch_size: usize,
    /// Truncated-BPTT segment length.
    #[arg(long, default_value_t = 35)]
    pub bptt: usize,
    /// Evaluate on at most this many validation tokens during training (default: all).
    #[arg(long)]
    pub valid_tokens: Option<usize>,
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
    /// The engine's flags (streams, epochs, learning rate, checkpoints…).
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_cell(s: &str) -> Result<CellKind, String> {
    s.parse()
}

impl PtbLmArgs {
    /// The model configuration these flags describe.
    pub fn model_config(&self, n_tokens: usize) -> RnnLmConfig {
        RnnLmConfig::new(self.cell, n_tokens, self.emb, self.hidden)
            .with_n_layers(self.layers)
            .with_chunk_size(self.chunk_size)
            .with_kernel_size(self.kernel_size)
            .with_dropout(self.dropout)
            .with_dropout_hidden(self.dropout_hidden)
            .with_dropout_input(self.dropout_input)
            .with_dropout_embedding(self.dropout_embedding)
            .with_weight_drop(self.weight_drop)
            .with_alpha(self.alpha)
            .with_beta(self.beta)
    }

    /// Checks every flag before any work, with errors naming the flag and the rule.
    pub fn check(&self) -> Result<()> {
        crate::cli::check_engine(&self.engine)?;
        if self.bptt == 0 {
            bail!("--bptt must be at least 1");
        }
        if self.eval_batch_size == 0 {
            bail!("--eval-batch-size must be at least 1");
        }
        // Each layer has at least a hidden × hidden recurrent matrix; the top one emb × hidden.
        let (h, e) = (self.hidden as f64, self.emb as f64);
        crate::cli::check_weights_fit(
            "--hidden/--emb/--layers",
            h * h * self.layers.saturating_sub(1) as f64 + e * h + e * e,
            &self.device,
        )?;
        for (flag, v) in [("--alpha", self.alpha), ("--beta", self.beta)] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{flag} {v} must be a finite number ≥ 0");
            }
        }
        // The vocabulary is not read yet: any size ≥ 1 checks the widths and dropouts.
        self.model_config(1).validate().map_err(|e| {
            anyhow::anyhow!(
                "invalid flags: {}",
                e.named(&[
                    ("d_embed", "--emb"),
                    ("d_hidden", "--hidden"),
                    ("d_input", "--emb"),
                    ("n_layers", "--layers"),
                    ("chunk_size", "--chunk-size"),
                    ("kernel_size", "--kernel-size"),
                    ("dropout", "--dropout"),
                    ("dropout_hidden", "--dropout-hidden"),
                    ("dropout_input", "--dropout-input"),
                    ("dropout_embedding", "--dropout-embedding"),
                    ("weight_drop", "--weight-drop"),
                ])
            )
        })?;
        Ok(())
    }

    /// The engine configuration these flags describe: Adam, one TBPTT segment per step.
    pub fn train_config(&self) -> TrainConfig {
        let mut c = self.engine.train_config(OptimizerKind::Adam);
        c.batch_size = 1;
        c
    }
}

/// Words of a gold tree the way ON-LSTM's parsing evaluation sees them: punctuation removed,
/// lower-cased, digit runs → `N`.
pub fn parse_prep() -> TreePrep {
    TreePrep {
        norm: TextNorm {
            lowercase: true,
            digits: DigitNorm::RunsToN,
        },
        ..TreePrep::evaluation()
    }
}

struct Job {
    args: PtbLmArgs,
}

fn load_trained<B: ArborBackend>(
    dir: &Path,
    device: &B::Device,
) -> Result<(RnnLm<B>, Vocab, serde_json::Value, PathBuf)> {
    let path = checkpoint_in(dir)?;
    let file = CheckpointFile::load(&path)?;
    let task = &file.meta["task"];
    let config: RnnLmConfig = serde_json::from_value(task["model"].clone())
        .with_context(|| format!("{}: no language-model configuration", path.display()))?;
    let tokens: Vec<String> = serde_json::from_value(task["vocab"].clone())
        .with_context(|| format!("{}: no vocabulary", path.display()))?;
    let vocab = Vocab::from_tokens(tokens)?;
    let (model, meta) = load_model_from(config.init::<B>(device), file, &path, device)?;
    Ok((model, vocab, meta, path))
}

impl Job {
    fn train<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let a = &self.args;
        seed_everything::<Ad<B>>(&device, a.engine.seed);
        let vocab = build_stream_vocab(&a.train)?;
        let train_ids = read_token_stream(&a.train, &vocab)?;
        let mut valid_ids = read_token_stream(&a.valid, &vocab)?;
        if let Some(n) = a.valid_tokens {
            valid_ids.truncate(n + 1);
        }
        // This run's output folder (the data read first, so that a bad path creates nothing),
        // held until its result is written (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        let config = a.model_config(vocab.len());
        let model: RnnLm<Ad<B>> = config.init(&device);
        let meta = serde_json::json!({
            "model": config,
            "vocab": vocab.tokens(),
            "bptt": a.bptt,
            "batch_size": a.engine.batch_size,
        });
        let task = LmTask::<Ad<B>>::new(
            Batchified::new(&train_ids, a.engine.batch_size, a.bptt),
            Batchified::new(&valid_ids, a.eval_batch_size, a.bptt),
            a.alpha,
            a.beta,
            meta,
            device.clone(),
        );
        if task.train.num_segments() == 0 || task.valid.num_segments() == 0 {
            bail!("the training or validation text is too short for the batch size");
        }
        eprintln!(
            "PTB LM: {} training tokens ({} segments of {}x{}), {} validation tokens; vocabulary \
             {}; cell {}, emb {}, hidden {}, {} layers; device {}",
            train_ids.len(),
            task.train.num_segments(),
            a.engine.batch_size,
            a.bptt,
            task.valid.num_targets(),
            vocab.len(),
            a.cell,
            a.emb,
            a.hidden,
            a.layers,
            a.device
        );
        let outcome = train_on(
            &task,
            model,
            &a.train_config(),
            &a.engine.workers::<Ad<B>>(&device),
        )?;
        let r = &outcome.evals["valid"];
        let s = &outcome.state;
        println!(
            "cell {} steps {} epochs {:.2} train-time {:.1} s: valid perplexity {:.2}, \
             {:.0} training tokens/s",
            a.cell,
            s.step,
            s.step as f64 / task.train.num_segments() as f64,
            s.elapsed_sec,
            r.loss().map_or(f64::NAN, f64::exp),
            (s.step as usize * a.engine.batch_size * a.bptt) as f64 / s.elapsed_sec.max(1e-9)
        );
        println!("checkpoints: {}", outcome.last_checkpoint.display());
        Ok(())
    }

    fn eval<B: ArborBackend>(self, device: B::Device, file: &Path) -> Result<()> {
        let a = &self.args;
        let dir = a.checkpoint.clone().unwrap_or_else(|| a.engine.out.clone());
        let (model, vocab, _, path) = load_trained::<B>(&dir, &device)?;
        let ids = read_token_stream(file, &vocab)?;
        let data = Batchified::new(&ids, a.eval_batch_size, a.bptt);
        if data.num_targets() == 0 {
            bail!(
                "{}: no token to predict ({} tokens; --eval needs at least --eval-batch-size {} \
                 columns of 2 tokens)",
                file.display(),
                ids.len(),
                a.eval_batch_size
            );
        }
        let started = Instant::now();
        let r = evaluate_stream(&model, &data, &device);
        println!(
            "{} on {}: perplexity {:.2} over {} tokens (next-word accuracy {:.4}); {:.1} s",
            path.display(),
            file.display(),
            r.loss().map_or(f64::NAN, f64::exp),
            r.total,
            r.accuracy(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    fn parse<B: ArborBackend>(self, device: B::Device, file: &Path) -> Result<()> {
        let a = &self.args;
        let dir = a.checkpoint.clone().unwrap_or_else(|| a.engine.out.clone());
        let (model, vocab, _, path) = load_trained::<B>(&dir, &device)?;
        let gold = load_gold(file, &parse_prep(), None)?;
        if gold.sentences.is_empty() {
            bail!(
                "{}: no sentence to parse ({} trees, {} without a word after preprocessing)",
                file.display(),
                gold.total_trees,
                gold.dropped_empty
            );
        }
        let n_layers = model.stack.layers.len();
        if model
            .stack
            .layers
            .first()
            .is_none_or(|l| arbor_cells::RecurrentCell::n_chunks(l).is_none())
        {
            bail!(
                "{}: an LSTM has no syntactic distances to parse with",
                path.display()
            );
        }
        let eos = vocab.id(arbor_data::readers::lm::EOS);
        let mut scores = vec![ParsingF1::default(); n_layers];
        let mut trees: Vec<Vec<Option<BinaryTree>>> = vec![Vec::new(); n_layers];
        let mut unknown = 0usize;
        let mut words_total = 0usize;
        let sentences = &gold.sentences;
        for chunk in sentences.chunks(64) {
            // `<eos>` first, as the LM saw every sentence start in training; the distance of
            // word i is read at its own step (the model is causal, so nothing after it matters).
            let lengths: Vec<usize> = chunk.iter().map(|s| s.words.len() + 1).collect();
            let time = *lengths.iter().max().expect("non-empty chunk");
            let mut ids = vec![0u32; chunk.len() * time];
            for (b, s) in chunk.iter().enumerate() {
                ids[b * time] = eos;
                for (i, w) in s.words.iter().enumerate() {
                    let id = vocab.id(w);
                    unknown += usize::from(id == arbor_data::vocab::UNK_ID);
                    ids[b * time + 1 + i] = id;
                }
                words_total += s.words.len();
            }
            let x = arbor_lm::ids_tensor::<B>(&ids, [chunk.len(), time], &device);
            let distances = model.layer_distances(x, &lengths);
            for (l, d) in distances.into_iter().enumerate() {
                let d = d
                    .into_data()
                    .convert::<f64>()
                    .to_vec::<f64>()
                    .map_err(|e| anyhow::anyhow!("reading distances: {e:?}"))?;
                for (b, s) in chunk.iter().enumerate() {
                    let n = s.words.len();
                    let row = &d[b * time + 1..b * time + 1 + n];
                    let tree = BinaryTree::from_distances(row);
                    let spans = tree.as_ref().map(|t| t.spans()).unwrap_or_default();
                    scores[l].add(&spans, &s.spans, n);
                    trees[l].push(tree);
                }
            }
        }
        println!(
            "{} on {} ({} sentences, {} words, {:.1}% mapped to <unk>; punctuation removed, \
             lower-cased, digits → N):",
            path.display(),
            file.display(),
            sentences.len(),
            words_total,
            100.0 * unknown as f64 / words_total.max(1) as f64
        );
        let convs = [
            F1Convention::Sentence,
            F1Convention::Corpus,
            F1Convention::Evalb,
            F1Convention::PhraseGrammar,
        ];
        println!(
            "| trees | {} |",
            convs.map(|c| format!("F1 {}", c.name())).join(" | ")
        );
        println!("| --- |{}", " --- |".repeat(convs.len()));
        let row = |name: &str, f: &ParsingF1| {
            println!(
                "| {name} | {} |",
                convs.map(|c| format!("{:.1}", f.percent(c))).join(" | ")
            );
        };
        for (l, f) in scores.iter().enumerate() {
            row(&format!("layer {}", l + 1), f);
        }
        let spans = gold.span_lists();
        row(
            "right-branching",
            &baseline_f1(&spans, Baseline::RightBranching),
        );
        row(
            "left-branching",
            &baseline_f1(&spans, Baseline::LeftBranching),
        );
        row("balanced", &baseline_f1(&spans, Baseline::Balanced));
        if let Some(out) = &a.trees_out {
            let best = (0..n_layers)
                .max_by(|&i, &j| {
                    scores[i]
                        .f1(F1Convention::Sentence)
                        .total_cmp(&scores[j].f1(F1Convention::Sentence))
                })
                .unwrap_or(0);
            let mut text = String::new();
            for (s, t) in sentences.iter().zip(&trees[best]) {
                if let Some(t) = t {
                    text.push_str(&t.to_bracketed(&s.words));
                }
                text.push('\n');
            }
            std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
            println!("layer {} trees written to {}", best + 1, out.display());
        }
        Ok(())
    }
}

impl BackendJob for Job {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        if let Some(file) = self.args.parse.clone() {
            self.parse::<B>(device, &file)
        } else if let Some(file) = self.args.eval.clone() {
            self.eval::<B>(device, &file)
        } else {
            self.train::<B>(device)
        }
    }
}

/// Runs the program.
pub fn run(mut args: PtbLmArgs) -> Result<()> {
    args.check()?;
    args.device = args.engine.main_device(&args.device)?;
    let device = args.device.clone();
    run_on(&device, Job { args })?
}
