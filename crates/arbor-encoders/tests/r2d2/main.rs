//! R2D2: pruned chart vs exhaustive CKY, a hand-checked pruning walk-through, linear
//! composition counts, padding invariance, gradients.

mod common;

use std::collections::HashMap;

use arbor_cells::GumbelSampler;
use arbor_data::tree::BinaryTree;
use arbor_encoders::r2d2::{
    word_tree, Chart, ChartConfig, Compose, Composed, Composition, CompositionConfig, R2d2Config,
    R2d2LmConfig, R2d2SpecialIds, RoleEmbeddings, TreeRule,
};
use arbor_encoders::{Decisions, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder};
use burn::module::{Module, Param};
use burn::prelude::*;
use burn::tensor::TensorData;
use common::{dev, tensor, Ad, Fx};

/// The backend RNG is process-global: tests that seed it take this lock.
static SEED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn composition(d: usize, seed: u64) -> Composition<Fx> {
    let _lock = SEED.lock().unwrap_or_else(|e| e.into_inner());
    Fx::seed(&dev::<Fx>(), seed);
    CompositionConfig::new(d)
        .with_n_layers(2)
        .with_n_heads(2)
        .init(&dev::<Fx>())
}

fn rows(t: Tensor<Fx, 2>) -> Vec<Vec<f32>> {
    let [n, d] = t.dims();
    let v: Vec<f32> = t.into_data().convert::<f32>().into_vec().unwrap();
    (0..n).map(|i| v[i * d..(i + 1) * d].to_vec()).collect()
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{what}: {x} vs {y}\n{a:?}\n{b:?}");
    }
}

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

#[test]
fn each_layer_reads_its_own_role_table() {
    let d = 8;
    let per_layer = composition(d, 5);
    assert_eq!(per_layer.roles.dims(), [6, d], "one [3, D] table per layer");
    assert_eq!(per_layer.role_embeddings(), RoleEmbeddings::PerLayer);
    let left = tensor::<Fx, 2>([5, d], 1.0, 11);
    let right = tensor::<Fx, 2>([5, d], 1.0, 12);
    let run = |f: &Composition<Fx>| {
        let c = f.compose(left.clone(), right.clone());
        let mut v = rows(c.repr).concat();
        v.extend(
            c.log_p
                .into_data()
                .convert::<f32>()
                .into_vec::<f32>()
                .unwrap(),
        );
        v.extend(rows(f.mask_context(left.clone(), right.clone())).concat());
        v
    };
    // Burn initialises parameters lazily, on first use: run once so that the clones below
    // share the same weights instead of each drawing its own.
    let a = run(&per_layer);
    // Tables built from host values.
    let table = |n: usize| {
        let v: Vec<f32> = rows(per_layer.roles.val())[..3].concat().repeat(n);
        Tensor::<Fx, 2>::from_data(TensorData::new(v, [3 * n, d]), &dev::<Fx>())
    };
    // The shared layout: one table, read by both layers.
    let mut shared = per_layer.clone();
    shared.roles = Param::from_tensor(table(1));
    assert_eq!(shared.role_embeddings(), RoleEmbeddings::Shared);
    // Per-layer tables that happen to be equal compute what the shared table does.
    let mut twice = per_layer.clone();
    twice.roles = Param::from_tensor(table(2));
    assert_close(&run(&twice), &run(&shared), 1e-6, "equal tables");
    // Layer 1's own table matters.
    let b = run(&shared);
    assert!(
        a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-4),
        "layer 1 reads rows 3..6"
    );
    // The shared layout is still built on request.
    let old = CompositionConfig::new(d)
        .with_n_layers(3)
        .with_n_heads(2)
        .with_role_embeddings(RoleEmbeddings::Shared)
        .init::<Fx>(&dev::<Fx>());
    assert_eq!(old.roles.dims(), [3, d]);
}

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
    // Training reads nothing back, so a step composes every top-row cell that could hold the
    // merged terminal, min(m + 1, a' − m) for a' terminals after the merge, and keeps the new
    // ones: step 1 (a' = 5) 3 cells, step 2 (a' = 4) 2, step 3 (a' = 3) 1.
    let mut sampler = GumbelSampler::seeded(0);
    let train = Chart::build(
        &stub(),
        span_leaves(6),
        &[6],
        None,
        &config,
        Decisions::Sample(&mut sampler),
    );
    assert_eq!(train.stats.compositions, 13 + (3 + 2 + 1) * 2);
    assert_eq!(train.stats.calls, 2 + 3);
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

