//! A cell's whole-sequence `scan` computes what its step loop computes: outputs, last states,
//! syntactic distances and gradients, with padding (an empty example included) and an initial
//! state. Faster FastTrees is the cell with a scan.

mod common;

use arbor_cells::{run_sequence, SequenceOutput};
use arbor_cells::{ArborBackend, FasterFastTreesCell, FasterFastTreesCellConfig, LstmState};
use burn::backend::{Autodiff, Flex};
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
