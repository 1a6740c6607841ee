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

/// `x` `[1, len, d]` with its positions in reverse order, built word by word.
fn reversed<B: ArborBackend>(x: &Tensor<B, 3>) -> Tensor<B, 3> {
    let len = x.dims()[1];
    Tensor::cat(
        (0..len).rev().map(|t| x.clone().narrow(1, t, 1)).collect(),
        1,
    )
}

/// Leaf states of a single unpadded sentence `[1, len, d_in]`, computed independently of
/// [`Leaf::forward`]: the affine map directly, or the sequence runner on each prefix (and,
/// for the bidirectional leaf, on each reversed suffix).
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
            Leaf::BiLstm(cells) => {
                let fw = run_sequence(
                    &cells.forward_cell,
                    x.clone().narrow(1, 0, t + 1),
                    None,
                    None,
                )
                .last;
                let suffix = reversed(&x.clone().narrow(1, t, len - t));
                let bw = run_sequence(&cells.backward_cell, suffix, None, None).last;
                LstmState::new(
                    Tensor::cat(vec![fw.h, bw.h], 1),
                    Tensor::cat(vec![fw.c, bw.c], 1),
                )
            }
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
    let leaves = m.leaf.forward(x.clone(), &[5]);
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
            Leaf::BiLstm(cells) => [&cells.forward_cell, &cells.backward_cell]
                .iter()
                .map(|cell| {
                    norm(cell.input.weight.grad(&grads)) * norm(cell.hidden.weight.grad(&grads))
                })
                .product(),
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
fn encode_in_training_builds_no_trees_and_samples_as_forward_does() {
    // Trees are read back from the device, which a training step never does: `encode` with
    // sampled decisions leaves them out; its sentence vectors are `forward`'s with the same
    // noise, whose trees are still there for whoever wants them.
    let m = model::<Fx>(LeafKind::Lstm, 28);
    let lengths = [3, 1, 5];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 29);
    let enc = m.encode(
        EncoderInput::new(x.clone(), lengths.to_vec()),
        Decisions::Sample(&mut GumbelSampler::seeded(8)),
    );
    assert!(enc.trees.is_none(), "no trees in training");
    let out = m.forward(
        x,
        &lengths,
        Decisions::Sample(&mut GumbelSampler::seeded(8)),
    );
    assert_eq!(to_vec(enc.sentence), to_vec(out.root.h.clone()));
    assert_eq!(out.trees().len(), 3);
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

/// [`model`] with intra-attention switched on.
fn attending_model<B: ArborBackend>(leaf: LeafKind, seed: u64) -> GumbelTreeLstm<B> {
    let mut m = model::<B>(leaf, seed);
    m.settings.intra_attention = true;
    m
}

#[test]
fn bidirectional_leaves_are_padding_invariant_and_match_a_per_word_reference() {
    let m = model::<Fx>(LeafKind::BiLstm, 40);
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 41);
    let n = *LENGTHS.iter().max().unwrap();
    let leaves = m.leaf.forward(x.clone().narrow(1, 0, n), &LENGTHS);
    assert_eq!(leaves.h.dims(), [LENGTHS.len(), n, D]);
    for (b, &len) in LENGTHS.iter().enumerate() {
        let xb = alone(&x, b, len);
        let single = m.leaf.forward(xb.clone(), &[len]);
        for (t, want) in reference_leaves(&m, &xb).into_iter().enumerate() {
            let at = |s: &LstmState<Fx, 3>, i: usize| {
                (
                    to_vec(s.h.clone().narrow(0, i, 1).narrow(1, t, 1)),
                    to_vec(s.c.clone().narrow(0, i, 1).narrow(1, t, 1)),
                )
            };
            let (h, c) = at(&leaves, b);
            let what = format!("example {b} (len {len}) leaf {t}");
            assert_close(&h, &to_vec(want.h.clone()), TOL, &format!("{what}: h"));
            assert_close(&c, &to_vec(want.c.clone()), TOL, &format!("{what}: c"));
            let (h1, c1) = at(&single, 0);
            assert_close(&h, &h1, TOL, &format!("{what}: h vs alone"));
            assert_close(&c, &c1, TOL, &format!("{what}: c vs alone"));
        }
    }
}

/// Sets an `LstmCell` of width 1 over 1-wide inputs to `g = w·x` and every other
/// pre-activation 0, so `c_t = ½c_{t−1} + ½tanh(w·x_t)` and `h_t = ½tanh(c_t)`.
fn half_gates(cell: &mut arbor_cells::LstmCell<Fx>, w: f32) {
    let device = dev::<Fx>();
    cell.input.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(vec![0.0, 0.0, w, 0.0], [1, 4]),
        &device,
    ));
    cell.input.bias = Some(Param::from_tensor(Tensor::zeros([4], &device)));
    cell.hidden.weight = Param::from_tensor(Tensor::zeros([1, 4], &device));
}

