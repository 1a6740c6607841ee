//! Scores and trees: the query's dot product, determinism, seeded sampling, a hand-set tree,
//! coverage of every word, and selection probabilities.

use arbor_cells::GumbelSampler;
use arbor_data::tree::Span;
use arbor_encoders::*;
use burn::module::Param;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::*;
use crate::support::{model, D, D_IN, LENGTHS, TIME, TOL};

#[test]
fn scores_are_the_query_dot_product_over_root_d() {
    let m = model::<Fx>(LeafKind::Affine, 28);
    let h = tensor::<Fx, 3>([2, 3, D], 1.0, 29);
    let got = to_vec(m.scores(h.clone()));
    let q = to_vec(m.query.val());
    let hv = to_vec(h);
    let want: Vec<f64> = hv
        .chunks(D)
        .map(|r| r.iter().zip(&q).map(|(a, b)| a * b).sum::<f64>() / (D as f64).sqrt())
        .collect();
    assert_close(&got, &want, TOL, "scores");
}

#[test]
fn evaluation_is_deterministic() {
    let m = model::<Fx>(LeafKind::Lstm, 14);
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 15);
    let a = m.forward(x.clone(), &LENGTHS, Decisions::Argmax);
    let b = m.forward(x, &LENGTHS, Decisions::Argmax);
    assert_eq!(a.trees(), b.trees());
    assert_eq!(to_vec(a.root.h), to_vec(b.root.h));
    assert_eq!(to_vec(a.root.c), to_vec(b.root.c));
}

#[test]
fn seeded_sampling_is_reproducible_and_different_seeds_differ() {
    // The default (small) query: the noise decides, as early in training.
    let m = GumbelTreeLstmConfig::new(D_IN, D).init::<Fx>(&dev::<Fx>());
    let lengths = [6, 6, 5, 6];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 16);
    let run = |seed: u64| {
        let out = m.forward(
            x.clone(),
            &lengths,
            Decisions::Sample(&mut GumbelSampler::seeded(seed)),
        );
        (to_vec(out.root.h.clone()), out.trees())
    };
    let (h0, t0) = run(0);
    let (h1, t1) = run(0);
    assert_eq!(h0, h1, "same seed, same roots");
    assert_eq!(t0, t1, "same seed, same trees");
    assert!(
        (1..10).any(|s| run(s).1 != t0),
        "different seeds should give different trees"
    );
}

/// Hand-set weights: leaves `h = x, c = 0`; the parent's cell input is `tanh(h_l + h_r)` and
/// every gate is σ(0); `q = e_0`. The best first merge is the pair with the largest
/// `x_l[0] + x_r[0]`.
#[test]
fn the_tree_follows_the_highest_scoring_pair() {
    let d = 4;
    let device = dev::<Fx>();
    let mut m = GumbelTreeLstmConfig::new(d, d)
        .with_leaf(LeafKind::Affine)
        .init::<Fx>(&device);
    let mut leaf_w = vec![0f32; d * 2 * d];
    for i in 0..d {
        leaf_w[i * 2 * d + i] = 1.0;
    }
    let Leaf::Affine(linear) = &mut m.leaf else {
        unreachable!()
    };
    linear.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(leaf_w, [d, 2 * d]),
        &device,
    ));
    linear.bias = Some(Param::from_tensor(Tensor::zeros([2 * d], &device)));
    let mut comp_w = vec![0f32; 2 * d * 5 * d];
    for i in 0..d {
        comp_w[i * 5 * d + 4 * d + i] = 1.0; // h_l → g
        comp_w[(d + i) * 5 * d + 4 * d + i] = 1.0; // h_r → g
    }
    m.composition.children.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(comp_w, [2 * d, 5 * d]),
        &device,
    ));
    m.composition.children.bias = Some(Param::from_tensor(Tensor::zeros([5 * d], &device)));
    m.query = Param::from_tensor(Tensor::from_floats([1.0, 0.0, 0.0, 0.0], &device));

    // Word features on dimension 0; the bump marks the pair that must merge first.
    let cases: [(&[f32], usize); 4] = [
        (&[0.0, 0.1, 2.0, 2.0, -0.3, 0.0], 2),
        (&[3.0, 3.0, 0.0, 0.5, 0.2, 0.0], 0),
        (&[0.0, -0.5, 0.1, 0.0, 1.5, 1.5], 4),
        (&[0.2, 0.0, 1.0, -1.0, 0.0, 0.0], 1),
    ];
    let (batch, n) = (cases.len(), 6);
    let mut x = vec![0f32; batch * n * d];
    for (b, (words, _)) in cases.iter().enumerate() {
        for (t, &v) in words.iter().enumerate() {
            x[(b * n + t) * d] = v;
        }
    }
    let x = Tensor::<Fx, 3>::from_data(TensorData::new(x, [batch, n, d]), &device);
    let out = m.forward(x, &[n; 4], Decisions::Argmax);
    let indices = out.layer_indices();
    for (b, (_, first)) in cases.iter().enumerate() {
        assert_eq!(indices[b][0], *first, "case {b}: first merge");
        assert!(
            out.trees()[b]
                .spans()
                .contains(&Span::new(*first, first + 2)),
            "case {b}: span"
        );
    }
    // Case 0 step by step: (2 3) gives h₀ = ½tanh(½tanh 4) ≈ 0.23; the nodes are now
    // [0, 0.1, 0.23, −0.3, 0], so the next best pair is (0.1, 0.23) at index 1.
    assert_eq!(indices[0][1], 1);
}

#[test]
fn trees_cover_every_word_exactly_once() {
    let m = model::<Fx>(LeafKind::Lstm, 22);
    let lengths = [1, 7, 3, 2, 8, 5, 6, 4];
    let x = padded_batch::<Fx>(&lengths, 9, D_IN, 23);
    let mut sampler = GumbelSampler::seeded(5);
    for decisions in [Decisions::Argmax, Decisions::Sample(&mut sampler)] {
        let out = m.forward(x.clone(), &lengths, decisions);
        for ((tree, indices), &len) in out.trees().iter().zip(out.layer_indices()).zip(&lengths) {
            assert_eq!(indices.len(), len - 1);
            assert_eq!(tree.num_leaves(), len);
            assert_eq!(tree.leaves(), (0..len).collect::<Vec<_>>());
            assert_eq!(tree.spans().len(), len - 1);
        }
    }
}

#[test]
fn selection_probabilities_live_on_valid_candidates_only() {
    let m = model::<Fx>(LeafKind::Affine, 24);
    let lengths = [5, 2, 3];
    let x = padded_batch::<Fx>(&lengths, 5, D_IN, 25);
    let out = m.forward(
        x,
        &lengths,
        Decisions::Sample(&mut GumbelSampler::seeded(2)),
    );
    assert_eq!(out.probabilities.len(), 4);
    for (t, p) in out.probabilities.iter().enumerate() {
        let w = 4 - t;
        assert_eq!(p.dims(), [3, w]);
        for (b, &len) in lengths.iter().enumerate() {
            let r = row(p, b);
            let valid = (len - 1).saturating_sub(t);
            assert!(
                r[valid..].iter().all(|&v| v == 0.0),
                "layer {t} example {b}: {r:?}"
            );
            let sum: f64 = r.iter().sum();
            let want = if valid > 0 { 1.0 } else { 0.0 };
            assert!(
                (sum - want).abs() < 1e-5,
                "layer {t} example {b}: sum {sum}"
            );
        }
    }
}
