//! `cargo run --release --example logic`: propositional-logic inference (Bowman et al. 2015),
//! the task where tree structure matters most. Train on formulas with at most 6 operators,
//! hold out 10% of them for validation, and report test accuracy separately for every operator
//! count in the test files.

use arbor_cells::ArborBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use arbor_data::readers::logic::{
    read_logic, read_logic_dir, train_valid_split, Formula, LogicPair, Relation,
};
use arbor_data::vocab::Vocab;
use arbor_encoders::EncoderKind;
use arbor_train::EvalReport;
use burn::backend::Autodiff;
use clap::Parser;

use crate::cli::TrainArgs;
use crate::common::{
    classification_task, print_tree, train_and_report, Labels, RunEnd, WordLookup,
};
use crate::result::ScoreTable;
use arbor_tasks::{evaluate, NliData, NliTask};
use arbor_train::device::{run_on, BackendJob};

/// Default `--embed-init-std` of this program: SPINN's `nn.Embedding` default; measured in docs/log/results.md.
pub const EMBED_INIT_STD: f64 = 1.0;

/// Train a sentence-pair encoder on propositional-logic inference.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "logic",
    about = "Propositional-logic inference: train on formulas with few operators, test per operator count"
)]
pub struct LogicArgs {
    /// Directory with train0..trainK (and test0..testK) files.
    #[arg(long, default_value = "../shared/data/propositional_logic")]
    pub data_dir: PathBuf,
    /// Train on pairs with at most this many operators.
    #[arg(long, default_value_t = 6)]
    pub max_train_operators: usize,
    /// Fraction of the training pairs held out for validation (model selection).
    #[arg(long, default_value_t = 0.1)]
    pub valid_fraction: f64,
    /// Use only the first N training pairs after the split (for quick runs).
    #[arg(long)]
    pub train_limit: Option<usize>,
    /// Test files (repeatable; any operator counts). Default: the test0..testK files of
    /// --data-dir.
    #[arg(long)]
    pub test: Vec<PathBuf>,
    /// Feed only the formulas' leaves (`not e or not c`) to encoders that do not follow gold
    /// trees, instead of the formulas as written with their brackets (the default, as the
    /// ON-LSTM/FastTrees reference does). Without brackets most formulas are ambiguous: a
    /// harder variant, reported separately (docs/results.md). Gold-tree encoders (the SPINN
    /// kinds) always read the leaves beside their transitions.
    #[arg(long)]
    pub no_brackets: bool,
    /// How many test pairs to draw trees for after training (encoders that build trees).
    #[arg(long, default_value_t = 2)]
    pub show_trees: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: TrainArgs,
}

/// The logic data a run uses.
#[derive(Debug, Default)]
pub struct LogicSplits {
    /// Training pairs (after the validation split).
    pub train: Vec<LogicPair>,
    /// The held-out validation pairs.
    pub valid: Vec<LogicPair>,
    /// Test pairs, file after file.
    pub test: Vec<LogicPair>,
    /// The test files in the order of `test`: name and number of pairs.
    pub test_files: Vec<(String, usize)>,
}

