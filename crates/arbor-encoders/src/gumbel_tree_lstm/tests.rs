//! Carried candidates against the authors' schedule (every pair recomposed at every layer).

use arbor_cells::ArborBackend;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::module::{Module, Param};
use burn::prelude::*;
use burn::tensor::Distribution;

use super::{CandidateSchedule, GumbelTreeLstm, GumbelTreeLstmConfig, GumbelTreeOutput, LeafKind};
use crate::Decisions;

/// Every float parameter's gradient in `grads`, flattened, in the module's visiting order
/// (`None` for a parameter without one).
fn parameter_grads<B: burn::tensor::backend::AutodiffBackend>(
    m: &GumbelTreeLstm<B>,
    grads: &B::Gradients,
) -> Vec<(usize, Option<Vec<f64>>)> {
    use burn::module::ModuleVisitor;
    struct Collect<'a, B: burn::tensor::backend::AutodiffBackend> {
        grads: &'a B::Gradients,
        out: Vec<(usize, Option<Vec<f64>>)>,
    }
    impl<B: burn::tensor::backend::AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let g = param
                .grad(self.grads)
                .map(|g| g.into_data().convert::<f64>().to_vec().unwrap());
            self.out.push((param.val().shape().num_elements(), g));
        }
    }
    let mut c = Collect::<B> {
        grads,
        out: Vec::new(),
    };
    m.visit(&mut c);
    c.out
}

/// Carried candidates (the default schedule, and `CarryUnfused`) equal the authors' schedule
/// (every pair recomposed at every layer) in the trees, the selection probabilities, the root,
/// the intra-attention mix, and the gradients of every parameter and of the embeddings: with
/// argmax decisions (carried `h`, `c` and scores) and with straight-through Gumbel decisions
/// from the same noise (the fused training pass where the backend has it, `fused`, and
/// carried gate pre-activations).
fn carried_candidates_match_recomposition<
    B: burn::tensor::backend::AutodiffBackend + ArborBackend,
