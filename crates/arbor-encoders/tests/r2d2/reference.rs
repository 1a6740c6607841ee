//! The device chart against host references written the slow way: exhaustive CKY, and
//! pruned tree induction (Algorithms 1–2).

use std::collections::HashMap;

use arbor_data::tree::BinaryTree;
use arbor_encoders::r2d2::{Chart, ChartConfig, Compose, Composition};
use arbor_encoders::Decisions;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::{self, dev, tensor, Fx};
use crate::support::{assert_close, composition, rows};

/// Exhaustive CKY written the slow way: every cell, every split, one pair per call.
fn reference_cky(f: &Composition<Fx>, leaves: &[Vec<f32>]) -> (Vec<f32>, BinaryTree) {
    let n = leaves.len();
    let d = leaves[0].len();
    let row =
        |v: &[f32]| Tensor::<Fx, 2>::from_data(TensorData::new(v.to_vec(), [1, d]), &dev::<Fx>());
    // (e, log p̃, best split)
    let mut cells: HashMap<(usize, usize), (Vec<f32>, f32, usize)> = HashMap::new();
    for (i, e) in leaves.iter().enumerate() {
        cells.insert((i, i), (e.clone(), 0.0, i));
    }
    for len in 2..=n {
        for i in 0..=n - len {
            let j = i + len - 1;
            let mut best: Option<(Vec<f32>, f32, usize)> = None;
            for k in i..j {
                let (el, ll, _) = cells[&(i, k)].clone();
                let (er, lr, _) = cells[&(k + 1, j)].clone();
                let out = f.compose(row(&el), row(&er));
                let lp: f32 = out.log_p.into_scalar().elem();
                let score = lp + ll + lr;
                if best.as_ref().is_none_or(|b| score > b.1) {
                    best = Some((rows(out.repr).remove(0), score, k));
                }
            }
            cells.insert((i, j), best.unwrap());
        }
    }
    fn tree(
        cells: &HashMap<(usize, usize), (Vec<f32>, f32, usize)>,
        i: usize,
        j: usize,
    ) -> BinaryTree {
        if i == j {
            return BinaryTree::Leaf(i);
        }
        let k = cells[&(i, j)].2;
        BinaryTree::node(tree(cells, i, k), tree(cells, k + 1, j))
    }
    (cells[&(0, n - 1)].0.clone(), tree(&cells, 0, n - 1))
}

#[test]
fn with_a_window_of_at_least_n_minus_1_the_pruned_chart_is_exhaustive_cky() {
    let d = 8;
    for seed in 0..4u64 {
        let f = composition(d, seed);
        let lengths = [6usize, 4, 5];
        let leaves = tensor::<Fx, 3>([3, 6, d], 1.5, 100 + seed);
        for window in [5usize, 7] {
            let pruned = ChartConfig {
                window,
                pruning: true,
                tau: 1.0,
            };
            let full = ChartConfig {
                window,
                pruning: false,
                tau: 1.0,
            };
            let a = Chart::build(
                &f,
                leaves.clone(),
                &lengths,
                None,
                &pruned,
                Decisions::Argmax,
            );
            let b = Chart::build(&f, leaves.clone(), &lengths, None, &full, Decisions::Argmax);
            assert_eq!(a.trees(), b.trees());
            assert_eq!(a.stats, b.stats);
            assert_eq!(a.stats.merges, 0);
            let (ra, rb) = (rows(a.roots()), rows(b.roots()));
            let all = rows(leaves.clone().reshape([18, d]));
            for (s, &n) in lengths.iter().enumerate() {
                assert_close(&ra[s], &rb[s], 1e-6, "pruned vs full");
                let (root, tree) = reference_cky(&f, &all[s * 6..s * 6 + n]);
                assert_close(&ra[s], &root, 1e-4, "chart vs reference CKY");
                assert_eq!(a.trees()[s], tree, "seed {seed} sentence {s}");
            }
        }
    }
}

