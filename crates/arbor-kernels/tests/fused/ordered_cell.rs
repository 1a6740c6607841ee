//! `ordered_cell` and `ordered_gates` (the ON-LSTM cell): values and gradients against the
//! plain-op reference, against each other, and finite differences in f64.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// `ordered_cell` inputs: gates `[n, 4h]`, master gates in (0, 1) `[n, c]`, `c_prev` `[n, h]`.
fn ordered_inputs<B: Backend>(n: usize, c: usize, h: usize) -> [Tensor<B, 2>; 4] {
    let unit = |seed| tensor::<B, 2>([n, c], 0.45, seed).add_scalar(0.5);
    [
        tensor::<B, 2>([n, 4 * h], 4.0, 21),
        unit(22),
        unit(23),
        tensor::<B, 2>([n, h], 1.5, 24),
    ]
}

fn ordered<B: ArborBackend>(xs: [Tensor<B, 2>; 4], fused: bool) -> Tensor<B, 2> {
    let [g, mf, mi, cp] = xs;
    if fused {
        arbor_kernels::ordered_cell(g, mf, mi, cp)
    } else {
        let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::ordered_cell::<B>(
            p(g),
            p(mf),
            p(mi),
            p(cp),
        )))
    }
}

#[test]
fn ordered_cell_forward_matches_reference() {
    fn check<B: ArborBackend>() {
        for (n, c, h) in [(3, 4, 12), (2, 1, 9), (5, 10, 40), (160, 8, 64)] {
            let xs = ordered_inputs::<B>(n, c, h);
            let fused = to_vec(ordered(xs.clone(), true));
            let want = to_vec(ordered(xs, false));
            assert_close(&fused, &want, 1e-6, &format!("ordered [{n}, {c}, {h}]"));
        }
    }
    check::<Flex>();
    check::<NdArray>();
}

fn ordered_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    n: usize,
    c: usize,
    h: usize,
) -> Vec<Vec<f64>> {
    let xs = ordered_inputs::<B>(n, c, h).map(|t| t.require_grad());
    let w = tensor::<B, 2>([n, h], 1.0, 25);
    let g = ordered(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|t| to_vec(t.grad(&g).unwrap())).collect()
}

#[test]
fn ordered_cell_gradients_match_reference() {
    for (n, c, h) in [(3, 4, 12), (2, 3, 9), (96, 8, 64)] {
        assert_fused_agrees!(
            ordered_grads(n, c, h),
            ["d gates", "d master forget", "d master input", "d c_prev"],
            1e-5,
            format!("[{n}, {c}, {h}]")
        );
    }
}

#[test]
fn ordered_cell_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (n, c, h) = (2, 2, 4);
    let ad = ordered_grads::<Autodiff<Inner>>(true, n, c, h);
    let inputs = ordered_inputs::<Inner>(n, c, h);
    let w = tensor::<Inner, 2>([n, h], 1.0, 25);
    let f =
        |xs: [Tensor<Inner, 2>; 4]| -> f64 { ordered(xs, true).mul(w.clone()).sum().into_scalar() };
    // Sigmoid/tanh of f64 tensors run in f32 in Burn: a 1e-2 step (see gated_cell.rs).
    let fd = central_differences(&inputs, 1e-2, f);
    for i in 0..4 {
        assert_close(&ad[i], &fd[i], 2e-4, &format!("fd ordered input {i}"));
    }
}

/// `ordered_gates` on the same inputs as `ordered_cell` (its `c_prev` unused), with the gates a
/// strided view (columns 2.. of a wider tensor, as a cell's gate split gives them).
fn gate_inputs<B: Backend>(n: usize, c: usize, h: usize) -> [Tensor<B, 2>; 3] {
    let [g, mf, mi, _] = ordered_inputs::<B>(n, c, h);
    let wide = Tensor::cat(vec![tensor::<B, 2>([n, 2], 1.0, 71), g], 1);
    [wide.narrow(1, 2, 4 * h), mf, mi]
}

fn gates_out<B: ArborBackend>(xs: [Tensor<B, 2>; 3], fused: bool) -> Tensor<B, 2> {
    let [g, mf, mi] = xs;
    if fused {
        arbor_kernels::ordered_gates(g, mf, mi)
    } else {
        let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::ordered_gates::<B>(
            p(g),
            p(mf),
            p(mi),
        )))
    }
}

fn gates_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    (n, c, h): (usize, usize, usize),
) -> Vec<Vec<f64>> {
    let xs = gate_inputs::<B>(n, c, h).map(|t| t.require_grad());
    let w = tensor::<B, 2>([n, 2 * h], 1.0, 72);
    let g = gates_out(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|t| to_vec(t.grad(&g).unwrap())).collect()
}

#[test]
fn ordered_gates_match_reference_and_ordered_cell() {
    for (n, c, h) in [(3, 4, 12), (2, 1, 9), (5, 10, 40), (160, 8, 64)] {
        for fused in [
            to_vec(gates_out(gate_inputs::<Flex>(n, c, h), true)),
            to_vec(gates_out(gate_inputs::<NdArray>(n, c, h), true)),
        ] {
            let want = to_vec(gates_out(gate_inputs::<Flex>(n, c, h), false));
            assert_close(
                &fused,
                &want,
                1e-6,
                &format!("ordered_gates [{n}, {c}, {h}]"),
            );
            // With c_prev = 1, ordered_cell is f̂ + î ⊙ tanh(g): the sum of the two halves.
            let [g, mf, mi] = gate_inputs::<Flex>(n, c, h);
            let cell = to_vec(arbor_kernels::ordered_cell(
                g,
                mf,
                mi,
                Tensor::ones([n, h], &Default::default()),
            ));
            for r in 0..n {
                for j in 0..h {
                    let sum = fused[r * 2 * h + j] + fused[r * 2 * h + h + j];
                    assert!((sum - cell[r * h + j]).abs() < 1e-5, "row {r} unit {j}");
                }
            }
        }
        assert_fused_agrees!(
            gates_grads((n, c, h)),
            ["d gates", "d master forget", "d master input"],
            1e-5,
            format!("[{n}, {c}, {h}]")
        );
    }
}

#[test]
fn ordered_gates_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let dims = (2, 2, 4);
    let ad = gates_grads::<Autodiff<Inner>>(true, dims);
    let inputs = gate_inputs::<Inner>(dims.0, dims.1, dims.2);
    let w = tensor::<Inner, 2>([dims.0, 2 * dims.2], 1.0, 72);
    // Sigmoid/tanh of f64 tensors run in f32 in Burn: a 1e-2 step (see gated_cell.rs).
    let fd = central_differences(&inputs, 1e-2, |xs| {
        gates_out(xs, true).mul(w.clone()).sum().into_scalar()
    });
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 2e-4, &format!("fd ordered_gates input {i}"));
    }
}
