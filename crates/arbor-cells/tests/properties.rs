//! Properties every cell must keep: cumax shape, the frozen top chunk, padding invariance,
//! Conv FastTrees causality and batch independence, Faster FastTrees = its recurrence,
//! ST Gumbel selection rules.

mod common;

use arbor_cells::names::VariantArray;
use arbor_cells::*;
use burn::backend::Flex;
use burn::prelude::*;
use burn::tensor::activation::{sigmoid, tanh};
use burn::tensor::TensorData;
use common::*;

type Fx = Flex;

fn dev() -> burn::backend::flex::FlexDevice {
    Default::default()
}

const D_IN: usize = 5;
const H: usize = 8;
const CHUNK: usize = 2;

fn all_cells() -> Vec<AnyCell<Fx>> {
    CellKind::VARIANTS
        .iter()
        .copied()
        .map(|kind| {
            RecurrentStackConfig::new(kind, D_IN, H)
                .with_chunk_size(CHUNK)
                .init::<Fx>(&dev())
                .layers
                .remove(0)
        })
        .collect()
}

#[test]
fn cumax_is_monotone_in_unit_interval_and_ends_at_one() {
    for seed in 0..5 {
        let x = tensor::<Fx, 2>([4, 7], 6.0, seed, &dev());
        let y = to_vec(cumax(x));
        for row in y.chunks(7) {
            for w in row.windows(2) {
                assert!(w[1] >= w[0] - 1e-7, "not monotone: {row:?}");
            }
            assert!(row.iter().all(|v| (-1e-7..=1.0 + 1e-6).contains(v)));
            assert!((row[6] - 1.0).abs() < 1e-5, "last entry {} != 1", row[6]);
        }
    }
}

#[test]
fn master_gate_cells_never_write_the_top_chunk() {
    let (b, t) = (3, 6);
    for cell in all_cells().into_iter().filter(|c| c.n_chunks().is_some()) {
        let x = tensor::<Fx, 3>([b, t, D_IN], 3.0, 11, &dev());
        let init = LstmState::new(
            tensor::<Fx, 2>([b, H], 1.0, 12, &dev()),
            tensor::<Fx, 2>([b, H], 1.0, 13, &dev()),
        );
        let c0 = to_vec(init.c.clone());
        let out = run_sequence(&cell, x, None, Some(init));
        let c = to_vec(out.last.c);
        for e in 0..b {
            let top = (e * H + H - CHUNK)..(e * H + H);
            assert_close(&c[top.clone()], &c0[top], 1e-5, "top chunk");
        }
        // ... while the other chunks do change.
        assert!(c.iter().zip(&c0).any(|(a, b)| (a - b).abs() > 1e-3));
    }
}

#[test]
fn padding_never_changes_a_real_position() {
    let lengths = [5usize, 3, 1];
    let (b, t) = (lengths.len(), 5);
    for cell in all_cells() {
        let x = tensor::<Fx, 3>([b, t, D_IN], 1.0, 21, &dev());
        let batch = run_sequence(&cell, x.clone(), Some(&lengths), None);
        let outs = to_vec(batch.outputs.clone());
        for (e, &len) in lengths.iter().enumerate() {
            let alone_x = x.clone().slice([e..e + 1, 0..len, 0..D_IN]);
            let alone = run_sequence(&cell, alone_x, None, None);
            let real = &outs[e * t * H..e * t * H + len * H];
            assert_close(real, &to_vec(alone.outputs), 1e-5, "outputs");
            assert!(
                outs[e * t * H + len * H..(e + 1) * t * H]
                    .iter()
                    .all(|v| *v == 0.0),
                "padded outputs must be zero"
            );
            let last_h = to_vec(batch.last.h.clone().slice([e..e + 1, 0..H]));
            assert_close(&last_h, &to_vec(alone.last.h), 1e-5, "final h");
            let last_c = to_vec(batch.last.c.clone().slice([e..e + 1, 0..H]));
            assert_close(&last_c, &to_vec(alone.last.c), 1e-5, "final c");
            if let (Some(d), Some(da)) = (&batch.distances, alone.distances) {
                let d = to_vec(d.clone().slice([e..e + 1, 0..len]));
                assert_close(&d, &to_vec(da), 1e-5, "distances");
            }
        }
    }
}