/// Reads the training files of `--data-dir` (pairs with ≤ `--max-train-operators`
/// operators), splits off the validation pairs, and reads the test files.
pub fn load_splits(args: &LogicArgs) -> Result<LogicSplits> {
    let data = read_logic_dir(&args.data_dir, args.common.read_options())?;
    let pool: Vec<LogicPair> = data
        .train
        .into_iter()
        .filter(|p| p.operators <= args.max_train_operators)
        .collect();
    if pool.is_empty() {
        bail!(
            "{}: no training pair with at most {} operators",
            args.data_dir.display(),
            args.max_train_operators
        );
    }
    let (mut train, valid) = train_valid_split(pool, args.valid_fraction, args.common.engine.seed);
    if let Some(n) = args.train_limit {
        train.truncate(n);
    }
    if train.is_empty() || valid.is_empty() {
        bail!(
            "{} training and {} validation pairs: need at least one of each (check \
             --valid-fraction and --train-limit)",
            train.len(),
            valid.len()
        );
    }
    let name = |path: &Path| {
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let (test, test_files) = if args.test.is_empty() {
        let files = data
            .files
            .iter()
            .filter(|(_, path, _)| name(path).starts_with("test"))
            .map(|(_, path, n)| (name(path), *n))
            .collect();
        (data.test, files)
    } else {
        let mut test = Vec::new();
        let mut files = Vec::new();
        for path in &args.test {
            let records = read_logic(path, args.common.read_options())?.records;
            files.push((name(path), records.len()));
            test.extend(records);
        }
        (test, files)
    };
    if test.is_empty() {
        bail!(
            "no test pairs: {} has no test0.. files and no --test FILE was given",
            args.data_dir.display()
        );
    }
    Ok(LogicSplits {
        train,
        valid,
        test,
        test_files,
    })
}

/// Which tokens of a formula an encoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogicInput {
    /// The formula as written, brackets included ([`Formula::bracketed`]).
    Bracketed,
    /// The leaves only ([`Formula::tokens`]): what gold-tree encoders read beside their
    /// transitions, and the bracket-free variant (`--no-brackets`).
    Leaves,
}

impl LogicInput {
    /// The input for `encoder`: leaves for the encoders that follow gold transitions (their
    /// transitions shift one leaf at a time) or when `no_brackets`, else the bracketed formula.
    pub fn choose(encoder: EncoderKind, no_brackets: bool) -> Self {
        if encoder.needs_transitions() || no_brackets {
            LogicInput::Leaves
        } else {
            LogicInput::Bracketed
        }
    }

    /// The tokens of `f` this input reads.
    pub fn tokens(self, f: &Formula) -> &[String] {
        match self {
            LogicInput::Bracketed => &f.bracketed,
            LogicInput::Leaves => &f.tokens,
        }
    }

    /// `bracketed` or `leaves` (result.json's `input`).
    pub fn name(self) -> &'static str {
        match self {
            LogicInput::Bracketed => "bracketed",
            LogicInput::Leaves => "leaves",
        }
    }
}

/// Token ids, relation ids, gold transitions and operator counts (the groups); the token ids
/// are of `input`'s tokens.
pub fn to_data(pairs: &[LogicPair], vocab: &Vocab, input: LogicInput) -> NliData {
    NliData {
        premises: pairs
            .iter()
            .map(|p| vocab.encode(input.tokens(&p.left)))
            .collect(),
        hypotheses: pairs
            .iter()
            .map(|p| vocab.encode(input.tokens(&p.right)))
            .collect(),
        labels: pairs.iter().map(|p| p.relation.id()).collect(),
        transitions: Some((
            pairs.iter().map(|p| p.left.tree.to_transitions()).collect(),
            pairs
                .iter()
                .map(|p| p.right.tree.to_transitions())
                .collect(),
        )),
        groups: Some(pairs.iter().map(|p| p.operators).collect()),
    }
}

/// The vocabulary of `input`'s tokens over `pairs`.
pub fn logic_vocab(pairs: &[LogicPair], input: LogicInput) -> Vocab {
    arbor_data::vocab::word_vocab(
        pairs
            .iter()
            .flat_map(|p| [input.tokens(&p.left), input.tokens(&p.right)]),
        false,
    )
}

/// Per-operator-count accuracy from a report of [`evaluate`] over grouped data:
/// `operators → (accuracy, count)`.
pub fn per_operator_count(report: &EvalReport) -> BTreeMap<usize, (f64, usize)> {
    arbor_tasks::per_group(report)
}

/// Group ids of one evaluation pass that gives both the per-file and the per-operator-count
/// table: `file index · FILE_STRIDE + operators`.
const FILE_STRIDE: usize = 1 << 16;

