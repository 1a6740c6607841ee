//! A cell's whole-sequence `scan` computes what its step loop computes: outputs, last states,
//! syntactic distances and gradients, with padding (an empty example included) and an initial
//! state. Faster FastTrees is the cell with a scan.

mod common;

use arbor_cells::{run_sequence, CellStep, RecurrentCell, ScanOutput, SequenceOutput};
use arbor_cells::{
    ArborBackend, FastTreesCell, FastTreesCellConfig, FasterFastTreesCell,
    FasterFastTreesCellConfig, LstmCell, LstmCellConfig, LstmState, OnLstmCell, OnLstmCellConfig,
};
use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use common::{assert_close, tensor, to_vec, StepByStep};

fn flat<B: ArborBackend>(out: SequenceOutput<B>) -> Vec<Vec<f64>> {
    vec![
        to_vec(out.outputs),
        to_vec(out.last.h),
        to_vec(out.last.c),
        to_vec(out.distances.expect("cumax cells give distances")),
    ]
}

const NAMES: [&str; 4] = ["outputs", "last h", "last c", "distances"];

#[test]
fn scan_equals_the_step_loop() {
    type B = Flex;
    let device = Default::default();
    let cell: FasterFastTreesCell<B> = FasterFastTreesCellConfig::new(5, 8, 2).init(&device);
    let x = tensor::<B, 3>([4, 6, 5], 1.5, 1, &device);
    let init = LstmState {
        h: tensor::<B, 2>([4, 8], 1.0, 2, &device),
        c: tensor::<B, 2>([4, 8], 1.0, 3, &device),
    };
    for (lengths, init) in [
        (None, None),
        (Some(&[6, 3, 0, 1][..]), Some(init.clone())),
        (Some(&[6, 6, 6, 6][..]), Some(init)),
    ] {
        let scanned = flat(run_sequence(&cell, x.clone(), lengths, init.clone()));
        let looped = flat(run_sequence(&StepByStep(&cell), x.clone(), lengths, init));
        for (k, name) in NAMES.iter().enumerate() {
            assert_close(
                &scanned[k],
                &looped[k],
                1e-5,
                &format!("{name}, lengths {lengths:?}"),
            );
        }
    }
}

#[test]
fn scan_gradients_equal_the_step_loop() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let cell: FasterFastTreesCell<A> = FasterFastTreesCellConfig::new(5, 8, 2).init(&device);
    let lengths = [6, 3, 0, 1];
    let grads = |scan: bool| {
        let x = tensor::<A, 3>([4, 6, 5], 1.5, 1, &device).require_grad();
        let c0 = tensor::<A, 2>([4, 8], 1.0, 3, &device).require_grad();
        let init = LstmState {
            h: tensor::<A, 2>([4, 8], 1.0, 2, &device),
            c: c0.clone(),
        };
        let out = if scan {
            run_sequence(&cell, x.clone(), Some(&lengths), Some(init))
        } else {
            run_sequence(&StepByStep(&cell), x.clone(), Some(&lengths), Some(init))
        };
        let w = tensor::<A, 3>([4, 6, 8], 1.0, 4, &device);
        let loss = out.outputs.mul(w).sum()
            + out.last.h.sum()
            + out.last.c.mul_scalar(0.5).sum()
            + out.distances.unwrap().sum();
        let g = loss.backward();
        vec![
            to_vec(x.grad(&g).unwrap()),
            to_vec(c0.grad(&g).unwrap()),
            to_vec(cell.input.weight.grad(&g).unwrap()),
        ]
    };
    let (scanned, looped) = (grads(true), grads(false));
    for (k, name) in ["d x", "d c0", "d weight"].iter().enumerate() {
        assert_close(&scanned[k], &looped[k], 1e-4, name);
    }
}

/// The LSTM with its fused sequence op (`LstmCell::sequence`) as its scan, on every input,
/// padded ones included.
struct AlwaysFused<'a>(&'a LstmCell<Autodiff<Flex>>);

