//! Gumbel Tree-LSTM SNLI models built and run by the authors' own code
//! (jihunchoi/unsupervised-treelstm at `47623f5`: its `SNLIModel`, `build_vocab.py`,
//! `dump_dataset.py` and `evaluate.py`'s batching, driven by `fixtures/authors/gumbel_snli.py`)
//! import into arbor and give the authors' logits, predictions and trees on the first 40 SNLI
//! dev pairs. The importer is given only what a user gives it: the state dict, the vocabulary
//! file the authors' `build_vocab.py` wrote, and the reference's defaults.
//!
//! Twice: once through the library (`import_gumbel_snli`, the model called on ids looked up
//! here), and once end to end as a user runs it: the `arbor-convert import gumbel --task snli`
//! binary writes a checkpoint, which is loaded as the `snli` program loads one and evaluated on
//! the pairs written as an SNLI jsonl file, through the program's reader, `snli::to_data` with
//! the checkpoint's word lookup and `arbor_tasks`'s evaluation batches; then the program itself
//! runs (`snli --eval-only --checkpoint … --test FILE`, `snli --parse`) in a child process whose
//! output is read.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use arbor_apps::common::{checkpoint_in, parse_one, tokenize, WordLookup};
use arbor_apps::snli::SnliArgs;
use arbor_convert::gumbel::{
    import_gumbel_snli, with_reference_specials, GumbelImport, QueryScale,
};
use arbor_convert::ReferenceVocab;
use arbor_data::readers::snli::{read_snli, SnliPair};
use arbor_data::vocab::Vocab;
use arbor_data::ReadOptions;
use arbor_encoders::{Decisions, Encoder};
use arbor_heads::{NliClassifier, NliFeatures, SentenceBatch};
use arbor_tasks::{eval_batches, Classifier, ModelMeta, NliData};
use burn::backend::Flex;
use clap::Parser;
use common::{arbor_convert, argmax, fixture, input, normalised_tree, Fixture};

type B = Flex;
type Model = NliClassifier<B, Encoder<B>>;

/// The `snli` program's evaluation batch size.
const EVAL_BATCH: usize = 256;

