//! Gumbel Tree-LSTM models saved with jihunchoi/unsupervised-treelstm's layout import and
//! reproduce the reference outputs (fixtures from `fixtures/gumbel.py`) to 1e-5.

use crate::common;

use arbor_convert::gumbel::{
    import_gumbel_snli, import_gumbel_sst, with_reference_specials, GumbelImport, QueryScale,
};
use arbor_convert::{Array, ReferenceVocab, StateDict};
use arbor_encoders::{Decisions, EncoderInput, SentenceEncoder};
use arbor_heads::{NliFeatures, SentenceBatch};
use burn::backend::Flex;
use burn::prelude::*;
use common::{assert_close, fixture, Fixture};

type B = Flex;
const TOL: f32 = 1e-5;

fn options(fx: &Fixture) -> GumbelImport {
    GumbelImport {
        vocab: with_reference_specials(
            ReferenceVocab::read_file(&fx.dir.join("vocab.txt")).unwrap(),
        ),
        labels: None,
        query_scale: match fx.inputs["query_scale"].as_str().unwrap() {
            "none" => QueryScale::None,
            _ => QueryScale::SqrtHidden,
        },
        intra_attention: fx.inputs["intra_attention"].as_bool().unwrap(),
        tau: 1.0,
        dropout: 0.1,
        features: NliFeatures::AbsDifference,
        lowercase: true,
    }
}

/// Reference ids → arbor ids, through the token names.
fn arbor_ids(fx: &Fixture, arbor_vocab: &[String], key: &str) -> Vec<Vec<u32>> {
    let reference: Vec<String> = serde_json::from_value(fx.inputs["vocab"].clone()).unwrap();
    let sentences: Vec<Vec<usize>> = serde_json::from_value(fx.inputs[key].clone()).unwrap();
    sentences
        .iter()
        .map(|s| {
            s.iter()
                .map(|&r| arbor_vocab.iter().position(|t| *t == reference[r]).unwrap() as u32)
                .collect()
        })
        .collect()
}

fn values(t: Tensor<B, 2>) -> (Vec<f32>, Vec<usize>) {
    let dims = t.dims().to_vec();
    (t.into_data().into_vec::<f32>().unwrap(), dims)
}

fn vocab_of(meta: &serde_json::Value) -> Vec<String> {
    serde_json::from_value(meta["task"]["vocab"].clone()).unwrap()
}

/// Columns of a `[n, classes]` output in another order.
fn columns(a: &Array, order: &[usize]) -> Vec<f32> {
    let c = a.shape()[1];
    a.values()
        .chunks(c)
        .flat_map(|row| order.iter().map(move |&k| row[k]))
        .collect()
}

fn check_snli(name: &str) {
    let fx = fixture(name);
    let device = Default::default();
    let imported = import_gumbel_snli::<B>(fx.state_dict.clone(), &options(&fx), &device).unwrap();
    let vocab = vocab_of(&imported.meta);
    assert_eq!(&vocab[..2], ["<pad>", "<unk>"]);
    let labels: Vec<String> =
        serde_json::from_value(imported.meta["task"]["labels"].clone()).unwrap();
    assert_eq!(labels, ["entailment", "neutral", "contradiction"]);
    let model = &imported.model;
    let premises = arbor_ids(&fx, &vocab, "premises");
    let hypotheses = arbor_ids(&fx, &vocab, "hypotheses");

    for (side, sentences) in [("premise", &premises), ("hypothesis", &hypotheses)] {
        let batch = SentenceBatch::<B>::from_ids(sentences, 0, &device);
        let x = model.embedding.forward(batch.ids);
        let out = model
            .encoder
            .encode(EncoderInput::new(x, batch.lengths), Decisions::Argmax);
        let (v, dims) = values(out.sentence);
        assert_close(&fx, side, &v, &dims, TOL);
    }

    let mut both = premises.clone();
    both.extend(hypotheses);
    let out = model.forward(
        SentenceBatch::from_ids(&both, 0, &device),
        Decisions::Argmax,
    );
    let (v, dims) = values(out.logits);
    // The reference orders the classes neutral, entailment, contradiction.
    let expected = columns(&fx.expected["logits"], &[1, 0, 2]);
    assert_eq!(dims, fx.expected["logits"].shape());
    for (a, b) in v.iter().zip(&expected) {
        assert!((a - b).abs() <= TOL, "{name}: logits {v:?} vs {expected:?}");
    }
}

