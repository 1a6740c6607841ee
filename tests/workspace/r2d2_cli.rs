//! The r2d2 program end to end on a tiny WikiText-style fixture written here: `pretrain`
//! (vocabulary training, metrics, checkpoints, resume), `eval` (both PPPL aggregations) and
//! `parse` (piece-level and word-level brackets, gold treebank input), plus clear errors on
//! bad input.

use std::path::Path;
use std::sync::Mutex;

use arbor_apps::r2d2::{evaluate, run, Command, R2d2Args};
use arbor_data::tree::BinaryTree;
use clap::Parser;

/// Training uses the process-global backend generator.
static TRAINING: Mutex<()> = Mutex::new(());

const TRAIN: &str = " = Cats = \n\n \
The cat sat on the mat . The dog sat on the log . A cat saw a dog !\n\n \
 = = Dogs = = \n\n \
The dog saw the cat . A dog sat on a mat . The cats sat on the logs .\n \
Dogs and cats saw the mat . The mat saw nothing !\n";

const VALID: &str = " = Valid = \n\n The cat saw the log . A dog sat .\n";

const GOLD: &str =
    "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))\n\
(TOP (S (NP (DT A) (NN dog)) (VP (VBD saw) (NP (DT the) (NNS cats)))))\n";

fn write_fixture(dir: &Path) {
    std::fs::write(dir.join("train.txt"), TRAIN).unwrap();
    std::fs::write(dir.join("valid.txt"), VALID).unwrap();
    std::fs::write(dir.join("gold.txt"), GOLD).unwrap();
    std::fs::write(dir.join("input.txt"), "the cats sat\n\nthe dog saw a mat\n").unwrap();
}

fn args(v: &[&str]) -> R2d2Args {
    let mut all = vec!["r2d2"];
    all.extend_from_slice(v);
    R2d2Args::try_parse_from(all).unwrap()
}

fn pretrain(dir: &Path, out: &Path, extra: &[&str]) -> anyhow::Result<()> {
    pretrain_on(&dir.join("train.txt"), dir, out, extra)
}

