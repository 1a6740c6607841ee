//! SPINN SNLI models of nyu-mll/spinn's PyTorch port, imported and run in arbor: the outputs
//! match the reference's (computed by `fixtures/spinn.py`, committed under
//! `tests/fixtures/spinn-*/`) to 1e-5, and bad input is refused with every problem named.

use crate::common;

use std::collections::BTreeMap;

use arbor_cells::{GumbelSampler, LstmState, RecurrentCell};
use arbor_convert::{
    import_spinn, model_state_dict, Array, ConvertError, Imported, ReferenceVocab, SpinnImport,
    StateDict,
};
use arbor_data::tree::{BinaryTree, Transition};
use arbor_encoders::{Decisions, Encoder, EncoderInput, SentenceEncoder, Spinn};
use arbor_heads::{NliClassifier, SentenceBatch};
use burn::backend::Flex;
use burn::prelude::*;
use common::{assert_close, fixture, Fixture};

type B = Flex;
type Model = NliClassifier<B, Encoder<B>>;

const TOL: f32 = 1e-5;

fn opts(fx: &Fixture) -> SpinnImport {
    SpinnImport {
        vocab: Some(
            ReferenceVocab::read_file(&fx.dir.join("vocab.txt"))
                .unwrap()
                .tokens,
        ),
        vocab_file: Some(fx.dir.join("vocab.txt")),
        ..SpinnImport::default()
    }
}

fn import(name: &str) -> (Fixture, Imported<Model>) {
    let fx = fixture(name);
    let device = Default::default();
    let imported = import_spinn::<B>(fx.state_dict.clone(), &opts(&fx), &device)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (fx, imported)
}

fn ids(v: &serde_json::Value) -> Vec<Vec<u32>> {
    serde_json::from_value(v.clone()).unwrap()
}

fn transitions(v: &serde_json::Value) -> Vec<Vec<Transition>> {
    let raw: Vec<Vec<u8>> = serde_json::from_value(v.clone()).unwrap();
    raw.iter()
        .map(|ts| {
            ts.iter()
                .map(|&t| Transition::from_id(t).unwrap())
                .collect()
        })
        .collect()
}

/// Premises then hypotheses, with their gold transitions.
fn sentences(fx: &Fixture) -> (Vec<Vec<u32>>, Vec<Vec<Transition>>) {
    let mut s = ids(&fx.inputs["premises"]);
    s.extend(ids(&fx.inputs["hypotheses"]));
    let mut t = transitions(&fx.inputs["premise_transitions"]);
    t.extend(transitions(&fx.inputs["hypothesis_transitions"]));
    (s, t)
}

fn batch(fx: &Fixture) -> SentenceBatch<B> {
    let (s, t) = sentences(fx);
    SentenceBatch::from_ids(&s, 0, &Default::default()).with_transitions(t)
}

fn values<const D: usize>(t: Tensor<B, D>) -> (Vec<f32>, Vec<usize>) {
    let data = t.into_data();
    let shape = data.shape.to_vec();
    (data.to_vec::<f32>().unwrap(), shape)
}

fn check<const D: usize>(fx: &Fixture, name: &str, t: Tensor<B, D>) {
    let (v, s) = values(t);
    assert_close(fx, name, &v, &s, TOL);
    let e = &fx.expected[name];
    let worst = v
        .iter()
        .zip(e.values())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!("{}: {name} max |diff| = {worst:e}", fx.dir.display());
}

/// The sentence vectors of premises and hypotheses and the pair logits.
fn run(model: &Model, fx: &Fixture, decisions: Decisions<'_>) -> [Tensor<B, 2>; 3] {
    let b = batch(fx);
    let n = b.len();
    let x = model.embedding.forward(b.ids.clone());
    let mut input = EncoderInput::new(x, b.lengths.clone());
    input.transitions = b.transitions.clone();
    let (logits, sentences) = match decisions {
        Decisions::Argmax => (
            model.forward(b, Decisions::Argmax).logits,
            model.encoder.encode(input, Decisions::Argmax).sentence,
        ),
        Decisions::Sample(s) => (
            model.forward(b, Decisions::Sample(s)).logits,
            model.encoder.encode(input, Decisions::Sample(s)).sentence,
        ),
    };
    let d = sentences.dims()[1];
    [
        sentences.clone().slice([0..n / 2, 0..d]),
        sentences.slice([n / 2..n, 0..d]),
        logits,
    ]
}

