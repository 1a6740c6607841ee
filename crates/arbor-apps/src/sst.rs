//! `cargo run --release --example sst`: the same engine on SST-2, from GLUE-style tsv files or
//! from the PTB-style SST trees (neutral sentences dropped; gold transitions kept).

use arbor_cells::ArborBackend;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use arbor_data::readers::sst::{read_sst2_tsv, read_sst_trees, sst2_label, Sst2Example};
use arbor_data::tree::Transition;
use arbor_data::ReadOptions;
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use clap::Parser;

use crate::cli::TrainArgs;
use crate::common::{
    classification_task, load_checkpoint, parse_one, print_parse, print_tree, score_every_split,
    train_and_report, words, Labels, RunEnd, Trained, WordLookup,
};
use arbor_encoders::Encoder;
use arbor_heads::SentenceClassifier;
use arbor_tasks::{ClassifyData, ClassifyTask};
use arbor_train::device::{run_on, BackendJob};

/// Default `--embed-init-std` of this program: the Gumbel Tree-LSTM reference's `normal_(0, 0.01)`; on SST-2 a small start also learns faster than N(0, 1), docs/log/results.md.
pub const EMBED_INIT_STD: f64 = 0.01;

/// Train a sentence classifier on SST-2.
#[derive(Debug, Clone, Parser)]
#[command(name = "sst", about = "Train a sentence encoder on SST-2")]
pub struct SstArgs {
    /// Training file: SST-2 tsv (`*.tsv`) or SST PTB-style trees (anything else).
    #[arg(long, default_value = "datasets/sst2/train.tsv")]
    pub train: PathBuf,
    /// Validation file, same formats.
    #[arg(long, default_value = "datasets/sst2/dev.tsv")]
    pub valid: PathBuf,
    /// Optional test file.
    #[arg(long)]
    pub test: Option<PathBuf>,
    /// How many validation sentences to draw trees for after training.
    #[arg(long, default_value_t = 3)]
    pub show_trees: usize,
    /// Only evaluate a trained model (see --checkpoint) on --valid and --test.
    #[arg(long)]
    pub eval_only: bool,
    /// Checkpoint file or run directory to load (default: --out).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Print the tree a trained model builds for this sentence, and exit.
    #[arg(long)]
    pub parse: Option<String>,
    /// Look a word missing from the vocabulary up lower-cased, then upper-cased, before `<unk>`
    /// (the SPINN port's lookup); recorded in the checkpoint. Imported SPINN checkpoints do it
    /// already; with --eval-only it turns it on for any checkpoint.
    #[arg(long)]
    pub case_fallback: bool,
    /// Train on every labelled phrase of the training trees (each constituent down to the single
    /// words, neutral ones dropped), as Tai et al. (2015) and the Gumbel Tree-LSTM reference do;
    /// validation and test stay whole sentences. Needs a tree file for --train.
    #[arg(long)]
    pub phrases: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: TrainArgs,
}

/// SST-2 examples with their gold transitions when the file holds trees.
pub struct SstSplit {
    /// The sentences and binary labels.
    pub examples: Vec<Sst2Example>,
    /// Gold transitions (tree files only).
    pub transitions: Option<Vec<Vec<Transition>>>,
}

/// Reads an SST-2 file of either format: its sentences, or with `phrases` (tree files only) every
/// labelled phrase of every tree ([`arbor_data::readers::sst::SstTree::phrases`]).
pub fn read_split(path: &Path, phrases: bool, opts: ReadOptions) -> Result<SstSplit> {
    if !path.exists() {
        bail!(
            "{} not found. Get SST-2 with `cargo run -p arbor-apps --bin arbor-download -- sst2` \
             or pass --train/--valid (tsv or SST tree files); see datasets/README.md",
            path.display()
        );
    }
    let tsv = path.extension().is_some_and(|e| e == "tsv");
    if phrases && tsv {
        bail!(
            "{}: --phrases needs the PTB-style tree file (`(3 (2 It) ...)`), whose nodes carry the \
             phrase labels; a tsv has sentences only",
            path.display()
        );
    }
    let split = if tsv {
        SstSplit {
            examples: read_sst2_tsv(path, opts)?.records,
            transitions: None,
        }
    } else {
        let mut trees = read_sst_trees(path, opts)?.records;
        if phrases {
            trees = trees.iter().flat_map(|t| t.phrases()).collect();
        }
        let kept: Vec<_> = trees
            .iter()
            .filter(|t| sst2_label(t.label).is_some())
            .collect();
        SstSplit {
            examples: kept
                .iter()
                .map(|t| Sst2Example {
                    tokens: t.tokens(),
                    label: t.binary_label().unwrap_or_default(),
                })
                .collect(),
            transitions: Some(kept.iter().map(|t| t.transitions()).collect()),
        }
    };
    if split.examples.is_empty() {
        bail!("{}: no labelled sentences", path.display());
    }
    Ok(split)
}