#[test]
fn distances_are_one_minus_mean_master_forget() {
    // A single ON-LSTM step from zero state: recompute f̃ by hand from the weights.
    let cell = OnLstmCellConfig::new(D_IN, H, CHUNK).init::<Fx>(&dev());
    let x = tensor::<Fx, 3>([2, 1, D_IN], 1.0, 31, &dev());
    let out = run_sequence(&cell, x.clone(), None, None);
    let c = H / CHUNK;
    let logits = cell.input.forward(x.reshape([2, D_IN])).narrow(1, 0, c);
    let expected = cumax(logits).mean_dim(1).neg().add_scalar(1.0);
    assert_close(
        &to_vec(out.distances.unwrap()),
        &to_vec(expected),
        1e-6,
        "distance",
    );
}

#[test]
fn conv_fast_trees_is_causal() {
    let cell = ConvFastTreesCellConfig::new(D_IN, H, CHUNK)
        .with_kernel_size(3)
        .init::<Fx>(&dev());
    let (b, t) = (2, 6);
    let x = tensor::<Fx, 3>([b, t, D_IN], 1.0, 41, &dev());
    let base = to_vec(run_sequence(&cell, x.clone(), None, None).outputs);
    for s in 1..t {
        // Change x_s: outputs at positions < s must not move, position s must.
        let bump = Tensor::<Fx, 3>::ones([b, 1, D_IN], &dev()).mul_scalar(2.0);
        let changed = x.clone().slice_assign(
            [0..b, s..s + 1, 0..D_IN],
            x.clone().slice([0..b, s..s + 1, 0..D_IN]).add(bump),
        );
        let out = to_vec(run_sequence(&cell, changed, None, None).outputs);
        for e in 0..b {
            let before = e * t * H..e * t * H + s * H;
            assert_close(&out[before.clone()], &base[before], 0.0, "causality");
            let at = e * t * H + s * H..e * t * H + (s + 1) * H;
            assert!(out[at.clone()].iter().zip(&base[at]).any(|(a, b)| a != b));
        }
    }
}

#[test]
fn conv_fast_trees_examples_do_not_see_each_other() {
    let cell = ConvFastTreesCellConfig::new(D_IN, H, CHUNK).init::<Fx>(&dev());
    let (b, t) = (3, 4);
    let x = tensor::<Fx, 3>([b, t, D_IN], 1.0, 51, &dev());
    let base = to_vec(run_sequence(&cell, x.clone(), None, None).outputs);
    // Replace examples 1 and 2 entirely: example 0 must not change.
    let other = tensor::<Fx, 3>([b - 1, t, D_IN], 3.0, 52, &dev());
    let changed = x.clone().slice_assign([1..b, 0..t, 0..D_IN], other);
    let out = to_vec(run_sequence(&cell, changed, None, None).outputs);
    assert_close(&out[..t * H], &base[..t * H], 0.0, "example 0");
    // Batch of one: the conv must not collapse (the released code's bug).
    let single = to_vec(run_sequence(&cell, x.slice([0..1, 0..t, 0..D_IN]), None, None).outputs);
    assert_close(&single, &base[..t * H], 1e-6, "batch of one");
}