fn spinn(model: &Model) -> &Spinn<B> {
    match &model.encoder {
        Encoder::Spinn(s) => s,
        _ => panic!("not a SPINN encoder"),
    }
}

/// The transition classifier's logits at every gold step of every sentence, computed step by
/// step with the imported modules (a plain stack, one sentence at a time).
fn step_logits(model: &Model, fx: &Fixture) -> Tensor<B, 2> {
    let s = spinn(model);
    let (cell, classifier) = (s.tracker.as_ref().unwrap(), s.classifier.as_ref().unwrap());
    let d = s.d_hidden;
    let with_cell = s.transition_input() == Some(arbor_encoders::ClassifierInput::HiddenCell);
    let device = Default::default();
    let (sentences, gold) = sentences(fx);
    let mut all = Vec::new();
    for (words, ts) in sentences.iter().zip(&gold) {
        let n = words.len();
        let ids = Tensor::<B, 2, Int>::from_data(
            TensorData::new(words.iter().map(|&w| w as i64).collect(), [1, n]),
            &device,
        );
        let e = model.embedding.forward(ids);
        let de = e.dims()[2];
        let items = s.projection.forward(e.reshape([n, de]));
        let zero = Tensor::<B, 2>::zeros([1, 2 * d], &device);
        let h = |x: &Tensor<B, 2>| x.clone().narrow(1, 0, d);
        let mut stack: Vec<Tensor<B, 2>> = Vec::new();
        let mut next = 0;
        let mut state = LstmState::<B, 2>::zeros([1, cell.d_hidden()], &device);
        for op in ts {
            let top = stack.last().cloned().unwrap_or(zero.clone());
            let second = if stack.len() >= 2 {
                stack[stack.len() - 2].clone()
            } else {
                zero.clone()
            };
            let buf = if next < n {
                items.clone().narrow(0, next, 1)
            } else {
                zero.clone()
            };
            let x = Tensor::cat(vec![h(&top), h(&second), h(&buf)], 1);
            state = cell.step(cell.input.forward(x), state).state;
            let input = if with_cell {
                state.clone().concat()
            } else {
                state.h.clone()
            };
            all.push(classifier.forward(input));
            match op {
                Transition::Shift => {
                    stack.push(buf);
                    next += 1;
                }
                _ => {
                    let right = stack.pop().unwrap();
                    let left = stack.pop().unwrap();
                    let node = s.composition.forward(
                        LstmState::split(left),
                        LstmState::split(right),
                        Some(state.h.clone()),
                    );
                    stack.push(node.concat());
                }
            }
        }
    }
    Tensor::cat(all, 0)
}

fn check_given_transitions(name: &str) -> Imported<Model> {
    let (fx, imported) = import(name);
    let [u, v, logits] = run(&imported.model, &fx, Decisions::Argmax);
    check(&fx, "premise", u);
    check(&fx, "hypothesis", v);
    check(&fx, "logits", logits);
    imported
}

#[test]
fn spinn_pi_nt_matches_the_reference() {
    let imported = check_given_transitions("spinn-pi-nt");
    let meta = &imported.meta["task"]["model"];
    assert_eq!(meta["encoder"]["variant"], "pi-nt");
    assert_eq!(meta["head"]["batch_norm"], true);
    assert_eq!(meta["head"]["n_mlp_hidden"], 2);
    assert_eq!(imported.meta["task"]["vocab"][0], "<pad>");
    assert_eq!(imported.meta["task"]["vocab"][1], "<unk>");
    assert_eq!(imported.meta["task"]["vocab"][2], "a");
    // The port's lookup (as is, lower-cased, upper-cased) goes with the imported vocabulary.
    assert_eq!(imported.meta["task"]["case_fallback"], true);
}

