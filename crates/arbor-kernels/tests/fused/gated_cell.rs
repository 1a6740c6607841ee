//! `gated_cell` and `gated_output`: values and gradients against the plain-op reference for
//! several gate layouts, finite differences in f64, saturation, NaN and a bad child count.

use arbor_kernels::{gated_cell, gated_output, reference, ArborBackend, GateLayout};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, from_f64, tensor, to_vec};

/// The reference cell and output as tensors (plain ops, so autodiff records every one).
fn reference_both<B: Backend, const D: usize>(
    gates: Tensor<B, D>,
    children: Vec<Tensor<B, D>>,
    layout: &GateLayout,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let prims = children
        .into_iter()
        .map(|c| c.into_primitive().tensor())
        .collect();
    let c = reference::gated_cell::<B>(gates.clone().into_primitive().tensor(), prims, layout);
    let c = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(c));
    let h = reference::gated_output::<B>(
        gates.into_primitive().tensor(),
        c.clone().into_primitive().tensor(),
        layout,
    );
    (Tensor::from_primitive(TensorPrimitive::Float(h)), c)
}

fn fused_both<B: ArborBackend, const D: usize>(
    gates: Tensor<B, D>,
    children: Vec<Tensor<B, D>>,
    layout: &GateLayout,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let c = gated_cell(gates.clone(), children, layout);
    (gated_output(gates, c.clone(), layout), c)
}

/// Gates `[b, n, blocks·h]` and children that are strided views `[b, n, h]` of one
/// `[b, n + 1, h]` state (as the Gumbel Tree-LSTM's `c[:, :-1]` and `c[:, 1:]`), plus the base.
fn inputs<B: Backend>(
    layout: &GateLayout,
    b: usize,
    n: usize,
    h: usize,
    scale: f64,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let gates = tensor::<B, 3>([b, n, layout.blocks * h], scale, 1);
    let base = tensor::<B, 3>([b, n + 1, h], 1.5, 2);
    (gates, base)
}

fn children<B: Backend>(layout: &GateLayout, base: &Tensor<B, 3>) -> Vec<Tensor<B, 3>> {
    let n = base.dims()[1] - 1;
    (0..layout.forgets.len())
        .map(|k| base.clone().narrow(1, k.min(1), n))
        .collect()
}

fn layouts() -> Vec<GateLayout> {
    let three = GateLayout {
        blocks: 6,
        input: 5,
        candidate: 0,
        output: 2,
        forgets: vec![1, 3, 4],
    };
    vec![GateLayout::lstm(), GateLayout::binary_tree_lstm(), three]
}

fn forward_matches<B: ArborBackend>() {
    for layout in layouts() {
        // h = 11 is not a multiple of the eight SIMD lanes; scale 6 reaches the tails of σ/tanh.
        for (b, n, h) in [(3, 4, 11), (2, 1, 16), (1, 5, 3), (40, 9, 64)] {
            let (gates, base) = inputs::<B>(&layout, b, n, h, 6.0);
            let kids = children(&layout, &base);
            let (h_ref, c_ref) = reference_both(gates.clone(), kids.clone(), &layout);
            let (h_fused, c_fused) = fused_both(gates.clone(), kids.clone(), &layout);
            let what = format!("{layout:?} [{b}, {n}, {h}]");
            assert_close(&to_vec(c_fused), &to_vec(c_ref), 1e-6, &format!("c {what}"));
            assert_close(&to_vec(h_fused), &to_vec(h_ref), 1e-6, &format!("h {what}"));
            // Rank 2, contiguous children.
            let g2 = gates.reshape([b * n, layout.blocks * h]);
            let k2: Vec<Tensor<B, 2>> = kids.into_iter().map(|c| c.reshape([b * n, h])).collect();
            let (h_ref, c_ref) = reference_both(g2.clone(), k2.clone(), &layout);
            let (h_fused, c_fused) = fused_both(g2, k2, &layout);
            assert_close(
                &to_vec(c_fused),
                &to_vec(c_ref),
                1e-6,
                &format!("c2 {what}"),
            );
            assert_close(
                &to_vec(h_fused),
                &to_vec(h_ref),
                1e-6,
                &format!("h2 {what}"),
            );
        }
    }
}

#[test]
fn forward_matches_reference_flex() {
    forward_matches::<Flex>();
}

#[test]
fn forward_matches_reference_ndarray() {
    forward_matches::<NdArray>();
}

