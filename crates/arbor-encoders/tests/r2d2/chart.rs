//! The chart's cost and shape: linear composition counts, word pieces, the two tree rules,
//! gradients of discarded candidates, and edge shapes.

use arbor_cells::GumbelSampler;
use arbor_data::tree::BinaryTree;
use arbor_encoders::r2d2::{word_tree, Chart, ChartConfig, CompositionConfig, TreeRule};
use arbor_encoders::Decisions;
use burn::prelude::*;

use crate::common::{self, dev, tensor, Ad, Fx};
use crate::support::{assert_close, composition, SEED};

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
            // A training chart: with or without reads, with Gumbel noise or without.
            let train_with = |reads: bool, noise: bool| {
                let sampler = GumbelSampler::seeded(n as u64);
                let mut sampler = if noise {
                    sampler
                } else {
                    sampler.without_noise()
                };
                let leaves = tensor::<Fx, 3>([1, n, d], 1.0, n as u64);
                let decisions = Decisions::Sample(&mut sampler);
                if reads {
                    Chart::build(&f, leaves, &[n], None, &config, decisions)
                } else {
                    Chart::build_without_reads(&f, leaves, &[n], None, &config, decisions)
                }
            };
            let train = |reads: bool| train_with(reads, true);
            // Training without reads (a device's way) composes min(m + 1, a' − m) candidates
            // per merge whatever FIND picks.
            let padded = train(false);
            let candidates: usize = (window + 1..n).map(|a| (window + 1).min(a - window)).sum();
            assert_eq!(
                padded.stats.compositions,
                (rows + candidates * window) as u64,
                "n {n} m {window}: training without reads"
            );
            // Training on a CPU backend (Flex keeps its tensors in host memory) reads the
            // merge positions, as evaluation does, and composes exactly the new cells.
            let exact = train(true);
            let kept: usize = (0..n)
                .flat_map(|i| (i + window + 1..n).map(move |j| (i, j)))
                .filter(|&span| exact.has_cell(0, span))
                .count();
            assert_eq!(
                exact.stats.compositions,
                (rows + kept * window) as u64,
                "n {n} m {window}: training on the host"
            );
            // The same chart either way: with noiseless samples (the decisions of argmax), the
            // same trees as evaluation.
            let (exact, padded) = (train_with(true, false), train_with(false, false));
            assert_eq!(exact.trees(), chart.trees(), "n {n} m {window}");
            assert_eq!(padded.trees(), chart.trees(), "n {n} m {window}");
            assert_eq!(exact.stats.compositions, c, "n {n} m {window}");
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
