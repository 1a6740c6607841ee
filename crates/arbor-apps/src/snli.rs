//! `cargo run --release --example snli`: train a (latent-)tree sentence encoder on SNLI.

use arbor_cells::ArborBackend;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use arbor_data::download::{ensure_snli_from, DownloadOptions, SnliPaths};
use arbor_data::readers::snli::{read_snli, NliLabel, SnliPair};
use arbor_data::vocab::Vocab;
use arbor_data::{DataError, ReadOptions};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use clap::Parser;

use crate::cli::TrainArgs;
use crate::common::{
    classification_task, load_checkpoint, parse_one, print_parse, print_tree, score_every_split,
    train_and_report, words, Labels, RunEnd, Trained, WordLookup,
};
use arbor_encoders::Encoder;
use arbor_heads::NliClassifier;
use arbor_tasks::{evaluate, ModelMeta, NliData, NliTask};
use arbor_train::device::{run_on, BackendJob};

/// Default `--embed-init-std` of this program: the Gumbel Tree-LSTM reference's `normal_(0, 0.01)`.
pub const EMBED_INIT_STD: f64 = 0.01;

/// The official SNLI 1.0 archive.
pub const SNLI_URL: &str = "https://nlp.stanford.edu/projects/snli/snli_1.0.zip";

/// Train, evaluate or parse with an NLI model on SNLI.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "snli",
    about = "Train a tree-inducing sentence encoder on SNLI"
)]
pub struct SnliArgs {
    /// Directory with the official snli_1.0_{train,dev,test}.jsonl (downloaded there when absent).
    #[arg(long, default_value = "datasets/snli")]
    pub data_dir: PathBuf,
    /// Training file (instead of --data-dir).
    #[arg(long)]
    pub train: Option<PathBuf>,
    /// Validation file.
    #[arg(long)]
    pub valid: Option<PathBuf>,
    /// Test file.
    #[arg(long)]
    pub test: Option<PathBuf>,
    /// Hold out the last N training pairs as the validation split (when no --valid is given).
    #[arg(long, conflicts_with = "valid")]
    pub holdout: Option<usize>,
    /// Only evaluate a trained model (see --checkpoint).
    #[arg(long, conflicts_with = "parse")]
    pub eval_only: bool,
    /// Checkpoint file or run directory to load (default: --out).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Print the tree a trained model builds for this sentence, and exit.
    #[arg(long)]
    pub parse: Option<String>,
    /// How many validation pairs to draw trees for after training.
    #[arg(long, default_value_t = 3)]
    pub show_trees: usize,
    /// Look a word missing from the vocabulary up lower-cased, then upper-cased, before `<unk>`
    /// (the SPINN port's lookup); recorded in the checkpoint. Imported SPINN checkpoints do it
    /// already; with --eval-only it turns it on for any checkpoint.
    #[arg(long)]
    pub case_fallback: bool,
    /// Where to download SNLI from.
    #[arg(long, default_value = SNLI_URL, hide = true)]
    pub snli_url: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: TrainArgs,
}

/// Splits of SNLI pairs, read from disk.
#[derive(Debug, Default)]
pub struct SnliSplits {
    /// Training pairs (empty in --eval-only mode).
    pub train: Vec<SnliPair>,
    /// Named evaluation splits; the first is used for model selection.
    pub eval: Vec<(String, Vec<SnliPair>)>,
}

fn read(path: &PathBuf, opts: ReadOptions) -> Result<Vec<SnliPair>> {
    let loaded = read_snli(path, opts)?;
    if loaded.records.is_empty() {
        bail!("{}: no labelled pairs", path.display());
    }
    Ok(loaded.records)
}