/// Pruned tree induction (Algorithms 1–2) written the slow way on the host: one pair per
/// composition call, the chart a map of spans, FIND walking the best trees of the top-row
/// cells. Returns the merges, the tree and the root vector.
fn reference_pruned(
    f: &Composition<Fx>,
    leaves: &[Vec<f32>],
    window: usize,
    word_of: Option<&[usize]>,
) -> (Vec<(usize, usize)>, BinaryTree, Vec<f32>) {
    struct Cell {
        e: Vec<f32>,
        lpt: f32,
        lp: f32,
        /// Splits, best un-noised log p̃_ijk first (ties: leftmost).
        ranked: Vec<usize>,
    }
    let n = leaves.len();
    let d = leaves[0].len();
    let row =
        |v: &[f32]| Tensor::<Fx, 2>::from_data(TensorData::new(v.to_vec(), [1, d]), &dev::<Fx>());
    let mut cells: HashMap<(usize, usize), Cell> = HashMap::new();
    for (i, e) in leaves.iter().enumerate() {
        let leaf = Cell {
            e: e.clone(),
            lpt: 0.0,
            lp: 0.0,
            ranked: Vec::new(),
        };
        cells.insert((i, i), leaf);
    }
    let compute =
        |cells: &mut HashMap<(usize, usize), Cell>, span: (usize, usize), ks: &[usize]| {
            let mut scored: Vec<(usize, f32, Vec<f32>, f32)> = ks
                .iter()
                .map(|&k| {
                    let (l, r) = (&cells[&(span.0, k)], &cells[&(k + 1, span.1)]);
                    let out = f.compose(row(&l.e), row(&r.e));
                    let lp: f32 = out.log_p.into_scalar().elem();
                    (k, lp + l.lpt + r.lpt, rows(out.repr).remove(0), lp)
                })
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1));
            let ranked = scored.iter().map(|s| s.0).collect();
            let (_, lpt, e, lp) = scored.swap_remove(0);
            cells.insert(span, Cell { e, lpt, lp, ranked });
        };
    for len in 2..=(window + 1).min(n) {
        for i in 0..=n - len {
            let ks: Vec<usize> = (i..i + len - 1).collect();
            compute(&mut cells, (i, i + len - 1), &ks);
        }
    }
    let allowed = |(i, j): (usize, usize)| match word_of {
        None => true,
        Some(w) => {
            w[i] == w[j] || ((i == 0 || w[i - 1] != w[i]) && (j + 1 == n || w[j + 1] != w[j]))
        }
    };
    let mut atoms: Vec<(usize, usize)> = (0..n).map(|i| (i, i)).collect();
    let mut merged = Vec::new();
    while atoms.len() > window + 1 {
        let a = atoms.len();
        let ends: Vec<usize> = atoms.iter().map(|t| t.1).collect();
        // FIND 1: the bigrams the best trees of the top-row cells use.
        let mut used = vec![false; a - 1];
        let mut stack: Vec<(usize, usize)> = (0..a - window).map(|s| (s, s + window)).collect();
        while let Some((first, last)) = stack.pop() {
            match last - first {
                0 => {}
                1 => used[first] = true,
                _ => {
                    let span = (atoms[first].0, atoms[last].1);
                    let k = cells[&span]
                        .ranked
                        .iter()
                        .copied()
                        .find(|k| ends.contains(k));
                    let q = ends.iter().position(|&e| Some(e) == k).unwrap();
                    stack.push((first, q));
                    stack.push((q + 1, last));
                }
            }
        }
        // FIND 2: score the bigrams, in f32 as the device does.
        let p = |u: usize| cells[&(atoms[u].0, atoms[u + 1].1)].lp.exp();
        let eps = 1e-9f32;
        let score = |u: usize| {
            let mut s = p(u).max(eps).ln();
            if u > 0 {
                s += (1.0 - p(u - 1)).max(eps).ln();
            }
            if u + 2 < a {
                s += (1.0 - p(u + 1)).max(eps).ln();
            }
            s
        };
        let whole = |u: usize| allowed((atoms[u].0, atoms[u + 1].1));
        let tiers: [&dyn Fn(usize) -> bool; 3] = [&|u| used[u] && whole(u), &whole, &|_| true];
        let u = tiers
            .iter()
            .find_map(|tier| {
                (0..a - 1)
                    .filter(|&u| tier(u))
                    .fold(None, |best: Option<(usize, f32)>, u| match best {
                        Some((_, b)) if score(u) <= b => best,
                        _ => Some((u, score(u))),
                    })
            })
            .unwrap()
            .0;
        let span = (atoms[u].0, atoms[u + 1].1);
        atoms.splice(u..u + 2, [span]);
        merged.push(span);
        let a = atoms.len();
        if a > window {
            for s in u.saturating_sub(window)..=u.min(a - window - 1) {
                let cell = (atoms[s].0, atoms[s + window].1);
                let ks: Vec<usize> = atoms[s..s + window].iter().map(|t| t.1).collect();
                compute(&mut cells, cell, &ks);
            }
        }
    }
    fn tree(
        cells: &HashMap<(usize, usize), Cell>,
        merged: &[(usize, usize)],
        word_of: Option<&[usize]>,
        span: (usize, usize),
    ) -> BinaryTree {
        if span.0 == span.1 {
            return BinaryTree::Leaf(span.0);
        }
        let ok = |k: usize| {
            let cuts = merged
                .iter()
                .any(|&(a, b)| a >= span.0 && b <= span.1 && (a, b) != span && a <= k && k < b);
            let words = word_of.is_none_or(|w| w[span.0] == w[span.1] || w[k] != w[k + 1]);
            !cuts && words
        };
        let cell = &cells[&span];
        let k = cell.ranked.iter().copied().find(|&k| ok(k)).unwrap();
        BinaryTree::node(
            tree(cells, merged, word_of, (span.0, k)),
            tree(cells, merged, word_of, (k + 1, span.1)),
        )
    }
    let root = cells[&(0, n - 1)].e.clone();
    (
        merged.clone(),
        tree(&cells, &merged, word_of, (0, n - 1)),
        root,
    )
}