>(
    tol: f64,
    fused: bool,
) {
    let device = Default::default();
    // Lengths 1 to 9 in one batch (1-3-token sentences included), so that examples
    // complete at different layers and merges happen at both edges and inside.
    let lengths = [9, 1, 2, 7, 3, 9, 5, 8, 4, 6];
    let n = 9;
    {
        // Whether the backend runs the fused training pass.
        let m = GumbelTreeLstmConfig::new(4, 6).init::<B>(&device);
        let x = Tensor::<B, 3>::random([lengths.len(), n, 4], Distribution::Default, &device);
        let noise = Tensor::<B, 3>::zeros([lengths.len(), n - 1, n - 1], &device);
        let leaves = m.leaf.forward(x, &lengths);
        assert_eq!(
            m.composition
                .st_gumbel_tree(&leaves, m.query.val(), noise, 1.0, &lengths)
                .is_some(),
            fused,
            "the backend's fused training pass"
        );
    }
    for (sampled, schedule) in [
        (false, CandidateSchedule::Carry),
        (true, CandidateSchedule::Carry),
        (true, CandidateSchedule::CarryUnfused),
    ] {
        for (seed, leaf, attend) in [
            (1, LeafKind::Affine, false),
            (2, LeafKind::Lstm, true),
            (3, LeafKind::Affine, true),
            (4, LeafKind::BiLstm, false),
            (5, LeafKind::Lstm, false),
        ] {
            let what = format!("seed {seed}, sampled {sampled}, {schedule:?}");
            B::seed(&device, seed);
            let mut m = GumbelTreeLstmConfig::new(4, 6)
                .with_leaf(leaf)
                .with_intra_attention(Some(attend))
                .init::<B>(&device);
            // Unit-scale query entries, so that the scores decide among many candidates.
            m.query =
                Param::from_tensor(Tensor::random([6], Distribution::Normal(0.0, 1.0), &device));
            let x = Tensor::<B, 3>::random([lengths.len(), 10, 4], Distribution::Default, &device)
                .require_grad();
            let noise: Vec<Tensor<B, 2>> = (0..n - 1)
                .map(|t| {
                    Tensor::random(
                        [lengths.len(), n - 1 - t],
                        Distribution::Normal(0.0, 1.0),
                        &device,
                    )
                })
                .collect();
            let run = |schedule: CandidateSchedule| {
                if sampled {
                    m.forward_with_noise_scheduled(x.clone(), &lengths, &noise, schedule)
                } else {
                    m.forward_scheduled(x.clone(), &lengths, Decisions::Argmax, schedule)
                }
            };
            let (a, b) = (run(schedule), run(CandidateSchedule::Recompose));
            // The default carries at evaluation only: the same as one of the two.
            let c = run(CandidateSchedule::default());
            assert_eq!(
                c.layer_indices(),
                b.layer_indices(),
                "{what}: default's trees"
            );
            assert_eq!(a.layer_indices(), b.layer_indices(), "{what}: trees");
            assert!(
                a.layer_indices().iter().flatten().any(|&k| k > 0),
                "{what}: some merge away from the left edge"
            );
            let close = |p: Vec<f64>, q: Vec<f64>, part: &str| {
                assert_eq!(p.len(), q.len(), "{what}: {part}");
                for (i, (u, v)) in p.iter().zip(&q).enumerate() {
                    assert!((u - v).abs() <= tol, "{what}: {part}[{i}]: {u} vs {v}");
                }
            };
            let flat = |t: Tensor<B::InnerBackend, 2>| -> Vec<f64> {
                t.into_data().convert::<f64>().to_vec().unwrap()
            };
            for (pa, pb) in a.probabilities.iter().zip(&b.probabilities) {
                close(
                    flat(pa.clone().inner()),
                    flat(pb.clone().inner()),
                    "probabilities",
                );
            }
            close(
                flat(a.root.c.clone().inner()),
                flat(b.root.c.clone().inner()),
                "root c",
            );
            close(
                flat(a.sentence.clone().inner()),
                flat(b.sentence.clone().inner()),
                "sentence",
            );
            // Gradients of a loss that reads every root unit with its own weight.
            let w = Tensor::<B, 2>::random([lengths.len(), 6], Distribution::Default, &device);
            let loss = |o: &GumbelTreeOutput<B>| {
                o.sentence.clone().mul(w.clone()).sum() + o.root.c.clone().mul(w.clone()).sum()
            };
            let (ga, gb) = (loss(&a).backward(), loss(&b).backward());
            let dx = |g: &B::Gradients| {
                x.grad(g)
                    .unwrap()
                    .into_data()
                    .convert::<f64>()
                    .to_vec()
                    .unwrap()
            };
            close(dx(&ga), dx(&gb), "d embeddings");
            let (pa, pb) = (parameter_grads(&m, &ga), parameter_grads(&m, &gb));
            assert_eq!(pa.len(), pb.len());
            for (k, ((size, p), (_, q))) in pa.into_iter().zip(pb).enumerate() {
                match (p, q) {
                    (Some(p), Some(q)) => close(p, q, &format!("d parameter {k} ({size})")),
                    (p, q) => {
                        assert_eq!(p.is_some(), q.is_some(), "{what}: d parameter {k} ({size})")
                    }
                }
            }
            // The composition weight and, when sampled, the query do get gradients.
            assert!(m.composition.children.weight.grad(&ga).is_some(), "{what}");
            if sampled {
                assert!(m.query.grad(&ga).is_some(), "{what}: d query");
            }
        }
    }
}

#[test]
fn carried_candidates_match_recomposition_flex_f32() {
    carried_candidates_match_recomposition::<Autodiff<Flex>>(2e-5, true);
}

