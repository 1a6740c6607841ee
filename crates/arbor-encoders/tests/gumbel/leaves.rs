//! Leaves: the LSTM leaf at every position, and the bidirectional leaf.

use arbor_cells::LstmState;
use arbor_encoders::*;
use burn::module::Param;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::*;
use crate::support::{model, reference_leaves, reversed, D, D_IN, LENGTHS, TIME, TOL};

#[test]
fn the_leaf_lstm_keeps_h_and_c_at_every_position() {
    let m = model::<Fx>(LeafKind::Lstm, 12);
    let x = tensor::<Fx, 3>([1, 5, D_IN], 1.0, 13);
    let leaves = m.leaf.forward(x.clone(), &[5]);
    for (t, want) in reference_leaves(&m, &x).into_iter().enumerate() {
        let h = leaves.h.clone().narrow(1, t, 1).reshape([1, D]);
        let c = leaves.c.clone().narrow(1, t, 1).reshape([1, D]);
        assert_close(&to_vec(h), &to_vec(want.h), TOL, &format!("h at {t}"));
        assert_close(&to_vec(c), &to_vec(want.c), TOL, &format!("c at {t}"));
    }
}

#[test]
fn bidirectional_leaves_are_padding_invariant_and_match_a_per_word_reference() {
    let m = model::<Fx>(LeafKind::BiLstm, 40);
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 41);
    let n = *LENGTHS.iter().max().unwrap();
    let leaves = m.leaf.forward(x.clone().narrow(1, 0, n), &LENGTHS);
    assert_eq!(leaves.h.dims(), [LENGTHS.len(), n, D]);
    for (b, &len) in LENGTHS.iter().enumerate() {
        let xb = alone(&x, b, len);
        let single = m.leaf.forward(xb.clone(), &[len]);
        for (t, want) in reference_leaves(&m, &xb).into_iter().enumerate() {
            let at = |s: &LstmState<Fx, 3>, i: usize| {
                (
                    to_vec(s.h.clone().narrow(0, i, 1).narrow(1, t, 1)),
                    to_vec(s.c.clone().narrow(0, i, 1).narrow(1, t, 1)),
                )
            };
            let (h, c) = at(&leaves, b);
            let what = format!("example {b} (len {len}) leaf {t}");
            assert_close(&h, &to_vec(want.h.clone()), TOL, &format!("{what}: h"));
            assert_close(&c, &to_vec(want.c.clone()), TOL, &format!("{what}: c"));
            let (h1, c1) = at(&single, 0);
            assert_close(&h, &h1, TOL, &format!("{what}: h vs alone"));
            assert_close(&c, &c1, TOL, &format!("{what}: c vs alone"));
        }
    }
}

/// Sets an `LstmCell` of width 1 over 1-wide inputs to `g = w·x` and every other
/// pre-activation 0, so `c_t = ½c_{t−1} + ½tanh(w·x_t)` and `h_t = ½tanh(c_t)`.
fn half_gates(cell: &mut arbor_cells::LstmCell<Fx>, w: f32) {
    let device = dev::<Fx>();
    cell.input.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(vec![0.0, 0.0, w, 0.0], [1, 4]),
        &device,
    ));
    cell.input.bias = Some(Param::from_tensor(Tensor::zeros([4], &device)));
    cell.hidden.weight = Param::from_tensor(Tensor::zeros([1, 4], &device));
}