#[test]
fn the_device_chart_matches_pruned_induction_written_on_the_host() {
    // A batch mixing sentences that prune with ones that do not, every window from 1 to 4,
    // with and without word pieces: the merges, trees and roots of the batched device chart
    // equal the host walk's, sentence by sentence.
    let d = 8;
    let lengths = [11usize, 3, 14, 6, 1, 9];
    let time = 14;
    let word_of: Vec<Vec<usize>> = lengths
        .iter()
        .map(|&n| (0..n).map(|i| i / 2 + i / 5).collect())
        .collect();
    for seed in 0..3u64 {
        let f = composition(d, 30 + seed);
        let leaves = common::padded_batch::<Fx>(&lengths, time, d, 60 + seed);
        let all = rows(leaves.clone().reshape([lengths.len() * time, d]));
        for window in 1..=4 {
            for words in [false, true] {
                let config = ChartConfig {
                    window,
                    pruning: true,
                    tau: 1.0,
                };
                let words = words.then_some(word_of.as_slice());
                // `padded`: the way training builds, every candidate cell composed, no reads.
                let [exact, padded] = [false, true].map(|padded| {
                    let build = if padded {
                        Chart::build_without_reads
                    } else {
                        Chart::build
                    };
                    build(
                        &f,
                        leaves.clone(),
                        &lengths,
                        words,
                        &config,
                        Decisions::Argmax,
                    )
                });
                assert!(padded.stats.compositions >= exact.stats.compositions);
                let mut contexts = Vec::new();
                for (how, chart) in [("exact", exact), ("padded", padded)] {
                    let edge = |v: f32| Tensor::<Fx, 2>::full([1, d], v, &dev::<Fx>());
                    let (l, r) = chart.contexts(edge(-7.0), edge(7.0));
                    contexts.push((rows(l).concat(), rows(r).concat()));
                    let (merges, trees, roots) =
                        (chart.merges(), chart.trees(), rows(chart.roots()));
                    for (b, &n) in lengths.iter().enumerate() {
                        let what = format!(
                            "{how} seed {seed} m {window} words {} sentence {b}",
                            words.is_some()
                        );
                        let w = words.map(|w| w[b].as_slice());
                        let (m, tree, root) =
                            reference_pruned(&f, &all[b * time..b * time + n], window, w);
                        assert_eq!(merges[b], m, "{what}: merges");
                        assert_eq!(trees[b], tree, "{what}: tree");
                        assert_close(&roots[b], &root, 1e-4, &what);
                    }
                }
                // The LM contexts (longest cells ending before and starting after each token)
                // do not depend on how many candidates a step composed.
                assert_close(&contexts[0].0, &contexts[1].0, 1e-6, "left contexts");
                assert_close(&contexts[0].1, &contexts[1].1, 1e-6, "right contexts");
            }
        }
    }
}