const LOWERCASE: bool = true;

fn to_data(split: &SstSplit, vocab: &arbor_data::vocab::Vocab, lookup: WordLookup) -> ClassifyData {
    ClassifyData {
        sentences: split
            .examples
            .iter()
            .map(|e| lookup.encode(vocab, &e.tokens))
            .collect(),
        labels: split.examples.iter().map(|e| e.label as usize).collect(),
        transitions: split.transitions.clone(),
        groups: None,
    }
}

struct Job {
    args: SstArgs,
    train: SstSplit,
    eval: Vec<(String, SstSplit)>,
}

impl BackendJob for Job {
    type Output = Result<()>;

    fn run<B: ArborBackend>(self, device: B::Device) -> Result<()> {
        type Ad<B> = Autodiff<B>;
        let a = &self.args.common;
        // This run's output folder, held until its result is written (arbor_train::outdir).
        let _lock = a.engine.claim_out()?;
        let vocab = arbor_data::vocab::word_vocab(
            self.train.examples.iter().map(|e| &e.tokens[..]),
            LOWERCASE,
        );
        let lookup = WordLookup {
            lowercase: LOWERCASE,
            case_fallback: self.args.case_fallback,
        };
        let labels = Labels {
            names: vec!["negative".into(), "positive".into()],
            lookup,
            default_embed_std: EMBED_INIT_STD,
        };
        let eval = self
            .eval
            .iter()
            .map(|(n, s)| (n.clone(), to_data(s, &vocab, lookup)))
            .collect();
        let train_data = to_data(&self.train, &vocab, lookup);
        let (model, task): (_, ClassifyTask<Ad<B>>) =
            classification_task(a, &vocab, &labels, train_data, eval, &device)?;
        eprintln!(
            "SST-2: {} training sentences, {} validation; vocabulary {}; encoder {} (dim {}), device {}",
            task.train.len(),
            task.splits[0].1.len(),
            vocab.len(),
            a.encoder,
            a.dim,
            a.device
        );
        train_and_report::<B, _>(
            RunEnd::new("sst", a).with_evals(),
            &task,
            model,
            &device,
            score_every_split(&task.splits, task.scores_parses(), &device),
            |_, outcome| {
                // The last weights' trees.
                let inner = outcome.model.valid();
                let (name, data) = &task.splits[0];
                for i in 0..self.args.show_trees.min(data.len()) {
                    if let Some(t) = parse_one(
                        &inner.embedding,
                        &inner.encoder,
                        &data.sentences[i],
                        &device,
                    ) {
                        let w = words(&self.eval[0].1.examples[i].tokens, LOWERCASE);
                        print_tree(&format!("{name} sentence {i}"), &t, &w);
                    }
                }
            },
        )
    }
}