/// Finds and reads the splits the arguments name. With no file flags, uses --data-dir,
/// downloading SNLI there when it is absent; offline, the error says what to put where.
pub fn load_splits(args: &SnliArgs) -> Result<SnliSplits> {
    let (train, valid, test) =
        if args.train.is_some() || args.valid.is_some() || args.test.is_some() {
            (args.train.clone(), args.valid.clone(), args.test.clone())
        } else {
            let opts = DownloadOptions::default();
            match ensure_snli_from(&args.data_dir, &args.snli_url, &opts) {
                Ok(SnliPaths { train, dev, test }) => (train, dev, test),
                Err(DataError::Missing(_)) if !args.eval_only => {
                    let holdout = args.holdout.unwrap_or(SAMPLE_HOLDOUT);
                    eprintln!(
                        "SNLI is not in {} and cannot be downloaded: training on the built-in \
                         2,523-pair SNLI sample instead ({holdout} pairs held out for validation; \
                         CC BY-SA 4.0, see crates/arbor-data/data/SNLI-SAMPLE.md)",
                        args.data_dir.display()
                    );
                    return sample_splits(holdout);
                }
                Err(e) => return Err(e.into()),
            }
        };
    let opts = args.common.read_options();
    let mut splits = SnliSplits::default();
    if !args.eval_only {
        let path = train.context("no training file: pass --train FILE or --data-dir DIR")?;
        splits.train = read(&path, opts)?;
    }
    match (&valid, args.holdout) {
        (Some(v), _) => splits.eval.push(("valid".into(), read(v, opts)?)),
        (None, Some(n)) if !args.eval_only => {
            if n == 0 || n >= splits.train.len() {
                bail!("--holdout {n} must be between 1 and the number of training pairs - 1");
            }
            let held = splits.train.split_off(splits.train.len() - n);
            splits.eval.push(("valid".into(), held));
        }
        _ => {}
    }
    if let Some(t) = &test {
        splits.eval.push(("test".into(), read(t, opts)?));
    }
    if splits.eval.is_empty() {
        bail!("no evaluation split: pass --valid FILE, --test FILE or --holdout N");
    }
    Ok(splits)
}

/// Validation pairs held out of the built-in sample when `--holdout` is not given.
pub const SAMPLE_HOLDOUT: usize = 500;

/// The built-in SNLI sample ([`arbor_data::readers::snli::snli_sample`]) as training pairs and
/// a validation split of its last `holdout` pairs.
pub fn sample_splits(holdout: usize) -> Result<SnliSplits> {
    let mut train = arbor_data::readers::snli::snli_sample()?;
    if holdout == 0 || holdout >= train.len() {
        bail!(
            "--holdout {holdout} must be between 1 and the number of training pairs - 1 ({})",
            train.len() - 1
        );
    }
    let valid = train.split_off(train.len() - holdout);
    Ok(SnliSplits {
        train,
        eval: vec![("valid".into(), valid)],
    })
}

/// Token ids, labels and (when every pair has them) gold transitions.
pub fn to_data(pairs: &[SnliPair], vocab: &Vocab, lookup: WordLookup) -> NliData {
    let all_parsed = pairs.iter().all(SnliPair::has_parses);
    NliData {
        premises: pairs
            .iter()
            .map(|p| lookup.encode(vocab, &p.premise.tokens))
            .collect(),
        hypotheses: pairs
            .iter()
            .map(|p| lookup.encode(vocab, &p.hypothesis.tokens))
            .collect(),
        labels: pairs.iter().map(|p| p.label.id()).collect(),
        transitions: all_parsed.then(|| {
            (
                pairs
                    .iter()
                    .filter_map(|p| p.premise.transitions())
                    .collect(),
                pairs
                    .iter()
                    .filter_map(|p| p.hypothesis.transitions())
                    .collect(),
            )
        }),
        groups: None,
    }
}

const LOWERCASE: bool = true;

struct TrainJob {
    args: SnliArgs,
    splits: SnliSplits,
}

impl BackendJob for TrainJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let TrainJob { args, splits } = self;
        let a = &args.common;
        // This run's output folder, held until its result is written (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        let vocab = arbor_data::vocab::word_vocab(
            splits
                .train
                .iter()
                .flat_map(|p| [&p.premise.tokens[..], &p.hypothesis.tokens[..]]),
            LOWERCASE,
        );
        let lookup = WordLookup {
            lowercase: LOWERCASE,
            case_fallback: args.case_fallback,
        };
        let labels = Labels {
            names: NliLabel::ALL.iter().map(|l| l.name().to_string()).collect(),
            lookup,
            default_embed_std: EMBED_INIT_STD,
        };
        let eval: Vec<(String, NliData)> = splits
            .eval
            .iter()
            .map(|(n, p)| (n.clone(), to_data(p, &vocab, lookup)))
            .collect();
        let train_data = to_data(&splits.train, &vocab, lookup);
        let (model, task): (_, NliTask<Ad<B>>) =
            classification_task(a, &vocab, &labels, train_data, eval, &device)?;
        eprintln!(
            "SNLI: {} training pairs, {}; vocabulary {}; encoder {} (dim {}), device {}",
            task.train.len(),
            task.splits
                .iter()
                .map(|(n, d)| format!("{n} {}", d.len()))
                .collect::<Vec<_>>()
                .join(", "),
            vocab.len(),
            a.encoder,
            a.dim,
            args.common.device
        );
        let pairs = &splits.eval[0].1;
        train_and_report::<B, _>(
            RunEnd::new("snli", a)
                .with_evals()
                .with_best_on(&task.splits[0].0),
            &task,
            model,
            &device,
            score_every_split(&task.splits, task.scores_parses(), &device),
            |_, outcome| {
                // The last weights' trees.
                let inner = outcome.model.valid();
                let (name, data) = &task.splits[0];
                for (i, p) in pairs
                    .iter()
                    .enumerate()
                    .take(args.show_trees.min(data.len()))
                {
                    let sides = [
                        ("premise", &data.premises[i], &p.premise),
                        ("hypothesis", &data.hypotheses[i], &p.hypothesis),
                    ];
                    for (side, ids, sentence) in sides {
                        if let Some(t) = parse_one(&inner.embedding, &inner.encoder, ids, &device) {
                            let w = words(&sentence.tokens, LOWERCASE);
                            print_tree(&format!("{name} {side} {i}"), &t, &w);
                        }
                    }
                }
            },
        )
    }
}

