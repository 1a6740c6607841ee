//! The ON-LSTM (yikangshen/Ordered-Neurons), FastTrees and Faster FastTrees (billptw/FastTrees)
//! language models as the AUTHORS' OWN code computes them (fixtures written by
//! `fixtures/authors/rnn_lm.py`, which runs the references' `RNNModel`, their evaluation loop
//! and `test_phrase_grammar.test` on WikiText-2 lines and hand-written treebank-style trees),
//! imported with the `arbor-convert import` command as a user runs it, then evaluated the way
//! the `ptb_lm` program does (`--eval`: `read_token_stream` → `Batchified` → `evaluate_stream`;
//! `--parse`: `load_gold(parse_prep())` → `layer_distances` → `BinaryTree::from_distances`).

use crate::common;

use std::path::{Path, PathBuf};

use arbor_apps::ptb_lm::{parse_prep, PtbLmArgs};
use arbor_data::metrics::{F1Convention, ParsingF1};
use arbor_data::parseval::load_gold;
use arbor_data::readers::lm::EOS;
use arbor_data::readers::read_token_stream;
use arbor_data::tree::{BinaryTree, Span};
use arbor_data::vocab::Vocab;
use arbor_lm::{ids_tensor, token_nll, Batchified, RnnLm, RnnLmConfig};
use arbor_tasks::evaluate_stream;
use burn::backend::Flex;
use clap::Parser;
use common::{assert_close, fixture, Fixture};

type B = Flex;

/// The fixtures and the `arbor-convert import` subcommand for each.
const MODELS: [(&str, &str); 3] = [
    ("authors-lm-on-lstm", "on-lstm"),
    ("authors-lm-fasttrees", "fasttrees"),
    ("authors-lm-faster-fasttrees", "faster-fasttrees"),
];

/// Per-token NLL and distances, f32 arithmetic on both sides.
const TOL: f32 = 2e-5;
/// Relative tolerance on summed NLLs and losses.
const REL: f64 = 1e-5;

/// How the user names the reference's dictionary.
enum VocabFlags {
    /// `--corpus-train/--corpus-valid/--corpus-test` (rebuilt as `data.Corpus` does).
    Corpus,
    /// `--vocab vocab.txt`.
    File,
}

/// Runs `arbor-convert import SUB --state-dict … --weight-drop W --out …` as a user would.
fn import(fx: &Fixture, sub: &str, weight_drop: &str, vocab: VocabFlags, out: &Path) {
    common::arbor_convert(|cmd| {
        cmd.args(["import", sub, "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"));
        match vocab {
            VocabFlags::Corpus => {
                for (flag, file) in [
                    ("--corpus-train", "train.txt"),
                    ("--corpus-valid", "valid.txt"),
                    ("--corpus-test", "test.txt"),
                ] {
                    cmd.arg(flag).arg(fx.dir.join(file));
                }
            }
            VocabFlags::File => {
                cmd.arg("--vocab").arg(fx.dir.join("vocab.txt"));
            }
        }
        cmd.args(["--weight-drop", weight_drop, "--out"]).arg(out);
    });
}

/// What `ptb_lm --checkpoint` loads: the configuration and vocabulary of `meta["task"]`, then
/// the weights.
fn load(path: &Path) -> (RnnLm<B>, Vocab) {
    let device = Default::default();
    let file = arbor_train::CheckpointFile::load(path).unwrap();
    let config: RnnLmConfig = serde_json::from_value(file.meta["task"]["model"].clone()).unwrap();
    let tokens: Vec<String> = serde_json::from_value(file.meta["task"]["vocab"].clone()).unwrap();
    let (model, _) =
        arbor_train::load_model::<B, _>(config.init::<B>(&device), path, &device).unwrap();
    (model, Vocab::from_tokens(tokens).unwrap())
}

