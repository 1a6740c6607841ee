//! `write_rows` against `slice_assign` and `select_rows` against `select`, in values and
//! gradients.

use arbor_kernels::ArborBackend;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use crate::support::{assert_close, assert_fused_agrees, tensor, to_vec};

#[test]
fn write_rows_matches_slice_assign_and_never_changes_a_shared_tensor() {
    fn check<B: ArborBackend>() {
        let t = tensor::<B, 2>([6, 5], 1.0, 51);
        let rows = tensor::<B, 2>([2, 5], 1.0, 52);
        let want = to_vec(t.clone().slice_assign([3..5, 0..5], rows.clone()));
        // `t` is shared with `kept`: the write must copy, and `kept` must keep its values.
        let kept = t.clone();
        let before = to_vec(kept.clone());
        let out = arbor_kernels::write_rows(t, 3, rows.clone());
        assert_close(&to_vec(out.clone()), &want, 0.0, "write_rows (shared)");
        assert_close(&to_vec(kept), &before, 0.0, "the shared tensor");
        // `out` is its own: this write may go in place, with the same result.
        let want = to_vec(out.clone().slice_assign([0..2, 0..5], rows.clone()));
        let again = arbor_kernels::write_rows(out, 0, rows.clone());
        assert_close(&to_vec(again), &want, 0.0, "write_rows (own memory)");
        // A strided `rows` (every other column of a wider tensor).
        let wide = tensor::<B, 2>([1, 10], 1.0, 53).reshape([2, 5]);
        let t = tensor::<B, 2>([4, 5], 1.0, 54);
        let want = to_vec(t.clone().slice_assign([1..3, 0..5], wide.clone()));
        assert_close(
            &to_vec(arbor_kernels::write_rows(t, 1, wide)),
            &want,
            0.0,
            "write_rows (reshaped rows)",
        );
    }
    check::<Flex>();
    check::<NdArray>();
}

fn write_grads<B: AutodiffBackend + ArborBackend>(fused: bool) -> Vec<Vec<f64>> {
    let t = tensor::<B, 2>([6, 4], 1.0, 55).require_grad();
    let rows = tensor::<B, 2>([2, 4], 1.0, 56).require_grad();
    // Two writes, as a stack gets them, the second over part of the first.
    let write = |t: Tensor<B, 2>, start: usize, rows: Tensor<B, 2>| {
        if fused {
            arbor_kernels::write_rows(t, start, rows)
        } else {
            t.slice_assign([start..start + 2, 0..4], rows)
        }
    };
    let out = write(t.clone().mul_scalar(2.0), 1, rows.clone());
    let out = write(out, 2, rows.clone().exp());
    let w = tensor::<B, 2>([6, 4], 1.0, 57);
    let g = out.mul(w).sum().backward();
    vec![to_vec(t.grad(&g).unwrap()), to_vec(rows.grad(&g).unwrap())]
}

#[test]
fn write_rows_gradients_match_slice_assign() {
    assert_fused_agrees!(write_grads(), ["d t", "d rows"], 1e-6, "");
}

/// `select_rows` is Burn's `select` on dimension 0 in values and gradients, repeated rows
/// included, through an autodiff graph where the same tensor is read twice.
#[test]
fn select_rows_matches_select_in_values_and_gradients() {
    fn run<B: AutodiffBackend + ArborBackend>(fused: bool) -> [Vec<f64>; 2] {
        let t = tensor::<B, 2>([7, 5], 1.0, 91).require_grad();
        let (a, b) = ([6usize, 0, 3, 3, 1], [2usize, 6]);
        let read = |rows: &[usize]| {
            if fused {
                arbor_kernels::select_rows(t.clone(), rows)
            } else {
                let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
                let idx = Tensor::<B, 1, Int>::from_data(
                    burn::tensor::TensorData::new(ids, [rows.len()]),
                    &t.device(),
                );
                t.clone().select(0, idx)
            }
        };
        let (ya, yb) = (read(&a), read(&b));
        let loss = ya
            .clone()
            .mul(tensor::<B, 2>([5, 5], 1.0, 92))
            .sum()
            .add(yb.clone().mul(tensor::<B, 2>([2, 5], 1.0, 93)).sum());
        let g = loss.backward();
        let mut values = to_vec(ya);
        values.extend(to_vec(yb));
        [values, to_vec(t.grad(&g).unwrap())]
    }
    for (fused, want) in [
        (run::<Autodiff<Flex>>(true), run::<Autodiff<Flex>>(false)),
        (
            run::<Autodiff<NdArray>>(true),
            run::<Autodiff<NdArray>>(false),
        ),
        (
            run::<Autodiff<NdArray<f64>>>(true),
            run::<Autodiff<NdArray<f64>>>(false),
        ),
    ] {
        assert_close(&fused[0], &want[0], 0.0, "select_rows values");
        assert_close(&fused[1], &want[1], 1e-6, "select_rows gradient");
    }
}