fn check_sst(name: &str) {
    let fx = fixture(name);
    let device = Default::default();
    let imported = import_gumbel_sst::<B>(fx.state_dict.clone(), &options(&fx), &device).unwrap();
    let vocab = vocab_of(&imported.meta);
    let model = &imported.model;
    let sentences = arbor_ids(&fx, &vocab, "sentences");
    let batch = SentenceBatch::<B>::from_ids(&sentences, 0, &device);
    let x = model.embedding.forward(batch.ids.clone());
    let out = model.encoder.encode(
        EncoderInput::new(x, batch.lengths.clone()),
        Decisions::Argmax,
    );
    let (v, dims) = values(out.sentence);
    assert_close(&fx, "sentence", &v, &dims, TOL);
    let (v, dims) = values(model.forward(batch, Decisions::Argmax).logits);
    assert_close(&fx, "logits", &v, &dims, TOL);
}

#[test]
fn snli_leaf_lstm_model_matches_the_reference() {
    check_snli("gumbel-snli-lstm");
}

#[test]
fn snli_affine_leaf_unscaled_query_two_layer_mlp_matches_the_reference() {
    check_snli("gumbel-snli-affine");
}

#[test]
fn sst_bidirectional_leaf_with_intra_attention_and_batch_norm_matches_the_reference() {
    check_sst("gumbel-sst-bilstm-intra");
}

#[test]
fn sst_two_hidden_layers_with_batch_norm_matches_the_reference() {
    check_sst("gumbel-sst-lstm-bn2");
}

#[test]
fn a_damaged_state_dict_is_refused_with_every_problem_named() {
    let fx = fixture("gumbel-snli-lstm");
    let mut arrays = std::collections::BTreeMap::new();
    for (k, shape) in fx.state_dict.entries() {
        arrays.insert(k.to_string(), Array::zeros(shape.to_vec()));
    }
    arrays.remove("encoder.leaf_rnn_cell.bias_hh");
    arrays.insert(
        "encoder.treelstm_layer.comp_linear.bias".into(),
        Array::zeros(vec![7]),
    );
    arrays.insert("encoder.extra.weight".into(), Array::zeros(vec![2, 2]));
    let sd = StateDict::from_arrays("broken.pt", arrays);
    let err = import_gumbel_snli::<B>(sd, &options(&fx), &Default::default())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("broken.pt: does not match the gumbel-snli layout (3 problems)"),
        "{err}"
    );
    assert!(
        err.contains("missing key `encoder.leaf_rnn_cell.bias_hh`"),
        "{err}"
    );
    assert!(
        err.contains("`encoder.treelstm_layer.comp_linear.bias` has shape [7], expected [40]"),
        "{err}"
    );
    assert!(
        err.contains("unexpected key `encoder.extra.weight`"),
        "{err}"
    );
}

#[test]
fn a_vocabulary_of_the_wrong_size_is_refused() {
    let fx = fixture("gumbel-snli-lstm");
    let mut opts = options(&fx);
    opts.vocab.tokens.pop();
    opts.vocab.tokens.pop();
    opts.vocab.tokens.push("<PAD>".into());
    opts.vocab.tokens.push("<UNK>".into());
    opts.vocab.tokens.remove(0);
    let err = import_gumbel_snli::<B>(fx.state_dict.clone(), &opts, &Default::default())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("11 entries") && err.contains("12 rows"),
        "{err}"
    );
}

