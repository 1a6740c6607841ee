//! Gumbel Tree-LSTM SST models built and run by the authors' own code
//! (jihunchoi/unsupervised-treelstm at `47623f5`: its `SSTModel` and the torchtext pipeline of
//! its `sst/train.py`, torchtext 0.3.1, driven by `fixtures/authors/gumbel_sst.py`) import into
//! arbor and give the authors' logits, labels and trees on the first 40 non-neutral SST dev
//! sentences. The import runs the `arbor-convert` binary with only what a user has: the state
//! dict and torchtext's two `itos` lists. The evaluation goes through the `sst` program's own
//! loader, tree-file reader, word lookup and scoring.
//!
//! No SST text is committed (its licence, research use, does not clearly allow redistribution):
//! the fixtures name the lines used (`inputs.json`'s `data`: a file under the shared data folder,
//! how many of its first lines, their sha256), which the tests read from `../shared/data`
//! (relative to the workspace root; `$ARBOR_SHARED_DATA` overrides it), failing on a different
//! file and skipping with a note when it is absent. The tokens and trees are checked against the
//! sha256 of the authors' (`tokens_sha256`, `trees_sha256`; the trees are also stored as merge
//! positions).

use crate::common;

use std::path::{Path, PathBuf};

use arbor_apps::common::{load_sentence_classifier, parse_one, WordLookup};
use arbor_apps::sst::{read_split, SstArgs};
use arbor_data::download::sha256_file;
use arbor_encoders::{Decisions, EncoderInput, SentenceEncoder};
use arbor_heads::{SentenceBatch, SentenceClassifier};
use arbor_tasks::ClassifyData;
use burn::backend::Flex;
use clap::Parser;
use common::{assert_close, fixture, input, normalised_tree, Fixture};

type B = Flex;
type Model = SentenceClassifier<B, arbor_encoders::Encoder<B>>;
const TOL: f32 = 1e-5;
/// The reference's label ids (torchtext's label field: `<unk>`, positive, negative) of arbor's
/// classes negative, positive.
const TO_REFERENCE: [usize; 2] = [2, 1];