/// Scores a trained checkpoint (`--eval-only`) or draws one sentence's tree (`--parse`).
struct EvalJob {
    args: SstArgs,
    eval: Vec<(String, SstSplit)>,
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
        } = load_checkpoint::<B, SentenceClassifier<B, Encoder<B>>>(dir, &device)?;
        let encoder = meta.model.encoder();
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
        let mut lookup = WordLookup::of(&meta);
        lookup.case_fallback |= self.args.case_fallback;
        for (name, split) in &self.eval {
            let data = to_data(split, &vocab, lookup);
            if encoder.kind().needs_transitions() && data.transitions.is_none() {
                bail!(
                    "{name}: the {} encoder follows gold trees; pass SST tree files, not tsv",
                    encoder.kind()
                );
            }
            let r = arbor_tasks::evaluate(&model, &data, 256, false, &device);
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

/// Runs the program.
pub fn run(mut args: SstArgs) -> Result<()> {
    args.common.check()?;
    args.common.device = args.common.engine.main_device(&args.common.device)?;
    let device = args.common.device.clone();
    if args.parse.is_some() {
        return run_on(
            &device,
            EvalJob {
                args,
                eval: Vec::new(),
            },
        )?;
    }
    let mut eval = vec![(
        "valid".to_string(),
        read_split(&args.valid, false, args.common.read_options())?,
    )];
    if let Some(t) = &args.test {
        eval.push((
            "test".into(),
            read_split(t, false, args.common.read_options())?,
        ));
    }
    if args.eval_only {
        return run_on(&device, EvalJob { args, eval })?;
    }
    let train = read_split(&args.train, args.phrases, args.common.read_options())?;
    if args.phrases {
        eprintln!(
            "--phrases: {} labelled non-neutral phrases from {}",
            train.examples.len(),
            args.train.display()
        );
    }
    if args.common.encoder.needs_transitions() {
        for (name, split) in
            std::iter::once(("train", &train)).chain(eval.iter().map(|(n, s)| (n.as_str(), s)))
        {
            if split.transitions.is_none() {
                bail!(
                    "{name}: the {} encoder follows gold trees; pass SST tree files (PTB-style \
                     `(3 (2 It) ...)`), not tsv",
                    args.common.encoder
                );
            }
        }
    }
    run_on(&device, Job { args, train, eval })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_multiply_the_training_examples_and_need_trees() {
        let dir = tempfile::tempdir().unwrap();
        let trees = dir.path().join("train.txt");
        std::fs::write(
            &trees,
            "(3 (2 It) (4 (4 (2 's) (4 good)) (2 .)))\n(1 (1 bad) (2 film))\n(2 (2 so) (2 so))\n",
        )
        .unwrap();
        // Sentences: the neutral third one is dropped.
        let s = read_split(&trees, false, ReadOptions::strict()).unwrap();
        assert_eq!(s.examples.len(), 2);
        // Phrases: 4 non-neutral of the first tree's 7, 2 of the second's 3, none of the third's.
        let p = read_split(&trees, true, ReadOptions::strict()).unwrap();
        assert_eq!(p.examples.len(), 6);
        let labels: Vec<u8> = p.examples.iter().map(|e| e.label).collect();
        assert_eq!(labels, vec![1, 1, 1, 1, 0, 0]);
        assert_eq!(p.transitions.as_ref().unwrap().len(), 6);
        let tsv = dir.path().join("train.tsv");
        std::fs::write(&tsv, "sentence\tlabel\ngood fun\t1\n").unwrap();
        let err = match read_split(&tsv, true, ReadOptions::strict()) {
            Ok(_) => panic!("--phrases read a tsv"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("train.tsv") && err.contains("--phrases"),
            "{err}"
        );
    }

    #[test]
    fn case_fallback_is_recorded_in_the_checkpoint() {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("train.tsv");
        std::fs::write(
            &data,
            "sentence\tlabel\ngood fun\t1\nbad film\t0\nvery good\t1\nso bad\t0\n",
        )
        .unwrap();
        let out = dir.path().join("run");
        let d = data.to_str().unwrap();
        let o = out.to_str().unwrap();
        let flags = [
            "sst",
            "--train",
            d,
            "--valid",
            d,
            "--encoder",
            "lstm",
            "--dim",
            "8",
            "--batch-size",
            "2",
            "--max-steps",
            "2",
            "--show-trees",
            "0",
            "--out",
            o,
            "--quiet",
        ];
        run(SstArgs::try_parse_from(flags).unwrap()).unwrap();
        let plain = crate::common::checkpoint_meta(&out.join("last.ckpt")).unwrap();
        assert!(plain.lowercase && !plain.case_fallback);
        let mut with = flags.to_vec();
        with.extend(["--case-fallback", "--overwrite"]);
        run(SstArgs::try_parse_from(with).unwrap()).unwrap();
        let meta = crate::common::checkpoint_meta(&out.join("last.ckpt")).unwrap();
        assert!(meta.lowercase && meta.case_fallback);
    }
}