/// Rebuilds a trained pair classifier from a checkpoint file (its model, metadata and
/// vocabulary), as `--eval-only` and `--parse` do ([`crate::common::load_classifier`]).
///
/// # Errors
/// When the file cannot be read or holds another kind of model.
pub fn load_trained<B: ArborBackend>(
    path: &std::path::Path,
    device: &B::Device,
) -> Result<(NliClassifier<B, Encoder<B>>, ModelMeta, Vocab)> {
    crate::common::load_classifier(path, device)
}

struct EvalJob {
    args: SnliArgs,
    splits: Option<SnliSplits>,
}

impl BackendJob for EvalJob {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        let dir = self
            .args
            .checkpoint
            .as_ref()
            .unwrap_or(&self.args.common.engine.out);
        let Trained {
            path,
            model,
            meta,
            vocab,
        } = load_checkpoint::<B, NliClassifier<B, Encoder<B>>>(dir, &device)?;
        if let Some(sentence) = &self.args.parse {
            return print_parse(
                &model.embedding,
                &model.encoder,
                &meta,
                &vocab,
                sentence,
                &device,
            );
        }
        println!("model: {}", path.display());
        let parses = meta.model.encoder().kind() == arbor_encoders::EncoderKind::Spinn;
        let mut lookup = WordLookup::of(&meta);
        lookup.case_fallback |= self.args.case_fallback;
        for (name, pairs) in self.splits.unwrap_or_default().eval {
            let data = to_data(&pairs, &vocab, lookup);
            let r = evaluate(&model, &data, 256, parses, &device);
            println!(
                "{name:>8} accuracy {:.4} ({} / {})",
                r.accuracy(),
                r.correct,
                r.total
            );
        }
        Ok(())
    }
}

/// For encoders that follow gold trees: keeps only the pairs whose premise and hypothesis both
/// have a binary parse, saying how many were dropped from each split.
pub fn keep_parsed(splits: &mut SnliSplits, kind: arbor_encoders::EncoderKind) -> Result<()> {
    let keep = |name: &str, pairs: &mut Vec<SnliPair>| -> Result<()> {
        let before = pairs.len();
        pairs.retain(SnliPair::has_parses);
        if before > pairs.len() {
            eprintln!(
                "{name}: kept {} of {before} pairs ({} dropped: no binary parse, which the {kind} \
                 encoder needs)",
                pairs.len(),
                before - pairs.len()
            );
        }
        if pairs.is_empty() && before > 0 {
            bail!("{name}: no pair has binary parses, which the {kind} encoder needs");
        }
        Ok(())
    };
    keep("train", &mut splits.train)?;
    for (name, pairs) in &mut splits.eval {
        keep(name, pairs)?;
    }
    Ok(())
}

/// Runs the program.
pub fn run(mut args: SnliArgs) -> Result<()> {
    args.common.check()?;
    args.common.device = args.common.engine.main_device(&args.common.device)?;
    let device = args.common.device.clone();
    if args.parse.is_some() {
        return run_on(&device, EvalJob { args, splits: None })?;
    }
    let mut splits = load_splits(&args)?;
    if args.common.encoder.needs_transitions() {
        keep_parsed(&mut splits, args.common.encoder)?;
    }
    if args.eval_only {
        return run_on(
            &device,
            EvalJob {
                args,
                splits: Some(splits),
            },
        )?;
    }
    run_on(&device, TrainJob { args, splits })?
}