/// The shared data folder: `$ARBOR_SHARED_DATA`, else `../shared/data` beside the workspace.
fn shared_data() -> PathBuf {
    match std::env::var_os("ARBOR_SHARED_DATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    }
}

/// SHA-256 (lower-case hex) of `text`, by way of a file in `dir`.
fn sha256_text(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    sha256_file(&path).unwrap()
}

/// The SST lines the fixture's model was run on (`inputs.json`'s `data.train` and `data.dev`),
/// read from the shared data folder, checked against their sha256 and written to
/// `dir/{train,dev}.txt`; returns the dev file, or `None` with a note when the data is absent.
fn sst_lines(fx: &Fixture, dir: &Path) -> Option<PathBuf> {
    let root = shared_data();
    for split in ["train", "dev"] {
        let used = &fx.inputs["data"][split];
        let file = root.join(used["file"].as_str().unwrap());
        if !file.is_file() {
            println!(
                "skipping: {} not found (the SST trees the fixture {} was made from; set \
                 ARBOR_SHARED_DATA to the shared data folder)",
                file.display(),
                fx.dir.display()
            );
            return None;
        }
        let n = used["first_lines"].as_u64().unwrap() as usize;
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: cannot read: {e}", file.display()));
        let lines: Vec<&str> = text.split_inclusive('\n').take(n).collect();
        assert_eq!(
            lines.len(),
            n,
            "{}: has {} lines, the fixture {} was made from its first {n}",
            file.display(),
            lines.len(),
            fx.dir.display()
        );
        let out = dir.join(format!("{split}.txt"));
        std::fs::write(&out, lines.concat()).unwrap();
        let (got, want) = (sha256_file(&out).unwrap(), used["sha256"].as_str().unwrap());
        assert_eq!(
            got,
            want,
            "{}: its first {n} lines have sha256 {got}, but the fixture {} was made from lines \
             with sha256 {want}: a different SST file (regenerate the fixture with \
             fixtures/authors/gumbel_sst.py, or point ARBOR_SHARED_DATA at the data it was made \
             from)",
            file.display(),
            fx.dir.display()
        );
    }
    Some(dir.join("dev.txt"))
}

/// The bracketed tree of `tokens` merged at positions `merges`, in order (the fixture script's
/// `tree_string`).
fn tree_string(tokens: &[String], merges: &[usize]) -> String {
    let mut nodes = tokens.to_vec();
    for &i in merges {
        let right = nodes.remove(i + 1);
        nodes[i] = format!("({} {right})", nodes[i]);
    }
    assert_eq!(
        nodes.len(),
        1,
        "merges {merges:?} of {} tokens",
        tokens.len()
    );
    nodes.pop().unwrap()
}

/// `arbor-convert import gumbel --task sst --vocab VOCAB --vocab-format FORMAT --labels LABELS`
/// on the fixture's state dict, as a user runs it; returns the checkpoint.
fn import(
    fx: &Fixture,
    dir: &Path,
    vocab: &Path,
    format: &str,
    labels: &str,
) -> std::path::PathBuf {
    let out = dir.join(format!(
        "{format}-{}.ckpt",
        labels.replace(['<', '>', ','], "")
    ));
    common::arbor_convert(|c| {
        c.args(["import", "gumbel", "--task", "sst", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .arg("--vocab")
            .arg(vocab)
            .args(["--vocab-format", format, "--labels", labels, "--out"])
            .arg(&out);
    });
    out
}

/// The label field's `itos` as `--labels` takes it (`paste -sd, label_itos.txt`).
fn label_itos(fx: &Fixture) -> String {
    std::fs::read_to_string(fx.dir.join(fx.inputs["label_itos"].as_str().unwrap()))
        .unwrap()
        .lines()
        .collect::<Vec<_>>()
        .join(",")
}

/// What the `sst` program makes of `dev` (the tree file the authors' torchtext read) for a
/// checkpoint: its model, the word ids and labels it evaluates.
fn program_view(dev: &Path, ckpt: &Path) -> (Model, ClassifyData, Vec<Vec<String>>) {
    let device = Default::default();
    let (model, meta, vocab) = load_sentence_classifier::<B>(ckpt, &device).unwrap();
    let split = read_split(dev, false, arbor_data::ReadOptions::strict()).unwrap();
    let lookup = WordLookup::of(&meta);
    let tokens: Vec<Vec<String>> = split.examples.iter().map(|e| e.tokens.clone()).collect();
    let data = ClassifyData {
        sentences: tokens.iter().map(|t| lookup.encode(&vocab, t)).collect(),
        labels: split.examples.iter().map(|e| e.label as usize).collect(),
        transitions: None,
        groups: None,
    };
    (model, data, tokens)
}

/// arbor's `[n, 2]` logits (negative, positive).
fn logits(model: &Model, data: &ClassifyData) -> Vec<f32> {
    let batch = SentenceBatch::<B>::from_ids(&data.sentences, 0, &Default::default());
    let out = model.forward(batch, Decisions::Argmax).logits;
    assert_eq!(out.dims(), [data.sentences.len(), 2]);
    out.into_data().into_vec().unwrap()
}

/// Per sentence, the predicted label as a reference label id.
fn labels(logits: &[f32]) -> Vec<usize> {
    logits
        .chunks(2)
        .map(|r| TO_REFERENCE[usize::from(r[1] > r[0])])
        .collect()
}

/// The largest difference between arbor's logits and the reference's positive and negative rows.
fn worst_logit(fx: &Fixture, got: &[f32]) -> f32 {
    let want = fx.expected["logits"].values();
    let mut worst = 0f32;
    for (i, row) in got.chunks(2).enumerate() {
        for (k, v) in row.iter().enumerate() {
            worst = worst.max((v - want[i * 3 + TO_REFERENCE[k]]).abs());
        }
    }
    worst
}

fn check(name: &str) {
    let fx = fixture(name);
    let device = Default::default();
    let tmp = tempfile::tempdir().unwrap();
    let Some(dev) = sst_lines(&fx, tmp.path()) else {
        return;
    };
    let itos = fx.dir.join(fx.inputs["text_itos"].as_str().unwrap());
    let labels_flag = label_itos(&fx);
    assert_eq!(labels_flag, "<unk>,positive,negative");
    let ckpt = import(&fx, tmp.path(), &itos, "torchtext", &labels_flag);
    let (model, data, tokens) = program_view(&dev, &ckpt);
    let meta = arbor_apps::common::checkpoint_meta(&ckpt).unwrap();
    assert_eq!(
        meta.labels,
        ["negative", "positive"],
        "{name}: <unk> dropped"
    );
    assert!(!meta.lowercase, "{name}: torchtext's Field(lower=False)");
    assert_eq!(
        meta.vocab.len(),
        fx.inputs["vocab_size"].as_u64().unwrap() as usize
    );

    // The program reads the tree file into the tokens torchtext made of it, and the gold labels.
    let n = tokens.len();
    let merges: Vec<Vec<usize>> = input(&fx.inputs["merges"]);
    assert_eq!(n, merges.len(), "{name}: sentences");
    let lines: String = tokens.iter().map(|t| t.join(" ") + "\n").collect();
    assert_eq!(
        sha256_text(tmp.path(), "tokens.txt", &lines),
        fx.inputs["tokens_sha256"].as_str().unwrap(),
        "{name}: the program's tokens are not torchtext's"
    );
    let gold: Vec<String> = input(&fx.inputs["gold"]);
    let names = ["negative", "positive"];
    let program_gold: Vec<&str> = data.labels.iter().map(|&l| names[l]).collect();
    assert_eq!(program_gold, gold, "{name}");

    // Logits: the reference's positive and negative rows, to 1e-5.
    let got = logits(&model, &data);
    let worst = worst_logit(&fx, &got);
    assert!(worst <= TOL, "{name}: logits differ by {worst}");

    // Labels: all of the authors' predictions (none is <unk>), and the program's accuracy.
    let preds: Vec<usize> = input(&fx.inputs["pred"]);
    assert!(!preds.contains(&0), "{name}");
    assert_eq!(labels(&got), preds, "{name}");
    let report = arbor_tasks::evaluate(&model, &data, 256, false, &device);
    let authors_correct = preds
        .iter()
        .zip(&gold)
        .filter(|(&p, g)| names[TO_REFERENCE.iter().position(|&r| r == p).unwrap()] == *g)
        .count();
    assert_eq!(
        (report.correct, report.total),
        (authors_correct, n),
        "{name}"
    );

    // Sentence vectors of the whole batch, then each sentence's tree parsed alone (the authors'
    // trees come from their sorted, padded batches of 16).
    let batch = SentenceBatch::<B>::from_ids(&data.sentences, 0, &device);
    let x = model.embedding.forward(batch.ids);
    let out = model
        .encoder
        .encode(EncoderInput::new(x, batch.lengths), Decisions::Argmax);
    let dims = out.sentence.dims().to_vec();
    let v: Vec<f32> = out.sentence.into_data().into_vec().unwrap();
    assert_close(&fx, "sentence", &v, &dims, TOL);
    let worst_sentence = v
        .iter()
        .zip(fx.expected["sentence"].values())
        .fold(0f32, |w, (a, b)| w.max((a - b).abs()));
    let trees: Vec<String> = (0..n)
        .map(|i| tree_string(&tokens[i], &merges[i]))
        .collect();
    let lines: String = trees.iter().map(|t| t.clone() + "\n").collect();
    assert_eq!(
        sha256_text(tmp.path(), "trees.txt", &lines),
        fx.inputs["trees_sha256"].as_str().unwrap(),
        "{name}: the trees rebuilt from the merges are not the authors'"
    );
    for i in 0..n {
        let tree = parse_one(
            &model.embedding,
            &model.encoder,
            &data.sentences[i],
            &device,
        )
        .expect("the Gumbel Tree-LSTM builds a tree");
        assert_eq!(
            normalised_tree(&tree.to_bracketed(&tokens[i])),
            normalised_tree(&trees[i]),
            "{name}: sentence {i}"
        );
    }

    // The program itself evaluates the checkpoint on the tree file.
    let (c, d) = (ckpt.to_str().unwrap(), &dev);
    let args = SstArgs::try_parse_from([
        "sst",
        "--eval-only",
        "--checkpoint",
        c,
        "--valid",
        d.to_str().unwrap(),
    ])
    .unwrap();
    arbor_apps::sst::run(args).unwrap();
    eprintln!(
        "{name}: logits within {worst:.1e}, sentence vectors {worst_sentence:.1e}, labels \
         {n}/{n}, trees {n}/{n}, accuracy {}/{n} as the authors' model",
        report.correct
    );
}

#[test]
fn the_authors_lstm_leaf_batch_norm_sst_model_gives_its_logits_labels_and_trees() {
    check("authors-gumbel-sst-lstm-bn");
}

#[test]
fn the_authors_affine_leaf_sst_model_gives_its_logits_labels_and_trees() {
    check("authors-gumbel-sst-affine");
}

/// The checks above can fail: given the words of the `itos` without torchtext's specials (the
/// reference format, `<PAD>`, `<UNK>` appended) every embedding row is read two places off, and
/// given the label field in the wrong order every label flips.
#[test]
fn a_words_only_vocabulary_or_swapped_labels_move_the_outputs() {
    for name in ["authors-gumbel-sst-lstm-bn", "authors-gumbel-sst-affine"] {
        let fx = fixture(name);
        let tmp = tempfile::tempdir().unwrap();
        let Some(dev) = sst_lines(&fx, tmp.path()) else {
            return;
        };
        let itos = fx.dir.join(fx.inputs["text_itos"].as_str().unwrap());
        let words: String = std::fs::read_to_string(&itos)
            .unwrap()
            .lines()
            .skip(2)
            .map(|w| format!("{w}\n"))
            .collect();
        let words_file = tmp.path().join("words.txt");
        std::fs::write(&words_file, words).unwrap();
        let preds: Vec<usize> = input(&fx.inputs["pred"]);

        let shifted = import(&fx, tmp.path(), &words_file, "reference", &label_itos(&fx));
        let (model, data, _) = program_view(&dev, &shifted);
        let got = logits(&model, &data);
        let worst = worst_logit(&fx, &got);
        let changed = labels(&got)
            .iter()
            .zip(&preds)
            .filter(|(a, b)| a != b)
            .count();
        eprintln!(
            "{name}: words-only vocabulary: logits differ by up to {worst:.3}, {changed}/{} \
             labels change",
            preds.len()
        );
        assert!(worst > 0.01 && changed > 0, "{name}: {worst} {changed}");

        let swapped = import(
            &fx,
            tmp.path(),
            &itos,
            "torchtext",
            "<unk>,negative,positive",
        );
        let (model, data, _) = program_view(&dev, &swapped);
        let changed = labels(&logits(&model, &data))
            .iter()
            .zip(&preds)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(changed, preds.len(), "{name}: swapped labels");
    }
}
