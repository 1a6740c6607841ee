//! The language model: learning, truncated-BPTT state carry, deterministic evaluation and the
//! AWD-LSTM regularisers.

use arbor_cells::names::VariantArray;
use arbor_cells::ArborBackend;
use std::sync::Mutex;

use arbor_cells::CellKind;
use arbor_lm::*;
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::TensorData;

type Fx = Flex;
type Ad = Autodiff<Flex>;

/// The backend RNG is process-global: tests that draw from it take this lock.
static RNG: Mutex<()> = Mutex::new(());

const V: usize = 11;

fn config(cell: CellKind) -> RnnLmConfig {
    RnnLmConfig::new(cell, V, 6, 8)
        .with_n_layers(2)
        .with_chunk_size(2)
}

fn no_reg(c: RnnLmConfig) -> RnnLmConfig {
    c.with_dropout(0.0)
        .with_dropout_hidden(0.0)
        .with_dropout_input(0.0)
        .with_dropout_embedding(0.0)
        .with_weight_drop(0.0)
}

fn ids<B: ArborBackend>(rows: &[&[u32]]) -> Tensor<B, 2, Int> {
    let t = rows[0].len();
    let v: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.iter().map(|&x| x as i64))
        .collect();
    Tensor::from_data(TensorData::new(v, [rows.len(), t]), &Default::default())
}

fn vals<B: ArborBackend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn carrying_the_state_across_segments_equals_running_the_joined_segment() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let rows: [&[u32]; 2] = [&[1, 4, 2, 7, 3, 9, 0, 5], &[10, 2, 2, 6, 8, 1, 3, 4]];
    let first: [&[u32]; 2] = [&rows[0][..3], &rows[1][..3]];
    let second: [&[u32]; 2] = [&rows[0][3..], &rows[1][3..]];
    for &cell in CellKind::VARIANTS {
        let model: RnnLm<Fx> = config(cell).with_kernel_size(3).init(&Default::default());
        let joined = model.forward(ids(&rows), None);
        let a = model.forward(ids(&first), None);
        let b = model.forward(ids(&second), Some(a.state.clone().detach()));
        let both = Tensor::cat(vec![a.logits, b.logits], 1);
        let d = max_diff(&vals(both), &vals(joined.logits));
        assert!(d < 1e-5, "{cell}: logits differ by {d}");
        let h_joined = vals(joined.state.layers[1].state.h.clone());
        let h_split = vals(b.state.layers[1].state.h.clone());
        assert!(max_diff(&h_joined, &h_split) < 1e-5, "{cell}: final state");
        assert_eq!(
            joined.distances.len(),
            if cell == CellKind::Lstm { 0 } else { 2 }
        );
        for (l, dj) in joined.distances.iter().enumerate() {
            let ds = Tensor::cat(vec![a.distances[l].clone(), b.distances[l].clone()], 1);
            assert!(
                max_diff(&vals(ds), &vals(dj.clone())) < 1e-5,
                "{cell}: distances"
            );
        }
    }
}

#[test]
fn a_fresh_state_is_not_the_carried_one() {
    // Guards the test above: the carried state does change the second segment's output.
    let model: RnnLm<Fx> = config(CellKind::OnLstm).init(&Default::default());
    let a = model.forward(ids(&[&[1, 2, 3]]), None);
    let carried = model.forward(ids(&[&[4, 5]]), Some(a.state));
    let fresh = model.forward(ids(&[&[4, 5]]), None);
    assert!(max_diff(&vals(carried.logits), &vals(fresh.logits)) > 1e-6);
}

#[test]
fn evaluation_is_deterministic_and_training_is_not() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    let model: RnnLm<Ad> = config(CellKind::FastTrees).init(&device);
    let x: [&[u32]; 2] = [&[1, 4, 2, 7, 3], &[10, 2, 2, 6, 8]];
    let valid = model.valid();
    let e1 = vals(valid.forward(ids(&x), None).logits);
    let e2 = vals(valid.forward(ids(&x), None).logits);
    assert_eq!(e1, e2);
    // The same weights without any regulariser give the same numbers.
    let mut plain = model.clone();
    plain.reg = no_reg(config(CellKind::FastTrees)).regularisers();
    let p = vals(plain.forward(ids(&x), None).logits);
    assert!(max_diff(&e1, &p) < 1e-5);
    let t1 = vals(model.forward(ids(&x), None).logits);
    let t2 = vals(model.forward(ids(&x), None).logits);
    assert!(max_diff(&t1, &t2) > 1e-4, "training draws fresh masks");
    assert!(max_diff(&t1, &e1) > 1e-4);
}

