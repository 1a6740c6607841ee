//! Gumbel Tree-LSTM SNLI models built and run by the authors' own code
//! (jihunchoi/unsupervised-treelstm at `47623f5`: its `SNLIModel`, `build_vocab.py`,
//! `dump_dataset.py` and `evaluate.py`'s batching, driven by `fixtures/authors/gumbel_snli.py`)
//! import into arbor and give the authors' logits, predictions and trees on the first 40 SNLI
//! dev pairs. The importer is given only what a user gives it: the state dict, the vocabulary
//! file the authors' `build_vocab.py` wrote, and the reference's defaults.

mod common;

use arbor_convert::gumbel::{
    import_gumbel_snli, with_reference_specials, GumbelImport, QueryScale,
};
use arbor_convert::ReferenceVocab;
use arbor_encoders::Decisions;
use arbor_heads::{NliFeatures, SentenceBatch};
use burn::backend::Flex;
use common::{fixture, input, normalised_tree};

type B = Flex;

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

    // Predictions, in the reference's label ids.
    let preds: Vec<usize> = input(&fx.inputs["pred"]);
    for i in 0..n {
        let row = &got[i * 3..i * 3 + 3];
        let k = (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        assert_eq!(to_reference[k], preds[i], "{name}: pair {i}");
    }

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
