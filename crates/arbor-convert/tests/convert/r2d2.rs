//! R2D2 language models saved with ant-research/StructuredLM_RTDT's layout (branch `r2d2`)
//! import and reproduce the reference's evaluation outputs (fixture from `fixtures/r2d2.py`) to
//! 1e-5: the composition function, the chart (root, every cell's `log p` and `log p̃`, the best
//! splits), the bidirectional LM's log-probabilities and the PPPL terms.

use crate::common;

use std::collections::BTreeMap;

use arbor_convert::r2d2::{import_r2d2, R2d2Import};
use arbor_convert::{Array, CheckpointModel, ReferenceVocab, StateDict};
use arbor_encoders::r2d2::{Compose, R2d2Lm, R2d2SpecialIds};
use arbor_encoders::Decisions;
use arbor_tasks::R2d2Meta;
use burn::backend::Flex;
use burn::prelude::*;
use burn::tensor::TensorData;
use common::{arbor_convert, arbor_convert_error, assert_close, fixture, Fixture};

type B = Flex;
const TOL: f32 = 1e-5;
const NAME: &str = "r2d2-tiny";

fn options(fx: &Fixture) -> R2d2Import {
    let mut opts = R2d2Import::new(ReferenceVocab::read_file(&fx.dir.join("vocab.txt")).unwrap());
    opts.n_heads = fx.inputs["n_heads"].as_u64().unwrap() as usize;
    opts
}

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

fn tensor(a: &Array) -> Tensor<B, 2> {
    Tensor::from_data(a.clone().into_data(), &Default::default())
}

fn sentences(fx: &Fixture) -> Vec<Vec<u32>> {
    serde_json::from_value(fx.inputs["sentences"].clone()).unwrap()
}

/// Largest |difference| between `actual` and the expected output `name` (after
/// [`assert_close`] has checked the shape and the tolerance).
fn check(fx: &Fixture, name: &str, actual: &[f32], shape: &[usize], worst: &mut f32) {
    assert_close(fx, name, actual, shape, TOL);
    let d = actual
        .iter()
        .zip(fx.expected[name].values())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    *worst = worst.max(d);
}

