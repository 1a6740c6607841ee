//! `cargo run --release --example listops`: ListOps (Nangia & Bowman 2018), the diagnostic task
//! for latent-tree learning. `generate` writes data with the paper's procedure, `train` trains
//! any encoder (the gold-tree Tree-LSTM `spinn-pi-nt` follows the files' brackets), and `eval`
//! scores a checkpoint on other files, e.g. the official test file. Accuracy is reported over the
//! whole file, by the expression's depth and by length.

use arbor_cells::ArborBackend;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arbor_data::readers::listops::{
    parse_listops, read_listops, to_listops_line, LengthStats, ListOpsExample, ListOpsGenerator,
};
use arbor_data::vocab::Vocab;
use arbor_data::ReadOptions;
use arbor_encoders::EncoderKind;
use arbor_heads::SentenceClassifier;
use arbor_train::EvalReport;
use burn::backend::Autodiff;
use clap::{Args, Parser, Subcommand};

use crate::cli::TrainArgs;
use crate::common::{
    classification_task, load_checkpoint, print_tree, train_and_report, Labels, RunEnd, Trained,
    WordLookup,
};
use crate::result::ScoreTable;
use arbor_tasks::{evaluate, per_group, ClassifyData, ClassifyTask};
use arbor_train::device::{resolve, run_on, BackendJob};

/// Default `--embed-init-std` of this program: as for the logic data: a small vocabulary of symbols.
pub const EMBED_INIT_STD: f64 = 1.0;

/// ListOps: generate data, train, evaluate.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "listops",
    about = "ListOps: nested list operations over digits (generate, train, eval)"
)]
pub struct ListOpsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Write train/valid/test TSV files in the official bracketed format.
    Generate(GenerateArgs),
    /// Train a classifier (10 classes) on a ListOps file.
    Train(Box<TrainListOpsArgs>),
    /// Score a trained checkpoint on ListOps files.
    Eval(EvalArgs),
}

/// Flags of `generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Output directory (train.tsv, valid.tsv, test.tsv).
    #[arg(long, default_value = "datasets/listops")]
    pub out: PathBuf,
    /// Training examples.
    #[arg(long, default_value_t = 90_000)]
    pub train_size: usize,
    /// Validation examples.
    #[arg(long, default_value_t = 1_000)]
    pub valid_size: usize,
    /// Test examples (0: no test file); 10,000 like the released `test_d20s.tsv`.
    #[arg(long, default_value_t = 10_000)]
    pub test_size: usize,
    /// Longest expression, in flat tokens (default: no limit, as the reference's `make_data.py`).
    #[arg(long)]
    pub max_length: Option<usize>,
    /// Shortest expression, in flat tokens (1: a bare digit is an expression, as in the
    /// reference).
    #[arg(long, default_value_t = 1)]
    pub min_length: usize,
    /// Depth cap, the root at depth 1 (the reference's `MAX_DEPTH`): at most `max_depth − 1`
    /// nested operators.
    #[arg(long, default_value_t = 20)]
    pub max_depth: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Flags of `train`.
#[derive(Debug, Clone, Args)]
pub struct TrainListOpsArgs {
    /// Training file (`label<TAB>expression`, bracketed or flat).
    #[arg(long, default_value = "datasets/listops/train.tsv")]
    pub train: PathBuf,
    /// Validation file (model selection).
    #[arg(long, default_value = "datasets/listops/valid.tsv")]
    pub valid: PathBuf,
    /// Test files (repeatable), scored after training with the best checkpoint.
    #[arg(long)]
    pub test: Vec<PathBuf>,
    /// How many validation expressions to draw trees for after training.
    #[arg(long, default_value_t = 2)]
    pub show_trees: usize,
    /// Drop training expressions longer than this many flat tokens, as the reference's SPINN
    /// code does with its `--seq_length 100` (it compares 2n − 1 transitions with it, so it
    /// trains on expressions of at most 50 tokens, and scores every test expression). The
    /// validation and test files are always read whole.
    #[arg(long)]
    pub max_train_length: Option<usize>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: TrainArgs,
}

/// Flags of `eval`.
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Checkpoint file or run directory.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Files to score (repeatable).
    #[arg(long, required = true)]
    pub test: Vec<PathBuf>,
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
}

/// Length buckets (in tokens) for the by-length table: `[lo, hi)`.
pub const LENGTH_BUCKETS: [(usize, usize); 5] =
    [(0, 25), (25, 50), (50, 100), (100, 200), (200, usize::MAX)];

fn length_bucket(n: usize) -> usize {
    LENGTH_BUCKETS
        .iter()
        .position(|&(lo, hi)| n >= lo && n < hi)
        .unwrap_or(LENGTH_BUCKETS.len() - 1)
}

