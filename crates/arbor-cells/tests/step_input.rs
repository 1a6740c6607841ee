//! The cells that override `step_input` (the LSTM, ON-LSTM and FastTrees: input and recurrent
//! products as one `linear_pair`) compute what the default path computes (`precompute(x_t)`
//! then `step`): outputs, last states, distances and every gradient, with padding (an empty
//! example included) and an initial state, on Flex and on NdArray in f64. (The LSTM's
//! `run_sequence` takes its whole-sequence op, `scan`, so for it this compares that op with
//! the default steps.)

mod common;

use arbor_cells::{run_sequence, RecurrentCell, SequenceOutput};
use arbor_cells::{ArborBackend, FastTreesCellConfig, LstmCellConfig, LstmState, OnLstmCellConfig};
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::prelude::*;
use common::{assert_close, tensor, to_vec, Ad64, StepByStep};

fn flat<B: ArborBackend>(out: SequenceOutput<B>) -> Vec<Vec<f64>> {
    let mut v = vec![to_vec(out.outputs), to_vec(out.last.h), to_vec(out.last.c)];
    v.extend(out.distances.map(to_vec));
    v
}

/// Values and gradients (of `x`, `c0` and every parameter) of `cell` run both ways.
fn agree<B, C>(cell: &C, tol: f64)
where
    B: arbor_cells::ArborAutodiffBackend,
    C: RecurrentCell<B> + Module<B>,
{
    let device = Default::default();
    let (d_in, h) = (cell.d_input(), cell.d_hidden());
    for lengths in [None, Some(&[5, 2, 0, 1][..])] {
        let run = |fused: bool| {
            let x = tensor::<B, 3>([4, 5, d_in], 1.5, 1, &device).require_grad();
            let c0 = tensor::<B, 2>([4, h], 1.0, 3, &device).require_grad();
            let init = LstmState {
                h: tensor::<B, 2>([4, h], 1.0, 2, &device),
                c: c0.clone(),
            };
            let out = if fused {
                run_sequence(cell, x.clone(), lengths, Some(init))
            } else {
                run_sequence(&StepByStep(cell), x.clone(), lengths, Some(init))
            };
            let mut values = flat(out.clone());
            let w = tensor::<B, 3>([4, 5, h], 1.0, 4, &device);
            let mut loss = out.outputs.mul(w).sum() + out.last.c.mul_scalar(0.5).sum();
            if let Some(d) = out.distances {
                loss = loss + d.sum();
            }
            let g = loss.backward();
            values.push(to_vec(x.grad(&g).expect("d x")));
            values.push(to_vec(c0.grad(&g).expect("d c0")));
            // Every parameter's gradient, in the module's order.
            struct Grads<'g, B: burn::tensor::backend::AutodiffBackend>(
                &'g B::Gradients,
                Vec<Vec<f64>>,
            );
            impl<B: burn::tensor::backend::AutodiffBackend> burn::module::ModuleVisitor<B> for Grads<'_, B> {
                fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<B, D>>) {
                    let g = p.grad(self.0).expect("every parameter gets a gradient");
                    self.1.push(
                        g.into_data()
                            .convert::<f64>()
                            .to_vec::<f64>()
                            .expect("float data"),
                    );
                }
            }
            let mut visitor = Grads::<B>(&g, Vec::new());
            cell.visit(&mut visitor);
            assert!(visitor.1.len() >= 2, "the cell has parameters");
            values.extend(visitor.1);
            values
        };
        let (fused, plain) = (run(true), run(false));
        assert_eq!(fused.len(), plain.len());
        for (k, (a, b)) in fused.iter().zip(&plain).enumerate() {
            assert_close(a, b, tol, &format!("part {k}, lengths {lengths:?}"));
        }
    }
}

#[test]
fn fused_steps_equal_the_default_steps_on_flex() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    agree::<A, _>(&LstmCellConfig::new(6, 8).init::<A>(&device), 1e-5);
    agree::<A, _>(&OnLstmCellConfig::new(6, 8, 2).init::<A>(&device), 1e-5);
    agree::<A, _>(&FastTreesCellConfig::new(6, 8, 4).init::<A>(&device), 1e-5);
}

#[test]
fn fused_steps_equal_the_default_steps_in_f64() {
    let device = Default::default();
    // The LSTM, ON-LSTM and FastTrees run a sequence as one op (their `scan`), whose plain-ops
    // definition computes σ in the float type itself; the step loop's `gated_cell` uses Burn's
    // `sigmoid`, which computes in f32 whatever the type, so the two agree to f32 rounding of σ
    // only.
    agree::<Ad64, _>(&LstmCellConfig::new(6, 8).init::<Ad64>(&device), 1e-6);
    agree::<Ad64, _>(&OnLstmCellConfig::new(6, 8, 2).init::<Ad64>(&device), 1e-6);
    agree::<Ad64, _>(
        &FastTreesCellConfig::new(6, 8, 4).init::<Ad64>(&device),
        1e-6,
    );
}