/// Every output the fixture pins, for one imported model; returns the largest difference.
fn check_model(fx: &Fixture, model: &R2d2Lm<B>) -> f32 {
    let device = Default::default();
    let mut worst = 0.0f32;
    let ids = model.special_ids.expect("tied special tokens");
    assert_eq!(
        (ids.cls, ids.sum, ids.mask, ids.bos, ids.eos),
        (101, 7, 103, 4, 5)
    );

    // (a) The composition function on a batch of pairs, [CLS]/[SUM] from the embedding.
    let rows = Tensor::<B, 1, Int>::from_data(
        TensorData::new(vec![ids.cls as i64, ids.sum as i64, ids.mask as i64], [3]),
        &device,
    );
    let task = model.embedding.weight.val().select(0, rows);
    let composed = model.encoder.composition.with_task_tokens(task).compose(
        tensor(&fx.expected["compose_left"]),
        tensor(&fx.expected["compose_right"]),
    );
    let n = fx.expected["compose_left"].shape()[0];
    let d = model.encoder.d_model();
    check(
        fx,
        "compose_repr",
        &values(composed.repr),
        &[n, d],
        &mut worst,
    );
    check(
        fx,
        "compose_log_p",
        &values(composed.log_p),
        &[n],
        &mut worst,
    );

    // (b) The charts of the sentences, batched (padding included).
    let sents = sentences(fx);
    let refs: Vec<&[u32]> = sents.iter().map(Vec::as_slice).collect();
    let chart = model.chart(&refs, None, Decisions::Argmax);
    let roots = values(chart.roots());
    let splits: Vec<[usize; 4]> = serde_json::from_value(fx.inputs["splits"].clone()).unwrap();
    for (b, s) in sents.iter().enumerate() {
        let len = s.len();
        check(
            fx,
            &format!("s{b}_root"),
            &roots[b * d..(b + 1) * d],
            &[d],
            &mut worst,
        );
        // log p and log p̃ of every cell; log p̃ follows the chosen split (eq. 1, 5).
        let mut lp = vec![0.0f32; len * len];
        let mut lps = vec![0.0f32; len * len];
        for width in 1..len {
            for i in 0..len - width {
                let j = i + width;
                let (best, chosen) = chart.splits(b, (i, j)).unwrap();
                assert_eq!(best, chosen, "evaluation picks the best split");
                let want = splits
                    .iter()
                    .find(|x| x[0] == b && x[1] == i && x[2] == j)
                    .unwrap()[3];
                assert_eq!(best, want, "sentence {b}: best split of ({i}, {j})");
                let p = chart.cell_log_p(b, (i, j)).unwrap() as f32;
                lp[i * len + j] = p;
                lps[i * len + j] = p + lps[i * len + best] + lps[(best + 1) * len + j];
            }
        }
        check(fx, &format!("s{b}_log_p"), &lp, &[len, len], &mut worst);
        check(
            fx,
            &format!("s{b}_log_p_sum"),
            &lps,
            &[len, len],
            &mut worst,
        );
    }

    // The bidirectional LM: log-probabilities from the chart's contexts, as `lm_loss` builds
    // them, against the log-softmax of the reference's logits.
    let all = chart.vectors();
    let rows = all.dims()[0];
    let all = Tensor::cat(vec![all, model.edge_vectors()], 0);
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for ctx in chart.context_rows() {
        for (l, r) in ctx {
            left.push(l.unwrap_or(rows) as i64);
            right.push(r.unwrap_or(rows + 1) as i64);
        }
    }
    let idx = |v: Vec<i64>| {
        let n = v.len();
        Tensor::<B, 1, Int>::from_data(TensorData::new(v, [n]), &device)
    };
    let log_probs =
        values(model.predict(all.clone().select(0, idx(left)), all.select(0, idx(right))));
    let v = model.vocab_size();
    let nll = values(model.lm_loss(&refs, Decisions::Argmax).nll);
    let pppl = model.pseudo_nll(&refs);
    let mut at = 0;
    for (b, s) in sents.iter().enumerate() {
        let len = s.len();
        let logits = &fx.expected[&format!("s{b}_lm_logits")];
        assert_eq!(logits.shape(), [len, v]);
        let expected: Vec<f32> = logits
            .values()
            .chunks(v)
            .flat_map(|row| {
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
                let lse = max
                    + row
                        .iter()
                        .map(|&x| (x as f64 - max).exp())
                        .sum::<f64>()
                        .ln();
                row.iter().map(move |&x| (x as f64 - lse) as f32)
            })
            .collect();
        let actual = &log_probs[at * v..(at + len) * v];
        for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
            let diff = (a - e).abs();
            assert!(
                diff <= TOL,
                "s{b}: LM log-probability {k} is {a} in arbor and {e} in the reference"
            );
            worst = worst.max(diff);
        }
        check(
            fx,
            &format!("s{b}_lm_nll"),
            &nll[at..at + len],
            &[len],
            &mut worst,
        );
        let terms: Vec<f32> = pppl[b].iter().map(|&x| x as f32).collect();
        check(fx, &format!("s{b}_pppl_nll"), &terms, &[len], &mut worst);
        at += len;
    }
    worst
}

#[test]
fn the_reference_model_reproduces_its_evaluation_outputs() {
    let fx = fixture(NAME);
    let device = Default::default();
    let imported = import_r2d2::<B>(fx.state_dict.clone(), &options(&fx), &device).unwrap();
    let worst = check_model(&fx, &imported.model);
    eprintln!("{NAME}: largest difference from the reference {worst:e}");
    let meta = R2d2Meta::from_checkpoint(&imported.meta).unwrap();
    let c = &meta.model.encoder.composition;
    assert_eq!(
        (
            meta.model.vocab_size,
            c.d_model,
            c.n_layers,
            c.n_heads,
            c.d_ff
        ),
        (120, 8, 2, 2, 16)
    );
    assert_eq!(meta.model.encoder.window, 4);
    assert_eq!(meta.vocab[101], "[CLS]");
    assert_eq!(imported.meta["imported"]["layout"], "r2d2");
}