/// Gradients of a random projection of `h` and `c` with respect to the gates and the base
/// state the children are views of.
fn grads<B: AutodiffBackend + ArborBackend>(
    layout: &GateLayout,
    fused: bool,
    b: usize,
    n: usize,
    h: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (gates, base) = inputs::<B>(layout, b, n, h, 4.0);
    let (gates, base) = (gates.require_grad(), base.require_grad());
    let kids = children(layout, &base);
    let (hh, cc) = if fused {
        fused_both(gates.clone(), kids, layout)
    } else {
        reference_both(gates.clone(), kids, layout)
    };
    let wh = tensor::<B, 3>([b, n, h], 1.0, 7);
    let wc = tensor::<B, 3>([b, n, h], 1.0, 8);
    let loss = hh.mul(wh).sum().add(cc.mul(wc).sum());
    let g = loss.backward();
    (
        to_vec(gates.grad(&g).expect("gates grad")),
        to_vec(base.grad(&g).expect("base grad")),
    )
}

fn gradients_match<B: AutodiffBackend + ArborBackend>() {
    for layout in layouts() {
        for (b, n, h) in [(2, 3, 9), (1, 2, 16), (24, 5, 48)] {
            let (g_ref, s_ref) = grads::<B>(&layout, false, b, n, h);
            let (g_fused, s_fused) = grads::<B>(&layout, true, b, n, h);
            let what = format!("{layout:?} [{b}, {n}, {h}]");
            assert_close(&g_fused, &g_ref, 1e-5, &format!("d gates {what}"));
            assert_close(&s_fused, &s_ref, 1e-5, &format!("d children {what}"));
        }
    }
}

#[test]
fn gradients_match_reference_flex() {
    gradients_match::<Autodiff<Flex>>();
}

#[test]
fn gradients_match_reference_ndarray() {
    gradients_match::<Autodiff<NdArray>>();
}

/// The autodiff nodes against central finite differences, in f64 (NdArray<f64> runs the
/// plain-op backward kernels behind the fused nodes).
#[test]
fn finite_differences_f64() {
    type Ad = Autodiff<NdArray<f64>>;
    type Inner = NdArray<f64>;
    for layout in layouts() {
        let (b, n, h) = (1, 2, 3);
        let (_, fd_gates, fd_base) = {
            let (gates, base) = inputs::<Inner>(&layout, b, n, h, 4.0);
            let wh = tensor::<Inner, 3>([b, n, h], 1.0, 7);
            let wc = tensor::<Inner, 3>([b, n, h], 1.0, 8);
            let f = |gates: Tensor<Inner, 3>, base: Tensor<Inner, 3>| -> f64 {
                let (hh, cc) = fused_both(gates, children(&layout, &base), &layout);
                hh.mul(wh.clone())
                    .sum()
                    .add(cc.mul(wc.clone()).sum())
                    .into_scalar()
            };
            // Burn computes sigmoid and tanh of f64 tensors in f32 (`to_full_precision`), so a
            // tiny step would measure rounding noise; 1e-2 keeps both error terms near 1e-5.
            let eps = 1e-2;
            let diff = |t: &Tensor<Inner, 3>, other: &Tensor<Inner, 3>, first: bool| {
                let v = to_vec(t.clone());
                (0..v.len())
                    .map(|k| {
                        let bump = |d: f64| {
                            let mut w = v.clone();
                            w[k] += d;
                            let p = from_f64::<Inner, 3>(w, t.dims());
                            if first {
                                f(p, other.clone())
                            } else {
                                f(other.clone(), p)
                            }
                        };
                        (bump(eps) - bump(-eps)) / (2.0 * eps)
                    })
                    .collect::<Vec<f64>>()
            };
            (0, diff(&gates, &base, true), diff(&base, &gates, false))
        };
        let (g_ad, s_ad) = grads::<Ad>(&layout, true, b, n, h);
        assert_close(&g_ad, &fd_gates, 2e-4, &format!("fd gates {layout:?}"));
        assert_close(&s_ad, &fd_base, 2e-4, &format!("fd children {layout:?}"));
    }
}

#[test]
fn extremes_and_nan() {
    let layout = GateLayout::lstm();
    let gates = Tensor::<Flex, 2>::from_floats(
        [[100.0, -100.0, 100.0, -100.0], [f32::NAN, 0.0, 0.0, 0.0]],
        &Default::default(),
    );
    let c_prev = Tensor::<Flex, 2>::from_floats([[3.0], [1.0]], &Default::default());
    let c = gated_cell(gates.clone(), vec![c_prev], &layout);
    let h = gated_output(gates, c.clone(), &layout);
    let (c, h) = (to_vec(c), to_vec(h));
    // Row 0: i, g saturate at 1, f at 0: c = 1; o at 0: h = 0.
    assert!(
        (c[0] - 1.0).abs() < 1e-6 && h[0].abs() < 1e-6,
        "{c:?} {h:?}"
    );
    assert!(
        c[1].is_nan() && h[1].is_nan(),
        "NaN must propagate: {c:?} {h:?}"
    );
}

#[test]
#[should_panic(expected = "one child per forget gate")]
fn wrong_child_count_is_a_clear_panic() {
    let gates = Tensor::<Flex, 2>::zeros([1, 4], &Default::default());
    let _ = gated_cell(gates, vec![], &GateLayout::lstm());
}
