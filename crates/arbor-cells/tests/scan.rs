//! A cell's whole-sequence `scan` computes what its step loop computes: outputs, last states,
//! syntactic distances and gradients, with padding (an empty example included) and an initial
//! state. Faster FastTrees is the cell with a scan.

mod common;

use arbor_cells::{run_sequence, RecurrentCell, SequenceOutput};
use arbor_cells::{
    ArborBackend, ConvFastTreesCell, ConvFastTreesCellConfig, FastTreesCell, FastTreesCellConfig,
    FasterFastTreesCell, FasterFastTreesCellConfig, LstmCell, LstmCellConfig, LstmState,
    OnLstmCell, OnLstmCellConfig,
};
use burn::backend::{Autodiff, Flex};
use burn::nn::Linear;
use burn::tensor::backend::AutodiffBackend;
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

/// The input and hidden `Linear`s of a cell.
type Layers<C> = for<'a> fn(&'a C) -> (&'a Linear<Autodiff<Flex>>, &'a Linear<Autodiff<Flex>>);

/// The gradients of a cell's other parameters (those outside its input and hidden `Linear`s).
type Extra<C> = fn(&C, &<Autodiff<Flex> as AutodiffBackend>::Gradients) -> Vec<Vec<f64>>;

/// No other parameters.
fn no_extra<C>(_: &C, _: &<Autodiff<Flex> as AutodiffBackend>::Gradients) -> Vec<Vec<f64>> {
    Vec::new()
}

/// Runs `cell` (its whole-sequence op when `scan`, else its step loop) on a batch with an
/// initial state and returns the values (outputs, last `h`, last `c`, and the distances of
/// cumax cells) and the gradients of a loss reaching all of them with respect to `x`, `h0`,
/// `c0` and the weights of the cell's input and hidden `Linear`s (`layers`).
fn fused_or_looped<C: RecurrentCell<Autodiff<Flex>>>(
    cell: &C,
    (layers, extra): (Layers<C>, Extra<C>),
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
    let mut values = vec![
        to_vec(out.outputs.clone()),
        to_vec(out.last.h.clone()),
        to_vec(out.last.c.clone()),
    ];
    let w = tensor::<A, 3>([4, 6, 8], 1.0, 4, &device);
    let mut loss = out.outputs.mul(w).sum() + out.last.h.sum() + out.last.c.mul_scalar(0.5).sum();
    if let Some(distances) = out.distances {
        values.push(to_vec(distances.clone()));
        let wd = tensor::<A, 2>([4, 6], 1.0, 5, &device);
        loss = loss + distances.mul(wd).sum();
    }
    let g = loss.backward();
    let (input, hidden) = layers(cell);
    let mut grads = vec![
        to_vec(x.grad(&g).unwrap()),
        to_vec(h0.grad(&g).unwrap()),
        to_vec(c0.grad(&g).unwrap()),
        to_vec(input.weight.grad(&g).unwrap()),
        to_vec(input.bias.as_ref().unwrap().grad(&g).unwrap()),
        to_vec(hidden.weight.grad(&g).unwrap()),
    ];
    grads.extend(extra(cell, &g));
    (values, grads)
}

/// `cell`'s whole-sequence op against its step loop ([`fused_or_looped`]), without padding,
/// padded (an empty example included) and with every example at full length: values to 1e-5
/// (`values` names them), gradients to 1e-4.
fn assert_fused_equals_loop<C: RecurrentCell<Autodiff<Flex>>>(
    name: &str,
    cell: &C,
    layers: (Layers<C>, Extra<C>),
    values: &[&str],
    extra: &[&str],
) {
    let grads: Vec<&str> = ["d x", "d h0", "d c0", "d W", "d b", "d U"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    for lengths in [None, Some(&[6, 3, 0, 1][..]), Some(&[6, 6, 6, 6][..])] {
        let (sv, sg) = fused_or_looped(cell, layers, lengths, true);
        let (lv, lg) = fused_or_looped(cell, layers, lengths, false);
        assert_eq!((sv.len(), lv.len()), (values.len(), values.len()), "{name}");
        for (k, what) in values.iter().enumerate() {
            assert_close(&sv[k], &lv[k], 1e-5, &format!("{name} {what}, {lengths:?}"));
        }
        for (k, what) in grads.iter().enumerate() {
            assert_close(&sg[k], &lg[k], 1e-4, &format!("{name} {what}, {lengths:?}"));
        }
    }
}

/// The LSTM's fused sequence op (`LstmCell::scan`, `lstm_sequence`) computes what its step
/// loop computes: outputs, last states and the gradients of the input, the initial state and
/// both weights, with padding (an empty example included) and an initial state.
#[test]
fn lstm_sequence_equals_the_step_loop_in_values_and_gradients() {
    let cell: LstmCell<Autodiff<Flex>> = LstmCellConfig::new(5, 8).init(&Default::default());
    let layers: Layers<LstmCell<_>> = |c| (&c.input, &c.hidden);
    assert_fused_equals_loop("LSTM", &cell, (layers, no_extra), &NAMES[..3], &[]);
}

/// The ON-LSTM's and FastTrees' fused sequence ops (`on_lstm_sequence`,
/// `fast_trees_sequence`, their cells' `scan`) compute what their step loops compute: outputs,
/// last states, distances and the gradients of the input, the initial state and every weight,
/// with padding (an empty example included) and an initial state.
#[test]
fn ordered_sequences_equal_the_step_loop_in_values_and_gradients() {
    let device = Default::default();
    let on_lstm: OnLstmCell<Autodiff<Flex>> = OnLstmCellConfig::new(5, 8, 2).init(&device);
    let fast_trees: FastTreesCell<Autodiff<Flex>> = FastTreesCellConfig::new(5, 8, 4).init(&device);
    let layers: Layers<OnLstmCell<_>> = |c| (&c.input, &c.hidden);
    assert_fused_equals_loop("ON-LSTM", &on_lstm, (layers, no_extra), &NAMES, &[]);
    let layers: Layers<FastTreesCell<_>> = |c| (&c.input, &c.hidden);
    assert_fused_equals_loop("FastTrees", &fast_trees, (layers, no_extra), &NAMES, &[]);
}

/// Conv FastTrees' fused sequence op (`conv_fast_trees_sequence`, the cell's `scan`: the
/// convolution's master gates given to the op) computes what its step loop computes: outputs,
/// last states, distances and the gradients of the input, the initial state, the input and
/// hidden weights and the convolution head's weights, with padding (an empty example
/// included) and an initial state.
#[test]
fn conv_fast_trees_sequence_equals_the_step_loop_in_values_and_gradients() {
    let cell: ConvFastTreesCell<Autodiff<Flex>> =
        ConvFastTreesCellConfig::new(5, 8, 4).init(&Default::default());
    let layers: Layers<ConvFastTreesCell<_>> = |c| (&c.input, &c.hidden);
    let extra: Extra<ConvFastTreesCell<_>> = |c, g| {
        vec![
            to_vec(c.conv.weight.grad(g).unwrap()),
            to_vec(c.conv.bias.as_ref().unwrap().grad(g).unwrap()),
            to_vec(c.master.weight.grad(g).unwrap()),
            to_vec(c.master.bias.as_ref().unwrap().grad(g).unwrap()),
        ]
    };
    assert_fused_equals_loop(
        "Conv FastTrees",
        &cell,
        (layers, extra),
        &NAMES,
        &["d conv W", "d conv b", "d master W", "d master b"],
    );
}