impl RecurrentCell<Autodiff<Flex>> for AlwaysFused<'_> {
    fn d_input(&self) -> usize {
        self.0.d_input()
    }
    fn d_hidden(&self) -> usize {
        self.0.d_hidden()
    }
    fn n_chunks(&self) -> Option<usize> {
        None
    }
    fn precompute(&self, x: Tensor<Autodiff<Flex>, 3>) -> Tensor<Autodiff<Flex>, 3> {
        self.0.precompute(x)
    }
    fn step(
        &self,
        xp: Tensor<Autodiff<Flex>, 2>,
        state: LstmState<Autodiff<Flex>, 2>,
    ) -> CellStep<Autodiff<Flex>> {
        self.0.step(xp, state)
    }
    fn scan(
        &self,
        x: Tensor<Autodiff<Flex>, 3>,
        init: &LstmState<Autodiff<Flex>, 2>,
        _pad: Option<Tensor<Autodiff<Flex>, 3, Bool>>,
        lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<Autodiff<Flex>>> {
        let (h, c_last) = self
            .0
            .sequence(x, Some(init.clone()), lengths.unwrap_or(&[]));
        Some(ScanOutput {
            h,
            c_last,
            distances: None,
        })
    }
}

/// The LSTM's fused sequence op (`LstmCell::sequence`) computes what its step loop
/// computes: outputs, last states and the gradients of the input, the initial state and both
/// weights, with padding (an empty example included) and an initial state.
#[test]
fn lstm_sequence_equals_the_step_loop_in_values_and_gradients() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let cell: LstmCell<A> = LstmCellConfig::new(5, 8).init(&device);
    for lengths in [None, Some(&[6, 3, 0, 1][..]), Some(&[6, 6, 6, 6][..])] {
        let run = |scan: bool| {
            let x = tensor::<A, 3>([4, 6, 5], 1.5, 1, &device).require_grad();
            let h0 = tensor::<A, 2>([4, 8], 1.0, 2, &device).require_grad();
            let c0 = tensor::<A, 2>([4, 8], 1.0, 3, &device).require_grad();
            let init = Some(LstmState {
                h: h0.clone(),
                c: c0.clone(),
            });
            let out = if scan {
                run_sequence(&AlwaysFused(&cell), x.clone(), lengths, init)
            } else {
                run_sequence(&StepByStep(&cell), x.clone(), lengths, init)
            };
            let values = vec![
                to_vec(out.outputs.clone()),
                to_vec(out.last.h.clone()),
                to_vec(out.last.c.clone()),
            ];
            let w = tensor::<A, 3>([4, 6, 8], 1.0, 4, &device);
            let loss =
                out.outputs.mul(w).sum() + out.last.h.sum() + out.last.c.mul_scalar(0.5).sum();
            let g = loss.backward();
            let grads = vec![
                to_vec(x.grad(&g).unwrap()),
                to_vec(h0.grad(&g).unwrap()),
                to_vec(c0.grad(&g).unwrap()),
                to_vec(cell.input.weight.grad(&g).unwrap()),
                to_vec(cell.input.bias.as_ref().unwrap().grad(&g).unwrap()),
                to_vec(cell.hidden.weight.grad(&g).unwrap()),
            ];
            (values, grads)
        };
        let ((sv, sg), (lv, lg)) = (run(true), run(false));
        for (k, name) in ["outputs", "last h", "last c"].iter().enumerate() {
            assert_close(&sv[k], &lv[k], 1e-5, &format!("{name}, {lengths:?}"));
        }
        let names = ["d x", "d h0", "d c0", "d W", "d b", "d U"];
        for (k, name) in names.iter().enumerate() {
            assert_close(&sg[k], &lg[k], 1e-4, &format!("{name}, {lengths:?}"));
        }
    }
}

