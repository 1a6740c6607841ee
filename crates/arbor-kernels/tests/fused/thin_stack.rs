//! `ThinStack` against the same writes and reads as `write_rows` and `select_rows` on one
//! tensor, in values and gradients: on `Autodiff<Flex>` and `Autodiff<NdArray>` (host rows
//! beside one-element tokens) and on `Flex` (no autodiff: the tensor itself, which is also the
//! path of every other backend and float type).

use arbor_kernels::{ArborBackend, ThinStack};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use crate::support::{assert_close, tensor, to_vec};

const BLOCKS: usize = 5;
const B: usize = 3;
const W: usize = 4;

/// The rows step `t` reads: some of every earlier block (in a fixed scattered order, repeats
/// included), and a row of the zero block.
fn reads(t: usize) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..t * B)
        .filter(|r| !(r * 7 + t).is_multiple_of(3))
        .collect();
    rows.push(1);
    rows.push(rows[0]);
    rows
}

/// Steps `1..=BLOCKS`: read, then write block `t` as two runs (row 0, rows 1..B) computed from
/// the step's input and what it read; the loss weighs every read and the last block. Returns
/// the loss's value, every step input's gradient and the reads' values.
fn run<A: AutodiffBackend + ArborBackend>(thin: bool) -> (Vec<f64>, Vec<f64>) {
    let dev = Default::default();
    let xs: Vec<Tensor<A, 2>> = (0..BLOCKS)
        .map(|t| tensor::<A, 2>([B, W], 1.0, 60 + t as u64).require_grad())
        .collect();
    let n = (BLOCKS + 1) * B;
    let mut stack = ThinStack::<A>::zeros(n, W, &dev);
    let mut plain = arbor_kernels::zeros::<A, 2>([n, W], &dev);
    let mut loss = Tensor::<A, 1>::zeros([1], &dev);
    let mut values = Vec::new();
    for t in 1..=BLOCKS {
        let rows = reads(t);
        let read = if thin {
            stack.read(&rows)
        } else {
            arbor_kernels::select_rows(plain.clone(), &rows)
        };
        values.extend(to_vec(read.clone()));
        let weight = tensor::<A, 2>([rows.len(), W], 1.0, 90 + t as u64);
        loss = loss + read.clone().mul(weight).sum();
        let new = xs[t - 1].clone() + read.narrow(0, 0, B).tanh().mul_scalar(0.5);
        let (first, rest) = (new.clone().narrow(0, 0, 1), new.narrow(0, 1, B - 1));
        if thin {
            stack = stack.write(t * B, first).write(t * B + 1, rest);
        } else {
            plain = arbor_kernels::write_rows(plain, t * B, first);
            plain = arbor_kernels::write_rows(plain, t * B + 1, rest);
        }
    }
    let last: Vec<usize> = (BLOCKS * B..n).collect();
    let tail = if thin {
        stack.read(&last)
    } else {
        arbor_kernels::select_rows(plain, &last)
    };
    values.extend(to_vec(tail.clone()));
    let loss = loss + tail.powi_scalar(2).sum();
    let grads = loss.backward();
    let g = xs
        .iter()
        .flat_map(|x| to_vec(x.grad(&grads).expect("every step's input has a gradient")))
        .collect();
    (values, g)
}

#[test]
fn thin_stack_equals_rows_written_and_read_in_one_tensor() {
    for (name, (thin, plain)) in [
        (
            "Autodiff<Flex>",
            (run::<Autodiff<Flex>>(true), run::<Autodiff<Flex>>(false)),
        ),
        (
            "Autodiff<NdArray>",
            (
                run::<Autodiff<NdArray>>(true),
                run::<Autodiff<NdArray>>(false),
            ),
        ),
    ] {
        assert_close(&thin.0, &plain.0, 1e-6, &format!("{name}: values read"));
        assert_close(&thin.1, &plain.1, 1e-6, &format!("{name}: gradients"));
        assert!(
            thin.1.iter().any(|&v| v != 0.0),
            "{name}: gradients reach the inputs"
        );
    }
    // Without autodiff the stack is one tensor written in place.
    let dev = Default::default();
    let rows = tensor::<Flex, 2>([2, W], 1.0, 70);
    let stack = ThinStack::<Flex>::zeros(4, W, &dev).write(1, rows.clone());
    let got = to_vec(stack.read(&[2, 0, 1]));
    let r = to_vec(rows);
    let want: Vec<f64> = r[W..]
        .iter()
        .chain(&[0.0; W])
        .chain(&r[..W])
        .copied()
        .collect();
    assert_close(&got, &want, 0.0, "Flex: rows read back");
}

/// A read's gradient reaches rows written in any earlier block, and only them: the gradient of
/// an input whose rows nobody reads is zero.
#[test]
fn only_rows_read_get_a_gradient() {
    type A = Autodiff<Flex>;
    let dev = Default::default();
    let x = tensor::<A, 2>([2, W], 1.0, 71).require_grad();
    let y = tensor::<A, 2>([2, W], 1.0, 72).require_grad();
    let stack = ThinStack::<A>::zeros(6, W, &dev)
        .write(2, x.clone())
        .write(4, y.clone());
    let grads = stack.read(&[3, 3, 0]).sum().backward();
    let gx = to_vec(x.grad(&grads).unwrap());
    assert_eq!(&gx[..W], &[0.0; W], "row 2 is never read");
    assert_eq!(&gx[W..], &[2.0; W], "row 3 is read twice");
    let gy = y
        .grad(&grads)
        .map(to_vec)
        .unwrap_or_else(|| vec![0.0; 2 * W]);
    assert!(
        gy.iter().all(|&v| v == 0.0),
        "rows 4 and 5 are never read: {gy:?}"
    );
}