/// The test data grouped by `(file, operators)` (see [`FILE_STRIDE`]).
fn by_file_and_operators(data: &NliData, splits: &LogicSplits) -> NliData {
    let groups = splits
        .test_files
        .iter()
        .enumerate()
        .flat_map(|(f, (_, n))| std::iter::repeat_n(f, *n))
        .zip(&splits.test)
        .map(|(f, p)| f * FILE_STRIDE + p.operators.min(FILE_STRIDE - 1))
        .collect();
    NliData {
        groups: Some(groups),
        ..data.clone()
    }
}

/// The per-file and per-operator-count tables of a report of [`by_file_and_operators`] data,
/// as `(key, correct, total)` rows.
type Rows = Vec<(String, usize, usize)>;

fn file_and_operator_tables(report: &EvalReport, splits: &LogicSplits) -> (Rows, Rows) {
    let mut by_file: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut by_ops: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for (g, (acc, n)) in per_operator_count(report) {
        let correct = (acc * n as f64).round() as usize;
        for (key, table) in [
            (g / FILE_STRIDE, &mut by_file),
            (g % FILE_STRIDE, &mut by_ops),
        ] {
            let e = table.entry(key).or_default();
            e.0 += correct;
            e.1 += n;
        }
    }
    let files = by_file
        .into_iter()
        .map(|(f, (c, n))| (splits.test_files[f].0.clone(), c, n))
        .collect();
    let ops = by_ops
        .into_iter()
        .map(|(k, (c, n))| (k.to_string(), c, n))
        .collect();
    (files, ops)
}

/// Prints a test report's accuracy, its per-operator-count `rows` (`(operators, correct,
/// total)`) and its transition accuracy where it has one.
pub fn print_table(title: &str, report: &EvalReport, rows: &[(String, usize, usize)]) {
    println!(
        "{title}: accuracy {:.4} ({} / {})",
        report.accuracy(),
        report.correct,
        report.total
    );
    println!("  operators  pairs  accuracy");
    for (g, c, n) in rows {
        println!("  {g:>9}  {n:>5}  {:.4}", *c as f64 / (*n).max(1) as f64);
    }
    if let Some(t) = report.extra.get("transition_accuracy") {
        println!("  transition accuracy (own parses vs gold): {t:.4}");
    }
}

struct Job {
    args: LogicArgs,
    splits: LogicSplits,
}

impl BackendJob for Job {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let Job { args, splits } = self;
        let a = &args.common;
        // This run's output folder, held until its result is written (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        let input = LogicInput::choose(a.encoder, args.no_brackets);
        let vocab = logic_vocab(&splits.train, input);
        let labels = Labels {
            names: Relation::ALL
                .iter()
                .map(|r| r.symbol().to_string())
                .collect(),
            lookup: WordLookup::plain(false),
            default_embed_std: EMBED_INIT_STD,
        };
        let eval = vec![
            ("valid".into(), to_data(&splits.valid, &vocab, input)),
            ("test".into(), to_data(&splits.test, &vocab, input)),
        ];
        let train_data = to_data(&splits.train, &vocab, input);
        let (model, task): (_, NliTask<Ad<B>>) =
            classification_task(a, &vocab, &labels, train_data, eval, &device)?;
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        for p in &splits.test {
            *counts.entry(p.operators).or_default() += 1;
        }
        eprintln!(
            "logic: {} training pairs (≤ {} operators), {} validation, {} test (operators: {}); \
             input {}; vocabulary {}; encoder {} (dim {}), device {}",
            splits.train.len(),
            args.max_train_operators,
            splits.valid.len(),
            splits.test.len(),
            counts
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            input.name(),
            vocab.len(),
            a.encoder,
            a.dim,
            a.device
        );
        let test = &task.splits[1].1;
        train_and_report::<B, _>(
            RunEnd::new("logic", a),
            &task,
            model,
            &device,
            |model, which, outcome, result| {
                if let Some(r) = outcome.evals.get("test") {
                    let rows: Vec<_> = per_operator_count(r)
                        .into_iter()
                        .map(|(g, (acc, n))| (g.to_string(), (acc * n as f64).round() as usize, n))
                        .collect();
                    print_table("test (last model)", r, &rows);
                }
                let parses = task.scores_parses();
                let valid_report = evaluate(model, &task.splits[0].1, 256, parses, &device);
                // One pass over the test set, grouped by (file, operators): both tables come
                // from it.
                let report = evaluate(
                    model,
                    &by_file_and_operators(test, &splits),
                    256,
                    parses,
                    &device,
                );
                let (files, ops) = file_and_operator_tables(&report, &splits);
                println!(
                    "valid accuracy {:.4} ({} / {})",
                    valid_report.accuracy(),
                    valid_report.correct,
                    valid_report.total
                );
                print_table(&format!("test ({which})"), &report, &ops);
                println!("  file      pairs  accuracy");
                for (f, c, n) in &files {
                    println!("  {f:<8}  {n:>5}  {:.4}", *c as f64 / (*n).max(1) as f64);
                }
                result.input = Some(input.name().into());
                result
                    .split("valid", &valid_report)
                    .split("test", &report)
                    .table(ScoreTable::new(
                        "test accuracy by file",
                        "test",
                        "file",
                        files,
                    ))
                    .table(ScoreTable::new(
                        "test accuracy by operator count",
                        "test",
                        "operators",
                        ops,
                    ));
                Ok(())
            },
            |model, _| {
                let shown: Vec<usize> = (0..test.len()).take(args.show_trees).collect();
                if shown.is_empty() {
                    return;
                }
                let (batch, _) = test.batch::<B>(&shown, &device);
                let out = model.forward(batch, arbor_encoders::Decisions::Argmax);
                if let Some((left, right)) = out.trees {
                    for (k, &i) in shown.iter().enumerate() {
                        let p = &splits.test[i];
                        print_tree(&format!("test {i} left"), &left[k], input.tokens(&p.left));
                        print_tree(
                            &format!("test {i} right"),
                            &right[k],
                            input.tokens(&p.right),
                        );
                    }
                }
            },
        )
    }
}