#[test]
fn each_regulariser_changes_training_output_but_not_evaluation() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    type Set = fn(RnnLmConfig) -> RnnLmConfig;
    let cases: [(&str, Set); 5] = [
        ("dropout", |c| c.with_dropout(0.5)),
        ("dropout_hidden", |c| c.with_dropout_hidden(0.5)),
        ("dropout_input", |c| c.with_dropout_input(0.5)),
        ("dropout_embedding", |c| c.with_dropout_embedding(0.5)),
        ("weight_drop", |c| c.with_weight_drop(0.5)),
    ];
    let x: [&[u32]; 2] = [&[1, 4, 2, 7, 3, 1], &[10, 2, 2, 6, 8, 2]];
    for cell in [CellKind::Lstm, CellKind::OnLstm, CellKind::ConvFastTrees] {
        Ad::seed(&device, 3);
        let base: RnnLm<Ad> = no_reg(config(cell)).init(&device);
        let reference = vals(base.valid().forward(ids(&x), None).logits);
        let base_train = vals(base.forward(ids(&x), None).logits);
        assert!(
            max_diff(&reference, &base_train) < 1e-5,
            "{cell}: no regulariser"
        );
        for (name, set) in cases {
            let mut m = base.clone();
            m.reg = set(no_reg(config(cell))).regularisers();
            let train = vals(m.forward(ids(&x), None).logits);
            assert!(
                max_diff(&train, &reference) > 1e-4,
                "{cell}: {name} changes nothing in training"
            );
            let eval = vals(m.valid().forward(ids(&x), None).logits);
            assert!(
                max_diff(&eval, &reference) < 1e-6,
                "{cell}: {name} acts in evaluation"
            );
        }
    }
}

#[test]
fn locked_dropout_shares_one_mask_over_time_and_embedding_dropout_drops_rows() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    Ad::seed(&device, 5);
    let x = Tensor::<Ad, 3>::ones([3, 7, 16], &device);
    let y = vals(locked_dropout(x.clone(), 0.5));
    for b in 0..3 {
        for d in 0..16 {
            let v0 = y[b * 7 * 16 + d];
            assert!(v0 == 0.0 || (v0 - 2.0).abs() < 1e-6);
            for t in 1..7 {
                assert_eq!(y[(b * 7 + t) * 16 + d], v0, "mask changes over time");
            }
        }
    }
    assert!(y.contains(&0.0) && y.contains(&2.0));
    let w = Tensor::<Ad, 2>::ones([20, 4], &device);
    let e = vals(embedding_dropout(w, 0.5));
    let rows: Vec<f64> = e.chunks(4).map(|r| r[0]).collect();
    for (r, chunk) in e.chunks(4).enumerate() {
        assert!(
            chunk.iter().all(|&v| v == rows[r]),
            "row {r} partly dropped"
        );
    }
    assert!(rows.contains(&0.0) && rows.contains(&2.0));
    // Without autodiff both are the identity.
    let plain = Tensor::<Fx, 3>::ones([2, 3, 4], &device);
    assert_eq!(vals(locked_dropout(plain, 0.9)), vec![1.0; 24]);
}

