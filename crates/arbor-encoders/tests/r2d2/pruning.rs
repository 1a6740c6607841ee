//! Hand-checked charts over stub compositions with chosen scores: a cell's log p over its
//! splits, and pruning walk-throughs.

use std::collections::HashMap;

use arbor_cells::GumbelSampler;
use arbor_data::tree::BinaryTree;
use arbor_encoders::r2d2::{Chart, ChartConfig, Compose, Composed};
use arbor_encoders::Decisions;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::{dev, Fx};
use crate::support::rows;

/// A composition whose vectors record their span (`e = [start, end]`) and whose `log p`
/// comes from a table chosen by the test.
struct Stub {
    p: HashMap<(usize, usize), f64>,
    default: f64,
}

impl Compose<Fx> for Stub {
    fn d_model(&self) -> usize {
        2
    }

    fn compose(&self, left: Tensor<Fx, 2>, right: Tensor<Fx, 2>) -> Composed<Fx> {
        let (l, r) = (rows(left), rows(right));
        let n = l.len();
        let mut repr = Vec::new();
        let mut log_p = Vec::new();
        for (a, b) in l.iter().zip(&r) {
            let span = (a[0] as usize, b[1] as usize);
            repr.extend([a[0], b[1]]);
            log_p.push(self.p.get(&span).copied().unwrap_or(self.default).ln() as f32);
        }
        Composed {
            repr: Tensor::from_data(TensorData::new(repr, [n, 2]), &dev::<Fx>()),
            log_p: Tensor::from_data(TensorData::new(log_p, [n]), &dev::<Fx>()),
        }
    }
}

fn stub() -> Stub {
    // Bigrams p(0,1) = .9, p(1,2) = .2, p(2,3) = .3, p(3,4) = .8, p(4,5) = .1; longer spans .5
    // except p(2,4) = .6 and p(0,4) = .4 (to avoid ties between trees).
    let p = [
        ((0, 1), 0.9),
        ((1, 2), 0.2),
        ((2, 3), 0.3),
        ((3, 4), 0.8),
        ((4, 5), 0.1),
        ((2, 4), 0.6),
        ((0, 4), 0.4),
    ];
    Stub {
        p: p.into_iter().collect(),
        default: 0.5,
    }
}

/// A composition whose `log p` depends on the split too: `p(i, k, j)` for left `(i, k)` and
/// right `(k + 1, j)`, so the splits of one cell score differently.
struct SplitStub;

impl SplitStub {
    fn p(i: usize, k: usize, j: usize) -> f64 {
        0.05 + 0.9 * (((i * 7 + k * 13 + j * 29) % 17) as f64 / 16.0)
    }
}

impl Compose<Fx> for SplitStub {
    fn d_model(&self) -> usize {
        2
    }

    fn compose(&self, left: Tensor<Fx, 2>, right: Tensor<Fx, 2>) -> Composed<Fx> {
        let (l, r) = (rows(left), rows(right));
        let n = l.len();
        let mut repr = Vec::new();
        let mut log_p = Vec::new();
        for (a, b) in l.iter().zip(&r) {
            let (i, k, j) = (a[0] as usize, a[1] as usize, b[1] as usize);
            repr.extend([a[0], b[1]]);
            log_p.push(Self::p(i, k, j).ln() as f32);
        }
        Composed {
            repr: Tensor::from_data(TensorData::new(repr, [n, 2]), &dev::<Fx>()),
            log_p: Tensor::from_data(TensorData::new(log_p, [n]), &dev::<Fx>()),
        }
    }
}

#[test]
fn a_cells_log_p_is_the_alpha_weighted_sum_over_its_splits() {
    // eq. 5: log p_ij = Σ_k α_k log p_ijk. α is one-hot in the forward pass, so the cell's
    // log p is that of the split α picked: the best un-noised split at evaluation, a
    // Gumbel-noised one in training (where it may differ from the best split's).
    let n = 7;
    let config = ChartConfig {
        window: n,
        pruning: false,
        tau: 1.0,
    };
    let spans: Vec<(usize, usize)> = (3..=n)
        .flat_map(|len| (0..=n - len).map(move |i| (i, i + len - 1)))
        .collect();
    let eval = Chart::build(
        &SplitStub,
        span_leaves(n),
        &[n],
        None,
        &config,
        Decisions::Argmax,
    );
    for &(i, j) in &spans {
        let (best, chosen) = eval.splits(0, (i, j)).unwrap();
        assert_eq!(
            best,
            chosen,
            "evaluation picks the best split of {:?}",
            (i, j)
        );
        let lp = eval.cell_log_p(0, (i, j)).unwrap();
        assert!((lp - SplitStub::p(i, best, j).ln()).abs() < 1e-5);
    }
    let mut differs = 0;
    for seed in 0..4 {
        let mut sampler = GumbelSampler::seeded(seed);
        let train = Chart::build(
            &SplitStub,
            span_leaves(n),
            &[n],
            None,
            &config,
            Decisions::Sample(&mut sampler),
        );
        for &(i, j) in &spans {
            let (best, chosen) = train.splits(0, (i, j)).unwrap();
            let lp = train.cell_log_p(0, (i, j)).unwrap();
            let want = SplitStub::p(i, chosen, j).ln();
            assert!((lp - want).abs() < 1e-5, "{:?}: {lp} vs {want}", (i, j));
            let t: f32 = train
                .cell_log_p_tensor(0, (i, j))
                .unwrap()
                .into_scalar()
                .elem();
            assert!(
                (t as f64 - want).abs() < 1e-5,
                "the tensor holds the same value"
            );
            if chosen != best {
                let best_lp = SplitStub::p(i, best, j).ln();
                assert!((lp - best_lp).abs() > 1e-6, "split-dependent scores differ");
                differs += 1;
            }
        }
    }
    assert!(
        differs > 0,
        "with noise, some cell picks another split than the best"
    );
}

