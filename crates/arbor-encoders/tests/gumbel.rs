//! Gumbel Tree-LSTM: padding invariance, agreement with a per-example reference, leaves,
//! determinism, reproducible sampling, gradients, and tree correctness.

mod common;

use arbor_cells::ArborBackend;
use arbor_cells::{run_sequence, GumbelSampler, LstmState};
use arbor_data::tree::{BinaryTree, Span};
use arbor_encoders::*;
use burn::module::Param;
use burn::prelude::*;
use burn::tensor::TensorData;
use common::*;

const D_IN: usize = 5;
const D: usize = 6;
const TOL: f64 = 1e-5;

/// A model whose query has unit-scale entries, so that the scores (not just the noise) decide.
fn model<B: ArborBackend>(leaf: LeafKind, seed: u64) -> GumbelTreeLstm<B> {
    let mut m = GumbelTreeLstmConfig::new(D_IN, D)
        .with_leaf(leaf)
        .init::<B>(&dev::<B>());
    m.query = Param::from_tensor(tensor::<B, 1>([D], 1.0, seed));
    m
}

/// Leaf states of a single unpadded sentence `[1, len, d_in]`, computed independently of
/// [`Leaf::forward`]: the affine map directly, or the sequence runner on each prefix.
fn reference_leaves<B: ArborBackend>(
    m: &GumbelTreeLstm<B>,
    x: &Tensor<B, 3>,
) -> Vec<LstmState<B, 2>> {
    let len = x.dims()[1];
    (0..len)
        .map(|t| match &m.leaf {
            Leaf::Affine(linear) => {
                LstmState::split(linear.forward(x.clone().narrow(1, t, 1).reshape([1, D_IN])))
            }
            Leaf::Lstm(cell) => run_sequence(cell, x.clone().narrow(1, 0, t + 1), None, None).last,
        })
        .collect()
}

/// A per-example, per-node reference: compose every adjacent pair one at a time, score on the
/// host, merge the best (scores plus `noise[t][k]` at layer `t`, when given).
fn reference<B: ArborBackend>(
    m: &GumbelTreeLstm<B>,
    x: &Tensor<B, 3>,
    noise: Option<&[Vec<f64>]>,
) -> (LstmState<B, 2>, Vec<usize>) {
    let q = to_vec(m.query.val());
    let mut nodes = reference_leaves(m, x);
    let mut indices = Vec::new();
    while nodes.len() > 1 {
        let t = indices.len();
        let cands: Vec<LstmState<B, 2>> = nodes
            .windows(2)
            .map(|w| m.composition.forward(w[0].clone(), w[1].clone(), None))
            .collect();
        let scores: Vec<f64> = cands
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let h = to_vec(c.h.clone());
                let v = h.iter().zip(&q).map(|(a, b)| a * b).sum::<f64>() / (D as f64).sqrt();
                v + noise.map_or(0.0, |n| n[t][k])
            })
            .collect();
        let k = (0..scores.len())
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        nodes.splice(k..k + 2, [cands[k].clone()]);
        indices.push(k);
    }
    (nodes.pop().unwrap(), indices)
}

fn check_root<B: ArborBackend>(
    root: &LstmState<B, 2>,
    b: usize,
    want: &LstmState<B, 2>,
    what: &str,
) {
    assert_close(
        &row(&root.h, b),
        &to_vec(want.h.clone()),
        TOL,
        &format!("{what}: h"),
    );
    assert_close(
        &row(&root.c, b),
        &to_vec(want.c.clone()),
        TOL,
        &format!("{what}: c"),
    );
}

const LENGTHS: [usize; 6] = [5, 1, 2, 4, 3, 5];
const TIME: usize = 7;

#[test]
fn argmax_is_padding_invariant_and_matches_a_per_example_reference() {
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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

#[test]
fn the_leaf_lstm_keeps_h_and_c_at_every_position() {
    let m = model::<Fx>(LeafKind::Lstm, 12);
    let x = tensor::<Fx, 3>([1, 5, D_IN], 1.0, 13);
    let leaves = m.leaf.forward(x.clone());
    for (t, want) in reference_leaves(&m, &x).into_iter().enumerate() {
        let h = leaves.h.clone().narrow(1, t, 1).reshape([1, D]);
        let c = leaves.c.clone().narrow(1, t, 1).reshape([1, D]);
        assert_close(&to_vec(h), &to_vec(want.h), TOL, &format!("h at {t}"));
        assert_close(&to_vec(c), &to_vec(want.c), TOL, &format!("c at {t}"));
    }
}

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

#[test]
fn gradients_reach_the_query_the_composition_and_the_leaves() {
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
        let m = model::<Ad>(leaf, 17);
        let lengths = [4, 2, 5];
        let x = padded_batch::<Ad>(&lengths, 5, D_IN, 18);
        let out = m.forward(
            x,
            &lengths,
            Decisions::Sample(&mut GumbelSampler::seeded(3)),
        );
        let w = tensor::<Ad, 2>([3, D], 1.0, 19);
        let grads = out.root.h.mul(w).sum().backward();
        let norm = |g: Option<Tensor<Fx, 2>>| {
            to_vec(g.expect("a gradient"))
                .iter()
                .map(|v| v.abs())
                .sum::<f64>()
        };
        let q = m.query.grad(&grads).expect("q has a gradient");
        assert!(
            to_vec(q).iter().any(|&v| v != 0.0),
            "{leaf}: zero gradient for q"
        );
        assert!(
            norm(m.composition.children.weight.grad(&grads)) > 0.0,
            "{leaf}: composition"
        );
        let leaf_grad = match &m.leaf {
            Leaf::Affine(linear) => norm(linear.weight.grad(&grads)),
            Leaf::Lstm(cell) => {
                norm(cell.input.weight.grad(&grads)) * norm(cell.hidden.weight.grad(&grads))
            }
        };
        assert!(leaf_grad > 0.0, "{leaf}: leaf weights");
    }
}