#[test]
fn composition_calls_grow_linearly() {
    let d = 8;
    let f = composition(d, 7);
    for window in [2usize, 3, 4] {
        for n in [8usize, 16, 32, 48] {
            let leaves = tensor::<Fx, 3>([1, n, d], 1.0, n as u64);
            let config = ChartConfig {
                window,
                pruning: true,
                tau: 1.0,
            };
            let chart = Chart::build(&f, leaves, &[n], None, &config, Decisions::Argmax);
            let c = chart.stats.compositions;
            assert!(
                c <= (3 * n * window * window) as u64,
                "n {n} m {window}: {c} compositions"
            );
            assert_eq!(chart.stats.merges, (n - window - 1) as u64);
            // Linear in n: the CKY rows up to m + 1, then between m and m(m + 1)
            // compositions per merge (exhaustive CKY needs (n³ − n)/6).
            let rows: usize = (2..=window + 1).map(|l| (n - l + 1) * (l - 1)).sum();
            let merges = n - window - 1;
            assert!(
                c >= (rows + merges * window) as u64
                    && c <= (rows + merges * window * (window + 1)) as u64,
                "n {n} m {window}: {c} compositions"
            );
            // Evaluation composes exactly the new cells: the cells beyond the CKY rows.
            let kept: usize = (0..n)
                .flat_map(|i| (i + window + 1..n).map(move |j| (i, j)))
                .filter(|&span| chart.has_cell(0, span))
                .count();
            assert_eq!(c, (rows + kept * window) as u64, "n {n} m {window}");
            // Training composes min(m + 1, a' − m) candidates per merge whatever FIND picks.
            let mut sampler = GumbelSampler::seeded(n as u64);
            let leaves = tensor::<Fx, 3>([1, n, d], 1.0, n as u64);
            let train = Chart::build(
                &f,
                leaves,
                &[n],
                None,
                &config,
                Decisions::Sample(&mut sampler),
            );
            let candidates: usize = (window + 1..n).map(|a| (window + 1).min(a - window)).sum();
            assert_eq!(
                train.stats.compositions,
                (rows + candidates * window) as u64,
                "n {n} m {window}: training"
            );
            assert_eq!(
                chart.stats.calls,
                (n - 1) as u64,
                "one call per row or merge"
            );
        }
    }
    let leaves = tensor::<Fx, 3>([1, 16, d], 1.0, 3);
    let full = ChartConfig {
        window: 2,
        pruning: false,
        tau: 1.0,
    };
    let chart = Chart::build(&f, leaves, &[16], None, &full, Decisions::Argmax);
    assert_eq!(chart.stats.compositions, (16 * 16 * 16 - 16) / 6);
}

