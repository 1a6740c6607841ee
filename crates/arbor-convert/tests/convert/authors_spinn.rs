//! SPINN-PI-NT, SPINN-PI and full SPINN SNLI classifiers built and run by the authors' own code
//! (nyu-mll/spinn's PyTorch port at `031c845`: `models/base.py`'s `init_model` and
//! `load_data_and_embeddings`, `fat_stack.py`, `util/data.py`'s vocabulary, case-fallback lookup
//! and bucketed batches, driven by `fixtures/authors/spinn_snli.py`) import into arbor and give
//! the port's logits, predictions and (full SPINN) parses on the first 48 SNLI dev pairs.
//!
//! The importer gets what a user gives `arbor-convert import spinn`: the state dict, the
//! vocabulary the port built (`vocab.txt`) and the GloVe-format file it was trained with
//! (`embeddings.txt`; the port keeps pretrained vectors outside its state dict), with the CLI's
//! defaults. The pairs then go through the `snli` program's evaluation path: its SNLI reader
//! (tokens and trees from the binary parses), `snli::to_data` with the word lookup the
//! checkpoint records (`WordLookup::of`: the port's case fallback), and `arbor_tasks`'s
//! evaluation batches.

use crate::common;

use std::path::Path;

use arbor_apps::common::WordLookup;
use arbor_apps::snli::SnliArgs;
use arbor_convert::{import_spinn, model_state_dict, ReferenceVocab, SpinnImport, StateDict};
use arbor_data::readers::snli::read_snli;
use arbor_data::tree::BinaryTree;
use arbor_data::vocab::Vocab;
use arbor_data::ReadOptions;
use arbor_encoders::{Decisions, Encoder};
use arbor_heads::NliClassifier;
use arbor_tasks::{eval_batches, Classifier, ModelMeta, NliData};
use burn::backend::Flex;
use clap::Parser;
use common::{argmax, fixture, Fixture};

type B = Flex;
type Model = NliClassifier<B, Encoder<B>>;

/// The `snli` program's evaluation batch size.
const EVAL_BATCH: usize = 256;

fn input<T: serde::de::DeserializeOwned>(fx: &Fixture, key: &str) -> T {
    serde_json::from_value(fx.inputs[key].clone())
        .unwrap_or_else(|e| panic!("{}: inputs.json `{key}`: {e}", fx.dir.display()))
}

/// A binary parse in SNLI's format from tokens and SHIFT (0) / REDUCE (1) transitions.
fn binary_parse(tokens: &[String], transitions: &[u8]) -> String {
    let mut stack: Vec<String> = Vec::new();
    let mut next = tokens.iter();
    for &t in transitions {
        if t == 0 {
            stack.push(next.next().unwrap().clone());
        } else {
            let right = stack.pop().unwrap();
            let left = stack.pop().unwrap();
            stack.push(format!("( {left} {right} )"));
        }
    }
    assert_eq!(stack.len(), 1);
    stack.pop().unwrap()
}