/// Runs `cell` (its fused sequence op when `scan`, else its step loop) on a padded batch with
/// an initial state and returns the values (outputs, last `h`, last `c`, distances) and the
/// gradients of a loss reaching all of them (the distances included) with respect to `x`,
/// `h0`, `c0` and the cell's parameters (`params`).
fn fused_and_looped<C: RecurrentCell<Autodiff<Flex>>>(
    cell: &C,
    params: impl Fn(
        &C,
        &<Autodiff<Flex> as burn::tensor::backend::AutodiffBackend>::Gradients,
    ) -> Vec<Vec<f64>>,
    lengths: Option<&[usize]>,
    scan: bool,
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let x = tensor::<A, 3>([4, 6, 5], 1.5, 1, &device).require_grad();
    let h0 = tensor::<A, 2>([4, 8], 1.0, 2, &device).require_grad();
    let c0 = tensor::<A, 2>([4, 8], 1.0, 3, &device).require_grad();
    let init = Some(LstmState {
        h: h0.clone(),
        c: c0.clone(),
    });
    let out = if scan {
        run_sequence(cell, x.clone(), lengths, init)
    } else {
        run_sequence(&StepByStep(cell), x.clone(), lengths, init)
    };
    let distances = out.distances.clone().expect("cumax cells give distances");
    let values = vec![
        to_vec(out.outputs.clone()),
        to_vec(out.last.h.clone()),
        to_vec(out.last.c.clone()),
        to_vec(distances.clone()),
    ];
    let w = tensor::<A, 3>([4, 6, 8], 1.0, 4, &device);
    let wd = tensor::<A, 2>([4, 6], 1.0, 5, &device);
    let loss = out.outputs.mul(w).sum()
        + out.last.h.sum()
        + out.last.c.mul_scalar(0.5).sum()
        + distances.mul(wd).sum();
    let g = loss.backward();
    let mut grads = vec![
        to_vec(x.grad(&g).unwrap()),
        to_vec(h0.grad(&g).unwrap()),
        to_vec(c0.grad(&g).unwrap()),
    ];
    grads.extend(params(cell, &g));
    (values, grads)
}

/// The ON-LSTM's and FastTrees' fused sequence ops (`on_lstm_sequence`,
/// `fast_trees_sequence`, their cells' `scan`) compute what their step loops compute: outputs,
/// last states, distances and the gradients of the input, the initial state and every weight,
/// with padding (an empty example included) and an initial state.
#[test]
fn ordered_sequences_equal_the_step_loop_in_values_and_gradients() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let on_lstm: OnLstmCell<A> = OnLstmCellConfig::new(5, 8, 2).init(&device);
    let fast_trees: FastTreesCell<A> = FastTreesCellConfig::new(5, 8, 4).init(&device);
    let names = ["d x", "d h0", "d c0", "d W", "d b", "d U"];
    for lengths in [None, Some(&[6, 3, 0, 1][..]), Some(&[6, 6, 6, 6][..])] {
        let runs = [
            (
                "ON-LSTM",
                fused_and_looped(
                    &on_lstm,
                    |c, g| linear_grads(&c.input, &c.hidden, g),
                    lengths,
                    true,
                ),
                fused_and_looped(
                    &on_lstm,
                    |c, g| linear_grads(&c.input, &c.hidden, g),
                    lengths,
                    false,
                ),
            ),
            (
                "FastTrees",
                fused_and_looped(
                    &fast_trees,
                    |c, g| linear_grads(&c.input, &c.hidden, g),
                    lengths,
                    true,
                ),
                fused_and_looped(
                    &fast_trees,
                    |c, g| linear_grads(&c.input, &c.hidden, g),
                    lengths,
                    false,
                ),
            ),
        ];
        for (cell, (sv, sg), (lv, lg)) in runs {
            for (k, name) in NAMES.iter().enumerate() {
                assert_close(&sv[k], &lv[k], 1e-5, &format!("{cell} {name}, {lengths:?}"));
            }
            for (k, name) in names.iter().enumerate() {
                assert_close(&sg[k], &lg[k], 1e-4, &format!("{cell} {name}, {lengths:?}"));
            }
        }
    }
}

/// The gradients of an input `Linear` (weight and bias) and a hidden one (weight).
fn linear_grads(
    input: &burn::nn::Linear<Autodiff<Flex>>,
    hidden: &burn::nn::Linear<Autodiff<Flex>>,
    g: &<Autodiff<Flex> as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> Vec<Vec<f64>> {
    vec![
        to_vec(input.weight.grad(g).unwrap()),
        to_vec(input.bias.as_ref().unwrap().grad(g).unwrap()),
        to_vec(hidden.weight.grad(g).unwrap()),
    ]
}