#[test]
fn argmax_evaluation_has_no_gradient_path_to_the_query() {
    let m = model::<Ad>(LeafKind::Affine, 20);
    let lengths = [4, 3];
    let x = padded_batch::<Ad>(&lengths, 4, D_IN, 21);
    let out = m.forward(x, &lengths, Decisions::Argmax);
    let grads = out.root.h.sum().backward();
    let q = m.query.grad(&grads).map(to_vec).unwrap_or_default();
    assert!(
        q.iter().all(|&v| v == 0.0),
        "argmax must not train q: {q:?}"
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

#[test]
fn encode_returns_the_root_the_trees_and_masked_leaf_states() {
    let m = model::<Fx>(LeafKind::Lstm, 26);
    let lengths = [3, 1, 4];
    let time = 6; // longer than the longest sentence
    let x = padded_batch::<Fx>(&lengths, time, D_IN, 27);
    let out = m.forward(x.clone(), &lengths, Decisions::Argmax);
    let enc = m.encode(EncoderInput::new(x, lengths.to_vec()), Decisions::Argmax);
    assert_eq!(m.d_output(), D);
    assert_eq!(enc.sentence.dims(), [3, D]);
    assert_eq!(to_vec(enc.sentence), to_vec(out.root.h.clone()));
    assert_eq!(enc.trees.as_deref(), Some(out.trees().as_slice()));
    let tokens = enc.tokens.expect("leaf states");
    assert_eq!(tokens.dims(), [3, time, D]);
    for (b, &len) in lengths.iter().enumerate() {
        for t in 0..time {
            let tok = to_vec(tokens.clone().narrow(0, b, 1).narrow(1, t, 1));
            if t < len {
                let leaf = to_vec(out.leaves.h.clone().narrow(0, b, 1).narrow(1, t, 1));
                assert_eq!(tok, leaf, "example {b} position {t}");
            } else {
                assert!(tok.iter().all(|&v| v == 0.0), "example {b} padding {t}");
            }
        }
    }
    assert!(enc.aux_loss.is_none());
}

#[test]
fn non_finite_inputs_give_trees_not_a_panic() {
    // A diverged model: every score is NaN. The encoder must still return one tree per
    // sentence over its words (the sentence vectors are NaN, which the engine reports).
    let device = dev::<Fx>();
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
        let enc = GumbelTreeLstmConfig::new(3, 4)
            .with_leaf(leaf)
            .init::<Fx>(&device);
        let x = Tensor::<Fx, 3>::full([2, 5, 3], f32::NAN, &device);
        let out = enc.encode(EncoderInput::new(x, vec![5, 3]), Decisions::Argmax);
        let trees = out.trees.expect("trees");
        assert_eq!(trees[0].leaves(), vec![0, 1, 2, 3, 4], "{leaf}");
        assert_eq!(trees[1].leaves(), vec![0, 1, 2], "{leaf}");
    }
}

/// The query's gradient of `m` when sampling with the seeded sampler at temperature `tau`
/// (`None`: the model's own τ).
fn query_grad_at(m: &GumbelTreeLstm<Ad>, tau: Option<f64>) -> Vec<f64> {
    let lengths = [5, 3];
    let x = padded_batch::<Ad>(&lengths, 5, D_IN, 22);
    let out = m.forward(
        x,
        &lengths,
        Decisions::Sample(&mut GumbelSampler::seeded(4).with_temperature(tau)),
    );
    let grads = out.root.h.sum().backward();
    to_vec(m.query.grad(&grads).expect("q has a gradient"))
}

#[test]
fn an_annealed_temperature_from_the_sampler_replaces_the_models_own() {
    // The straight-through forward value does not depend on τ; its gradient does.
    let m = model::<Ad>(LeafKind::Lstm, 21);
    let own = query_grad_at(&m, None);
    let same = query_grad_at(&m, Some(GumbelTreeLstmConfig::new(D_IN, D).tau));
    let cold = query_grad_at(&m, Some(0.1));
    assert_eq!(
        own, same,
        "the model's own τ given explicitly changed the gradient"
    );
    assert!(
        own.iter().zip(&cold).any(|(a, b)| (a - b).abs() > 1e-6),
        "τ = 0.1 left the gradient unchanged: the sampler's temperature is ignored"
    );
    // A non-positive temperature is ignored rather than dividing by zero.
    assert_eq!(own, query_grad_at(&m, Some(0.0)));
}