/// The fixture's pairs as an SNLI jsonl file: the tokens and binary parses the port read from
/// the dev set, and the gold labels.
fn write_pairs(fx: &Fixture, path: &Path) {
    let labels: Vec<String> = input(fx, "labels");
    let gold: Vec<usize> = input(fx, "gold_labels");
    let ids: Vec<String> = input(fx, "pair_ids");
    let mut out = String::new();
    let pt: Vec<Vec<String>> = input(fx, "premise_tokens");
    let ht: Vec<Vec<String>> = input(fx, "hypothesis_tokens");
    let ptr: Vec<Vec<u8>> = input(fx, "premise_transitions");
    let htr: Vec<Vec<u8>> = input(fx, "hypothesis_transitions");
    for i in 0..gold.len() {
        let row = serde_json::json!({
            "gold_label": labels[gold[i]],
            "pairID": ids[i],
            "sentence1": pt[i].join(" "),
            "sentence2": ht[i].join(" "),
            "sentence1_binary_parse": binary_parse(&pt[i], &ptr[i]),
            "sentence2_binary_parse": binary_parse(&ht[i], &htr[i]),
        });
        out.push_str(&row.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// What `arbor-convert import spinn --vocab vocab.txt --embeddings embeddings.txt` sets.
fn import_options(fx: &Fixture) -> SpinnImport {
    let vocab_file = fx.dir.join("vocab.txt");
    SpinnImport {
        vocab: Some(ReferenceVocab::read_file(&vocab_file).unwrap().tokens),
        vocab_file: Some(vocab_file),
        embeddings: Some(fx.dir.join("embeddings.txt")),
        ..SpinnImport::default()
    }
}

/// `arbor-convert import spinn --state-dict … --vocab vocab.txt --embeddings embeddings.txt`.
fn import(fx: &Fixture) -> (Model, ModelMeta, serde_json::Value) {
    let sd = model_state_dict(StateDict::read(&fx.dir.join("state_dict.pt")).unwrap());
    let opts = import_options(fx);
    let imported = import_spinn::<B>(sd, &opts, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", fx.dir.display()));
    let meta: ModelMeta = serde_json::from_value(imported.meta["task"].clone()).unwrap();
    (imported.model, meta, imported.meta)
}

/// What the `snli` program's evaluation computes, per pair: logits (rows in pair order) and,
/// for full SPINN, each sentence's own tree (premises, then hypotheses, in pair order).
struct Run {
    logits: Vec<[f32; 3]>,
    trees: Option<Vec<BinaryTree>>,
    data: NliData,
}

fn evaluate(model: &Model, meta: &ModelMeta, pairs: &Path, lookup: WordLookup) -> Run {
    let device = Default::default();
    let vocab = Vocab::from_tokens(meta.vocab.clone()).unwrap();
    let pairs = read_snli(pairs, ReadOptions::strict()).unwrap().records;
    let data = arbor_apps::snli::to_data(&pairs, &vocab, lookup);
    let n = data.len();
    let mut logits = vec![[0f32; 3]; n];
    let mut trees: Vec<Option<BinaryTree>> = vec![None; 2 * n];
    let mut built = false;
    for idx in eval_batches(&data.lengths(), EVAL_BATCH) {
        let (batch, _) = data.batch::<B>(&idx, &device);
        let out = model.classify(batch, Decisions::Argmax);
        let values: Vec<f32> = out.logits.into_data().to_vec().unwrap();
        for (k, &i) in idx.iter().enumerate() {
            logits[i].copy_from_slice(&values[3 * k..3 * k + 3]);
        }
        if let Some(t) = out.trees {
            built = true;
            for (k, &i) in idx.iter().enumerate() {
                trees[i] = Some(t[k].clone());
                trees[n + i] = Some(t[idx.len() + k].clone());
            }
        }
    }
    let trees = built.then(|| trees.into_iter().map(Option::unwrap).collect());
    Run {
        logits,
        trees,
        data,
    }
}

fn max_diff(a: &[[f32; 3]], b: &[f32]) -> f32 {
    a.iter()
        .flatten()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn check(name: &str) {
    let fx = fixture(name);
    let tmp = tempfile::tempdir().unwrap();
    let pairs = tmp.path().join("pairs.jsonl");
    write_pairs(&fx, &pairs);
    let (model, meta, full_meta) = import(&fx);
    assert!(meta.case_fallback && !meta.lowercase, "{name}: {full_meta}");
    let n: usize = fx.inputs["pair_ids"].as_array().unwrap().len();
    assert_eq!(
        full_meta["imported"]["embeddings"]["rows_found"],
        fx.inputs["vocab_size"].as_u64().unwrap() - 1,
        "{name}: every word but *PADDING* has a vector"
    );

    // The labels are the port's LABEL_MAP order, which is arbor's.
    let labels: Vec<String> = input(&fx, "labels");
    assert_eq!(labels, meta.labels, "{name}: label order");

    let run = evaluate(&model, &meta, &pairs, WordLookup::of(&meta));
    // The program's word ids are the port's (TokensToIDs with its case fallback).
    let port_premises: Vec<Vec<u32>> = input(&fx, "premise_ids");
    let port_hypotheses: Vec<Vec<u32>> = input(&fx, "hypothesis_ids");
    assert_eq!(run.data.premises, port_premises, "{name}: premise ids");
    assert_eq!(
        run.data.hypotheses, port_hypotheses,
        "{name}: hypothesis ids"
    );

    // Logits and labels: the port's, each sentence alone.
    let want = fx.expected["logits"].values();
    let diff = max_diff(&run.logits, want);
    assert!(diff <= 1e-5, "{name}: logits differ by {diff}");
    let port_pred: Vec<usize> = input(&fx, "pred");
    let pred: Vec<usize> = run.logits.iter().map(argmax).collect();
    let agree = pred.iter().zip(&port_pred).filter(|(a, b)| a == b).count();
    assert_eq!(agree, n, "{name}: labels");
    // The port's own bucketed evaluation batches (its tracker moves during a padded
    // sentence's leading SKIPs): same labels, logits within what that padding moves.
    let batched_pred: Vec<usize> = input(&fx, "batched_pred");
    let batched_agree = pred
        .iter()
        .zip(&batched_pred)
        .filter(|(a, b)| a == b)
        .count();
    let batched_diff = max_diff(&run.logits, fx.expected["batched_logits"].values());
    println!(
        "{name}: logits max |diff| {diff:e} (sentences alone), {batched_diff:e} against the \
         port's padded batches; labels {agree}/{n} and {batched_agree}/{n}"
    );
    assert_eq!(
        batched_agree, n,
        "{name}: labels of the port's batched evaluation"
    );

    // Full SPINN's own parses at evaluation are the port's (use_internal_parser).
    if fx.inputs.get("parsed_premise_transitions").is_some() {
        let trees = run.trees.as_ref().expect("full SPINN builds trees");
        let mut want: Vec<Vec<u8>> = input(&fx, "parsed_premise_transitions");
        want.extend(input::<Vec<Vec<u8>>>(&fx, "parsed_hypothesis_transitions"));
        let got: Vec<Vec<u8>> = trees
            .iter()
            .map(|t| t.to_transitions().iter().map(|t| t.id()).collect())
            .collect();
        let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        println!("{name}: parses {same}/{}", want.len());
        assert_eq!(same, want.len(), "{name}: parses");
    }

    // The program's accuracy equals the port's.
    let gold: Vec<usize> = input(&fx, "gold_labels");
    let port_correct = port_pred.iter().zip(&gold).filter(|(a, b)| a == b).count();
    let parses = meta.model.encoder().kind() == arbor_encoders::EncoderKind::Spinn;
    let report = arbor_tasks::evaluate(&model, &run.data, EVAL_BATCH, parses, &Default::default());
    assert_eq!(report.correct, port_correct, "{name}: accuracy");
    assert_eq!(report.total, n);

    // Without the port's case fallback the words it found lower- or upper-cased become
    // `<unk>`, and the outputs move.
    let plain = evaluate(&model, &meta, &pairs, WordLookup::plain(false));
    let ids_differ = plain
        .data
        .premises
        .iter()
        .chain(&plain.data.hypotheses)
        .flatten()
        .zip(port_premises.iter().chain(&port_hypotheses).flatten())
        .filter(|(a, b)| a != b)
        .count();
    let plain_agree = plain
        .logits
        .iter()
        .map(argmax)
        .zip(&port_pred)
        .filter(|(a, b)| a == *b)
        .count();
    let plain_diff = max_diff(&plain.logits, want);
    println!(
        "{name}: without case fallback {ids_differ} word ids differ, logits by up to \
         {plain_diff:e}, labels {plain_agree}/{n}"
    );
    assert!(
        ids_differ > 0 && plain_diff > 1e-2,
        "{name}: the fallback is not exercised"
    );
}

#[test]
fn the_authors_spinn_pi_nt_imports_and_evaluates_as_the_port() {
    check("authors-spinn-pi-nt");
}

#[test]
fn the_authors_spinn_pi_imports_and_evaluates_as_the_port() {
    check("authors-spinn-pi");
}

#[test]
fn the_authors_full_spinn_imports_evaluates_and_parses_as_the_port() {
    check("authors-spinn-full");
}

/// The whole program: the imported checkpoint written to disk, then `snli --eval-only
/// --checkpoint … --test pairs.jsonl` and `snli --parse`.
#[test]
fn the_snli_program_runs_an_imported_authors_spinn_checkpoint() {
    let fx = fixture("authors-spinn-full");
    let tmp = tempfile::tempdir().unwrap();
    let pairs = tmp.path().join("pairs.jsonl");
    write_pairs(&fx, &pairs);
    let sd = model_state_dict(StateDict::read(&fx.dir.join("state_dict.pt")).unwrap());
    let opts = import_options(&fx);
    let ckpt = tmp.path().join("spinn.ckpt");
    import_spinn::<B>(sd, &opts, &Default::default())
        .unwrap()
        .save::<B>(&ckpt)
        .unwrap();
    let (c, p) = (ckpt.to_str().unwrap(), pairs.to_str().unwrap());
    let eval =
        SnliArgs::try_parse_from(["snli", "--eval-only", "--checkpoint", c, "--test", p]).unwrap();
    arbor_apps::snli::run(eval).unwrap();
    let parse = SnliArgs::try_parse_from([
        "snli",
        "--checkpoint",
        c,
        "--parse",
        "Two women are embracing while holding to go packages.",
    ])
    .unwrap();
    arbor_apps::snli::run(parse).unwrap();
}