/// The reference's dictionary, `data.Corpus`'s `idx2word` as the script wrote it to `vocab.txt`.
fn reference_vocab(fx: &Fixture) -> Vec<String> {
    std::fs::read_to_string(fx.dir.join("vocab.txt"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// The per-token NLL of a stream in the reference's order (`[segment][time][batch]`), the state
/// carried across segments as `evaluate_stream` carries it.
fn token_nlls(model: &RnnLm<B>, data: &Batchified) -> Vec<f32> {
    let device = Default::default();
    let mut state = None;
    let mut out = Vec::new();
    for s in 0..data.num_segments() {
        let seg = data.segment(s);
        let x = ids_tensor::<B>(&seg.inputs, [seg.batch, seg.len], &device);
        let y = ids_tensor::<B>(&seg.targets, [seg.batch, seg.len], &device);
        let o = model.forward(x, state);
        let nll: Vec<f32> = token_nll(o.logits, y).into_data().to_vec().unwrap();
        for t in 0..seg.len {
            for b in 0..seg.batch {
                out.push(nll[b * seg.len + t]);
            }
        }
        state = Some(o.state);
    }
    out
}

/// The reference's evaluation of one stream (`fixture inputs.json` `streams.<split>`) against
/// arbor's; returns (relative difference of the reference's loss, max |per-token NLL diff|).
fn check_stream(fx: &Fixture, model: &RnnLm<B>, vocab: &Vocab, split: &str) -> (f64, f32) {
    let what = format!("{} {split}", fx.dir.file_name().unwrap().to_string_lossy());
    let s = &fx.inputs["streams"][split];
    let batch = s["batch_size"].as_u64().unwrap() as usize;
    let bptt = s["bptt"].as_u64().unwrap() as usize;
    let rows = s["rows"].as_u64().unwrap() as usize;
    let ids = read_token_stream(fx.dir.join(s["file"].as_str().unwrap()), vocab).unwrap();
    assert_eq!(
        ids.len() as u64,
        s["tokens"].as_u64().unwrap(),
        "{what}: tokens"
    );
    let data = Batchified::new(&ids, batch, bptt);
    assert_eq!(data.n, rows, "{what}: rows");
    let segments: Vec<usize> = (0..data.num_segments())
        .map(|k| data.segment(k).len)
        .collect();
    let expected_segments: Vec<usize> = serde_json::from_value(s["segments"].clone()).unwrap();
    assert_eq!(
        segments, expected_segments,
        "{what}: the reference's segments"
    );

    // ptb_lm --eval's computation.
    let r = evaluate_stream(model, &data, &Default::default());
    assert_eq!(r.total as u64, s["targets"].as_u64().unwrap(), "{what}");
    let nll_sum = s["nll_sum"].as_f64().unwrap();
    assert!(
        rel(r.loss_sum, nll_sum) < REL,
        "{what}: summed NLL {} in arbor, {nll_sum} in the reference",
        r.loss_sum
    );
    let ppl = r.loss().unwrap().exp();
    let ref_ppl = s["perplexity_per_target"].as_f64().unwrap();
    assert!(
        rel(ppl.ln(), ref_ppl.ln()) < REL,
        "{what}: perplexity {ppl} in arbor, {ref_ppl} in the reference"
    );
    // The reference's own number divides by batch · rows (docs/interop.md, "Perplexity
    // conventions"): arbor's sum under that divisor is the reference's loss.
    let ref_loss = s["reference_loss"].as_f64().unwrap();
    let as_reference = r.loss_sum / (batch * rows) as f64;
    let loss_diff = rel(as_reference, ref_loss);
    assert!(
        loss_diff < REL,
        "{what}: the reference's loss {ref_loss}, arbor's sum / (batch · rows) {as_reference}"
    );

    let nll = token_nlls(model, &data);
    let name = format!("{split}_nll");
    assert_close(fx, &name, &nll, &[nll.len()], TOL);
    let worst = nll
        .iter()
        .zip(fx.expected[&name].values())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    (loss_diff, worst)
}

#[test]
fn imported_models_give_the_authors_perplexities_through_ptb_lms_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sub) in MODELS {
        let fx = fixture(name);
        let ckpt = dir.path().join(format!("{sub}.ckpt"));
        let wdrop = fx.inputs["config"]["wdrop"].as_f64().unwrap().to_string();
        import(&fx, sub, &wdrop, VocabFlags::Corpus, &ckpt);
        let (model, vocab) = load(&ckpt);
        // The dictionary the reference's data.Corpus built, after arbor's `<pad>` and `<unk>`.
        let reference = reference_vocab(&fx);
        assert_eq!(
            reference.len() as u64,
            fx.inputs["config"]["ntokens"].as_u64().unwrap()
        );
        let rest: Vec<&String> = reference.iter().filter(|t| *t != "<unk>").collect();
        assert_eq!(vocab.tokens()[..2], ["<pad>", "<unk>"]);
        assert_eq!(
            vocab.tokens()[2..].iter().collect::<Vec<_>>(),
            rest,
            "{name}: vocabulary"
        );
        for split in ["valid", "test"] {
            let (loss, nll) = check_stream(&fx, &model, &vocab, split);
            eprintln!(
                "{name} {split}: reference loss relative diff {loss:.2e}, per-token NLL max \
                 |diff| {nll:.2e}"
            );
        }
        // The program itself reads the checkpoint and prints the same perplexity.
        let s = &fx.inputs["streams"]["valid"];
        let args = PtbLmArgs::try_parse_from([
            "ptb_lm".to_string(),
            "--checkpoint".into(),
            ckpt.display().to_string(),
            "--eval".into(),
            fx.dir.join("valid.txt").display().to_string(),
            "--eval-batch-size".into(),
            s["batch_size"].to_string(),
            "--bptt".into(),
            s["bptt"].to_string(),
        ])
        .unwrap();
        arbor_apps::ptb_lm::run(args).unwrap();
        // An empty file is an error naming it, not "perplexity NaN over 0 tokens".
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        for mode in ["--eval", "--parse"] {
            let args = PtbLmArgs::try_parse_from([
                "ptb_lm".to_string(),
                "--checkpoint".into(),
                ckpt.display().to_string(),
                mode.into(),
                empty.display().to_string(),
            ])
            .unwrap();
            let e = format!("{:#}", arbor_apps::ptb_lm::run(args).unwrap_err());
            assert!(
                e.contains("empty.txt") && e.contains("no "),
                "{name} {mode}: {e}"
            );
        }
    }
}

fn spans_without_root(spans: &[Span], n: usize) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = spans
        .iter()
        .filter(|s| !(s.start == 0 && s.end == n))
        .map(|s| (s.start, s.end))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn imported_models_give_the_authors_distances_and_trees_through_ptb_lms_parse() {
    let dir = tempfile::tempdir().unwrap();
    let device = Default::default();
    for (name, sub) in MODELS {
        let fx = fixture(name);
        let ckpt = dir.path().join(format!("{sub}.ckpt"));
        let wdrop = fx.inputs["config"]["wdrop"].as_f64().unwrap().to_string();
        import(&fx, sub, &wdrop, VocabFlags::File, &ckpt);
        let (model, vocab) = load(&ckpt);
        let p = &fx.inputs["parse"];
        let trees: PathBuf = fx.dir.join(p["file"].as_str().unwrap());
        let gold = load_gold(&trees, &parse_prep(), None).unwrap();
        let sentences = p["sentences"].as_array().unwrap();
        let reference = reference_vocab(&fx);
        assert_eq!(gold.sentences.len(), sentences.len());
        // ptb_lm --parse: `<eos>` first, the sentences padded into one batch.
        let lengths: Vec<usize> = gold.sentences.iter().map(|s| s.words.len() + 1).collect();
        let time = *lengths.iter().max().unwrap();
        let mut ids = vec![0u32; gold.sentences.len() * time];
        for (b, s) in gold.sentences.iter().enumerate() {
            ids[b * time] = vocab.id(EOS);
            for (i, w) in s.words.iter().enumerate() {
                ids[b * time + 1 + i] = vocab.id(w);
            }
        }
        let x = ids_tensor::<B>(&ids, [gold.sentences.len(), time], &device);
        let layers: Vec<Vec<f32>> = model
            .layer_distances(x, &lengths)
            .into_iter()
            .map(|d| d.into_data().to_vec().unwrap())
            .collect();
        let layer = p["layer"].as_u64().unwrap() as usize - 1;
        let mut f1 = ParsingF1::default();
        let mut worst = 0f32;
        for (k, (g, s)) in gold.sentences.iter().zip(sentences).enumerate() {
            let n = g.words.len();
            let words: Vec<String> = serde_json::from_value(s["words"].clone()).unwrap();
            assert_eq!(
                g.words, words,
                "{name}: sentence {k}: the reference's words"
            );
            // The reference's ids (`<eos>` both ends; arbor does not feed the last one).
            let ref_ids: Vec<usize> = serde_json::from_value(s["ids"].clone()).unwrap();
            for (i, &r) in ref_ids[..=n].iter().enumerate() {
                assert_eq!(
                    vocab.tokens()[ids[k * time + i] as usize],
                    reference[r],
                    "{name}: sentence {k}, word {i}"
                );
            }
            // Distances of every layer at the n + 1 steps arbor runs (the reference's first
            // n + 1 of n + 2; the model is causal).
            let e = &fx.expected[&format!("distances_{k}")];
            assert_eq!(e.shape(), &[layers.len(), n + 2]);
            for (l, d) in layers.iter().enumerate() {
                for i in 0..=n {
                    let (got, want) = (d[k * time + i], e.values()[l * (n + 2) + i]);
                    let diff = (got - want).abs();
                    assert!(
                        diff <= TOL,
                        "{name}: sentence {k}, layer {}, step {i}: distance {got} in arbor, \
                         {want} in the reference",
                        l + 1
                    );
                    worst = worst.max(diff);
                }
            }
            // The tree of the reference's layer, as ptb_lm builds it.
            let row: Vec<f64> = layers[layer][k * time + 1..k * time + 1 + n]
                .iter()
                .map(|&d| d as f64)
                .collect();
            let tree = BinaryTree::from_distances(&row).unwrap();
            let pred: Vec<(usize, usize)> =
                serde_json::from_value::<Vec<(usize, usize)>>(s["brackets"].clone()).unwrap();
            assert_eq!(
                spans_without_root(&tree.spans(), n),
                pred,
                "{name}: sentence {k}: tree {}",
                s["tree"]
            );
            let gold_spans: Vec<(usize, usize)> =
                serde_json::from_value(s["gold_brackets"].clone()).unwrap();
            assert_eq!(
                spans_without_root(&g.spans, n),
                gold_spans,
                "{name}: sentence {k}: gold"
            );
            f1.add(&tree.spans(), &g.spans, n);
        }
        let reference_f1 = p["mean_sentence_f1"].as_f64().unwrap();
        let got_f1 = f1.f1(F1Convention::PhraseGrammar);
        assert!(
            (got_f1 - reference_f1).abs() < 1e-6,
            "{name}: test_phrase_grammar F1 {reference_f1}, arbor {got_f1}"
        );
        eprintln!(
            "{name}: distances max |diff| {worst:.2e}; {} of {} trees identical; F1 {got_f1:.4} \
             (reference {reference_f1:.4})",
            sentences.len(),
            sentences.len()
        );
        // The program itself parses with the checkpoint.
        let args = PtbLmArgs::try_parse_from([
            "ptb_lm".to_string(),
            "--checkpoint".into(),
            ckpt.display().to_string(),
            "--parse".into(),
            trees.display().to_string(),
        ])
        .unwrap();
        arbor_apps::ptb_lm::run(args).unwrap();
    }
}

/// The settings a user supplies change the numbers by far more than the tolerances, so the
/// checks above would catch a wrong import: `--weight-drop 0` instead of the trained rate (for
/// the two cells that use `hh`), and the ON-LSTM state dict imported as Faster FastTrees (same
/// keys and shapes, another computation).
#[test]
fn a_wrong_setting_moves_the_numbers_far_outside_the_tolerances() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sub, wdrop) in [
        ("authors-lm-on-lstm", "on-lstm", "0"),
        ("authors-lm-fasttrees", "fasttrees", "0"),
        ("authors-lm-on-lstm", "faster-fasttrees", "0.45"),
    ] {
        let fx = fixture(name);
        let ckpt = dir.path().join(format!("{name}-{sub}-{wdrop}.ckpt"));
        import(&fx, sub, wdrop, VocabFlags::File, &ckpt);
        let (model, vocab) = load(&ckpt);
        let s = &fx.inputs["streams"]["test"];
        let ids = read_token_stream(fx.dir.join("test.txt"), &vocab).unwrap();
        let data = Batchified::new(
            &ids,
            s["batch_size"].as_u64().unwrap() as usize,
            s["bptt"].as_u64().unwrap() as usize,
        );
        let got = evaluate_stream(&model, &data, &Default::default()).loss_sum;
        let reference = s["nll_sum"].as_f64().unwrap();
        let moved = rel(got, reference);
        let worst = token_nlls(&model, &data)
            .iter()
            .zip(fx.expected["test_nll"].values())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        eprintln!(
            "{name} imported as {sub} --weight-drop {wdrop}: test NLL sum {got:.4} vs the \
             reference's {reference:.4} (relative {moved:.2e}), per-token NLL max |diff| \
             {worst:.2e}"
        );
        assert!(moved > 10.0 * REL, "{name} as {sub}, wdrop {wdrop}: sum");
        assert!(
            worst > 100.0 * TOL,
            "{name} as {sub}, wdrop {wdrop}: per token"
        );
    }
}