#[test]
fn spinn_pi_matches_the_reference() {
    let imported = check_given_transitions("spinn-pi");
    let meta = &imported.meta["task"]["model"];
    assert_eq!(meta["encoder"]["variant"], "pi");
    assert_eq!(meta["encoder"]["d_tracking"], 4);
    assert_eq!(meta["head"]["batch_norm"], false);
}

fn check_full(name: &str, input: &str) {
    let (fx, imported) = import(name);
    let model = &imported.model;
    assert_eq!(
        imported.meta["task"]["model"]["encoder"]["classifier_input"],
        input
    );
    // Teacher-forced (arbor's training mode; the reference with the given transitions).
    let mut sampler = GumbelSampler::seeded(0);
    let [u, v, logits] = run(model, &fx, Decisions::Sample(&mut sampler));
    check(&fx, "premise", u);
    check(&fx, "hypothesis", v);
    check(&fx, "logits", logits);
    check(&fx, "transition_logits", step_logits(model, &fx));
    let mut sampler = GumbelSampler::seeded(0);
    let b = batch(&fx);
    let x = model.embedding.forward(b.ids.clone());
    let mut enc_in = EncoderInput::new(x, b.lengths.clone());
    enc_in.transitions = b.transitions.clone();
    let loss = model
        .encoder
        .encode(enc_in, Decisions::Sample(&mut sampler))
        .aux_loss
        .expect("full SPINN returns its transition loss when teacher-forced");
    check(&fx, "transition_loss", loss);
    // Evaluation: arbor parses on its own, the reference with its internal parser.
    let [u, v, logits] = run(model, &fx, Decisions::Argmax);
    check(&fx, "parsed_premise", u);
    check(&fx, "parsed_hypothesis", v);
    check(&fx, "parsed_logits", logits);
    let out = model.forward(batch(&fx), Decisions::Argmax);
    let (pre, hyp) = out.trees.expect("full SPINN returns its parses");
    let parsed = transitions(&fx.inputs["parsed_transitions"]);
    let (gold_s, gold_t) = sentences(&fx);
    assert_eq!(gold_s.len(), parsed.len());
    let mut differ = 0;
    for (i, tree) in pre.iter().chain(&hyp).enumerate() {
        assert_eq!(
            tree,
            &BinaryTree::from_transitions(&parsed[i]).unwrap(),
            "sentence {i}"
        );
        differ += usize::from(parsed[i] != gold_t[i]);
    }
    assert!(
        differ > 0,
        "the fixture's parses should differ from the gold trees"
    );
}

#[test]
fn full_spinn_matches_the_reference() {
    check_full("spinn-full", "h-c");
}

/// `--encode pass`, no `reduce.track`, `predict_use_cell = False`, no hidden MLP layer.
#[test]
fn full_spinn_without_optional_parts_matches_the_reference() {
    check_full("spinn-full-h", "h");
}

fn arrays(sd: &StateDict) -> BTreeMap<String, Array> {
    let mut copy = sd.clone();
    let keys: Vec<(String, Vec<usize>)> = sd
        .entries()
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    keys.into_iter()
        .map(|(k, s)| {
            let a = copy.take(&k, &s).unwrap();
            (k, a)
        })
        .collect()
}