/// Runs the program.
pub fn run(mut args: LogicArgs) -> Result<()> {
    args.common.check()?;
    if !(args.valid_fraction.is_finite() && args.valid_fraction > 0.0 && args.valid_fraction < 1.0)
    {
        anyhow::bail!(
            "--valid-fraction {} must be a number in (0, 1): the share of the training pairs \
             held out for validation",
            args.valid_fraction
        );
    }
    args.common.device = args.common.engine.main_device(&args.common.device)?;
    let splits = load_splits(&args)?;
    let device = args.common.device.clone();
    run_on(&device, Job { args, splits })?
}

/// Whether `path` looks like a logic data directory (has `train0`).
pub fn has_logic_data(path: &Path) -> bool {
    path.join("train0").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_data::readers::logic::parse_logic_line;

    #[test]
    fn brackets_reach_every_encoder_that_does_not_follow_gold_trees() {
        use arbor_cells::names::VariantArray;
        for &kind in EncoderKind::VARIANTS {
            let input = LogicInput::choose(kind, false);
            assert_eq!(
                input == LogicInput::Leaves,
                kind.needs_transitions(),
                "{kind}"
            );
            assert_eq!(LogicInput::choose(kind, true), LogicInput::Leaves, "{kind}");
        }
        let pairs = vec![parse_logic_line("^\t( not ( a ( or b ) ) )\ta").unwrap()];
        let bracketed = logic_vocab(&pairs, LogicInput::Bracketed);
        let data = to_data(&pairs, &bracketed, LogicInput::Bracketed);
        let words: Vec<&str> = data.premises[0]
            .iter()
            .map(|&id| bracketed.tokens()[id as usize].as_str())
            .collect();
        assert_eq!(words.join(" "), "( not ( a ( or b ) ) )");
        let leaves = logic_vocab(&pairs, LogicInput::Leaves);
        assert!(leaves.get("(").is_none() && bracketed.get("(").is_some());
        let data = to_data(&pairs, &leaves, LogicInput::Leaves);
        assert_eq!(data.premises[0].len(), 4);
        // Transitions are the gold tree's either way (used only by the SPINN kinds).
        assert_eq!(data.transitions.unwrap().0[0].len(), 7);
    }
}