#[test]
#[should_panic(expected = "select_rows: row 7 of a 7-row tensor")]
fn select_rows_refuses_an_out_of_range_row() {
    let t = Tensor::<Flex, 2>::zeros([7, 2], &Default::default());
    let _ = arbor_kernels::select_rows(t, &[0, 7]);
}

/// `narrow` is Burn's `narrow` in values and gradients, on every dimension of a rank-3 tensor
/// (the first, a middle and the last, each at the start, inside and at the end), with the same
/// tensor read in several overlapping pieces (so its gradient sums them), on a strided input
/// (a transposed view) and on an input that is not a graph leaf.
fn narrow_grads<B: AutodiffBackend + ArborBackend>(fused: bool) -> Vec<Vec<f64>> {
    let x = tensor::<B, 3>([4, 5, 6], 1.0, 94).require_grad();
    let cut = |t: Tensor<B, 3>, dim: usize, start: usize, len: usize| {
        if fused {
            arbor_kernels::narrow(t, dim, start, len)
        } else {
            t.narrow(dim, start, len)
        }
    };
    let pieces = [
        cut(x.clone(), 0, 0, 2),
        cut(x.clone(), 0, 1, 3),
        cut(x.clone(), 1, 2, 3),
        cut(x.clone(), 2, 5, 1),
        cut(x.clone().swap_dims(0, 2), 0, 1, 4),
        cut(x.clone().exp(), 1, 0, 5),
    ];
    let mut values = Vec::new();
    let mut loss: Option<Tensor<B, 1>> = None;
    for (i, p) in pieces.into_iter().enumerate() {
        values.extend(to_vec(p.clone()));
        let w = tensor::<B, 3>(p.dims(), 1.0, 95 + i as u64);
        let term = p.mul(w).sum();
        loss = Some(match loss {
            None => term,
            Some(l) => l.add(term),
        });
    }
    let g = loss.expect("pieces").backward();
    vec![values, to_vec(x.grad(&g).unwrap())]
}

#[test]
fn narrow_matches_burns_narrow_in_values_and_gradients() {
    assert_fused_agrees!(narrow_grads(), ["values", "d x"], 1e-6, "");
}

/// The host kernel itself (not only through autodiff): every dimension of a rank-4 gradient.
#[test]
fn narrow_backward_writes_the_piece_into_zeros_on_every_dimension() {
    fn check<B: ArborBackend>() {
        let shape = [3, 4, 2, 5];
        for dim in 0..4 {
            let (start, len) = (1, shape[dim] - 1);
            let mut piece = shape;
            piece[dim] = len;
            let grad = tensor::<B, 4>(piece, 1.0, 99 + dim as u64);
            let zeros = Tensor::<B, 4>::zeros(shape, (&grad.device(), grad.dtype()));
            let want = zeros.slice_assign(
                std::array::from_fn::<_, 4, _>(|d| {
                    if d == dim {
                        start..start + len
                    } else {
                        0..shape[d]
                    }
                }),
                grad.clone(),
            );
            let got = B::narrow_backward(
                grad.into_primitive().tensor(),
                burn::tensor::Shape::from(shape),
                dim,
                start,
            );
            let got = Tensor::<B, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(got));
            assert_close(&to_vec(got), &to_vec(want), 0.0, &format!("dim {dim}"));
        }
    }
    check::<Flex>();
    check::<NdArray>();
    check::<NdArray<f64>>();
}

#[test]
#[should_panic(expected = "narrow: 3..6 of dimension 1 of [2, 5]")]
fn narrow_refuses_a_range_past_the_end() {
    let t = Tensor::<Flex, 2>::zeros([2, 5], &Default::default());
    let _ = arbor_kernels::narrow(t, 1, 3, 3);
}