#[test]
fn the_bidirectional_leaf_by_hand() {
    // D = 2: each direction is one unit wide. Forward g = x, backward g = 2x.
    let device = dev::<Fx>();
    let mut m = GumbelTreeLstmConfig::new(1, 2)
        .with_leaf(LeafKind::BiLstm)
        .init::<Fx>(&device);
    let Leaf::BiLstm(cells) = &mut m.leaf else {
        unreachable!()
    };
    half_gates(&mut cells.forward_cell, 1.0);
    half_gates(&mut cells.backward_cell, 2.0);
    // Sentence [1, −1, 0.5] padded to 5 with garbage, beside a longer sentence.
    let words = [1.0f64, -1.0, 0.5];
    let x = Tensor::<Fx, 3>::from_data(
        TensorData::new(
            vec![1.0f32, -1.0, 0.5, 30.0, -30.0, 0.3, 0.2, 0.1, 0.0, -0.1],
            [2, 5, 1],
        ),
        &device,
    );
    let leaves = m.leaf.forward(x, &[3, 5]);
    let mut fw = Vec::new();
    let mut c = 0.0;
    for &w in &words {
        c = 0.5 * c + 0.5 * w.tanh();
        fw.push(c);
    }
    let mut bw = [0.0; 3];
    let mut c = 0.0;
    for t in (0..3).rev() {
        c = 0.5 * c + 0.5 * (2.0 * words[t]).tanh();
        bw[t] = c;
    }
    for t in 0..3 {
        let got_c = to_vec(leaves.c.clone().narrow(0, 0, 1).narrow(1, t, 1));
        let got_h = to_vec(leaves.h.clone().narrow(0, 0, 1).narrow(1, t, 1));
        assert_close(&got_c, &[fw[t], bw[t]], TOL, &format!("c at {t}"));
        assert_close(
            &got_h,
            &[0.5 * fw[t].tanh(), 0.5 * bw[t].tanh()],
            TOL,
            &format!("h at {t}"),
        );
    }
}

#[test]
fn reversing_a_sentence_swaps_the_directions_of_the_bidirectional_leaf() {
    // With the same weights in both directions, leaf i of a sentence is leaf len − 1 − i of
    // its reversal with the two halves swapped, wherever the sentences sit in a padded batch.
    let mut m = model::<Fx>(LeafKind::BiLstm, 42);
    let Leaf::BiLstm(cells) = &mut m.leaf else {
        unreachable!()
    };
    // Copies of the values (a clone of a lazily initialised parameter would draw its own).
    let fw = &cells.forward_cell;
    let copy = |p: &Param<Tensor<Fx, 2>>| Param::from_tensor(p.val());
    cells.backward_cell.input.weight = copy(&fw.input.weight);
    cells.backward_cell.input.bias = fw.input.bias.as_ref().map(|b| Param::from_tensor(b.val()));
    cells.backward_cell.hidden.weight = copy(&fw.hidden.weight);
    let len = 4;
    let lengths = [len, 2, len];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 43);
    let sentence = alone(&x, 0, len);
    let x = Tensor::cat(
        vec![
            x.clone().narrow(0, 0, 2),
            Tensor::cat(
                vec![
                    reversed(&sentence),
                    x.clone().narrow(0, 2, 1).narrow(1, len, 2),
                ],
                1,
            ),
        ],
        0,
    );
    let leaves = m.leaf.forward(x, &lengths);
    let half = D / 2;
    for i in 0..len {
        let pick = |t: &Tensor<Fx, 3>, b: usize, p: usize| {
            to_vec(t.clone().narrow(0, b, 1).narrow(1, p, 1).reshape([D]))
        };
        for (what, t) in [("h", &leaves.h), ("c", &leaves.c)] {
            let a = pick(t, 0, i);
            let r = pick(t, 2, len - 1 - i);
            let swapped: Vec<f64> = r[half..].iter().chain(&r[..half]).copied().collect();
            assert_close(&a, &swapped, TOL, &format!("{what} of leaf {i}"));
        }
    }
}

#[test]
fn an_odd_width_is_refused_for_the_bidirectional_leaf() {
    let odd = GumbelTreeLstmConfig::new(3, 5).with_leaf(LeafKind::BiLstm);
    let err = odd.validate().unwrap_err().to_string();
    assert!(err.contains("d_hidden") && err.contains("even"), "{err}");
    assert!(GumbelTreeLstmConfig::new(3, 6)
        .with_leaf(LeafKind::BiLstm)
        .validate()
        .is_ok());
}
