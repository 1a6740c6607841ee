//! Agreement with the per-example reference, padded or alone, with argmax or matched noise,
//! down to sentences of one and two words.

use arbor_cells::GumbelSampler;
use arbor_data::tree::BinaryTree;
use arbor_encoders::*;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::*;
use crate::support::{check_root, model, reference, reference_leaves, D_IN, LENGTHS, TIME};

#[test]
fn argmax_is_padding_invariant_and_matches_a_per_example_reference() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = model::<Fx>(leaf, 1);
        let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 2);
        let out = m.forward(x.clone(), &LENGTHS, Decisions::Argmax);
        let indices = out.layer_indices();
        let trees = out.trees();
        for (b, &len) in LENGTHS.iter().enumerate() {
            let what = format!("{leaf} leaf, example {b} (len {len})");
            let xb = alone(&x, b, len);
            let single = m.forward(xb.clone(), &[len], Decisions::Argmax);
            check_root(&out.root, b, &single.root, &format!("{what} vs alone"));
            assert_eq!(trees[b], single.trees()[0], "{what}: tree vs alone");
            let (want, want_indices) = reference(&m, &xb, None);
            check_root(&out.root, b, &want, &format!("{what} vs reference"));
            assert_eq!(indices[b], want_indices, "{what}: indices vs reference");
        }
        // Some example really built a non-trivial tree, so the comparison meant something.
        assert!(indices
            .iter()
            .any(|i| i.len() >= 3 && i.iter().any(|&k| k > 0)));
    }
}

/// Per-layer batch noise whose valid entries are random and whose invalid entries (padded
/// candidates, complete examples) are huge, plus each example's own valid part.
fn arranged_noise(lengths: &[usize], seed: u64) -> (Vec<Tensor<Fx, 2>>, Vec<Vec<Vec<f64>>>) {
    let n = *lengths.iter().max().unwrap();
    let batch = lengths.len();
    let mut per_example = vec![Vec::new(); batch];
    let mut layers = Vec::new();
    for t in 0..n - 1 {
        let w = n - 1 - t;
        let real = values(batch * w, 2.0, seed + t as u64);
        let mut v = Vec::with_capacity(batch * w);
        for (b, &len) in lengths.iter().enumerate() {
            let valid = (len - 1).saturating_sub(t);
            if valid > 0 {
                per_example[b].push(
                    real[b * w..b * w + valid]
                        .iter()
                        .map(|&g| g as f64)
                        .collect(),
                );
            }
            for k in 0..w {
                v.push(if k < valid { real[b * w + k] } else { 1e4 });
            }
        }
        layers.push(Tensor::from_data(
            TensorData::new(v, [batch, w]),
            &dev::<Fx>(),
        ));
    }
    (layers, per_example)
}

#[test]
fn sampling_with_matched_noise_is_padding_invariant_and_ignores_padded_noise() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = model::<Fx>(leaf, 3);
        let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 4);
        let (noise, per_example) = arranged_noise(&LENGTHS, 5);
        let out = m.forward_with_noise(x.clone(), &LENGTHS, &noise);
        let indices = out.layer_indices();
        for (b, &len) in LENGTHS.iter().enumerate() {
            let what = format!("{leaf} leaf, example {b} (len {len})");
            let xb = alone(&x, b, len);
            let own: Vec<Tensor<Fx, 2>> = per_example[b]
                .iter()
                .map(|g| {
                    let g: Vec<f32> = g.iter().map(|&v| v as f32).collect();
                    let k = g.len();
                    Tensor::from_data(TensorData::new(g, [1, k]), &dev::<Fx>())
                })
                .collect();
            let single = m.forward_with_noise(xb.clone(), &[len], &own);
            check_root(&out.root, b, &single.root, &format!("{what} vs alone"));
            assert_eq!(
                indices[b],
                single.layer_indices()[0],
                "{what}: indices vs alone"
            );
            let (want, want_indices) = reference(&m, &xb, Some(&per_example[b]));
            check_root(&out.root, b, &want, &format!("{what} vs reference"));
            assert_eq!(indices[b], want_indices, "{what}: indices vs reference");
        }
    }
}

#[test]
fn the_sampler_path_uses_one_noise_draw_per_layer() {
    let m = model::<Fx>(LeafKind::Lstm, 6);
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 7);
    let n = *LENGTHS.iter().max().unwrap();
    let mut sampler = GumbelSampler::seeded(11);
    let noise: Vec<Tensor<Fx, 2>> = (0..n - 1)
        .map(|t| sampler.sample::<Fx, 2>([LENGTHS.len(), n - 1 - t], &dev::<Fx>()))
        .collect();
    let given = m.forward_with_noise(x.clone(), &LENGTHS, &noise);
    let sampled = m.forward(
        x,
        &LENGTHS,
        Decisions::Sample(&mut GumbelSampler::seeded(11)),
    );
    assert_eq!(given.layer_indices(), sampled.layer_indices());
    assert_eq!(to_vec(given.root.h), to_vec(sampled.root.h));
}

#[test]
fn a_length_one_sentence_returns_its_leaf() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = model::<Fx>(leaf, 8);
        let lengths = [3, 1, 4, 1];
        let x = padded_batch::<Fx>(&lengths, 5, D_IN, 9);
        let argmax = m.forward(x.clone(), &lengths, Decisions::Argmax);
        let sampled = m.forward(
            x.clone(),
            &lengths,
            Decisions::Sample(&mut GumbelSampler::seeded(1)),
        );
        for b in [1, 3] {
            let want = reference_leaves(&m, &alone(&x, b, 1)).remove(0);
            check_root(
                &argmax.root,
                b,
                &want,
                &format!("{leaf} leaf, argmax, example {b}"),
            );
            check_root(
                &sampled.root,
                b,
                &want,
                &format!("{leaf} leaf, sample, example {b}"),
            );
            let single = m.forward(alone(&x, b, 1), &[1], Decisions::Argmax);
            check_root(
                &single.root,
                0,
                &want,
                &format!("{leaf} leaf, alone, example {b}"),
            );
            assert_eq!(argmax.trees()[b], BinaryTree::Leaf(0));
        }
    }
}

#[test]
fn a_length_two_sentence_is_one_composition_of_its_leaves() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = model::<Fx>(leaf, 10);
        let lengths = [2, 4, 2];
        let x = padded_batch::<Fx>(&lengths, 4, D_IN, 11);
        let out = m.forward(x.clone(), &lengths, Decisions::Argmax);
        for b in [0, 2] {
            let mut leaves = reference_leaves(&m, &alone(&x, b, 2));
            let right = leaves.pop().unwrap();
            let left = leaves.pop().unwrap();
            let want = m.composition.forward(left, right, None);
            check_root(&out.root, b, &want, &format!("{leaf} leaf, example {b}"));
            assert_eq!(
                out.trees()[b],
                BinaryTree::node(BinaryTree::Leaf(0), BinaryTree::Leaf(1))
            );
        }
    }
}