#[test]
fn a_missing_an_extra_and_a_misshaped_key_are_reported_together() {
    let fx = fixture("spinn-pi");
    let mut t = arrays(&fx.state_dict);
    t.remove("spinn.tracker.lateral.weight");
    t.insert(
        "spinn.extra.weight".into(),
        Array::new(vec![2], vec![1.0, 2.0]).unwrap(),
    );
    t.insert("mlp.l0.bias".into(), Array::zeros(vec![9]));
    let sd = StateDict::from_arrays("broken.pt", t);
    let err = import_spinn::<B>(sd, &opts(&fx), &Default::default()).unwrap_err();
    assert!(matches!(err, ConvertError::Layout { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("broken.pt: does not match the spinn-snli layout (3 problems)"),
        "{msg}"
    );
    assert!(
        msg.contains("missing key `spinn.tracker.lateral.weight` (expected shape [16, 4])"),
        "{msg}"
    );
    assert!(msg.contains("unexpected key `spinn.extra.weight`"), "{msg}");
    assert!(
        msg.contains("key `mlp.l0.bias` has shape [9], expected [10]"),
        "{msg}"
    );
}

#[test]
fn a_vocabulary_of_the_wrong_size_is_refused() {
    let fx = fixture("spinn-pi");
    let mut o = opts(&fx);
    o.vocab.as_mut().unwrap().pop();
    let err = import_spinn::<B>(fx.state_dict.clone(), &o, &Default::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("vocab.txt has 14 tokens but the model's embedding has 15 rows"),
        "{msg}"
    );
}

#[test]
fn a_vocabulary_without_the_special_tokens_first_is_refused() {
    let fx = fixture("spinn-pi");
    let mut o = opts(&fx);
    o.vocab.as_mut().unwrap().swap(1, 2);
    let msg = import_spinn::<B>(fx.state_dict.clone(), &o, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("ids 0 and 1 must be"), "{msg}");
}

#[test]
fn a_label_list_of_the_wrong_length_is_refused() {
    let fx = fixture("spinn-pi");
    let mut o = opts(&fx);
    o.labels.pop();
    let msg = import_spinn::<B>(fx.state_dict.clone(), &o, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("the model has 3 classes but 2 labels"),
        "{msg}"
    );
}

#[test]
fn unsupported_settings_are_named() {
    let fx = fixture("spinn-pi");
    let mut t = arrays(&fx.state_dict);
    t.insert(
        "spinn.tracker.transform.weight".into(),
        Array::zeros(vec![4, 16]),
    );
    let sd = StateDict::from_arrays("lateral.pt", t);
    let msg = import_spinn::<B>(sd, &opts(&fx), &Default::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("lateral_tracking = False"), "{msg}");

    let fx = fixture("spinn-full");
    let mut t = arrays(&fx.state_dict);
    t.insert(
        "spinn.transition_net.weight".into(),
        Array::zeros(vec![2, 10]),
    );
    let sd = StateDict::from_arrays("lengths.pt", t);
    let msg = import_spinn::<B>(sd, &opts(&fx), &Default::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("use_lengths"), "{msg}");
}

/// A model trained on pretrained vectors has no `embed.embed.weight`: the rows come from the
/// GloVe text file, by token; tokens it lacks stay zero.
#[test]
fn pretrained_vectors_come_from_the_embeddings_file() {
    let fx = fixture("spinn-pi");
    let mut t = arrays(&fx.state_dict);
    let table = t.remove("embed.embed.weight").unwrap();
    let vocab = ReferenceVocab::read_file(&fx.dir.join("vocab.txt"))
        .unwrap()
        .tokens;
    let e = table.shape()[1];
    let dir = tempfile::tempdir().unwrap();
    let glove = dir.path().join("vectors.txt");
    let mut text = String::from("unused 1 2 3\n"); // a word not in the vocabulary: skipped
    for (i, w) in vocab.iter().enumerate().skip(1) {
        let row: Vec<String> = table.values()[i * e..(i + 1) * e]
            .iter()
            .map(|x| format!("{x:e}"))
            .collect();
        text.push_str(&format!("{w} {}\n", row.join(" ")));
    }
    std::fs::write(&glove, text).unwrap();
    let sd = StateDict::from_arrays("glove-model.pt", t.clone());

    let mut o = opts(&fx);
    let err = import_spinn::<B>(sd.clone(), &o, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("--embeddings"), "{err}");

    o.embeddings = Some(glove);
    let imported = import_spinn::<B>(sd, &o, &Default::default()).unwrap();
    assert_eq!(imported.meta["imported"]["embeddings"]["rows_found"], 14);
    let [u, v, logits] = run(&imported.model, &fx, Decisions::Argmax);
    check(&fx, "premise", u);
    check(&fx, "hypothesis", v);
    check(&fx, "logits", logits);
}

/// The port's `ModelTrainer.save` wraps the state dict with the step and the optimizer state.
#[test]
fn a_training_checkpoints_model_state_dict_is_used() {
    let fx = fixture("spinn-pi");
    let mut t: BTreeMap<String, Array> = arrays(&fx.state_dict)
        .into_iter()
        .map(|(k, a)| (format!("model_state_dict.{k}"), a))
        .collect();
    t.insert(
        "optimizer_state_dict.state.0.exp_avg".into(),
        Array::zeros(vec![3]),
    );
    let sd = model_state_dict(StateDict::from_arrays("checkpoint.pt", t));
    let imported = import_spinn::<B>(sd, &opts(&fx), &Default::default()).unwrap();
    let [_, _, logits] = run(&imported.model, &fx, Decisions::Argmax);
    check(&fx, "logits", logits);
}

#[test]
fn the_checkpoint_loads_back_as_an_arbor_classifier() {
    let (fx, imported) = import("spinn-full");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spinn.ckpt");
    imported.save::<B>(&path).unwrap();
    let file = arbor_train::CheckpointFile::load(&path).unwrap();
    let kind = arbor_convert::CheckpointModel::from_meta(&file.meta).unwrap();
    let arbor_convert::CheckpointModel::Classifier(meta) = kind else {
        panic!("not a classifier")
    };
    assert_eq!(meta.labels, ["entailment", "neutral", "contradiction"]);
    assert_eq!(meta.vocab.len(), 15);
    assert!(!meta.lowercase);
    assert_eq!(file.meta["imported"]["layout"], "spinn-snli");
    let _ = fx;
}

/// The SNLI labels in another order: the output rows are permuted into arbor's order.
#[test]
fn labels_in_another_order_are_permuted_into_arbors() {
    let fx = fixture("spinn-pi");
    let mut o = opts(&fx);
    o.labels = vec![
        "contradiction".into(),
        "entailment".into(),
        "neutral".into(),
    ];
    let imported = import_spinn::<B>(fx.state_dict.clone(), &o, &Default::default()).unwrap();
    assert_eq!(
        imported.meta["task"]["labels"],
        serde_json::json!(["entailment", "neutral", "contradiction"])
    );
    let [_, _, logits] = run(&imported.model, &fx, Decisions::Argmax);
    // arbor column j is reference output order[j]: entailment ← 1, neutral ← 2, contradiction ← 0.
    let permuted = logits.select(
        1,
        Tensor::<B, 1, Int>::from_data(TensorData::new(vec![2i64, 0, 1], [3]), &Default::default()),
    );
    check(&fx, "logits", permuted);
}

/// A classifier with a class SNLI never has (an `<unk>` row first, as torchtext's label fields
/// have): the extra row is dropped, the model is a 3-class one with the same logits, and the
/// extra class can never be predicted.
#[test]
fn a_class_snli_never_has_is_dropped() {
    let fx = fixture("spinn-pi");
    let mut t = arrays(&fx.state_dict);
    let last = (0..)
        .take_while(|k| t.contains_key(&format!("mlp.l{k}.weight")))
        .last()
        .unwrap();
    let (wk, bk) = (format!("mlp.l{last}.weight"), format!("mlp.l{last}.bias"));
    let w = t.remove(&wk).unwrap();
    let b = t.remove(&bk).unwrap();
    let width = w.shape()[1];
    let extra_w = Array::new(vec![1, width], vec![0.5; width]).unwrap();
    let extra_b = Array::new(vec![1], vec![100.0]).unwrap();
    t.insert(wk, Array::concat(&[extra_w, w]));
    t.insert(bk, Array::concat(&[extra_b, b]));
    let sd = StateDict::from_arrays("four-classes.pt", t);
    let mut o = opts(&fx);
    o.labels = ["<unk>", "entailment", "neutral", "contradiction"]
        .map(String::from)
        .to_vec();
    let imported = import_spinn::<B>(sd, &o, &Default::default()).unwrap();
    assert_eq!(
        imported.meta["task"]["labels"],
        serde_json::json!(["entailment", "neutral", "contradiction"])
    );
    let [_, _, logits] = run(&imported.model, &fx, Decisions::Argmax);
    assert_eq!(logits.dims()[1], 3);
    check(&fx, "logits", logits);
}