#[test]
fn faster_fast_trees_equals_its_recurrence() {
    let cell = FasterFastTreesCellConfig::new(D_IN, H, CHUNK).init::<Fx>(&dev());
    let (b, t, c) = (2, 5, H / CHUNK);
    let x = tensor::<Fx, 3>([b, t, D_IN], 1.0, 61, &dev());
    let out = run_sequence(&cell, x.clone(), None, None);
    // Step-by-step reference straight from the equations, one time step at a time.
    let mut cs = Tensor::<Fx, 2>::zeros([b, H], &dev());
    let mut hs = Vec::new();
    for s in 0..t {
        let xt = x
            .clone()
            .slice([0..b, s..s + 1, 0..D_IN])
            .reshape([b, D_IN]);
        let all = cell.input.forward(xt);
        let ft = cumax(all.clone().narrow(1, 0, c));
        let it = cumax(all.clone().narrow(1, c, c)).neg().add_scalar(1.0);
        let g = |k: usize| all.clone().narrow(1, 2 * c + k * H, H);
        let (i, f, u, o) = (sigmoid(g(0)), sigmoid(g(1)), tanh(g(2)), sigmoid(g(3)));
        let mut f_hat = Vec::new();
        let mut i_hat = Vec::new();
        for e in 0..b {
            for n in 0..H {
                let k = n / CHUNK;
                let ftv = to_vec(ft.clone().slice([e..e + 1, k..k + 1]))[0];
                let itv = to_vec(it.clone().slice([e..e + 1, k..k + 1]))[0];
                let fv = to_vec(f.clone().slice([e..e + 1, n..n + 1]))[0];
                let iv = to_vec(i.clone().slice([e..e + 1, n..n + 1]))[0];
                let w = ftv * itv;
                f_hat.push(fv * w + (ftv - w));
                i_hat.push(iv * w + (itv - w));
            }
        }
        let f_hat = Tensor::<Fx, 2>::from_data(TensorData::new(f_hat, [b, H]), &dev());
        let i_hat = Tensor::<Fx, 2>::from_data(TensorData::new(i_hat, [b, H]), &dev());
        cs = f_hat.mul(cs).add(i_hat.mul(u));
        hs.push(o.mul(tanh(cs.clone())).unsqueeze_dim::<3>(1));
    }
    let reference = Tensor::cat(hs, 1);
    assert_close(
        &to_vec(out.outputs),
        &to_vec(reference),
        1e-5,
        "Faster FastTrees",
    );
}

#[test]
fn tree_lstm_matches_its_equations_and_starts_forget_biases_at_one() {
    let d = 3;
    let cell = BinaryTreeLstmConfig::new(d).init::<Fx>(&dev());
    let bias = to_vec(cell.children.bias.as_ref().unwrap().val());
    assert_eq!(&bias[..d], &[0.0; 3], "i bias");
    assert_eq!(&bias[d..3 * d], &[1.0; 6], "forget biases");
    assert_eq!(&bias[3 * d..], &[0.0; 6], "o, g biases");
    let l = LstmState::new(
        tensor::<Fx, 2>([2, d], 1.0, 1, &dev()),
        tensor::<Fx, 2>([2, d], 1.0, 2, &dev()),
    );
    let r = LstmState::new(
        tensor::<Fx, 2>([2, d], 1.0, 3, &dev()),
        tensor::<Fx, 2>([2, d], 1.0, 4, &dev()),
    );
    let out = cell.forward(l.clone(), r.clone(), None);
    // Gate order i, f_l, f_r, o, g.
    let z = cell
        .children
        .forward(Tensor::cat(vec![l.h.clone(), r.h.clone()], 1));
    let g = |k: usize| z.clone().narrow(1, k * d, d);
    let c = sigmoid(g(1))
        .mul(l.c)
        .add(sigmoid(g(2)).mul(r.c))
        .add(sigmoid(g(0)).mul(tanh(g(4))));
    let h = sigmoid(g(3)).mul(tanh(c.clone()));
    assert_close(&to_vec(out.c), &to_vec(c), 1e-6, "c");
    assert_close(&to_vec(out.h), &to_vec(h), 1e-6, "h");
}