fn pretrain_on(train: &Path, dir: &Path, out: &Path, extra: &[&str]) -> anyhow::Result<()> {
    let valid = dir.join("valid.txt");
    let mut v = vec![
        "pretrain",
        "--train",
        train.to_str().unwrap(),
        "--valid",
        valid.to_str().unwrap(),
        "--vocab-size",
        "60",
        "--dim",
        "8",
        "--layers",
        "1",
        "--heads",
        "2",
        "--window",
        "2",
        "--batch-size",
        "4",
        "--max-tokens",
        "64",
        "--warmup",
        "2",
        "--eval-every",
        "2",
        "--epochs",
        "20",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    v.extend_from_slice(extra);
    run(args(&v))
}

/// `(kind, step)` of every metrics record.
fn metric_steps(out: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["kind"].as_str().unwrap().to_string(),
                v["step"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn pretrain_resume_eval_and_parse() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("run");

    // Pretrain 3 steps, then resume to 6: the second run continues the first.
    pretrain(dir.path(), &out, &["--max-steps", "3"]).unwrap();
    for f in ["vocab.txt", "last.ckpt", "best.ckpt", "metrics.jsonl"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let vocab = std::fs::read_to_string(out.join("vocab.txt")).unwrap();
    assert!(vocab.lines().any(|l| l == "[UNK]") && vocab.lines().any(|l| l == "cat"));
    // The trained vocabulary has R2D2's special tokens, so the model ties them to its rows.
    let meta = arbor_train::CheckpointFile::load(&out.join("last.ckpt"))
        .unwrap()
        .meta;
    let meta = arbor_tasks::R2d2Meta::from_checkpoint(&meta).unwrap();
    let ids = meta
        .model
        .special_ids
        .expect("special ids from the vocabulary");
    assert_eq!(meta.vocab[ids.bos as usize], "[BOS]");
    assert_eq!(meta.vocab[ids.sum as usize], "[SUM]");
    assert_eq!(meta.vocab[ids.cls as usize], "[CLS]");
    let first = metric_steps(&out);
    assert!(first.iter().any(|(k, s)| k == "eval:valid" && *s == 2));
    assert!(first.iter().all(|(_, s)| *s <= 3));
    pretrain(dir.path(), &out, &["--max-steps", "6", "--resume"]).unwrap();
    let second = metric_steps(&out);
    assert!(second.iter().any(|(k, s)| k == "eval:valid" && *s == 4));
    assert!(second.iter().any(|(k, s)| k == "eval:valid" && *s == 6));
    assert!(
        second
            .iter()
            .filter(|(k, s)| k == "eval:valid" && *s == 2)
            .count()
            == 1,
        "resuming must not redo step 2's evaluation: {second:?}"
    );
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(text.lines().all(|l| !l.contains("NaN")));

    // eval: both aggregations, finite, over every valid sentence.
    let ckpt = out.join("best.ckpt");
    let valid = dir.path().join("valid.txt");
    let Command::Eval(eval_args) = args(&[
        "eval",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--text",
        valid.to_str().unwrap(),
    ])
    .command
    else {
        unreachable!()
    };
    let pppl = evaluate(eval_args).unwrap();
    assert_eq!(pppl.sentences, 2);
    assert!(pppl.tokens >= 9, "{pppl:?}");
    // The reference's preparation scores every non-blank line, the heading too, and keeps the
    // short paragraph whole: two "sentences" again, with the heading's pieces on top.
    let Command::Eval(ref_args) = args(&[
        "eval",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--text",
        valid.to_str().unwrap(),
        "--prep",
        "reference",
    ])
    .command
    else {
        unreachable!()
    };
    let reference = evaluate(ref_args).unwrap();
    assert_eq!(reference.sentences, 2);
    assert!(reference.tokens > pppl.tokens, "{reference:?} vs {pppl:?}");
    assert!(pppl.corpus_pppl().is_finite() && pppl.corpus_pppl() > 1.0);
    assert!(pppl.mean_sentence_nll().is_finite() && pppl.mean_sentence_nll() > 0.0);

    // parse --input at word level: one tree per non-empty line, over exactly its words.
    let input = dir.path().join("input.txt");
    let trees = dir.path().join("trees.txt");
    run(args(&[
        "parse",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--word-level",
        "--output",
        trees.to_str().unwrap(),
    ]))
    .unwrap();
    let lines: Vec<String> = std::fs::read_to_string(&trees)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, words) in lines.iter().zip([
        vec!["the", "cats", "sat"],
        vec!["the", "dog", "saw", "a", "mat"],
    ]) {
        let (tree, leaves) = BinaryTree::parse(line).unwrap();
        assert_eq!(leaves, words, "{line}");
        assert_eq!(tree.num_leaves(), words.len());
    }

    // A sentence over --max-len is refused before anything is parsed, naming it.
    let refused_out = dir.path().join("refused.txt");
    let e = run(args(&[
        "parse",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--max-len",
        "4",
        "--output",
        refused_out.to_str().unwrap(),
    ]))
    .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("input.txt: sentence 2") && msg.contains("over --max-len 4"),
        "{msg}"
    );

    // parse --gold: the treebank's sentences after evaluation preprocessing (punctuation
    // dropped), word level.
    let gold = dir.path().join("gold.txt");
    let gold_trees = dir.path().join("gold_trees.txt");
    run(args(&[
        "parse",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--gold",
        gold.to_str().unwrap(),
        "--output",
        gold_trees.to_str().unwrap(),
    ]))
    .unwrap();
    let lines: Vec<String> = std::fs::read_to_string(&gold_trees)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 2);
    let (_, leaves) = BinaryTree::parse(&lines[0]).unwrap();
    assert_eq!(leaves, ["The", "cat", "sat", "on", "the", "mat"]);
}

#[test]
fn bad_input_is_a_clear_error() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("run");
    // A missing training file is named.
    let missing = dir.path().join("nope.txt");
    let err = pretrain_on(&missing, dir.path(), &out, &["--max-steps", "1"]).unwrap_err();
    assert!(format!("{err:#}").contains("nope.txt"), "{err:#}");
    // A checkpoint that is not one is named.
    let junk = dir.path().join("junk.ckpt");
    std::fs::write(&junk, "not a checkpoint").unwrap();
    let err = run(args(&[
        "eval",
        "--checkpoint",
        junk.to_str().unwrap(),
        "--text",
        dir.path().join("valid.txt").to_str().unwrap(),
    ]))
    .unwrap_err();
    assert!(format!("{err:#}").contains("junk.ckpt"), "{err:#}");
    // The reference's preparation counts pieces of a given vocabulary.
    let err = pretrain(dir.path(), &out, &["--prep", "reference"]).unwrap_err();
    assert!(
        format!("{err:#}").contains("--prep reference needs --vocab"),
        "{err:#}"
    );
}