#[test]
fn a_sentence_alone_equals_the_same_sentence_in_a_padded_batch() {
    let d = 8;
    for pruning in [true, false] {
        Fx::seed(&dev::<Fx>(), 11);
        let enc = R2d2Config::new(d, CompositionConfig::new(d).with_n_heads(2))
            .with_window(2)
            .with_pruning(pruning)
            .init::<Fx>(&dev::<Fx>());
        let lengths = vec![7usize, 3, 9, 1];
        let x = common::padded_batch::<Fx>(&lengths, 9, d, 5);
        let out = enc.encode(
            EncoderInput::new(x.clone(), lengths.clone()),
            Decisions::Argmax,
        );
        let roots = rows(out.sentence);
        let trees = out.trees.unwrap();
        for (b, &n) in lengths.iter().enumerate() {
            let alone = x.clone().narrow(0, b, 1).narrow(1, 0, n);
            let one = enc.encode(EncoderInput::new(alone, vec![n]), Decisions::Argmax);
            assert_close(&roots[b], &rows(one.sentence)[0], 1e-5, "root");
            assert_eq!(trees[b], one.trees.unwrap()[0]);
            assert_eq!(trees[b].num_leaves(), n);
        }
    }
    // The LM loss of every token too.
    Fx::seed(&dev::<Fx>(), 12);
    let lm = R2d2LmConfig::new(30)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .init::<Fx>(&dev::<Fx>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6, 7], vec![8, 9], vec![10]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let batch: Vec<f32> = lm
        .lm_loss(&refs, Decisions::Argmax)
        .nll
        .into_data()
        .convert::<f32>()
        .into_vec()
        .unwrap();
    let mut alone = Vec::new();
    for s in &refs {
        let nll = lm.lm_loss(&[s], Decisions::Argmax).nll;
        alone.extend(nll.into_data().convert::<f32>().into_vec::<f32>().unwrap());
    }
    assert_close(&batch, &alone, 1e-5, "token NLL");
    // Pseudo-perplexity terms, batched or not.
    let pppl = lm.pseudo_nll(&refs);
    for (s, terms) in refs.iter().zip(&pppl) {
        let one = lm.pseudo_nll(&[s]);
        let (a, b): (Vec<f32>, Vec<f32>) = (
            terms.iter().map(|&x| x as f32).collect(),
            one[0].iter().map(|&x| x as f32).collect(),
        );
        assert_close(&a, &b, 1e-5, "pseudo NLL");
        assert!(terms.iter().all(|x| x.is_finite() && *x > 0.0));
    }
}