fn check(name: &str) {
    let fx = fixture(name);
    let device = Default::default();
    assert_eq!(
        fx.inputs["features"],
        "torch.cat([pre, hyp, torch.abs(pre - hyp), pre * hyp], dim=1)"
    );
    let opts = GumbelImport {
        vocab: with_reference_specials(
            ReferenceVocab::read_file(&fx.dir.join("vocab.txt")).unwrap(),
        ),
        labels: None,
        query_scale: QueryScale::SqrtHidden,
        intra_attention: false,
        tau: 1.0,
        dropout: 0.1,
        features: NliFeatures::AbsDifference,
        lowercase: fx.inputs["lowercase"].as_bool().unwrap(),
    };
    let imported = import_gumbel_snli::<B>(fx.state_dict.clone(), &opts, &device).unwrap();
    assert_eq!(imported.meta["task"]["lowercase"], false, "{name}");
    let vocab: Vec<String> =
        serde_json::from_value(imported.meta["task"]["vocab"].clone()).unwrap();
    let id = |w: &String| vocab.iter().position(|t| t == w).unwrap_or(1) as u32;
    let premises: Vec<Vec<String>> = input(&fx.inputs["pre_tokens"]);
    let hypotheses: Vec<Vec<String>> = input(&fx.inputs["hyp_tokens"]);
    let ids = |s: &[Vec<String>]| -> Vec<Vec<u32>> {
        s.iter().map(|w| w.iter().map(id).collect()).collect()
    };
    let (pre_ids, hyp_ids) = (ids(&premises), ids(&hypotheses));
    let model = &imported.model;

    // Logits: arbor orders the classes entailment, neutral, contradiction; the reference
    // neutral, entailment, contradiction.
    let mut both = pre_ids.clone();
    both.extend(hyp_ids.iter().cloned());
    let logits = model
        .forward(
            SentenceBatch::from_ids(&both, 0, &device),
            Decisions::Argmax,
        )
        .logits;
    let n = premises.len();
    assert_eq!(logits.dims(), [n, 3]);
    let got: Vec<f32> = logits.into_data().into_vec().unwrap();
    let want = fx.expected["logits"].values();
    let to_reference = [1usize, 0, 2];
    let mut worst = 0f32;
    for i in 0..n {
        for k in 0..3 {
            worst = worst.max((got[i * 3 + k] - want[i * 3 + to_reference[k]]).abs());
        }
    }
    assert!(worst <= 1e-5, "{name}: logits differ by {worst}");

    // Predictions, in the reference's label ids. They cover all three classes (the script
    // shifts the output biases so), so a model stuck on one class would fail the check.
    let preds: Vec<usize> = input(&fx.inputs["pred"]);
    let labels: Vec<String> = input(&fx.inputs["labels"]);
    let counts: Vec<usize> = (0..3)
        .map(|c| preds.iter().filter(|&&p| p == c).count())
        .collect();
    for (c, &count) in counts.iter().enumerate() {
        assert!(count > 0, "{name}: no pair is predicted {}", labels[c]);
    }
    for i in 0..n {
        let row = &got[i * 3..i * 3 + 3];
        let k = (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        assert_eq!(to_reference[k], preds[i], "{name}: pair {i}");
    }
    eprintln!("{name}: labels {n}/{n}, predicted {labels:?} {counts:?}, logits within {worst:.1e}");

    // Trees: each sentence parsed alone (the authors' batch gives the same, the script checks).
    for (side, words, sentence_ids, trees) in [
        (
            "premise",
            &premises,
            &pre_ids,
            input::<Vec<String>>(&fx.inputs["pre_trees"]),
        ),
        (
            "hypothesis",
            &hypotheses,
            &hyp_ids,
            input::<Vec<String>>(&fx.inputs["hyp_trees"]),
        ),
    ] {
        for i in 0..n {
            let tree = arbor_apps::common::parse_one(
                &model.embedding,
                &model.encoder,
                &sentence_ids[i],
                &device,
            )
            .expect("the Gumbel Tree-LSTM builds a tree");
            assert_eq!(
                normalised_tree(&tree.to_bracketed(&words[i])),
                normalised_tree(&trees[i]),
                "{name}: {side} {i}"
            );
        }
    }
}

#[test]
fn the_authors_lstm_leaf_batch_norm_model_gives_its_logits_labels_and_trees() {
    check("authors-gumbel-snli-lstm-bn");
}

#[test]
fn the_authors_bidirectional_leaf_model_gives_its_logits_labels_and_trees() {
    check("authors-gumbel-snli-bilstm");
}

// ---- End to end: the `arbor-convert` binary, then the `snli` program ----

/// The premise `--parse` is given (pair 9's, as SNLI's `sentence1` has it): its words, split by
/// the program's tokenizer, are the authors' tokens (`football,` gives `football`, `,`).
const PARSE_PREMISE: (usize, &str) = (
    9,
    "Two young boys of opposing teams play football, while wearing full protection uniforms and \
     helmets.",
);

/// `arbor-convert import gumbel --task snli --state-dict state_dict.pt --vocab vocab.txt
/// --vocab-size N [extra] --out OUT`, as docs/interop.md has a user run it: the vocabulary file
/// as the authors' `build_vocab.py` wrote it (`word<TAB>0` lines), N what their
/// `dump_dataset.py` was given (all of its words), every other flag at its default (the
/// reference's).
fn import_with_the_binary(fx: &Fixture, out: &Path, extra: &[&str]) {
    let vocab_size = fx.inputs["vocab"]["num_file_words"].to_string();
    arbor_convert(|c| {
        c.args(["import", "gumbel", "--task", "snli", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .arg("--vocab")
            .arg(fx.dir.join("vocab.txt"))
            .args(["--vocab-size", &vocab_size])
            .args(extra)
            .arg("--out")
            .arg(out);
    });
}

/// A checkpoint loaded as the `snli` program loads one: the file found by `checkpoint_in`,
/// then the program's own `load_trained`.
fn load(path: &Path) -> (Model, ModelMeta, Vocab, PathBuf) {
    let path = checkpoint_in(path).unwrap();
    let (model, meta, vocab) =
        arbor_apps::snli::load_trained::<B>(&path, &Default::default()).unwrap();
    (model, meta, vocab, path)
}

/// The fixture's pairs as an SNLI jsonl file without binary parses: each sentence is the
/// authors' tokens (`nltk.word_tokenize`'s) joined by single spaces, which arbor's reader splits
/// on white space, and the gold label by name.
fn write_pairs(fx: &Fixture, path: &Path) {
    let labels: Vec<String> = input(&fx.inputs["labels"]);
    let gold: Vec<usize> = input(&fx.inputs["gold_labels"]);
    let ids: Vec<String> = input(&fx.inputs["pair_ids"]);
    let premises: Vec<Vec<String>> = input(&fx.inputs["pre_tokens"]);
    let hypotheses: Vec<Vec<String>> = input(&fx.inputs["hyp_tokens"]);
    let mut out = String::new();
    for i in 0..gold.len() {
        let row = serde_json::json!({
            "gold_label": labels[gold[i]],
            "pairID": ids[i],
            "sentence1": premises[i].join(" "),
            "sentence2": hypotheses[i].join(" "),
        });
        out.push_str(&row.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// The authors' word ids as arbor's: theirs are the vocabulary file's words in order, then
/// `<pad>`, `<unk>`; arbor's vocabulary is `<pad>`, `<unk>`, then the same words.
fn arbor_ids(fx: &Fixture, key: &str) -> Vec<Vec<u32>> {
    let pad = fx.inputs["vocab"]["pad_id"].as_u64().unwrap() as u32;
    let unk = fx.inputs["vocab"]["unk_id"].as_u64().unwrap() as u32;
    input::<Vec<Vec<u32>>>(&fx.inputs[key])
        .into_iter()
        .map(|s| {
            s.into_iter()
                .map(|id| match id {
                    _ if id == pad => 0,
                    _ if id == unk => 1,
                    _ => id + 2,
                })
                .collect()
        })
        .collect()
}

/// What the `snli` program's evaluation makes of a pairs file: the pairs its reader returns, the
/// data `snli::to_data` builds with the checkpoint's word lookup, and per pair the logits (arbor's
/// class order) of `arbor_tasks`'s evaluation batches, with each sentence's tree from the same
/// batches (premises, then hypotheses, in pair order).
struct Run {
    pairs: Vec<SnliPair>,
    data: NliData,
    logits: Vec<[f32; 3]>,
    trees: Vec<String>,
}

fn program_evaluation(model: &Model, meta: &ModelMeta, vocab: &Vocab, pairs: &Path) -> Run {
    let device = Default::default();
    let pairs = read_snli(pairs, ReadOptions::strict()).unwrap().records;
    let data = arbor_apps::snli::to_data(&pairs, vocab, WordLookup::of(meta));
    let n = data.len();
    let mut logits = vec![[0f32; 3]; n];
    let mut trees = vec![String::new(); 2 * n];
    for idx in eval_batches(&data.lengths(), EVAL_BATCH) {
        let (batch, _) = data.batch::<B>(&idx, &device);
        let out = model.classify(batch, Decisions::Argmax);
        let values: Vec<f32> = out.logits.into_data().to_vec().unwrap();
        let built = out.trees.expect("the Gumbel Tree-LSTM builds trees");
        for (k, &i) in idx.iter().enumerate() {
            logits[i].copy_from_slice(&values[3 * k..3 * k + 3]);
            trees[i] = built[k].to_bracketed(&pairs[i].premise.tokens);
            trees[n + i] = built[idx.len() + k].to_bracketed(&pairs[i].hypothesis.tokens);
        }
    }
    Run {
        pairs,
        data,
        logits,
        trees,
    }
}

/// Set to the `snli` program's arguments, one a line, it makes [`snli_program_child`] run the
/// program with them.
const SNLI_ARGS: &str = "ARBOR_TEST_SNLI_ARGS";

/// The name the test harness gives test `name` of this module: the modules of the test binary
/// prefix it (not the binary's own name), so `--exact` must be given the whole path.
fn test_path(name: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}

/// Runs the `snli` program's entry point with `args` in a child process (this test binary
/// running [`snli_program_child`] alone), so that what the program prints can be read; returns
/// its standard output.
fn snli_program(args: &[&str]) -> String {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            &test_path("snli_program_child"),
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(SNLI_ARGS, args.join("\n"))
        .output()
        .unwrap();
    let stdout = String::from_utf8(o.stdout).unwrap();
    assert!(
        o.status.success() && stdout.contains("1 passed"),
        "snli {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// The `snli` program (`arbor_apps::snli::run`, what `cargo run --example snli` calls) with the
/// arguments in `$ARBOR_TEST_SNLI_ARGS`; run by [`snli_program`], a no-op without them.
#[test]
#[ignore = "the snli program's entry point, run in a child process by the end-to-end tests"]
fn snli_program_child() {
    let Ok(args) = std::env::var(SNLI_ARGS) else {
        return;
    };
    let args = SnliArgs::try_parse_from(std::iter::once("snli").chain(args.lines())).unwrap();
    arbor_apps::snli::run(args).unwrap();
}

/// The largest difference between the program's logits (arbor's class order) and the authors'
/// (theirs): arbor's class `k` is the reference's `to_reference[k]`.
fn worst_logit(run: &Run, want: &[f32], to_reference: &[usize]) -> f32 {
    let mut worst = 0f32;
    for (i, row) in run.logits.iter().enumerate() {
        for (k, v) in row.iter().enumerate() {
            worst = worst.max((v - want[i * 3 + to_reference[k]]).abs());
        }
    }
    worst
}

fn check_end_to_end(name: &str) {
    let fx = fixture(name);
    let device = Default::default();
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("gumbel-snli.ckpt");
    import_with_the_binary(&fx, &ckpt, &[]);
    let (model, meta, vocab, ckpt) = load(&ckpt);
    assert!(!meta.lowercase && !meta.case_fallback, "{name}");
    assert_eq!(
        meta.vocab.len(),
        fx.inputs["vocab"]["size"].as_u64().unwrap() as usize
    );
    // arbor's classes by name in the reference's order: entailment, neutral, contradiction are
    // the authors' 1, 0, 2.
    let labels: Vec<String> = input(&fx.inputs["labels"]);
    let to_reference: Vec<usize> = meta
        .labels
        .iter()
        .map(|l| labels.iter().position(|r| r == l).unwrap())
        .collect();
    assert_eq!(to_reference, [1, 0, 2], "{name}: {:?}", meta.labels);

    let pairs_file = tmp.path().join("pairs.jsonl");
    write_pairs(&fx, &pairs_file);
    let run = program_evaluation(&model, &meta, &vocab, &pairs_file);
    let n = run.data.len();
    assert_eq!(n, 40, "{name}");

    // The reader gives the authors' tokens, the checkpoint's lookup their word ids (none
    // `<unk>`), the gold labels theirs.
    let premises: Vec<Vec<String>> = input(&fx.inputs["pre_tokens"]);
    let hypotheses: Vec<Vec<String>> = input(&fx.inputs["hyp_tokens"]);
    for (i, pair) in run.pairs.iter().enumerate() {
        assert!(pair.premise.tree.is_none() && pair.hypothesis.tree.is_none());
        assert_eq!(pair.premise.tokens, premises[i], "{name}: premise {i}");
        assert_eq!(
            pair.hypothesis.tokens, hypotheses[i],
            "{name}: hypothesis {i}"
        );
    }
    assert_eq!(run.data.premises, arbor_ids(&fx, "pre_ids"), "{name}");
    assert_eq!(run.data.hypotheses, arbor_ids(&fx, "hyp_ids"), "{name}");
    let gold: Vec<usize> = input(&fx.inputs["gold_labels"]);
    let program_gold: Vec<usize> = run.data.labels.iter().map(|&l| to_reference[l]).collect();
    assert_eq!(program_gold, gold, "{name}: gold labels");

    // Logits, labels and trees of the program's evaluation batches.
    let worst = worst_logit(&run, fx.expected["logits"].values(), &to_reference);
    assert!(worst <= 1e-5, "{name}: logits differ by {worst}");
    let preds: Vec<usize> = input(&fx.inputs["pred"]);
    let agree = run
        .logits
        .iter()
        .zip(&preds)
        .filter(|(row, &p)| to_reference[argmax(row)] == p)
        .count();
    assert_eq!(agree, n, "{name}: labels");
    let mut want_trees: Vec<String> = input(&fx.inputs["pre_trees"]);
    want_trees.extend(input::<Vec<String>>(&fx.inputs["hyp_trees"]));
    let same_trees = run
        .trees
        .iter()
        .zip(&want_trees)
        .filter(|(a, b)| normalised_tree(a) == normalised_tree(b))
        .count();
    assert_eq!(same_trees, 2 * n, "{name}: trees");

    // The program's accuracy is the authors' (evaluate.py's: predictions equal to gold).
    let authors_correct = preds.iter().zip(&gold).filter(|(p, g)| p == g).count();
    let report = arbor_tasks::evaluate(&model, &run.data, EVAL_BATCH, false, &device);
    assert_eq!(
        (report.correct, report.total),
        (authors_correct, n),
        "{name}: accuracy"
    );

    // The program itself: `snli --eval-only --checkpoint … --test pairs.jsonl` reports that
    // accuracy.
    let (c, p) = (ckpt.to_str().unwrap(), pairs_file.to_str().unwrap());
    let out = snli_program(&["--eval-only", "--checkpoint", c, "--test", p]);
    let line = out
        .lines()
        .find(|l| l.contains("test accuracy"))
        .unwrap_or_else(|| panic!("{name}: no test accuracy in:\n{out}"));
    assert!(
        line.ends_with(&format!("({authors_correct} / {n})")),
        "{name}: {line}"
    );

    // `snli --parse` of a premise as SNLI writes it prints the authors' tree.
    let (i, sentence) = PARSE_PREMISE;
    assert_eq!(tokenize(sentence, meta.lowercase), premises[i], "{name}");
    let out = snli_program(&["--checkpoint", c, "--parse", sentence]);
    let tree = out
        .lines()
        .find_map(|l| l.split_once("tree: ").map(|(_, t)| t))
        .unwrap_or_else(|| panic!("{name}: no tree in:\n{out}"));
    assert_eq!(
        normalised_tree(tree),
        normalised_tree(&want_trees[i]),
        "{name}: --parse"
    );
    // The same as the library's tree of the premise alone.
    let alone = parse_one(
        &model.embedding,
        &model.encoder,
        &run.data.premises[i],
        &device,
    )
    .expect("a tree");
    assert_eq!(
        normalised_tree(tree),
        normalised_tree(&alone.to_bracketed(&premises[i]))
    );

    eprintln!(
        "{name}: arbor-convert → snli: tokens and ids {n}/{n} pairs, logits within {worst:.1e}, \
         labels {agree}/{n}, trees {same_trees}/{}, accuracy {}/{n} as the authors' \
         ({line:?}), --parse {tree}",
        2 * n,
        report.correct,
    );
}

#[test]
fn the_authors_lstm_leaf_batch_norm_model_imports_and_evaluates_through_the_programs() {
    check_end_to_end("authors-gumbel-snli-lstm-bn");
}

#[test]
fn the_authors_bidirectional_leaf_model_imports_and_evaluates_through_the_programs() {
    check_end_to_end("authors-gumbel-snli-bilstm");
}

/// The end-to-end checks can fail: the import's `--difference signed` (`u − v`, the pair
/// feature of the reference's early versions and of arbor's import before issue 31) moves the
/// program's logits.
#[test]
fn a_signed_difference_import_moves_the_programs_logits() {
    for name in ["authors-gumbel-snli-lstm-bn", "authors-gumbel-snli-bilstm"] {
        let fx = fixture(name);
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = tmp.path().join("signed.ckpt");
        import_with_the_binary(&fx, &ckpt, &["--difference", "signed"]);
        let (model, meta, vocab, _) = load(&ckpt);
        let pairs_file = tmp.path().join("pairs.jsonl");
        write_pairs(&fx, &pairs_file);
        let run = program_evaluation(&model, &meta, &vocab, &pairs_file);
        let worst = worst_logit(&run, fx.expected["logits"].values(), &[1, 0, 2]);
        eprintln!("{name}: --difference signed: logits differ by up to {worst:.3}");
        assert!(worst > 1e-2, "{name}: {worst}");
    }
}
