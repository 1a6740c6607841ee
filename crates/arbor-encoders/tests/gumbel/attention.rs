//! Intra-attention: padding, a host reference, gradients, `encode`, and old configurations.

use arbor_cells::ArborBackend;
use arbor_cells::{GumbelSampler, LstmState};
use arbor_encoders::*;
use burn::prelude::*;

use crate::common::*;
use crate::support::{check_root, model, reference, reference_leaves, D, D_IN, LENGTHS, TIME, TOL};

/// [`model`] with intra-attention switched on.
fn attending_model<B: ArborBackend>(leaf: LeafKind, seed: u64) -> GumbelTreeLstm<B> {
    let mut m = model::<B>(leaf, seed);
    m.settings.intra_attention = true;
    m
}

/// Host reference of intra-attention for one unpadded sentence: the leaves, the parents the
/// per-example reference merges (argmax), the mean, the dot-product scores and the softmax.
fn reference_attention(m: &GumbelTreeLstm<Fx>, x: &Tensor<Fx, 3>) -> (Vec<f64>, Vec<f64>) {
    let q = to_vec(m.query.val());
    let mut nodes = reference_leaves(m, x);
    let mut all: Vec<Vec<f64>> = nodes.iter().map(|s| to_vec(s.h.clone())).collect();
    while nodes.len() > 1 {
        let cands: Vec<LstmState<Fx, 2>> = nodes
            .windows(2)
            .map(|w| m.composition.forward(w[0].clone(), w[1].clone(), None))
            .collect();
        let score = |c: &LstmState<Fx, 2>| {
            let h = to_vec(c.h.clone());
            h.iter().zip(&q).map(|(a, b)| a * b).sum::<f64>()
        };
        let k = (0..cands.len())
            .max_by(|&a, &b| score(&cands[a]).total_cmp(&score(&cands[b])))
            .unwrap();
        all.push(to_vec(cands[k].h.clone()));
        nodes.splice(k..k + 2, [cands[k].clone()]);
    }
    let count = all.len() as f64;
    let mean: Vec<f64> = (0..D)
        .map(|j| all.iter().map(|v| v[j]).sum::<f64>() / count)
        .collect();
    let scores: Vec<f64> = all
        .iter()
        .map(|v| v.iter().zip(&mean).map(|(a, b)| a * b).sum())
        .collect();
    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
    let z: f64 = e.iter().sum();
    let weights: Vec<f64> = e.iter().map(|v| v / z).collect();
    let mix = (0..D)
        .map(|j| all.iter().zip(&weights).map(|(v, w)| v[j] * w).sum())
        .collect();
    (mix, weights)
}

#[test]
fn intra_attention_is_padding_invariant_ignores_padding_and_matches_a_host_reference() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = attending_model::<Fx>(leaf, 44);
        let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 45);
        let n = *LENGTHS.iter().max().unwrap();
        let out = m.forward(x.clone(), &LENGTHS, Decisions::Argmax);
        let weights = out.attention.clone().expect("attention weights");
        assert_eq!(weights.dims(), [LENGTHS.len(), 2 * n - 1]);
        for (b, &len) in LENGTHS.iter().enumerate() {
            let what = format!("{leaf} leaf, example {b} (len {len})");
            let w = row(&weights, b);
            // Real columns: leaves 0..len and layers 0..len − 1 (columns n..n + len − 1).
            let real = |j: usize| j < len || (j >= n && j - n + 1 < len);
            for (j, &v) in w.iter().enumerate() {
                if !real(j) {
                    assert_eq!(v, 0.0, "{what}: padding node {j} has weight {v}");
                }
            }
            let own: Vec<f64> = (0..len).chain(n..n + len - 1).map(|j| w[j]).collect();
            let xb = alone(&x, b, len);
            let single = m.forward(xb.clone(), &[len], Decisions::Argmax);
            let single_w = row(single.attention.as_ref().unwrap(), 0);
            assert_close(&own, &single_w, TOL, &format!("{what}: weights vs alone"));
            assert_close(
                &row(&out.sentence, b),
                &row(&single.sentence, 0),
                TOL,
                &format!("{what}: sentence vs alone"),
            );
            let (mix, want_w) = reference_attention(&m, &xb);
            assert_close(
                &own,
                &want_w,
                1e-4,
                &format!("{what}: weights vs reference"),
            );
            assert_close(
                &row(&out.sentence, b),
                &mix,
                1e-4,
                &format!("{what}: sentence vs reference"),
            );
            // The root is still the tree's root.
            let (root, _) = reference(&m, &xb, None);
            check_root(&out.root, b, &root, &format!("{what}: root"));
        }
        // Sampling: the same masks (the last entries of the weights stay 0 for short ones).
        let sampled = m.forward(
            x,
            &LENGTHS,
            Decisions::Sample(&mut GumbelSampler::seeded(3)),
        );
        let w = row(sampled.attention.as_ref().unwrap(), 1); // length 1: its leaf only
        assert!(
            (w[0] - 1.0).abs() < 1e-6 && w[1..].iter().all(|&v| v == 0.0),
            "{w:?}"
        );
    }
}

