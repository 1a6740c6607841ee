//! `arbor-parse-f1`: unsupervised parsing F1 of predicted trees against a gold treebank, plus
//! left-branching, right-branching, balanced and random baselines. See `docs/data.md`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use arbor_data::metrics::F1Convention;
use arbor_data::parseval::{baselines, load_gold, read_predictions, score};
use arbor_data::tree::{DigitNorm, TextNorm, TreePrep};
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Convention {
    /// Sentence-level mean, whole-sentence span excluded (compound PCFG).
    Sentence,
    /// Corpus-level summed counts, whole-sentence span excluded.
    Corpus,
    /// Corpus-level, whole-sentence span included (EVALB-style; ON-LSTM/FastTrees papers).
    Evalb,
    /// ON-LSTM's `test_phrase_grammar.py`: sentence-level mean, whole-sentence span excluded,
    /// every sentence counted (one without spans scores 1).
    PhraseGrammar,
    /// All of the above.
    All,
}

/// Unsupervised parsing F1 against a gold treebank (one tree per line, e.g. WSJ `.clean`).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Gold treebank: one labelled tree per line.
    #[arg(long)]
    gold: PathBuf,
    /// Predicted trees: one unlabelled bracketed tree per line, over the preprocessed gold words,
    /// aligned with the gold file (one line per gold tree, or per kept sentence).
    #[arg(long, required_unless_present = "baselines_only")]
    pred: Option<PathBuf>,
    /// Which convention(s) to print.
    #[arg(long, value_enum, default_value = "all")]
    convention: Convention,
    /// Keep punctuation (by default PTB punctuation tags and -NONE- traces are removed).
    #[arg(long)]
    keep_punct: bool,
    /// Keep unary chains (by default they are collapsed; spans are the same either way).
    #[arg(long)]
    keep_unary: bool,
    /// Lower-case gold words.
    #[arg(long)]
    lowercase: bool,
    /// Replace digit runs in gold words with N.
    #[arg(long)]
    digits_to_n: bool,
    /// Only score sentences of at most this many words after preprocessing (10 for WSJ10).
    #[arg(long)]
    max_len: Option<usize>,
    /// Only print the baselines (no prediction file needed).
    #[arg(long)]
    baselines_only: bool,
    /// Skip the baselines.
    #[arg(long, conflicts_with = "baselines_only")]
    no_baselines: bool,
    /// Number of random-tree seeds to average (seeds first_seed, first_seed+1, ...).
    #[arg(long, default_value_t = 5)]
    random_seeds: u64,
    /// First random seed.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let prep = TreePrep {
        remove_punctuation: !args.keep_punct,
        collapse_unary: !args.keep_unary,
        strip_function_tags: true,
        norm: TextNorm {
            lowercase: args.lowercase,
            digits: if args.digits_to_n {
                DigitNorm::RunsToN
            } else {
                DigitNorm::Keep
            },
        },
    };
    let gold = load_gold(&args.gold, &prep, args.max_len)
        .with_context(|| format!("reading gold trees {}", args.gold.display()))?;
    if gold.sentences.is_empty() {
        bail!("{}: no sentence left to score", args.gold.display());
    }
    let convs: Vec<F1Convention> = match args.convention {
        Convention::Sentence => vec![F1Convention::Sentence],
        Convention::Corpus => vec![F1Convention::Corpus],
        Convention::Evalb => vec![F1Convention::Evalb],
        Convention::PhraseGrammar => vec![F1Convention::PhraseGrammar],
        Convention::All => F1Convention::ALL.to_vec(),
    };
    let scored = match (&args.pred, args.baselines_only) {
        (Some(pred), false) => Some((pred, score(&gold, &read_predictions(pred, &gold)?))),
        _ => None,
    };
    println!(
        "gold: {} ({} trees; {} kept, {} empty after preprocessing, {} longer than max-len)",
        args.gold.display(),
        gold.total_trees,
        gold.sentences.len(),
        gold.dropped_empty,
        gold.dropped_long
    );
    println!(
        "preprocessing: punctuation {}, unaries {}, lowercase {}, max-len {}",
        if args.keep_punct { "kept" } else { "removed" },
        if args.keep_unary { "kept" } else { "collapsed" },
        args.lowercase,
        args.max_len
            .map(|m| m.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let single = gold.sentences.iter().filter(|s| s.words.len() < 2).count();
    if single > 0 {
        println!(
            "note: {single} one-word sentences carry no span: skipped by every convention except \
             phrase-grammar, which scores each 1 (as test_phrase_grammar.py does)"
        );
    }
    let mut header = format!("{:<28}", "F1 (%)");
    for c in &convs {
        header.push_str(&format!(" {:>18}", c.name()));
    }
    println!("{header}");
    if let Some((pred, acc)) = &scored {
        {
            let mut line = format!(
                "{:<28}",
                pred.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            );
            for &c in &convs {
                line.push_str(&format!(" {:>18.2}", acc.percent(c)));
            }
            println!("{line}");
        }
    }
    if !args.no_baselines {
        let seeds: Vec<u64> = (0..args.random_seeds)
            .map(|i| args.first_seed + i)
            .collect();
        for row in baselines(&gold, &seeds) {
            let mut line = format!("{:<28}", row.name);
            for &c in &convs {
                let i = F1Convention::ALL
                    .iter()
                    .position(|x| *x == c)
                    .expect("known");
                let v = row.f1[i].1;
                match &row.sd {
                    Some(sd) => {
                        line.push_str(&format!(" {:>18}", format!("{v:.2} ± {:.2}", sd[i])))
                    }
                    None => line.push_str(&format!(" {v:>18.2}")),
                }
            }
            println!("{line}");
        }
    }
    Ok(())
}