#[test]
fn labels_that_do_not_fit_the_classifier_are_refused() {
    let fx = fixture("gumbel-snli-lstm");
    let mut opts = options(&fx);
    opts.labels = Some(vec!["yes".into(), "no".into()]);
    let err = import_gumbel_snli::<B>(fx.state_dict.clone(), &opts, &Default::default())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("2 label names") && err.contains("3 classes"),
        "{err}"
    );
}

/// The SST reference's `train.py` builds its vocabulary and labels with torchtext: `itos` starts
/// `<unk>`, `<pad>`, and the label field is `<unk>`, positive, negative. The same weights laid
/// out that way import to the same model: the embedding rows follow the `itos`, and the
/// label field's `<unk>` row (given a bias that would win every argmax) is dropped.
#[test]
fn sst_with_a_torchtext_vocabulary_and_label_field_matches_the_reference() {
    let fx = fixture("gumbel-sst-lstm-bn2");
    let mut sd = fx.state_dict.clone();
    let keys: Vec<(String, Vec<usize>)> = sd
        .entries()
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    let mut arrays = std::collections::BTreeMap::new();
    for (k, shape) in keys {
        let a = sd.take(&k, &shape).unwrap();
        arrays.insert(k, a);
    }
    let rows = |a: &Array, order: &[usize]| {
        Array::concat(&order.iter().map(|&r| a.rows(r, r + 1)).collect::<Vec<_>>())
    };
    // Reference rows: the words, then <PAD>, <UNK>; torchtext: <unk>, <pad>, the words.
    let emb = arrays["word_embedding.weight"].clone();
    let n = emb.shape()[0];
    let order: Vec<usize> = [n - 1, n - 2].into_iter().chain(0..n - 2).collect();
    arrays.insert("word_embedding.weight".into(), rows(&emb, &order));
    // Output rows negative, positive → <unk>, positive, negative.
    let w = arrays["classifier.clf_linear.weight"].clone();
    let unk_row = w.rows(0, 1).map(|_| 0.0);
    arrays.insert(
        "classifier.clf_linear.weight".into(),
        Array::concat(&[unk_row, w.rows(1, 2), w.rows(0, 1)]),
    );
    let b = arrays["classifier.clf_linear.bias"]
        .clone()
        .reshape(vec![2, 1]);
    let unk_bias = Array::new(vec![1, 1], vec![100.0]).unwrap();
    arrays.insert(
        "classifier.clf_linear.bias".into(),
        Array::concat(&[unk_bias, b.rows(1, 2), b.rows(0, 1)]).reshape(vec![3]),
    );
    let torchtext_sd = StateDict::from_arrays(fx.dir.join("state_dict.pt"), arrays);

    let words = ReferenceVocab::read_file(&fx.dir.join("vocab.txt")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let itos = tmp.path().join("itos.txt");
    let mut text = String::from("<unk>\n<pad>\n");
    for t in &words.tokens {
        text.push_str(t);
        text.push('\n');
    }
    std::fs::write(&itos, text).unwrap();
    let mut opts = options(&fx);
    opts.vocab = ReferenceVocab::read_file(&itos).unwrap();
    opts.labels = Some(["<unk>", "positive", "negative"].map(String::from).to_vec());

    let device = Default::default();
    let imported = import_gumbel_sst::<B>(torchtext_sd, &opts, &device).unwrap();
    let reference = import_gumbel_sst::<B>(fx.state_dict.clone(), &options(&fx), &device).unwrap();
    assert_eq!(vocab_of(&imported.meta), vocab_of(&reference.meta));
    let labels: Vec<String> =
        serde_json::from_value(imported.meta["task"]["labels"].clone()).unwrap();
    assert_eq!(labels, ["negative", "positive"]);
    let vocab = vocab_of(&imported.meta);
    let sentences = arbor_ids(&fx, &vocab, "sentences");
    let batch = SentenceBatch::<B>::from_ids(&sentences, 0, &device);
    let (v, dims) = values(imported.model.forward(batch, Decisions::Argmax).logits);
    assert_close(&fx, "logits", &v, &dims, TOL);
}