/// Writes the generated files; returns a summary line per file.
pub fn generate(args: &GenerateArgs) -> Result<Vec<String>> {
    let generator = ListOpsGenerator {
        max_depth: args.max_depth,
        min_tokens: args.min_length,
        max_tokens: args.max_length,
        ..Default::default()
    };
    generator
        .check()
        .map_err(|e| anyhow::anyhow!("--min-length/--max-length/--max-depth: {e}"))?;
    if args.train_size == 0 && args.valid_size == 0 && args.test_size == 0 {
        bail!("--train-size, --valid-size and --test-size are all 0: nothing to generate");
    }
    // The expressions are held in memory (to keep the splits apart) before they are written:
    // at least 64 bytes each, whatever their length.
    let count = args.train_size as f64 + args.valid_size as f64 + args.test_size as f64;
    if let Ok(cpu) = arbor_train::device::DeviceSpec::default_cpu() {
        crate::cli::check_fits(
            "--train-size/--valid-size/--test-size",
            &format!("{count:.0} expressions"),
            count * 64.0,
            cpu,
        )?;
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut seen = HashSet::new();
    let mut summary = Vec::new();
    for (k, (name, n)) in [
        ("train.tsv", args.train_size),
        ("valid.tsv", args.valid_size),
        ("test.tsv", args.test_size),
    ]
    .into_iter()
    .enumerate()
    {
        if n == 0 {
            continue;
        }
        // Each split has its own seed and excludes every expression of the earlier splits.
        let exprs = generator
            .generate(n, args.seed.wrapping_mul(3).wrapping_add(k as u64), &seen)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let mut text = String::new();
        for e in &exprs {
            writeln!(text, "{}", to_listops_line(e)).expect("writing to a String");
        }
        // Every line must read back with its label equal to its value.
        let path = args.out.join(name);
        let check = parse_listops(text.as_bytes(), &path, ReadOptions::strict(), true)?;
        if check.len() != exprs.len() {
            bail!(
                "{}: {} lines read back of {}",
                path.display(),
                check.len(),
                exprs.len()
            );
        }
        write_atomically(&path, &text)?;
        summary.push(format!("{}: {}", path.display(), describe(&check.records)));
        seen.extend(exprs);
    }
    Ok(summary)
}

/// One line on a ListOps file's size, lengths and depth, to compare generated data with a released
/// file (the released `test_d20s.tsv`: "10000 expressions, length mean 42.8, median 16, 90th
/// percentile 106, max 939 tokens; 10.7% over 100; depth up to 19").
pub fn describe(examples: &[ListOpsExample]) -> String {
    let lengths: Vec<usize> = examples.iter().map(|e| e.tokens.len()).collect();
    let max_depth = examples.iter().map(|e| e.depth).max().unwrap_or(0);
    match LengthStats::of(&lengths) {
        Some(s) => format!("{} expressions, {s}; depth up to {max_depth}", s.n),
        None => "no expressions".to_string(),
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tsv.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Reads a ListOps file for training or evaluation, with a hint when it is missing.
pub fn read_file(path: &Path) -> Result<Vec<ListOpsExample>> {
    read_file_with(path, ReadOptions::strict())
}

/// [`read_file`] with other reading options (a training run's `--max-sentence-len`).
pub fn read_file_with(path: &Path, opts: ReadOptions) -> Result<Vec<ListOpsExample>> {
    if !path.exists() {
        bail!(
            "{} not found: generate ListOps data with `cargo run --release --example listops -- \
             generate --out {}`, or pass the file",
            path.display(),
            path.parent()
                .map_or("DIR".into(), |p| p.display().to_string())
        );
    }
    let loaded = read_listops(path, opts)?;
    if loaded.is_empty() {
        bail!("{}: no examples", path.display());
    }
    Ok(loaded.records)
}

/// Refuses a file some of whose lines have no gold tree (flat lines of more than one token)
/// when `encoder` follows gold trees: it would otherwise be scored without them.
///
/// # Errors
/// Naming the file, the first such line and the encoder.
pub fn require_trees(path: &Path, encoder: EncoderKind, examples: &[ListOpsExample]) -> Result<()> {
    if !encoder.needs_transitions() {
        return Ok(());
    }
    if let Some(i) = examples.iter().position(|e| e.tree.is_none()) {
        bail!(
            "{}: the {encoder} encoder follows gold trees, and this file has flat lines \
             (the first is record {}); give the bracketed form",
            path.display(),
            i + 1
        );
    }
    Ok(())
}

/// Token ids, labels, gold transitions (when every line is bracketed) and depth groups.
pub fn to_data(examples: &[ListOpsExample], vocab: &Vocab) -> ClassifyData {
    let transitions: Option<Vec<_>> = examples
        .iter()
        .map(|e| e.tree.as_ref().map(|t| t.to_transitions()))
        .collect();
    ClassifyData {
        sentences: examples.iter().map(|e| vocab.encode(&e.tokens)).collect(),
        labels: examples.iter().map(|e| e.label as usize).collect(),
        transitions,
        groups: Some(examples.iter().map(|e| e.depth).collect()),
    }
}

/// Prints accuracy over a file, by depth and by length (both from one evaluation pass), and
/// returns that pass's report: its groups are `depth · LENGTH_BUCKETS.len() + length bucket`.
pub fn report<B: ArborBackend>(
    title: &str,
    model: &SentenceClassifier<B, arbor_encoders::Encoder<B>>,
    examples: &[ListOpsExample],
    data: &ClassifyData,
    device: &B::Device,
) -> EvalReport {
    report_tables(title, model, examples, data, device).0
}

/// [`report`], also returning the by-depth and by-length tables as `(key, correct, total)`
/// rows.
#[allow(clippy::type_complexity)]
pub fn report_tables<B: ArborBackend>(
    title: &str,
    model: &SentenceClassifier<B, arbor_encoders::Encoder<B>>,
    examples: &[ListOpsExample],
    data: &ClassifyData,
    device: &B::Device,
) -> (
    EvalReport,
    Vec<(String, usize, usize)>,
    Vec<(String, usize, usize)>,
) {
    // One pass over the data, grouped by (depth, length bucket); both tables are sums over it.
    let n_buckets = LENGTH_BUCKETS.len();
    let joint = ClassifyData {
        groups: Some(
            examples
                .iter()
                .map(|e| e.depth * n_buckets + length_bucket(e.tokens.len()))
                .collect(),
        ),
        ..data.clone()
    };
    let report = evaluate(model, &joint, 256, false, device);
    println!(
        "{title}: accuracy {:.4} ({} / {})",
        report.accuracy(),
        report.correct,
        report.total
    );
    let mut by_depth: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut by_length: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for (g, (acc, n)) in per_group(&report) {
        let correct = (acc * n as f64).round() as usize;
        for (key, table) in [
            (g / n_buckets, &mut by_depth),
            (g % n_buckets, &mut by_length),
        ] {
            let e = table.entry(key).or_default();
            e.0 += correct;
            e.1 += n;
        }
    }
    println!("  depth  examples  accuracy");
    let mut depth_rows = Vec::new();
    for (depth, (c, n)) in by_depth {
        println!("  {depth:>5}  {n:>8}  {:.4}", c as f64 / n as f64);
        depth_rows.push((depth.to_string(), c, n));
    }
    println!("  length     examples  accuracy");
    let mut length_rows = Vec::new();
    for (b, (c, n)) in by_length {
        let (lo, hi) = LENGTH_BUCKETS[b];
        let range = if hi == usize::MAX {
            format!("{lo}+")
        } else {
            format!("{lo}–{}", hi - 1)
        };
        println!("  {range:>9}  {n:>8}  {:.4}", c as f64 / n as f64);
        length_rows.push((range, c, n));
    }
    (report, depth_rows, length_rows)
}

fn show_trees<B: ArborBackend>(
    model: &SentenceClassifier<B, arbor_encoders::Encoder<B>>,
    examples: &[ListOpsExample],
    data: &ClassifyData,
    n: usize,
    device: &B::Device,
) {
    for (i, e) in examples.iter().enumerate().take(n) {
        if let Some(gold) = &e.tree {
            print_tree(
                &format!("example {i} (label {}) gold", e.label),
                gold,
                &e.tokens,
            );
        }
        if let Some(t) =
            crate::common::parse_one(&model.embedding, &model.encoder, &data.sentences[i], device)
        {
            print_tree(&format!("example {i} induced"), &t, &e.tokens);
        }
    }
}

struct TrainJob {
    args: TrainListOpsArgs,
    train: Vec<ListOpsExample>,
    valid: Vec<ListOpsExample>,
    tests: Vec<(PathBuf, Vec<ListOpsExample>)>,
}

impl BackendJob for TrainJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let a = &self.args.common;
        // This run's output folder, held until its result is written (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        let vocab = arbor_data::vocab::word_vocab(self.train.iter().map(|e| &e.tokens[..]), false);
        let labels = Labels {
            names: (0..10).map(|d| d.to_string()).collect(),
            lookup: WordLookup::plain(false),
            default_embed_std: EMBED_INIT_STD,
        };
        let train_data = to_data(&self.train, &vocab);
        let eval = vec![("valid".into(), to_data(&self.valid, &vocab))];
        let (model, task): (_, ClassifyTask<Ad<B>>) =
            classification_task(a, &vocab, &labels, train_data, eval, &device).map_err(|e| {
                if a.encoder.needs_transitions() {
                    e.context(format!(
                        "the {} encoder needs bracketed ListOps lines",
                        a.encoder
                    ))
                } else {
                    e
                }
            })?;
        eprintln!(
            "ListOps: {} training expressions, {} validation; vocabulary {}; encoder {} (dim {}), \
             device {}",
            task.train.len(),
            task.splits[0].1.len(),
            vocab.len(),
            a.encoder,
            a.dim,
            a.device
        );
        let valid = &task.splits[0].1;
        train_and_report::<B, _>(
            RunEnd::new("listops", a),
            &task,
            model,
            &device,
            |model, which, _, result| {
                let (r, _, _) = report_tables(
                    &format!("valid ({which})"),
                    model,
                    &self.valid,
                    valid,
                    &device,
                );
                result.split("valid", &r);
                for (k, (path, examples)) in self.tests.iter().enumerate() {
                    let data = to_data(examples, &vocab);
                    let (r, depth, length) = report_tables(
                        &format!("{} ({which})", path.display()),
                        model,
                        examples,
                        &data,
                        &device,
                    );
                    // The first test file is `test`; more are `test2`, `test3`…
                    let split = if k == 0 {
                        "test".to_string()
                    } else {
                        format!("test{}", k + 1)
                    };
                    let title = |by: &str| format!("{split} ({}) accuracy by {by}", path.display());
                    result
                        .split(&split, &r)
                        .table(ScoreTable::new(title("depth"), &split, "depth", depth))
                        .table(ScoreTable::new(title("length"), &split, "length", length));
                }
                Ok(())
            },
            |model, _| show_trees(model, &self.valid, valid, self.args.show_trees, &device),
        )
    }
}

struct EvalJob {
    args: EvalArgs,
    tests: Vec<(PathBuf, Vec<ListOpsExample>)>,
}

impl BackendJob for EvalJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        let Trained {
            model, meta, vocab, ..
        } = load_checkpoint::<B, SentenceClassifier<B, arbor_encoders::Encoder<B>>>(
            &self.args.checkpoint,
            &device,
        )?;
        let encoder = meta.model.encoder();
        for (test, examples) in &self.tests {
            require_trees(test, encoder.kind(), examples)?;
            let data = to_data(examples, &vocab);
            report(
                &test.display().to_string(),
                &model,
                examples,
                &data,
                &device,
            );
        }
        Ok(())
    }
}

