//! An R2D2 language model built and run by the authors' own code (ant-research/StructuredLM_RTDT
//! at `6edf2ac`, branch `r2d2`: its `R2D2` model, `ChartTable.get_token_tree` and
//! `lm_eval_buckets.BatchR2D2Predictor`, driven by `fixtures/authors/r2d2.py`) imports into
//! arbor, and the `r2d2` program's own `parse` and `eval` give the authors' trees and
//! pseudo-perplexity terms on 24 WikiText-2 sentences of 6 to 15 pieces, every one of which goes
//! through pruned induction (window 2). The importer is given what a user gives it: the state
//! dict, the vocabulary file and the flags the model's configuration needs (`--heads`,
//! `--window`).

use crate::common;

use std::path::{Path, PathBuf};

use arbor_apps::r2d2::{evaluate, Command, R2d2Args};
use arbor_data::wordpiece::WordPieceTokenizer;
use arbor_encoders::r2d2::{R2d2Lm, TreeRule};
use arbor_tasks::R2d2Meta;
use burn::backend::Flex;
use clap::Parser;
use common::{fixture, input, normalised_tree};

type B = Flex;
const NAME: &str = "authors-r2d2";
const TOL: f64 = 1e-5;

/// `arbor-convert import r2d2`, as a user runs it; returns the checkpoint's path.
fn import(dir: &Path, fx: &common::Fixture) -> PathBuf {
    let out = dir.join("r2d2.ckpt");
    let heads = fx.inputs["n_heads"].to_string();
    let window = fx.inputs["window"].to_string();
    common::arbor_convert(|c| {
        c.args(["import", "r2d2", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .arg("--vocab")
            .arg(fx.dir.join("vocab.txt"))
            .args(["--heads", &heads, "--window", &window, "--out"])
            .arg(&out);
    });
    out
}

/// `r2d2 parse --checkpoint CKPT --input SENTENCES [extra]`: its output lines.
fn parse(ckpt: &Path, sentences: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut argv = vec![
        "r2d2",
        "parse",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        sentences.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--device",
        "flex",
    ];
    argv.extend_from_slice(extra);
    arbor_apps::r2d2::run(R2d2Args::try_parse_from(argv).unwrap()).unwrap();
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(normalised_tree)
        .collect()
}

/// How many of `trees` equal the reference's, and the first one that differs.
fn agreement(trees: &[String], reference: &[String]) -> (usize, Option<usize>) {
    assert_eq!(trees.len(), reference.len());
    let same: Vec<bool> = trees
        .iter()
        .zip(reference)
        .map(|(a, r)| *a == normalised_tree(r))
        .collect();
    (
        same.iter().filter(|&&s| s).count(),
        same.iter().position(|&s| !s),
    )
}

#[test]
fn the_r2d2_program_parses_and_evaluates_an_imported_model_as_the_authors_code_does() {
    let fx = fixture(NAME);
    let device = Default::default();
    let texts: Vec<String> = input(&fx.inputs["texts"]);
    let ids: Vec<Vec<u32>> = input(&fx.inputs["ids"]);
    let reference_trees: Vec<String> = input(&fx.inputs["trees"]);
    let merges: Vec<usize> = input(&fx.inputs["merges"]);
    let n = texts.len();
    assert!(merges.iter().all(|&m| m > 0), "every sentence is pruned");

    let tmp = tempfile::tempdir().unwrap();
    let ckpt = import(tmp.path(), &fx);

    // The checkpoint records the reference's tree rule; the tokenizer it stores gives the ids
    // the authors' model was run on.
    let file = arbor_train::CheckpointFile::load(&ckpt).unwrap();
    let meta = R2d2Meta::from_checkpoint(&file.meta).unwrap();
    assert_eq!(meta.tree_rule, TreeRule::Reference);
    assert_eq!(meta.model.encoder.window, 2);
    let tok = WordPieceTokenizer::from_pieces(&meta.vocab, true).unwrap();
    for (text, want) in texts.iter().zip(&ids) {
        assert_eq!(&tok.encode(text).unwrap().ids, want, "{text}");
    }

    // Trees: `r2d2 parse`, with the rule the checkpoint records, then each rule by name.
    let sentences = tmp.path().join("sentences.txt");
    std::fs::write(&sentences, texts.join("\n") + "\n").unwrap();
    let out = tmp.path().join("trees.txt");
    let recorded = parse(&ckpt, &sentences, &out, &[]);
    let (same, first) = agreement(&recorded, &reference_trees);
    assert_eq!(
        same,
        n,
        "trees equal to the reference's get_token_tree: {same} of {n}; first difference, \
         sentence {first:?}:\n arbor     {}\n reference {}",
        first.map_or("", |i| &recorded[i]),
        first.map_or("", |i| &reference_trees[i])
    );
    let by_name = parse(&ckpt, &sentences, &out, &["--tree-rule", "reference"]);
    assert_eq!(by_name, recorded);
    let arbor = parse(&ckpt, &sentences, &out, &["--tree-rule", "arbor"]);
    let (same_arbor, _) = agreement(&arbor, &reference_trees);
    eprintln!(
        "{NAME}: trees equal to the reference's: {same} of {n} with --tree-rule reference, \
         {same_arbor} of {n} with --tree-rule arbor"
    );
    assert!(
        same_arbor < n,
        "arbor's rule gives the reference's trees on every sentence: the fixture does not tell \
         the rules apart"
    );

    // PPPL terms: the model as the program loads it, with the program's batching (4 sentences).
    let (model, _) =
        arbor_train::load_model::<B, _>(meta.model.init::<B>(&device), &ckpt, &device).unwrap();
    let model: R2d2Lm<B> = model;
    let mut worst = 0.0f64;
    let mut nll_sum = 0.0f64;
    for (chunk_at, chunk) in ids.chunks(4).enumerate() {
        let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        for (k, terms) in model.pseudo_nll(&refs).iter().enumerate() {
            let b = chunk_at * 4 + k;
            let want = fx.expected[&format!("s{b}_pppl_nll")].values();
            assert_eq!(terms.len(), want.len(), "sentence {b}");
            for (i, (a, w)) in terms.iter().zip(want).enumerate() {
                let d = (a - f64::from(*w)).abs();
                assert!(
                    d <= TOL,
                    "sentence {b}, token {i}: NLL {a} in arbor, {w} in the reference"
                );
                worst = worst.max(d);
            }
            nll_sum += terms.iter().sum::<f64>();
        }
    }
    eprintln!("{NAME}: largest |difference| of a PPPL term {worst:e}");

    // `r2d2 eval` on the same sentences, one per line (`--prep reference`: every line).
    let text = tmp.path().join("text.txt");
    std::fs::write(&text, texts.join("\n") + "\n").unwrap();
    let args = R2d2Args::try_parse_from([
        "r2d2",
        "eval",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--text",
        text.to_str().unwrap(),
        "--prep",
        "reference",
        "--device",
        "flex",
    ])
    .unwrap();
    let Command::Eval(args) = args.command else {
        unreachable!("parsed an eval command")
    };
    let pppl = evaluate(args).unwrap();
    let tokens: usize = ids.iter().map(Vec::len).sum();
    assert_eq!((pppl.sentences, pppl.tokens), (n as u64, tokens as u64));
    let ref_sum: f64 = (0..n)
        .flat_map(|b| fx.expected[&format!("s{b}_pppl_nll")].values().to_vec())
        .map(f64::from)
        .sum();
    assert!((pppl.nll_sum - nll_sum).abs() <= 1e-9 * nll_sum.abs().max(1.0));
    assert!(
        (pppl.nll_sum - ref_sum).abs() <= TOL * tokens as f64,
        "Σ NLL {} in arbor, {ref_sum} in the reference",
        pppl.nll_sum
    );
    // The number lm_eval_buckets.py prints: the mean over sentences of each sentence's mean NLL.
    let ref_mean = fx.expected["pppl_mean"]
        .values()
        .iter()
        .map(|&x| f64::from(x))
        .sum::<f64>()
        / n as f64;
    assert!(
        (pppl.mean_sentence_nll() - ref_mean).abs() <= TOL,
        "mean sentence NLL {} in arbor, {ref_mean} in the reference",
        pppl.mean_sentence_nll()
    );
}

#[test]
fn arbor_trained_checkpoints_without_a_recorded_rule_keep_arbor_s_rule() {
    let fx = fixture(NAME);
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = import(tmp.path(), &fx);
    let file = arbor_train::CheckpointFile::load(&ckpt).unwrap();
    let mut meta = file.meta.clone();
    assert_eq!(meta["task"]["tree_rule"], "reference");
    meta["task"]
        .as_object_mut()
        .unwrap()
        .remove("tree_rule")
        .unwrap();
    assert_eq!(
        R2d2Meta::from_checkpoint(&meta).unwrap().tree_rule,
        TreeRule::Arbor
    );
}