#[test]
fn weight_drop_masks_the_recurrent_matrix_and_keeps_its_gradient() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    Ad::seed(&device, 9);
    let model: RnnLm<Ad> = no_reg(config(CellKind::Lstm)).init(&device);
    let arbor_cells::AnyCell::Lstm(cell) = &model.stack.layers[0] else {
        panic!("an LSTM layer")
    };
    let dropped = weight_drop(&model.stack.layers[0], 0.5);
    let arbor_cells::AnyCell::Lstm(dc) = &dropped else {
        panic!("still an LSTM layer")
    };
    let u = vals(cell.hidden.weight.val());
    let du = vals(dc.hidden.weight.val());
    let zeros = du.iter().filter(|&&v| v == 0.0).count();
    assert!(
        zeros > du.len() / 4 && zeros < 3 * du.len() / 4,
        "{zeros} of {}",
        du.len()
    );
    for (a, b) in u.iter().zip(&du) {
        assert!(*b == 0.0 || (b - 2.0 * a).abs() < 1e-6);
    }
    // The input weight W is untouched.
    assert_eq!(vals(cell.input.weight.val()), vals(dc.input.weight.val()));
    // Gradients flow through the mask to the original U.
    let mut m = model.clone();
    m.reg = no_reg(config(CellKind::Lstm))
        .with_weight_drop(0.5)
        .regularisers();
    let out = m.forward(ids(&[&[1, 2, 3, 4]]), None);
    let grads = out.logits.sum().backward();
    let g = cell.hidden.weight.grad(&grads).expect("U gets a gradient");
    assert!(vals(g).iter().any(|v| v.abs() > 0.0));
}

#[test]
fn ar_and_tar_follow_their_definitions() {
    let device = Default::default();
    let model: RnnLm<Fx> = no_reg(config(CellKind::Lstm)).init(&device);
    let out = model.forward(ids(&[&[1, 2, 3]]), None);
    let h = vals(out.outputs.clone());
    let d = 6;
    let ar: f64 = h.iter().map(|v| v * v).sum::<f64>() / h.len() as f64;
    let tar: f64 =
        (d..h.len()).map(|i| (h[i] - h[i - d]).powi(2)).sum::<f64>() / (h.len() - d) as f64;
    let got = vals(out.ar_tar(2.0, 1.0))[0];
    assert!(
        (got - (2.0 * ar + tar)).abs() < 1e-6,
        "{got} vs {}",
        2.0 * ar + tar
    );
}

#[test]
fn the_loss_decreases_on_a_tiny_corpus() {
    let _g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    Ad::seed(&device, 1);
    let mut model: RnnLm<Ad> = no_reg(config(CellKind::FasterFastTrees))
        .with_dropout(0.1)
        .init(&device);
    let stream: Vec<u32> = (0..200).map(|i| [1, 2, 3, 4, 5, 6][i % 6]).collect();
    let data = Batchified::new(&stream, 4, 8);
    let mut optim = AdamConfig::new().init();
    let eval = |m: &RnnLm<Ad>| {
        let m = m.valid();
        let mut state = None;
        let mut sum = 0.0;
        for s in 0..data.num_segments() {
            let seg = data.segment(s);
            let x = Tensor::<Fx, 2, Int>::from_data(
                TensorData::new(
                    seg.inputs.iter().map(|&v| v as i64).collect(),
                    [seg.batch, seg.len],
                ),
                &device,
            );
            let y = Tensor::<Fx, 2, Int>::from_data(
                TensorData::new(
                    seg.targets.iter().map(|&v| v as i64).collect(),
                    [seg.batch, seg.len],
                ),
                &device,
            );
            let out = m.forward(x, state);
            sum += vals(token_nll(out.logits, y).sum())[0];
            state = Some(out.state);
        }
        sum / data.num_targets() as f64
    };
    let before = eval(&model);
    for _epoch in 0..25 {
        let mut state: Option<LmState<Ad>> = None;
        for s in 0..data.num_segments() {
            let seg = data.segment(s);
            let x = Tensor::<Ad, 2, Int>::from_data(
                TensorData::new(
                    seg.inputs.iter().map(|&v| v as i64).collect(),
                    [seg.batch, seg.len],
                ),
                &device,
            );
            let y = Tensor::<Ad, 2, Int>::from_data(
                TensorData::new(
                    seg.targets.iter().map(|&v| v as i64).collect(),
                    [seg.batch, seg.len],
                ),
                &device,
            );
            let out = model.forward(x, state);
            let loss = token_nll(out.logits.clone(), y)
                .mean()
                .add(out.ar_tar(2.0, 1.0));
            state = Some(out.state.detach());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(2e-2, model, grads);
        }
    }
    let after = eval(&model);
    assert!(
        after < 0.6 * before,
        "mean NLL {before:.3} → {after:.3} on a periodic stream"
    );
}