/// Runs the program.
pub fn run(args: ListOpsArgs) -> Result<()> {
    match args.command {
        Command::Generate(g) => {
            for line in generate(&g)? {
                println!("{line}");
            }
            Ok(())
        }
        Command::Train(t) => {
            let mut t = *t;
            t.common.check()?;
            t.common.device = t.common.engine.main_device(&t.common.device)?;
            let opts = t.common.read_options();
            let mut train = read_file_with(&t.train, opts)?;
            let valid = read_file_with(&t.valid, opts)?;
            let tests = t
                .test
                .iter()
                .map(|p| Ok((p.clone(), read_file_with(p, opts)?)))
                .collect::<Result<Vec<_>>>()?;
            eprintln!("{}: {}", t.train.display(), describe(&train));
            if let Some(max) = t.max_train_length {
                let before = train.len();
                train.retain(|e| e.tokens.len() <= max);
                eprintln!(
                    "--max-train-length {max}: training on {} of {before} expressions",
                    train.len()
                );
                if train.is_empty() {
                    bail!(
                        "--max-train-length {max}: no training expression of {} is that short",
                        t.train.display()
                    );
                }
            }
            eprintln!("{}: {}", t.valid.display(), describe(&valid));
            for (path, examples) in &tests {
                eprintln!("{}: {}", path.display(), describe(examples));
            }
            // Before any training: a test file the encoder cannot read is refused, never
            // scored without its trees.
            for (path, examples) in &tests {
                require_trees(path, t.common.encoder, examples)?;
            }
            let device = t.common.device.clone();
            run_on(
                &device,
                TrainJob {
                    args: t,
                    train,
                    valid,
                    tests,
                },
            )?
        }
        Command::Eval(mut e) => {
            e.device = resolve(&e.device)?.to_string();
            let tests = e
                .test
                .iter()
                .map(|p| Ok((p.clone(), read_file(p)?)))
                .collect::<Result<Vec<_>>>()?;
            for (path, examples) in &tests {
                eprintln!("{}: {}", path.display(), describe(examples));
            }
            let device = e.device.clone();
            run_on(&device, EvalJob { args: e, tests })?
        }
    }
}