#[test]
fn the_import_command_writes_a_checkpoint_the_r2d2_program_can_load() {
    let fx = fixture(NAME);
    let device = Default::default();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r2d2.ckpt");
    arbor_convert(|c| {
        c.args(["import", "r2d2", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .arg("--vocab")
            .arg(fx.dir.join("vocab.txt"))
            .args(["--heads", "2", "--out"])
            .arg(&out);
    });
    // What `r2d2 eval|parse --checkpoint` does: metadata, model, tokenizer from the vocabulary.
    let file = arbor_train::CheckpointFile::load(&out).unwrap();
    let kind = CheckpointModel::from_meta(&file.meta).unwrap();
    assert_eq!(kind.name(), "r2d2");
    let meta = R2d2Meta::from_checkpoint(&file.meta).unwrap();
    let tok = arbor_data::wordpiece::WordPieceTokenizer::from_pieces(&meta.vocab, true).unwrap();
    let (model, _) =
        arbor_train::load_model::<B, _>(meta.model.init::<B>(&device), &out, &device).unwrap();
    let worst = check_model(&fx, &model);
    assert!(worst <= TOL);
    let ids = tok.encode("The cats sat on the mat.").unwrap().ids;
    let words: Vec<String> = ids.iter().map(|&i| tok.id_piece(i).unwrap()).collect();
    assert_eq!(words, ["the", "cat", "##s", "sat", "on", "the", "mat", "."]);
    let nll = model.pseudo_nll(&[&ids]);
    assert!(nll[0].iter().all(|x| x.is_finite() && *x > 0.0));

    // Without the head count (the reference's 12 does not divide 8) it is an error, not a panic.
    let stderr = arbor_convert_error(|c| {
        c.args(["import", "r2d2", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .arg("--vocab")
            .arg(fx.dir.join("vocab.txt"))
            .arg("--out")
            .arg(dir.path().join("bad.ckpt"));
    });
    assert!(stderr.contains("--heads"), "{stderr}");
}

fn entries(sd: &StateDict) -> BTreeMap<String, Array> {
    let keys: Vec<(String, Vec<usize>)> = sd
        .entries()
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    let mut sd = sd.clone();
    keys.into_iter()
        .map(|(k, s)| {
            let a = sd.take(&k, &s).unwrap();
            (k, a)
        })
        .collect()
}

fn import_error(sd: StateDict, opts: &R2d2Import) -> String {
    import_r2d2::<B>(sd, opts, &Default::default())
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn a_damaged_state_dict_is_refused_with_every_problem_named() {
    let fx = fixture(NAME);
    let mut arrays = entries(&fx.state_dict);
    arrays.remove("tree_encoder.layers.1.linear2.bias");
    arrays.insert("blender.bias".into(), Array::zeros(vec![3]));
    arrays.insert(
        "tree_encoder.layers.0.extra.weight".into(),
        Array::zeros(vec![2, 2]),
    );
    let err = import_error(StateDict::from_arrays("broken.pt", arrays), &options(&fx));
    assert!(
        err.starts_with("broken.pt: does not match the r2d2 layout (3 problems)"),
        "{err}"
    );
    assert!(
        err.contains("missing key `tree_encoder.layers.1.linear2.bias`"),
        "{err}"
    );
    assert!(
        err.contains("`blender.bias` has shape [3], expected [2]"),
        "{err}"
    );
    assert!(
        err.contains("unexpected key `tree_encoder.layers.0.extra.weight`"),
        "{err}"
    );

    // Another model altogether.
    let mut arrays = BTreeMap::new();
    arrays.insert("embedding.weight".into(), Array::zeros(vec![120, 8]));
    let err = import_error(StateDict::from_arrays("other.pt", arrays), &options(&fx));
    assert!(err.contains("no composition Transformer"), "{err}");
}

#[test]
fn an_untied_classifier_is_refused() {
    let fx = fixture(NAME);
    let mut arrays = entries(&fx.state_dict);
    let c = arrays["classifier.weight"].map(|x| x * 1.5);
    arrays.insert("classifier.weight".into(), c);
    let err = import_error(StateDict::from_arrays("untied.pt", arrays), &options(&fx));
    assert!(
        err.contains("`classifier.weight` differs from `embedding.weight`")
            && err.contains("untied"),
        "{err}"
    );
}

#[test]
fn vocabularies_special_ids_and_heads_that_do_not_fit_are_refused() {
    let fx = fixture(NAME);
    // One piece short.
    let mut opts = options(&fx);
    opts.vocab.tokens.pop();
    let err = import_error(fx.state_dict.clone(), &opts);
    assert!(
        err.contains("119 pieces") && err.contains("120 rows"),
        "{err}"
    );
    // A vocabulary without [MASK] names no special ids: they must be given...
    let mut opts = options(&fx);
    opts.vocab.tokens[103] = "[MASKED]".into();
    let err = import_error(fx.state_dict.clone(), &opts);
    assert!(err.contains("--special-ids"), "{err}");
    opts.special_ids = Some(R2d2SpecialIds {
        cls: 101,
        sum: 7,
        mask: 103,
        bos: 4,
        eos: 5,
    });
    assert!(import_r2d2::<B>(fx.state_dict.clone(), &opts, &Default::default()).is_ok());
    // ...and lie inside the vocabulary.
    opts.special_ids = Some(R2d2SpecialIds {
        cls: 101,
        sum: 7,
        mask: 103,
        bos: 4,
        eos: 500,
    });
    let err = import_error(fx.state_dict.clone(), &opts);
    assert!(err.contains("--special-ids"), "{err}");
    // A vocabulary without [UNK] cannot tokenize.
    let mut opts = options(&fx);
    opts.vocab.tokens[100] = "[UNKNOWN]".into();
    let err = import_error(fx.state_dict.clone(), &opts);
    assert!(err.contains("[UNK]"), "{err}");
    // Heads that do not divide the width.
    let mut opts = options(&fx);
    opts.n_heads = 3;
    let err = import_error(fx.state_dict.clone(), &opts);
    assert!(err.contains("--heads"), "{err}");
}

/// Largest difference of the composition outputs and the first sentence's root from the
/// reference's, without asserting.
fn distance(fx: &Fixture, model: &R2d2Lm<B>) -> f32 {
    let device = Default::default();
    let ids = model.special_ids.unwrap();
    let rows = Tensor::<B, 1, Int>::from_data(
        TensorData::new(vec![ids.cls as i64, ids.sum as i64, ids.mask as i64], [3]),
        &device,
    );
    let task = model.embedding.weight.val().select(0, rows);
    let composed = model.encoder.composition.with_task_tokens(task).compose(
        tensor(&fx.expected["compose_left"]),
        tensor(&fx.expected["compose_right"]),
    );
    let sents = sentences(fx);
    let root = values(model.chart(&[&sents[0]], None, Decisions::Argmax).roots());
    [
        ("compose_repr", values(composed.repr)),
        ("compose_log_p", values(composed.log_p)),
        ("s0_root", root),
    ]
    .iter()
    .map(|(name, actual)| {
        actual
            .iter()
            .zip(fx.expected[*name].values())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max)
    })
    .fold(0.0f32, f32::max)
}

#[test]
fn the_fixture_tells_wrong_mappings_apart() {
    let fx = fixture(NAME);
    let device = Default::default();
    let run = |arrays: BTreeMap<String, Array>, heads: usize| {
        let mut opts = options(&fx);
        opts.n_heads = heads;
        let sd = StateDict::from_arrays("variant.pt", arrays);
        distance(&fx, &import_r2d2::<B>(sd, &opts, &device).unwrap().model)
    };
    let original = entries(&fx.state_dict);
    assert!(run(original.clone(), 2) <= TOL);
    let swap_rows = |a: &Array, order: &[usize]| a.reorder_blocks(order);
    let mut variants: Vec<(&str, BTreeMap<String, Array>, usize)> = Vec::new();
    // The blender's outputs read the other way round.
    let mut v = original.clone();
    for k in ["blender.weight", "blender.bias"] {
        v.insert(k.into(), swap_rows(&original[k], &[1, 0]));
    }
    variants.push(("blender outputs swapped", v, 2));
    // One role table for both layers (arbor's former `shared` layout).
    let mut v = original.clone();
    let t0 = original["tree_encoder.layers.0.position_embedding.weight"].clone();
    v.insert("tree_encoder.layers.1.position_embedding.weight".into(), t0);
    variants.push(("layer 0's role table in both layers", v, 2));
    // Left and right roles swapped.
    let mut v = original.clone();
    for l in 0..2 {
        let k = format!("tree_encoder.layers.{l}.position_embedding.weight");
        v.insert(k.clone(), swap_rows(&original[&k], &[0, 2, 1]));
    }
    variants.push(("left/right roles swapped", v, 2));
    // W_q and W_k swapped (attention scores transposed).
    let mut v = original.clone();
    for l in 0..2 {
        for k in ["in_proj_weight", "in_proj_bias"] {
            let k = format!("tree_encoder.layers.{l}.self_attn.{k}");
            v.insert(k.clone(), swap_rows(&original[&k], &[1, 0, 2]));
        }
    }
    variants.push(("q and k blocks swapped", v, 2));
    variants.push(("one head instead of two", original.clone(), 1));
    variants.push(("four heads instead of two", original, 4));
    for (what, arrays, heads) in variants {
        let d = run(arrays, heads);
        assert!(d > 1e-3, "{what}: still within {d} of the reference");
        eprintln!("{what}: {d:.4} from the reference");
    }
}

#[test]
fn a_state_dict_without_the_tied_duplicate_imports_the_same_model() {
    let fx = fixture(NAME);
    let mut arrays = entries(&fx.state_dict);
    arrays.remove("classifier.weight");
    let sd = StateDict::from_arrays("no-classifier.pt", arrays);
    let model = import_r2d2::<B>(sd, &options(&fx), &Default::default())
        .unwrap()
        .model;
    assert!(check_model(&fx, &model) <= TOL);
}