fn span_leaves(n: usize) -> Tensor<Fx, 3> {
    let v: Vec<f32> = (0..n).flat_map(|i| [i as f32, i as f32]).collect();
    Tensor::from_data(TensorData::new(v, [1, n, 2]), &dev::<Fx>())
}

#[test]
fn pruning_walk_through_with_chosen_scores_m2() {
    // m = 2, 6 tokens: rows of spans 2 and 3, then 6 − 2 − 1 = 3 merges.
    // Step 1: top cells (0,2) (1,3) (2,4) (3,5) use bigrams {01, 23, 34}; scores
    //   01: ln .9 + ln(1 − .2) = −0.33; 23: ln .3 + ln .8 + ln .2 = −3.04;
    //   34: ln .8 + ln .7 + ln .9 = −0.69  → merge (0,1); compute (0,3).
    // Step 2: (0,3) prefers ((01)2)3, so top cells use {([01],2), 34}; ([01],2) = cell (0,2)
    //   with p = .5: ln .5 + ln .7 = −1.05; 34: −0.69 → merge (3,4); compute (0,4), (2,5).
    // Step 3: (0,4) = (01)(2(34)) and (2,5) = (2(34))5 both use (2,[34]) → merge (2,4);
    //   compute the root (0,5): (01)+(2,5) beats (0,4)+5 because p(0,4) = .4 < p(2,5) = .5.
    let config = ChartConfig {
        window: 2,
        pruning: true,
        tau: 1.0,
    };
    let chart = Chart::build(
        &stub(),
        span_leaves(6),
        &[6],
        None,
        &config,
        Decisions::Argmax,
    );
    assert_eq!(chart.merges()[0], vec![(0, 1), (3, 4), (2, 4)]);
    let (expected, _) = BinaryTree::parse("((0 1) ((2 (3 4)) 5))").unwrap();
    assert_eq!(chart.trees()[0], expected.renumbered());
    for span in [(0, 3), (0, 4), (2, 5), (0, 5)] {
        assert!(chart.has_cell(0, span), "{span:?} computed");
    }
    assert!(!chart.has_cell(0, (1, 4)), "never a top-row cell");
    // Rows 2 and 3: 5·1 + 4·2 = 13; step 1: (0,3) 2 splits; step 2: (0,4), (2,5) 2 each;
    // step 3: the root, 2 splits.
    assert_eq!(chart.stats.compositions, 13 + 2 + 4 + 2);
    // Training without reads (a device's way) composes every top-row cell that could hold the
    // merged terminal, min(m + 1, a' − m) for a' terminals after the merge, and keeps the new
    // ones: step 1 (a' = 5) 3 cells, step 2 (a' = 4) 2, step 3 (a' = 3) 1.
    let train = |reads: bool| {
        let mut sampler = GumbelSampler::seeded(0).without_noise();
        let decisions = Decisions::Sample(&mut sampler);
        let (f, leaves) = (stub(), span_leaves(6));
        if reads {
            Chart::build(&f, leaves, &[6], None, &config, decisions)
        } else {
            Chart::build_without_reads(&f, leaves, &[6], None, &config, decisions)
        }
    };
    let padded = train(false);
    assert_eq!(padded.stats.compositions, 13 + (3 + 2 + 1) * 2);
    assert_eq!(padded.stats.calls, 2 + 3);
    // Training on a CPU backend reads the merge positions and composes what evaluation does
    // (noiseless samples: evaluation's decisions, so its tree too).
    let train = train(true);
    assert_eq!(train.stats.compositions, 13 + 2 + 4 + 2);
    assert_eq!(train.trees(), chart.trees());
    assert_eq!(chart.stats.calls, 2 + 3);
}

#[test]
fn pruning_walk_through_with_chosen_scores_m3() {
    // m = 3: rows of spans 2–4, then 2 merges.
    // Step 1: (0,3) → ((01)2)3, (1,4) → 1(2(34)), (2,5) → (2(34))5: bigrams {01, 34};
    //   01 scores −0.33 > 34 at −0.69 → merge (0,1); compute (0,4).
    // Step 2: (0,4) → (01)(2(34)), (2,5) → (2(34))5: only 34 → merge (3,4); compute (0,5)
    //   with splits after 1, 2 and 4: (01)+(2,5) scores −1.53, (0,2)+(3,5) −1.71,
    //   (0,4)+5 −1.76.
    let config = ChartConfig {
        window: 3,
        pruning: true,
        tau: 1.0,
    };
    let chart = Chart::build(
        &stub(),
        span_leaves(6),
        &[6],
        None,
        &config,
        Decisions::Argmax,
    );
    assert_eq!(chart.merges()[0], vec![(0, 1), (3, 4)]);
    let (expected, _) = BinaryTree::parse("((0 1) ((2 (3 4)) 5))").unwrap();
    assert_eq!(chart.trees()[0], expected.renumbered());
    // Rows 2–4: 5 + 4·2 + 3·3 = 22; step 1: (0,4) 3 splits; step 2: the root, 3 splits.
    assert_eq!(chart.stats.compositions, 22 + 3 + 3);
    for span in [(0, 4), (0, 5)] {
        assert!(chart.has_cell(0, span), "{span:?} computed");
    }
    assert!(!chart.has_cell(0, (1, 5)), "never a top-row cell");
}