/// `ThinStack::from_rows` read many times (repeats, and rows read by several reads) against
/// `select_rows` on the same tensor: values, and the gradient of the tensor the rows come from
/// (a product, so the rows are an op's output, not a leaf), every row read or not.
fn read_many<A: AutodiffBackend + ArborBackend>(as_stack: bool) -> (Vec<f64>, Vec<f64>) {
    let x = tensor::<A, 2>([7, 3], 1.0, 75).require_grad();
    let w = tensor::<A, 2>([3, W], 1.0, 76);
    let rows = x.clone().matmul(w);
    let source = as_stack.then(|| ThinStack::<A>::from_rows(rows.clone()));
    let read = |r: &[usize]| match &source {
        Some(s) => s.read(r),
        None => arbor_kernels::select_rows(rows.clone(), r),
    };
    let reads: [&[usize]; 4] = [&[0, 2, 2], &[6, 0], &[3], &[2, 5, 1, 6]];
    let mut values = Vec::new();
    let mut loss = Tensor::<A, 1>::zeros([1], &Default::default());
    for (k, r) in reads.iter().enumerate() {
        let v = read(r);
        values.extend(to_vec(v.clone()));
        loss = loss
            + v.mul(tensor::<A, 2>([r.len(), W], 1.0, 80 + k as u64))
                .sum();
    }
    let grads = loss.backward();
    (values, to_vec(x.grad(&grads).expect("x has a gradient")))
}

#[test]
fn rows_read_many_times_equal_select_rows() {
    for (name, (stack, plain)) in [
        (
            "Autodiff<Flex>",
            (
                read_many::<Autodiff<Flex>>(true),
                read_many::<Autodiff<Flex>>(false),
            ),
        ),
        (
            "Autodiff<NdArray>",
            (
                read_many::<Autodiff<NdArray>>(true),
                read_many::<Autodiff<NdArray>>(false),
            ),
        ),
    ] {
        assert_close(&stack.0, &plain.0, 0.0, &format!("{name}: values read"));
        assert_close(&stack.1, &plain.1, 1e-6, &format!("{name}: gradients"));
        assert!(
            stack.1.iter().any(|&v| v != 0.0),
            "{name}: gradients reach x"
        );
    }
    // Without autodiff the stack is the tensor itself.
    let rows = tensor::<Flex, 2>([3, W], 1.0, 77);
    let got = to_vec(ThinStack::<Flex>::from_rows(rows.clone()).read(&[2, 2, 0]));
    let r = to_vec(rows);
    let want: Vec<f64> = r[2 * W..]
        .iter()
        .chain(&r[2 * W..])
        .chain(&r[..W])
        .copied()
        .collect();
    assert_close(&got, &want, 0.0, "Flex: rows read back");
}

/// Rows made by `from_rows` are written: writing over them is refused.
#[test]
#[should_panic(expected = "row 1 was written before")]
fn rows_from_a_tensor_are_written() {
    let rows = tensor::<Flex, 2>([3, W], 1.0, 78);
    let _ = ThinStack::<Flex>::from_rows(rows).write(1, tensor::<Flex, 2>([1, W], 1.0, 79));
}

/// Dropping the stack once the forward pass is over frees its rows' values; the backward pass
/// then allocates the gradient buffer, and every gradient is what it is with the stack alive.
#[test]
fn a_stack_dropped_before_the_backward_pass_gives_the_same_gradients() {
    type A = Autodiff<Flex>;
    let grads_of = |drop_first: bool| {
        let dev = Default::default();
        let x = tensor::<A, 2>([2, W], 1.0, 81).require_grad();
        let src = tensor::<A, 2>([3, W], 1.0, 82).require_grad();
        let stack = ThinStack::<A>::zeros(4, W, &dev).write(1, x.clone());
        let buffer = ThinStack::<A>::from_rows(src.clone());
        let out = stack.read(&[2, 1, 2]).mul_scalar(3.0) + buffer.read(&[0, 2, 2]).exp();
        if drop_first {
            drop(stack);
            drop(buffer);
        }
        let g = out.sum().backward();
        (
            to_vec(x.grad(&g).expect("x has a gradient")),
            to_vec(src.grad(&g).expect("src has a gradient")),
        )
    };
    let (kept, dropped) = (grads_of(false), grads_of(true));
    assert_close(&dropped.0, &kept.0, 0.0, "stack rows");
    assert_close(&dropped.1, &kept.1, 0.0, "from_rows rows");
    assert_eq!(&kept.0[..W], &[3.0; W], "row 1 is read once, times 3");
    assert_eq!(&kept.0[W..], &[6.0; W], "row 2 is read twice, times 3");
}

/// A thin stack's rows never change: writing a row twice is refused.
#[test]
#[should_panic(expected = "row 3 was written before")]
fn a_row_is_written_once() {
    let dev = Default::default();
    let rows = tensor::<Flex, 2>([2, W], 1.0, 73);
    let _ = ThinStack::<Flex>::zeros(6, W, &dev)
        .write(2, rows.clone())
        .write(3, rows);
}

/// The backward pass takes the rows' memory for their gradient: reading the stack after it
/// began is refused rather than answered with gradient values.
#[test]
#[should_panic(expected = "after a backward pass through it began")]
fn no_read_after_the_backward_pass() {
    type A = Autodiff<Flex>;
    let dev = Default::default();
    let x = tensor::<A, 2>([2, W], 1.0, 74).require_grad();
    let stack = ThinStack::<A>::zeros(4, W, &dev).write(0, x);
    let _ = stack.read(&[1]).sum().backward();
    let _ = stack.read(&[0]);
}