#[test]
fn intra_attention_gradients_reach_every_parameter() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = attending_model::<Ad>(leaf, 46);
        let lengths = [4, 2, 5];
        let x = padded_batch::<Ad>(&lengths, 5, D_IN, 47);
        let out = m.forward(
            x,
            &lengths,
            Decisions::Sample(&mut GumbelSampler::seeded(5)),
        );
        let w = tensor::<Ad, 2>([3, D], 1.0, 48);
        let grads = out.sentence.mul(w).sum().backward();
        let nonzero =
            |g: Option<Tensor<Fx, 2>>| to_vec(g.expect("a gradient")).iter().any(|v| *v != 0.0);
        let q = m.query.grad(&grads).expect("q has a gradient");
        assert!(to_vec(q).iter().any(|&v| v != 0.0), "{leaf}: q");
        assert!(
            nonzero(m.composition.children.weight.grad(&grads)),
            "{leaf}: composition"
        );
        let cells: Vec<&arbor_cells::LstmCell<Ad>> = match &m.leaf {
            Leaf::Affine(linear) => {
                assert!(nonzero(linear.weight.grad(&grads)), "{leaf}: affine leaf");
                Vec::new()
            }
            Leaf::Lstm(cell) => vec![cell],
            Leaf::BiLstm(c) => vec![&c.forward_cell, &c.backward_cell],
        };
        for cell in cells {
            assert!(
                nonzero(cell.input.weight.grad(&grads)),
                "{leaf}: leaf input"
            );
            assert!(
                nonzero(cell.hidden.weight.grad(&grads)),
                "{leaf}: leaf hidden"
            );
        }
    }
}

#[test]
fn encode_returns_the_attention_sentence_vector() {
    let m = attending_model::<Fx>(LeafKind::BiLstm, 49);
    let lengths = [3, 1, 4];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 50);
    let out = m.forward(x.clone(), &lengths, Decisions::Argmax);
    let enc = m.encode(EncoderInput::new(x, lengths.to_vec()), Decisions::Argmax);
    assert_eq!(to_vec(enc.sentence), to_vec(out.sentence.clone()));
    assert_ne!(to_vec(out.sentence), to_vec(out.root.h));
}

#[test]
fn configurations_without_the_new_fields_load_with_the_old_behaviour() {
    let old = r#"{"d_input": 3, "d_hidden": 4, "leaf": "lstm", "tau": 1.0, "query_std": 0.01}"#;
    let config: GumbelTreeLstmConfig = serde_json::from_str(old).unwrap();
    assert_eq!(config.intra_attention, None);
    assert!(!config.uses_intra_attention());
    let m = config.init::<Fx>(&dev::<Fx>());
    assert!(!m.settings.intra_attention);
    let new = GumbelTreeLstmConfig::new(3, 4)
        .with_leaf(LeafKind::BiLstm)
        .with_intra_attention(Some(true));
    let json = serde_json::to_string(&new).unwrap();
    assert!(json.contains("\"bi-lstm\""), "{json}");
    let back: GumbelTreeLstmConfig = serde_json::from_str(&json).unwrap();
    assert!(back.uses_intra_attention() && back.leaf == LeafKind::BiLstm);
}
