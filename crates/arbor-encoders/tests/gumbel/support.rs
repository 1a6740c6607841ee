//! What the Gumbel Tree-LSTM tests share: sizes, a model whose scores decide, and host
//! references for the leaves and the per-example tree.

use arbor_cells::ArborBackend;
use arbor_cells::{run_sequence, LstmState};
use arbor_encoders::*;
use burn::module::Param;
use burn::prelude::*;

use crate::common::*;

pub const D_IN: usize = 5;
pub const D: usize = 6;
pub const TOL: f64 = 1e-5;

/// A model whose query has unit-scale entries, so that the scores (not just the noise) decide.
pub fn model<B: ArborBackend>(leaf: LeafKind, seed: u64) -> GumbelTreeLstm<B> {
    let mut m = GumbelTreeLstmConfig::new(D_IN, D)
        .with_leaf(leaf)
        .init::<B>(&dev::<B>());
    m.query = Param::from_tensor(tensor::<B, 1>([D], 1.0, seed));
    m
}

/// `x` `[1, len, d]` with its positions in reverse order, built word by word.
pub fn reversed<B: ArborBackend>(x: &Tensor<B, 3>) -> Tensor<B, 3> {
    let len = x.dims()[1];
    Tensor::cat(
        (0..len).rev().map(|t| x.clone().narrow(1, t, 1)).collect(),
        1,
    )
}

/// Leaf states of a single unpadded sentence `[1, len, d_in]`, computed independently of
/// [`Leaf::forward`]: the affine map directly, or the sequence runner on each prefix (and,
/// for the bidirectional leaf, on each reversed suffix).
pub fn reference_leaves<B: ArborBackend>(
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
pub fn reference<B: ArborBackend>(
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

pub fn check_root<B: ArborBackend>(
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

pub const LENGTHS: [usize; 6] = [5, 1, 2, 4, 3, 5];
pub const TIME: usize = 7;