#[test]
fn gradients_reach_the_composition_and_the_embeddings() {
    Ad::seed(&dev::<Ad>(), 3);
    let lm = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .init::<Ad>(&dev::<Ad>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let mut sampler = GumbelSampler::seeded(1);
    let out = lm.lm_loss(&refs, Decisions::Sample(&mut sampler));
    assert_eq!(out.tokens, 9);
    let grads = out.loss.backward();
    let norm = |t: Option<Tensor<Fx, 2>>, what: &str| {
        let g = t.unwrap_or_else(|| panic!("no gradient for {what}"));
        let s: f32 = g.abs().sum().into_scalar().elem();
        assert!(s > 0.0 && s.is_finite(), "{what}: {s}");
    };
    let comp = &lm.encoder.composition;
    norm(lm.embedding.weight.grad(&grads), "embedding");
    norm(comp.layers[0].qkv.weight.grad(&grads), "layer 0 qkv");
    norm(comp.layers[1].ff_out.weight.grad(&grads), "layer 1 ffn");
    norm(comp.roles.grad(&grads), "role embeddings");
    norm(comp.task_tokens.grad(&grads), "task tokens");
    norm(comp.mix.weight.grad(&grads), "Linear_2 (mixing)");
    // The merge scorer is reached only through the straight-through selection of splits.
    norm(comp.score.weight.grad(&grads), "Linear_1 (score)");
    norm(lm.edges.grad(&grads), "BOS/EOS");
    let _ = lm.num_params();
}

#[test]
fn word_pieces_of_one_word_stay_together() {
    let f = composition(8, 21);
    // Words: [0 0 0] [1] [2 2] [3] [4 4 4]: 10 pieces.
    let word_of = vec![0usize, 0, 0, 1, 2, 2, 3, 4, 4, 4];
    for (window, pruning) in [(2usize, true), (3, true), (2, false)] {
        for seed in 0..3u64 {
            let leaves = tensor::<Fx, 3>([1, 10, 8], 2.0, 40 + seed);
            let config = ChartConfig {
                window,
                pruning,
                tau: 1.0,
            };
            let chart = Chart::build(
                &f,
                leaves,
                &[10],
                Some(std::slice::from_ref(&word_of)),
                &config,
                Decisions::Argmax,
            );
            let tree = &chart.trees()[0];
            let words = word_tree(tree, &word_of).expect("every word is a constituent");
            assert_eq!(words.num_leaves(), 5);
            for (a, b) in chart.merges()[0].iter() {
                let inside = word_of[*a] == word_of[*b];
                let whole = (*a == 0 || word_of[a - 1] != word_of[*a])
                    && (*b == 9 || word_of[b + 1] != word_of[*b]);
                assert!(inside || whole, "merge ({a},{b}) splits a word");
            }
        }
    }
    // A tree that splits word 0 is refused.
    let (bad, _) = BinaryTree::parse("((0 1) (2 3))").unwrap();
    assert!(word_tree(&bad.renumbered(), &[0, 0, 0, 1]).is_none());
}

#[test]
fn r2d2_is_available_as_an_encoder_kind() {
    let kind: EncoderKind = "r2d2".parse().unwrap();
    assert_eq!(kind, EncoderKind::R2d2);
    let EncoderConfig::R2d2(config) = EncoderConfig::of_kind(kind, 6, 8) else {
        panic!("an R2D2 configuration")
    };
    let enc = EncoderConfig::from(config.with_window(2)).init::<Fx>(&dev::<Fx>());
    let x = tensor::<Fx, 3>([2, 5, 6], 1.0, 1);
    let out = enc.encode(EncoderInput::new(x, vec![5, 3]), Decisions::Argmax);
    assert_eq!(out.sentence.dims(), [2, 8]);
    let trees = out.trees.unwrap();
    assert_eq!((trees[0].num_leaves(), trees[1].num_leaves()), (5, 3));
}

#[test]
fn special_ids_follow_the_reference_vocabulary() {
    // A stock BERT vocabulary: [unused3], [unused4], [unused6] at the rows 4, 5, 7 that the
    // reference's own vocabulary names [BOS], [EOS], [SUM].
    let mut bert: Vec<String> = vec!["[PAD]".into()];
    bert.extend((0..99).map(|i| format!("[unused{i}]")));
    bert.extend(["[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"].map(String::from));
    let ids = R2d2SpecialIds::from_vocab(&bert).unwrap();
    assert_eq!(
        ids,
        R2d2SpecialIds {
            cls: 101,
            sum: 7,
            mask: 103,
            bos: 4,
            eos: 5
        }
    );
    // The reference's vocabulary names them; names win over [unusedN].
    let mut named = bert.clone();
    for (i, name) in [(4, "[BOS]"), (5, "[EOS]"), (7, "[SUM]")] {
        named[i] = name.into();
    }
    named.push("[unused3]".into());
    assert_eq!(R2d2SpecialIds::from_vocab(&named), Some(ids));
    // A vocabulary without them: separate parameters.
    let small = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"];
    assert_eq!(R2d2SpecialIds::from_vocab(&small), None);
    // Ids must exist in the vocabulary.
    let config = R2d2LmConfig::new(50).with_special_ids(Some(ids));
    assert!(config.validate().is_err());
}

#[test]
fn tied_special_tokens_are_rows_of_the_vocabulary_embedding() {
    Ad::seed(&dev::<Ad>(), 4);
    let ids = R2d2SpecialIds {
        cls: 10,
        sum: 11,
        mask: 12,
        bos: 13,
        eos: 14,
    };
    let lm = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .with_special_ids(Some(ids))
        .init::<Ad>(&dev::<Ad>());
    assert_eq!(lm.encoder.composition.task_tokens.dims(), [0, 8]);
    assert_eq!(lm.edges.dims(), [0, 8]);
    // Sentences that never use the special ids: their rows get gradients only as task tokens
    // and sentence edges.
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let mut sampler = GumbelSampler::seeded(2);
    let out = lm.lm_loss(&refs, Decisions::Sample(&mut sampler));
    let grads = out.loss.backward();
    let g = lm
        .embedding
        .weight
        .grad(&grads)
        .expect("embedding gradient");
    let row_norm = |r: usize| -> f32 { g.clone().narrow(0, r, 1).abs().sum().into_scalar().elem() };
    for (name, r) in [
        ("[CLS]", 10),
        ("[SUM]", 11),
        ("[MASK]", 12),
        ("[BOS]", 13),
        ("[EOS]", 14),
    ] {
        let n = row_norm(r);
        assert!(n > 0.0 && n.is_finite(), "{name}: {n}");
    }
    // Row 15 is used by nothing but the output softmax.
    assert!(row_norm(15) > 0.0, "the tied softmax reaches every row");
    // Pseudo-perplexity runs on the tied tokens too.
    let inner = burn::module::AutodiffModule::valid(&lm);
    let nll = inner.pseudo_nll(&refs);
    assert!(nll.iter().flatten().all(|x| x.is_finite() && *x > 0.0));
}

#[test]
fn records_written_before_special_ids_existed_still_load() {
    use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
    let config = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2));
    let lm = config.init::<Fx>(&dev::<Fx>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let loss = |m: &arbor_encoders::R2d2Lm<Fx>| -> f32 {
        m.lm_loss(&refs, Decisions::Argmax)
            .loss
            .into_scalar()
            .elem()
    };
    // Parameters are initialised on first use: use them before cloning.
    let want = loss(&lm);
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<Fx>::record(&rec, lm.clone().into_record(), ()).unwrap();
    // The new trailing field is one empty-record byte; a record from before it ends earlier.
    assert_eq!(bytes.last(), Some(&0));
    let old = bytes[..bytes.len() - 1].to_vec();
    let record = Recorder::<Fx>::load(&rec, old, &dev::<Fx>()).unwrap();
    let back = config.init::<Fx>(&dev::<Fx>()).load_record(record);
    assert_eq!(loss(&back), want);
    assert_eq!(back.special_ids, None);
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

/// The tree that follows every cell's best-ranked split from the root (the reference's
/// `get_token_tree`), built from [`Chart::splits`].
fn best_split_tree<B: arbor_cells::ArborBackend>(
    chart: &Chart<B>,
    b: usize,
    span: (usize, usize),
) -> BinaryTree {
    if span.0 == span.1 {
        return BinaryTree::Leaf(span.0);
    }
    let (k, _) = chart.splits(b, span).expect("a computed cell");
    BinaryTree::node(
        best_split_tree(chart, b, (span.0, k)),
        best_split_tree(chart, b, (k + 1, span.1)),
    )
}

#[test]
fn the_two_tree_rules_differ_only_on_stale_cells() {
    // `TreeRule::Reference` follows every cell's best split; `TreeRule::Arbor` (the default of
    // `trees()`) the best split that cuts no merged terminal, so every merge is a constituent.
    // Random compositions over a batch that prunes: the rules give different trees somewhere,
    // and the same trees without pruning (no merged terminals).
    let d = 8;
    let lengths = [11usize, 3, 14, 6, 1, 9];
    let time = 14;
    let mut differ = 0;
    for seed in 0..3u64 {
        let f = composition(d, 30 + seed);
        let leaves = common::padded_batch::<Fx>(&lengths, time, d, 60 + seed);
        for window in 1..=3 {
            for pruning in [true, false] {
                let config = ChartConfig {
                    window,
                    pruning,
                    tau: 1.0,
                };
                let chart = Chart::build(
                    &f,
                    leaves.clone(),
                    &lengths,
                    None,
                    &config,
                    Decisions::Argmax,
                );
                let reference = chart.trees_with(TreeRule::Reference);
                let arbor = chart.trees_with(TreeRule::Arbor);
                assert_eq!(arbor, chart.trees());
                for (b, &n) in lengths.iter().enumerate() {
                    let what = format!("seed {seed} m {window} pruning {pruning} sentence {b}");
                    assert_eq!(
                        reference[b],
                        best_split_tree(&chart, b, (0, n - 1)),
                        "{what}"
                    );
                    let spans = arbor[b].spans();
                    for &(i, j) in &chart.merges()[b] {
                        assert!(
                            spans.contains(&arbor_data::tree::Span::new(i, j + 1)),
                            "{what}: merge ({i}, {j}) is a constituent"
                        );
                    }
                    if !pruning {
                        assert_eq!(reference[b], arbor[b], "{what}");
                    }
                    differ += usize::from(reference[b] != arbor[b]);
                }
            }
        }
    }
    assert!(
        differ > 0,
        "the rules never differ: the test does not tell them apart"
    );
}

#[test]
fn candidates_outside_the_sentence_get_no_gradient() {
    // Training composes every top-row cell a merge could create and discards those outside
    // the sentence; with the same (argmax) decisions, the gradients of the roots and of every
    // token's LM contexts with respect to the leaves and the composition's weights equal those
    // of the chart that composes only the new cells.
    let _lock = SEED.lock().unwrap_or_else(|e| e.into_inner());
    Ad::seed(&dev::<Ad>(), 9);
    let d = 8;
    let f = CompositionConfig::new(d)
        .with_n_layers(2)
        .with_n_heads(2)
        .init::<Ad>(&dev::<Ad>());
    let lengths = [9usize, 4, 12, 7];
    let config = ChartConfig {
        window: 2,
        pruning: true,
        tau: 1.0,
    };
    let grads = |padded: bool| {
        let leaves = common::padded_batch::<Ad>(&lengths, 12, d, 3).require_grad();
        let build = if padded {
            Chart::build_without_reads
        } else {
            Chart::build
        };
        let chart = build(
            &f,
            leaves.clone(),
            &lengths,
            None,
            &config,
            Decisions::Argmax,
        );
        let edge = Tensor::<Ad, 2>::zeros([1, d], &dev::<Ad>());
        let (l, r) = chart.contexts(edge.clone(), edge);
        let loss = chart
            .roots()
            .sum()
            .add(l.powf_scalar(2.0).sum())
            .add(r.sum());
        let g = loss.backward();
        let leaf: Vec<f32> = leaves.grad(&g).unwrap().into_data().to_vec().unwrap();
        let weight: Vec<f32> = f.layers[0]
            .qkv
            .weight
            .grad(&g)
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap();
        (leaf, weight, chart.stats.compositions)
    };
    let (exact, padded) = (grads(false), grads(true));
    assert!(padded.2 > exact.2, "the padded chart composes more");
    assert!(exact.0.iter().any(|g| *g != 0.0));
    assert_close(&exact.0, &padded.0, 1e-5, "leaf gradients");
    assert_close(&exact.1, &padded.1, 1e-4, "weight gradients");
}

#[test]
fn edge_shapes_build_and_backpropagate() {
    // One-token sentences, padding far past the longest sentence, windows from 1 to wider than
    // any sentence, pruned or not, training or evaluation: the chart builds, gives a context
    // per token and a tree of the right size per sentence, and its gradients are finite.
    let d = 8;
    let f = CompositionConfig::new(d)
        .with_n_heads(2)
        .init::<Ad>(&dev::<Ad>());
    let cases = [
        (vec![1usize], 1usize),
        (vec![1, 1, 1], 5),
        (vec![2], 9),
        (vec![3, 1, 2], 12),
        (vec![7, 1, 2, 9], 20),
        (vec![30], 30),
    ];
    for (lengths, time) in cases {
        for window in [1usize, 2, 4, 40] {
            for pruning in [true, false] {
                for train in [false, true] {
                    let what = format!("{lengths:?} time {time} m {window} {pruning} {train}");
                    let leaves = common::padded_batch::<Ad>(&lengths, time, d, 1).require_grad();
                    let config = ChartConfig {
                        window,
                        pruning,
                        tau: 1.0,
                    };
                    let mut sampler = GumbelSampler::seeded(3);
                    let decisions = match train {
                        true => Decisions::Sample(&mut sampler),
                        false => Decisions::Argmax,
                    };
                    let chart =
                        Chart::build(&f, leaves.clone(), &lengths, None, &config, decisions);
                    let edge = Tensor::<Ad, 2>::zeros([1, d], &dev::<Ad>());
                    let (l, r) = chart.contexts(edge.clone(), edge);
                    assert_eq!(l.dims()[0], lengths.iter().sum::<usize>(), "{what}");
                    let g = chart.roots().sum().add(l.sum()).add(r.sum()).backward();
                    let s: f32 = leaves.grad(&g).unwrap().abs().sum().into_scalar().elem();
                    assert!(s.is_finite() && s > 0.0, "{what}: {s}");
                    for (t, &n) in chart.trees().iter().zip(&lengths) {
                        assert_eq!(t.num_leaves(), n, "{what}");
                    }
                }
            }
        }
    }
}