#[test]
fn the_bidirectional_leaf_by_hand() {
    // D = 2: each direction is one unit wide. Forward g = x, backward g = 2x.
    let device = dev::<Fx>();
    let mut m = GumbelTreeLstmConfig::new(1, 2)
        .with_leaf(LeafKind::BiLstm)
        .init::<Fx>(&device);
    let Leaf::BiLstm(cells) = &mut m.leaf else {
        unreachable!()
    };
    half_gates(&mut cells.forward_cell, 1.0);
    half_gates(&mut cells.backward_cell, 2.0);
    // Sentence [1, −1, 0.5] padded to 5 with garbage, beside a longer sentence.
    let words = [1.0f64, -1.0, 0.5];
    let x = Tensor::<Fx, 3>::from_data(
        TensorData::new(
            vec![1.0f32, -1.0, 0.5, 30.0, -30.0, 0.3, 0.2, 0.1, 0.0, -0.1],
            [2, 5, 1],
        ),
        &device,
    );
    let leaves = m.leaf.forward(x, &[3, 5]);
    let mut fw = Vec::new();
    let mut c = 0.0;
    for &w in &words {
        c = 0.5 * c + 0.5 * w.tanh();
        fw.push(c);
    }
    let mut bw = [0.0; 3];
    let mut c = 0.0;
    for t in (0..3).rev() {
        c = 0.5 * c + 0.5 * (2.0 * words[t]).tanh();
        bw[t] = c;
    }
    for t in 0..3 {
        let got_c = to_vec(leaves.c.clone().narrow(0, 0, 1).narrow(1, t, 1));
        let got_h = to_vec(leaves.h.clone().narrow(0, 0, 1).narrow(1, t, 1));
        assert_close(&got_c, &[fw[t], bw[t]], TOL, &format!("c at {t}"));
        assert_close(
            &got_h,
            &[0.5 * fw[t].tanh(), 0.5 * bw[t].tanh()],
            TOL,
            &format!("h at {t}"),
        );
    }
}

#[test]
fn reversing_a_sentence_swaps_the_directions_of_the_bidirectional_leaf() {
    // With the same weights in both directions, leaf i of a sentence is leaf len − 1 − i of
    // its reversal with the two halves swapped, wherever the sentences sit in a padded batch.
    let mut m = model::<Fx>(LeafKind::BiLstm, 42);
    let Leaf::BiLstm(cells) = &mut m.leaf else {
        unreachable!()
    };
    // Copies of the values (a clone of a lazily initialised parameter would draw its own).
    let fw = &cells.forward_cell;
    let copy = |p: &Param<Tensor<Fx, 2>>| Param::from_tensor(p.val());
    cells.backward_cell.input.weight = copy(&fw.input.weight);
    cells.backward_cell.input.bias = fw.input.bias.as_ref().map(|b| Param::from_tensor(b.val()));
    cells.backward_cell.hidden.weight = copy(&fw.hidden.weight);
    let len = 4;
    let lengths = [len, 2, len];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 43);
    let sentence = alone(&x, 0, len);
    let x = Tensor::cat(
        vec![
            x.clone().narrow(0, 0, 2),
            Tensor::cat(
                vec![
                    reversed(&sentence),
                    x.clone().narrow(0, 2, 1).narrow(1, len, 2),
                ],
                1,
            ),
        ],
        0,
    );
    let leaves = m.leaf.forward(x, &lengths);
    let half = D / 2;
    for i in 0..len {
        let pick = |t: &Tensor<Fx, 3>, b: usize, p: usize| {
            to_vec(t.clone().narrow(0, b, 1).narrow(1, p, 1).reshape([D]))
        };
        for (what, t) in [("h", &leaves.h), ("c", &leaves.c)] {
            let a = pick(t, 0, i);
            let r = pick(t, 2, len - 1 - i);
            let swapped: Vec<f64> = r[half..].iter().chain(&r[..half]).copied().collect();
            assert_close(&a, &swapped, TOL, &format!("{what} of leaf {i}"));
        }
    }
}

#[test]
fn an_odd_width_is_refused_for_the_bidirectional_leaf() {
    let odd = GumbelTreeLstmConfig::new(3, 5).with_leaf(LeafKind::BiLstm);
    let err = odd.validate().unwrap_err().to_string();
    assert!(err.contains("d_hidden") && err.contains("even"), "{err}");
    assert!(GumbelTreeLstmConfig::new(3, 6)
        .with_leaf(LeafKind::BiLstm)
        .validate()
        .is_ok());
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
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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
    for &leaf in <LeafKind as arbor_cells::names::ValueEnum>::value_variants() {
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