#[test]
fn tree_lstm_external_input_changes_the_result() {
    let cell = BinaryTreeLstmConfig::new(4)
        .with_d_external(2)
        .init::<Fx>(&dev());
    let s = || {
        LstmState::new(
            Tensor::<Fx, 3>::ones([1, 2, 4], &dev()),
            Tensor::ones([1, 2, 4], &dev()),
        )
    };
    let without = to_vec(cell.forward(s(), s(), None).h);
    let with = to_vec(
        cell.forward(s(), s(), Some(tensor::<Fx, 3>([1, 2, 2], 1.0, 5, &dev())))
            .h,
    );
    assert!(without.iter().zip(&with).any(|(a, b)| (a - b).abs() > 1e-4));
}

fn mask(rows: &[&[bool]]) -> Tensor<Fx, 2, Bool> {
    let k = rows[0].len();
    let v: Vec<bool> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(TensorData::new(v, [rows.len(), k]), &dev())
}

#[test]
fn gumbel_noise_is_always_finite() {
    let mut sampler = GumbelSampler::seeded(3);
    let g = to_vec(sampler.sample::<Fx, 2>([200, 500], &dev()));
    assert!(g.iter().all(|v| v.is_finite()));
    // Gumbel(0,1) has mean γ ≈ 0.5772.
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    assert!((mean - 0.5772).abs() < 0.02, "mean {mean}");
    let mut backend = GumbelSampler::backend();
    let g = to_vec(backend.sample::<Fx, 2>([200, 500], &dev()));
    assert!(g.iter().all(|v| v.is_finite()));
}

#[test]
fn st_gumbel_never_selects_masked_entries_and_is_one_hot() {
    let logits = Tensor::<Fx, 2>::from_data(
        TensorData::new(vec![0.0f32, 50.0, 1.0, 100.0, 0.5, -3.0], [2, 3]),
        &dev(),
    );
    let m = mask(&[&[true, false, true], &[false, true, true]]);
    // Huge noise on the masked entries must not matter.
    let noise = Tensor::<Fx, 2>::from_data(
        TensorData::new(vec![0.0f32, 1e6, 0.0, 1e6, 0.0, 0.0], [2, 3]),
        &dev(),
    );
    let s = st_gumbel_softmax(logits.clone(), Some(m.clone()), 1.0, Some(noise));
    assert_eq!(
        s.index.to_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![2, 1]
    );
    assert_close(
        &to_vec(s.hard),
        &[0.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        1e-6,
        "hard",
    );
    let soft = to_vec(s.soft);
    assert_eq!(soft[1], 0.0);
    assert_eq!(soft[3], 0.0);
    assert!(soft.iter().all(|v| v.is_finite()));
    // Extreme logits and all-masked rows stay finite.
    let wild = Tensor::<Fx, 2>::from_data(
        TensorData::new(vec![1e30f32, -1e30, 0.0, 3.0, 3.0, 3.0], [2, 3]),
        &dev(),
    );
    let s = st_gumbel_softmax(
        wild,
        Some(mask(&[&[true, true, true], &[false, false, false]])),
        1.0,
        None,
    );
    assert!(to_vec(s.soft).iter().all(|v| v.is_finite()));
    assert!(to_vec(s.hard).iter().all(|v| v.is_finite()));
}

/// The hard selection's forward value is exactly Burn's `one_hot` of the index (the helper
/// compares with `arange(k)` on the device instead, so it reads nothing back), for every width,
/// one entry included, on both CPU backends (whose argmax indices have their own int types).
fn hard_is_the_one_hot_of_the_index<B: ArborBackend>(device: &B::Device) {
    for k in 1..=6 {
        let logits = Tensor::<B, 2>::from_data(
            TensorData::new(
                (0..7 * k)
                    .map(|i| ((i * 37) % 11) as f32)
                    .collect::<Vec<_>>(),
                [7, k],
            ),
            device,
        );
        for s in [
            argmax_select(logits.clone(), None),
            st_gumbel_softmax(logits.clone(), None, 0.5, None),
        ] {
            let expected = if k == 1 {
                vec![1.0f32; 7]
            } else {
                s.index
                    .clone()
                    .one_hot::<2>(k)
                    .float()
                    .into_data()
                    .to_vec::<f32>()
                    .unwrap()
            };
            let hard = s.hard.into_data().convert::<f32>().to_vec::<f32>().unwrap();
            assert_eq!(hard, expected, "k = {k}");
        }
    }
}

#[test]
fn the_hard_selection_is_the_one_hot_of_the_index() {
    hard_is_the_one_hot_of_the_index::<Fx>(&dev());
    hard_is_the_one_hot_of_the_index::<burn::backend::NdArray>(&Default::default());
}

#[test]
fn evaluation_is_plain_argmax_and_seeded_noise_is_reproducible() {
    let logits = tensor::<Fx, 2>([6, 5], 2.0, 71, &dev());
    let a = argmax_select(logits.clone(), None);
    let b = argmax_select(logits.clone(), None);
    assert_eq!(a.index.to_data(), b.index.to_data());
    let v = to_vec(logits.clone());
    let idx = a.index.to_data().convert::<i64>().to_vec::<i64>().unwrap();
    for (r, &i) in idx.iter().enumerate() {
        let row = &v[r * 5..r * 5 + 5];
        let best = (0..5).fold(0, |m, k| if row[k] > row[m] { k } else { m });
        assert_eq!(i as usize, best);
    }
    let draw = |seed| {
        let mut s = GumbelSampler::seeded(seed);
        let g = s.sample::<Fx, 2>([6, 5], &dev());
        st_gumbel_softmax(logits.clone(), None, 1.0, Some(g))
            .index
            .to_data()
    };
    assert_eq!(draw(9), draw(9));
    let differs = (0..10).any(|s| draw(s) != draw(100 + s));
    assert!(
        differs,
        "different seeds should select differently at least once"
    );
}

#[test]
fn temperature_sharpens_the_soft_distribution() {
    let logits = tensor::<Fx, 2>([1, 4], 1.0, 81, &dev());
    let hot = to_vec(st_gumbel_softmax(logits.clone(), None, 5.0, None).soft);
    let cold = to_vec(st_gumbel_softmax(logits, None, 0.2, None).soft);
    let max = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max);
    assert!(max(&cold) > max(&hot));
}