#[test]
fn carried_candidates_match_recomposition_ndarray_f64() {
    // (`f64` data: no fused pass, so the sampled decisions carry gate pre-activations.)
    carried_candidates_match_recomposition::<Autodiff<NdArray<f64>>>(1e-12, false);
}

/// The fused argmax pass (the default schedule on a CPU backend without autodiff) equals the
/// layers run as tensor ops, carried and recomposed: the trees, the selection probabilities of
/// every layer, the root, the sentence vector and the intra-attention weights.
fn fused_evaluation_matches_the_tensor_layers<B: ArborBackend>(tol: f64) {
    let device = Default::default();
    let lengths = [9, 1, 2, 7, 3, 9, 5, 8, 4, 6];
    for (seed, leaf, attend) in [
        (1, LeafKind::Affine, false),
        (2, LeafKind::Lstm, true),
        (3, LeafKind::BiLstm, true),
    ] {
        let what = format!("seed {seed}");
        B::seed(&device, seed);
        let mut m = GumbelTreeLstmConfig::new(4, 6)
            .with_leaf(leaf)
            .with_intra_attention(Some(attend))
            .init::<B>(&device);
        m.query = Param::from_tensor(Tensor::random([6], Distribution::Normal(0.0, 1.0), &device));
        let x = Tensor::<B, 3>::random([lengths.len(), 10, 4], Distribution::Default, &device);
        let leaves = m.leaf.forward(x.clone().narrow(1, 0, 9), &lengths);
        assert!(
            m.composition
                .argmax_tree(&leaves, m.query.val(), &lengths)
                .is_some(),
            "{what}: the backend runs the fused pass"
        );
        let run = |schedule| m.forward_scheduled(x.clone(), &lengths, Decisions::Argmax, schedule);
        let fused = run(CandidateSchedule::default());
        let flat =
            |t: Tensor<B, 2>| -> Vec<f64> { t.into_data().convert::<f64>().to_vec().unwrap() };
        for other in [
            CandidateSchedule::CarryInEvaluation,
            CandidateSchedule::Recompose,
        ] {
            let o = run(other);
            let what = format!("{what}, against {other:?}");
            assert_eq!(fused.layer_indices(), o.layer_indices(), "{what}: trees");
            let close = |p: Vec<f64>, q: Vec<f64>, part: &str| {
                assert_eq!(p.len(), q.len(), "{what}: {part}");
                for (i, (u, v)) in p.iter().zip(&q).enumerate() {
                    assert!((u - v).abs() <= tol, "{what}: {part}[{i}]: {u} vs {v}");
                }
            };
            assert_eq!(fused.probabilities.len(), o.probabilities.len());
            for (t, (p, q)) in fused.probabilities.iter().zip(&o.probabilities).enumerate() {
                close(
                    flat(p.clone()),
                    flat(q.clone()),
                    &format!("layer {t} probabilities"),
                );
            }
            close(flat(fused.root.h.clone()), flat(o.root.h.clone()), "root h");
            close(flat(fused.root.c.clone()), flat(o.root.c.clone()), "root c");
            close(
                flat(fused.sentence.clone()),
                flat(o.sentence.clone()),
                "sentence",
            );
            match (&fused.attention, &o.attention) {
                (Some(a), Some(b)) => close(flat(a.clone()), flat(b.clone()), "attention"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "{what}: attention"),
            }
        }
        assert!(
            fused.layer_indices().iter().flatten().any(|&k| k > 0),
            "{what}: some merge away from the left edge"
        );
    }
}

#[test]
fn fused_evaluation_matches_the_tensor_layers_flex() {
    fused_evaluation_matches_the_tensor_layers::<Flex>(2e-5);
}

// Flex only: NdArray<f32> and NdArray<f64> share one device, whose default float type a
// concurrent f64 test may set (arbor-kernels' `tests/fused/argmax_tree.rs` runs the op on
// NdArray<f32> with explicit dtypes).
