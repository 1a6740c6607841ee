//! `argmax_tree`: the Gumbel Tree-LSTM's argmax layers as one op, against the layers written
//! out on the host in f64 (every pair recomposed at every layer); which backends have it.

use arbor_kernels::{argmax_tree, ArborBackend, GateLayout};
use burn::backend::{Autodiff, Flex, NdArray};

use crate::support::{assert_close, tensor, to_vec};

/// What the reference computes for one example: root `(h, c)`, and per layer the selected
/// index, the probabilities of its pairs and the chosen parent's `h`.
struct Layers {
    root: (Vec<f64>, Vec<f64>),
    selected: Vec<usize>,
    probabilities: Vec<Vec<f64>>,
    chosen: Vec<Vec<f64>>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The binary Tree-LSTM with gates `i, f_l, f_r, o, g` (`GateLayout::binary_tree_lstm`).
fn compose(
    l: &(Vec<f64>, Vec<f64>),
    r: &(Vec<f64>, Vec<f64>),
    w: &[f64],
    b: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let d = l.0.len();
    let input: Vec<f64> = l.0.iter().chain(&r.0).copied().collect();
    let gate = |j: usize| b[j] + (0..2 * d).map(|k| input[k] * w[k * 5 * d + j]).sum::<f64>();
    let mut h = vec![0.0; d];
    let mut c = vec![0.0; d];
    for u in 0..d {
        c[u] = sigmoid(gate(u)) * gate(4 * d + u).tanh()
            + sigmoid(gate(d + u)) * l.1[u]
            + sigmoid(gate(2 * d + u)) * r.1[u];
        h[u] = sigmoid(gate(3 * d + u)) * c[u].tanh();
    }
    (h, c)
}

/// The layers of one example, every pair recomposed at every layer (the authors' schedule).
fn reference(mut nodes: Vec<(Vec<f64>, Vec<f64>)>, w: &[f64], b: &[f64], q: &[f64]) -> Layers {
    let d = q.len();
    let mut out = Layers {
        root: (vec![], vec![]),
        selected: vec![],
        probabilities: vec![],
        chosen: vec![],
    };
    while nodes.len() > 1 {
        let cands: Vec<_> = nodes
            .windows(2)
            .map(|p| compose(&p[0], &p[1], w, b))
            .collect();
        let scores: Vec<f64> = cands
            .iter()
            .map(|(h, _)| h.iter().zip(q).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt())
            .collect();
        let mut best = 0;
        for (k, &s) in scores.iter().enumerate() {
            if s > scores[best] {
                best = k;
            }
        }
        let max = scores[best];
        let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
        out.probabilities
            .push(scores.iter().map(|s| (s - max).exp() / z).collect());
        out.selected.push(best);
        out.chosen.push(cands[best].0.clone());
        nodes.splice(best..best + 2, [cands[best].clone()]);
    }
    out.root = nodes.remove(0);
    out
}

/// The fused op on backend `B` against the reference, for sentences of lengths 1 to 9 in one
/// batch (merges at both edges and inside, examples completing at different layers).
fn fused_matches_the_layers_written_out<B: ArborBackend>(
    tol: f64,
    with_bias: bool,
    transposed: bool,
) {
    // 300 sentences: 1,605 first-layer pairs and over 400 new pairs in the second layer, more
    // than the kernel's 64-pair chunks of gate scratch and its 256-pair blocks of left
    // projections and output scratch (later blocks then read the right projections of nodes
    // merged in the first block's call).
    let lengths: Vec<usize> = [9, 1, 2, 7, 3, 9, 5, 8, 4, 6, 9, 8, 7, 9, 2, 6, 9, 5, 9, 9]
        .into_iter()
        .cycle()
        .take(300)
        .collect();
    let (batch, n, d) = (lengths.len(), 9, 5);
    let lh = tensor::<B, 3>([batch, n, d], 1.0, 1);
    let lc = tensor::<B, 3>([batch, n, d], 1.0, 2);
    // A strided weight view (the op reads the backend's strides): rows padded, or a
    // transposed matrix (columns contiguous).
    let w = if transposed {
        tensor::<B, 2>([5 * d, 2 * d], 0.8, 3).transpose()
    } else {
        tensor::<B, 2>([2 * d, 5 * d + 3], 0.8, 3).narrow(1, 1, 5 * d)
    };
    let b = tensor::<B, 1>([5 * d], 0.5, 4);
    let q = tensor::<B, 1>([d], 4.0, 5);
    let out = argmax_tree(
        lh.clone(),
        lc.clone(),
        w.clone(),
        with_bias.then(|| b.clone()),
        q.clone(),
        &lengths,
        &GateLayout::binary_tree_lstm(),
    )
    .expect("the CPU backends run argmax_tree on f32");
    let (lh, lc, w, q) = (to_vec(lh), to_vec(lc), to_vec(w), to_vec(q));
    let b = if with_bias {
        to_vec(b)
    } else {
        vec![0.0; 5 * d]
    };
    let (root_h, root_c, chosen, probabilities) = (
        to_vec(out.root_h),
        to_vec(out.root_c),
        to_vec(out.chosen),
        to_vec(out.probabilities),
    );
    let selected: Vec<i64> = out.selected.into_data().convert::<i64>().to_vec().unwrap();
    let layers = n - 1;
    let mut merged_inside = false;
    for (e, &len) in lengths.iter().enumerate() {
        let leaf = |v: &[f64], i: usize| v[(e * n + i) * d..(e * n + i + 1) * d].to_vec();
        let nodes = (0..len).map(|i| (leaf(&lh, i), leaf(&lc, i))).collect();
        let r = reference(nodes, &w, &b, &q);
        let what = format!("example {e} (length {len})");
        assert_close(
            &root_h[e * d..(e + 1) * d],
            &r.root.0,
            tol,
            &format!("{what}: root h"),
        );
        assert_close(
            &root_c[e * d..(e + 1) * d],
            &r.root.1,
            tol,
            &format!("{what}: root c"),
        );
        for t in 0..layers {
            let row = &probabilities[(e * layers + t) * layers..(e * layers + t + 1) * layers];
            let parent = &chosen[(e * layers + t) * d..(e * layers + t + 1) * d];
            if t + 1 < len {
                assert_eq!(
                    selected[e * layers + t] as usize,
                    r.selected[t],
                    "{what}: layer {t}"
                );
                merged_inside |= r.selected[t] > 0 && r.selected[t] + 2 < len - t;
                let mut p = r.probabilities[t].clone();
                p.resize(layers, 0.0);
                assert_close(row, &p, tol, &format!("{what}: layer {t} probabilities"));
                assert_close(
                    parent,
                    &r.chosen[t],
                    tol,
                    &format!("{what}: layer {t} parent"),
                );
            } else {
                assert_eq!(selected[e * layers + t], 0, "{what}: complete at layer {t}");
                assert!(
                    row.iter().chain(parent).all(|&v| v == 0.0),
                    "{what}: layer {t} zeros"
                );
            }
        }
    }
    assert!(merged_inside, "some merge away from both edges");
}

#[test]
fn fused_matches_the_layers_written_out_flex() {
    fused_matches_the_layers_written_out::<Flex>(1e-4, true, false);
}

#[test]
fn fused_matches_the_layers_written_out_with_a_transposed_weight() {
    fused_matches_the_layers_written_out::<Flex>(1e-4, true, true);
    fused_matches_the_layers_written_out::<NdArray<f32>>(1e-4, false, true);
}

#[test]
fn fused_matches_the_layers_written_out_without_a_bias() {
    fused_matches_the_layers_written_out::<Flex>(1e-4, false, false);
    fused_matches_the_layers_written_out::<NdArray<f32>>(1e-4, false, false);
}

#[test]
fn fused_matches_the_layers_written_out_ndarray() {
    fused_matches_the_layers_written_out::<NdArray<f32>>(1e-4, true, false);
}

/// The op is offered where no gradient is wanted and the data is `f32`: autodiff backends and
/// `f64` data get `None` (their callers run the layers as tensor ops).
#[test]
fn only_the_cpu_backends_on_f32_have_it() {
    fn run<B: ArborBackend>() -> bool {
        let lengths = [3, 2];
        argmax_tree(
            tensor::<B, 3>([2, 3, 4], 1.0, 1),
            tensor::<B, 3>([2, 3, 4], 1.0, 2),
            tensor::<B, 2>([8, 20], 1.0, 3),
            None,
            tensor::<B, 1>([4], 1.0, 4),
            &lengths,
            &GateLayout::binary_tree_lstm(),
        )
        .is_some()
    }
    assert!(run::<Flex>());
    assert!(run::<NdArray<f32>>());
    assert!(!run::<Autodiff<Flex>>());
    assert!(!run::<NdArray<f64>>());
}

/// Non-finite scores (a diverged model) give valid selections and no panic.
#[test]
fn non_finite_scores_still_give_valid_merges() {
    let lengths = [5, 4, 1];
    let mut q = vec![f64::NAN; 4];
    q[1] = f64::INFINITY;
    let out = argmax_tree(
        tensor::<Flex, 3>([3, 5, 4], 1.0, 1),
        tensor::<Flex, 3>([3, 5, 4], 1.0, 2),
        tensor::<Flex, 2>([8, 20], 1.0, 3),
        None,
        crate::support::from_f64::<Flex, 1>(q, [4]),
        &lengths,
        &GateLayout::binary_tree_lstm(),
    )
    .unwrap();
    let selected: Vec<i64> = out.selected.into_data().convert::<i64>().to_vec().unwrap();
    for (e, &len) in lengths.iter().enumerate() {
        for t in 0..len.saturating_sub(1) {
            let k = selected[e * 4 + t];
            assert!(
                (0..(len - t - 1) as i64).contains(&k),
                "example {e} layer {t}: {k}"
            );
        }
    }
}

/// A one-token batch has no layers: the roots are the leaves.
#[test]
fn one_token_sentences_are_their_leaves() {
    let lh = tensor::<Flex, 3>([2, 1, 3], 1.0, 1);
    let out = argmax_tree(
        lh.clone(),
        tensor::<Flex, 3>([2, 1, 3], 1.0, 2),
        tensor::<Flex, 2>([6, 15], 1.0, 3),
        None,
        tensor::<Flex, 1>([3], 1.0, 4),
        &[1, 1],
        &GateLayout::binary_tree_lstm(),
    )
    .unwrap();
    assert_eq!(to_vec(out.root_h), to_vec(lh));
    assert_eq!(out.selected.dims(), [2, 0]);
    assert_eq!(out.probabilities.dims(), [2, 0, 0]);
}