#[test]
fn stack_runs_layers_and_reports_distances_per_layer() {
    for &kind in CellKind::VARIANTS {
        let stack = RecurrentStackConfig::new(kind, D_IN, H)
            .with_n_layers(2)
            .with_chunk_size(CHUNK)
            .with_dropout(0.5)
            .init::<Fx>(&dev());
        let x = tensor::<Fx, 3>([2, 4, D_IN], 1.0, 91, &dev());
        let a = stack.forward(x.clone(), Some(&[4, 2]), None);
        let b = stack.forward(x, Some(&[4, 2]), None);
        // Without autodiff dropout is inactive: evaluation is deterministic.
        assert_close(
            &to_vec(a.outputs.clone()),
            &to_vec(b.outputs),
            0.0,
            "deterministic",
        );
        assert_eq!(a.outputs.dims(), [2, 4, H]);
        assert_eq!(a.last.len(), 2);
        assert_eq!(
            a.distances.len(),
            if kind.has_master_gates() { 2 } else { 0 }
        );
        assert_eq!(kind.to_string().parse::<CellKind>().unwrap(), kind);
    }
    assert!("gru".parse::<CellKind>().is_err());
}

#[test]
fn a_single_candidate_is_always_selected() {
    let logits = tensor::<Fx, 2>([3, 1], 2.0, 5, &dev());
    for s in [
        st_gumbel_softmax(
            logits.clone(),
            None,
            1.0,
            Some(tensor::<Fx, 2>([3, 1], 1.0, 6, &dev())),
        ),
        argmax_select(logits, None),
    ] {
        assert_close(&to_vec(s.hard), &[1.0; 3], 1e-6, "hard");
        assert_close(&to_vec(s.soft), &[1.0; 3], 1e-6, "soft");
        assert_eq!(
            s.index.to_data().convert::<i64>().to_vec::<i64>().unwrap(),
            vec![0; 3]
        );
    }
}
