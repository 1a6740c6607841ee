//! Tests of the FastTrees gate, the Transformer layer and the encoder stack.

use arbor_blocks::{
    padding_mask, self_attention, FastTreesGateConfig, GateInput, GateProjection, PositionKind,
    TransformerEncoderConfig, TransformerLayerConfig,
};
use arbor_cells::ArborBackend;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::module::Param;
use burn::nn::activation::ActivationConfig;
use burn::nn::transformer::{
    TransformerEncoderConfig as BurnEncoderConfig, TransformerEncoderInput,
};
use burn::prelude::*;
use burn::tensor::Distribution;

type F = Flex;
type D64 = NdArray<f64>;

fn values<B: ArborBackend, const N: usize>(t: Tensor<B, N>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

fn max_abs_diff<B: ArborBackend, const N: usize>(a: Tensor<B, N>, b: Tensor<B, N>) -> f64 {
    values(a)
        .iter()
        .zip(values(b))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn randn<B: ArborBackend, const N: usize>(
    shape: [usize; N],
    scale: f64,
    device: &B::Device,
) -> Tensor<B, N> {
    Tensor::random(shape, Distribution::Normal(0.0, scale), device)
}

#[test]
fn the_gate_stays_in_the_unit_interval_and_between_its_bounds() {
    let device = Default::default();
    for (chunk_size, input) in [
        (1, GateInput::Linear),
        (4, GateInput::Linear),
        (2, GateInput::CausalConv { kernel_size: 3 }),
    ] {
        let gate = FastTreesGateConfig::new(8)
            .with_chunk_size(chunk_size)
            .with_input(input)
            .init::<F>(&device);
        // Large inputs saturate softmax and σ: the bounds must hold at the extremes too.
        let x = randn::<F, 3>([3, 7, 8], 20.0, &device);
        let out = gate.forward(x.clone());
        let f = values(out.gate.clone());
        let lo = f.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = f.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        assert!(lo >= 0.0 && hi <= 1.0 + 1e-6, "F in [{lo}, {hi}]");
        assert!(hi - lo > 0.1, "the gate is not constant: [{lo}, {hi}]");
        // A non-decreasing and B non-increasing over chunks; A − A⊙B ≤ F ≤ A per neuron.
        let c = 8 / chunk_size;
        let a = values(out.master_forget.clone());
        let b = values(out.master_input.clone());
        for row in 0..3 * 7 {
            for k in 1..c {
                assert!(a[row * c + k] >= a[row * c + k - 1] - 1e-6);
                assert!(b[row * c + k] <= b[row * c + k - 1] + 1e-6);
            }
            assert!((a[row * c + c - 1] - 1.0).abs() < 1e-5, "cumax ends at 1");
            for n in 0..8 {
                let (ak, bk) = (a[row * c + n / chunk_size], b[row * c + n / chunk_size]);
                let fv = f[row * 8 + n];
                assert!(fv <= ak + 1e-6 && fv >= ak - ak * bk - 1e-6);
            }
        }
        assert_eq!(max_abs_diff(out.output, out.gate * x), 0.0);
        assert_eq!(out.distances.dims(), [3, 7]);
    }
}

fn softmax(v: &[f64]) -> Vec<f64> {
    let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

fn cumsum(v: &[f64]) -> Vec<f64> {
    v.iter()
        .scan(0.0, |acc, x| {
            *acc += x;
            Some(*acc)
        })
        .collect()
}

#[test]
fn the_gate_equations_match_a_hand_computation() {
    let device = Default::default();
    let (d, chunk, c) = (4, 2, 2);
    let width = 2 * c + d;
    let mut gate = FastTreesGateConfig::new(d)
        .with_chunk_size(chunk)
        .init::<D64>(&device);
    let w: Vec<f64> = (0..d * width)
        .map(|k| ((k * 7 % 11) as f64 - 5.0) / 4.0)
        .collect();
    let bias: Vec<f64> = (0..width).map(|k| (k as f64 - 3.0) / 5.0).collect();
    let GateProjection::Linear(linear) = &mut gate.projection else {
        panic!("a linear gate")
    };
    linear.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(w.clone(), [d, width]),
        &device,
    ));
    linear.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(bias.clone(), [width]),
        &device,
    )));
    let x: Vec<f64> = vec![0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 0.0, -2.0];
    let out = gate.forward(Tensor::<D64, 3>::from_data(
        TensorData::new(x.clone(), [1, 2, d]),
        &device,
    ));
    let (y, f, dist) = (values(out.output), values(out.gate), values(out.distances));
    for t in 0..2 {
        let xt = &x[t * d..(t + 1) * d];
        let l: Vec<f64> = (0..width)
            .map(|j| bias[j] + (0..d).map(|i| xt[i] * w[i * width + j]).sum::<f64>())
            .collect();
        let a = cumsum(&softmax(&l[0..c]));
        let b: Vec<f64> = cumsum(&softmax(&l[c..2 * c]))
            .iter()
            .map(|v| 1.0 - v)
            .collect();
        for n in 0..d {
            let k = n / chunk;
            let h = 1.0 / (1.0 + (-l[2 * c + n]).exp());
            let omega = a[k] * b[k];
            let expect = h * omega + (a[k] - omega);
            assert!(
                (f[t * d + n] - expect).abs() < 1e-7,
                "F[{t},{n}] {} vs {expect}; a {a:?} b {b:?}",
                f[t * d + n]
            );
            assert!((y[t * d + n] - expect * xt[n]).abs() < 1e-7, "Y[{t},{n}]");
        }
        let expect_d = 1.0 - a.iter().sum::<f64>() / c as f64;
        assert!((dist[t] - expect_d).abs() < 1e-9, "distance {t}");
    }
}

#[test]
fn the_causal_conv_gate_never_looks_ahead_nor_across_examples() {
    let device = Default::default();
    let gate = FastTreesGateConfig::new(6)
        .with_chunk_size(2)
        .with_input(GateInput::CausalConv { kernel_size: 3 })
        .init::<F>(&device);
    let x = randn::<F, 3>([2, 6, 6], 1.0, &device);
    let changed = x
        .clone()
        .slice_assign([0..1, 3..4, 0..6], randn::<F, 3>([1, 1, 6], 1.0, &device));
    let (a, b) = (gate.forward(x).gate, gate.forward(changed).gate);
    let diff = |t: std::ops::Range<usize>, e: usize| {
        max_abs_diff(
            a.clone().slice([e..e + 1, t.clone(), 0..6]),
            b.clone().slice([e..e + 1, t, 0..6]),
        )
    };
    assert_eq!(diff(0..3, 0), 0.0, "positions before the change");
    assert!(diff(3..4, 0) > 1e-6, "the changed position itself");
    assert!(diff(5..6, 0) > 1e-6, "t+2 is inside the kernel of width 3");
    assert_eq!(diff(0..6, 1), 0.0, "the other example");
    // A single example is not a degenerate case (the released code convolved over the batch).
    let one = randn::<F, 3>([1, 4, 6], 1.0, &device);
    let g = values(gate.forward(one).gate);
    assert!(g.iter().any(|v| (v - g[0]).abs() > 1e-4));
}

/// A plain layer (gate off) against Burn's own `TransformerEncoderLayer` with the same weights.
#[test]
fn without_the_gate_a_layer_is_burns_transformer_encoder_layer() {
    let device = Default::default();
    let (d, heads, d_ff) = (8, 2, 16);
    for norm_first in [false, true] {
        let mut mine = TransformerLayerConfig::new(d, heads, d_ff)
            .with_dropout(0.0)
            .with_norm_first(norm_first)
            .init::<D64>(&device);
        assert!(mine.gate.is_none());
        for norm in [&mut mine.norm_attn, &mut mine.norm_ffn] {
            norm.gamma = Param::from_tensor(randn([d], 1.0, &device));
            norm.beta = Some(Param::from_tensor(randn([d], 1.0, &device)));
        }
        let mut reference = BurnEncoderConfig::new(d, d_ff, heads, 1)
            .with_dropout(0.0)
            .with_norm_first(norm_first)
            .with_activation(ActivationConfig::Relu)
            .init::<D64>(&device);
        let x = randn::<D64, 3>([3, 5, d], 1.0, &device);
        let lengths = [5, 3, 1];
        let mask = padding_mask::<D64>(&lengths, 5, &device);
        let run_ref = |r: &burn::nn::transformer::TransformerEncoder<D64>| {
            r.forward(TransformerEncoderInput::new(x.clone()).mask_pad(mask.clone()))
        };
        let ours = mine.forward(x.clone(), Some(mask.clone())).output;
        assert!(
            max_abs_diff(ours.clone(), run_ref(&reference)) > 1e-3,
            "different weights must give different outputs"
        );
        let layer = &mut reference.layers[0];
        layer.mha = mine.mha.clone();
        layer.pwff = mine.pwff.clone();
        // Burn: post-norm norm_1 after attention, norm_2 after the FFN; pre-norm norm_2 before
        // attention and norm_1 before the FFN.
        let (attn, ffn) = (mine.norm_attn.clone(), mine.norm_ffn.clone());
        if norm_first {
            (layer.norm_2, layer.norm_1) = (attn, ffn);
        } else {
            (layer.norm_1, layer.norm_2) = (attn, ffn);
        }
        let diff = max_abs_diff(ours, run_ref(&reference));
        assert!(diff < 1e-12, "norm_first={norm_first}: {diff}");
    }
}

/// `self_attention` (rank-2 projections, strided heads) against Burn's `MultiHeadAttention` with
/// the same weights and a padding mask, in values and in every gradient, on flex (whose CPU
/// products read the strided heads in place) and in f64.
#[test]
fn self_attention_is_burns_multi_head_attention_in_values_and_gradients() {
    use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
    fn flat<B: Backend, const N: usize>(t: Tensor<B, N>) -> Vec<f64> {
        t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
    }
    fn check<B: burn::tensor::backend::AutodiffBackend + ArborBackend>(tol: f64) {
        let device = Default::default();
        let (batch, time, d, heads) = (3, 5, 8, 2);
        let mha = MultiHeadAttentionConfig::new(d, heads)
            .with_dropout(0.0)
            .init::<B>(&device);
        let x = randn::<B, 3>([batch, time, d], 1.0, &device);
        let w = randn::<B, 3>([batch, time, d], 1.0, &device);
        let mask = padding_mask::<B>(&[5, 3, 1], time, &device);
        let grads = |ours: bool| {
            let x = x.clone().require_grad();
            let y = if ours {
                self_attention(&mha, x.clone(), Some(mask.clone()))
            } else {
                mha.forward(MhaInput::self_attn(x.clone()).mask_pad(mask.clone()))
                    .context
            };
            let g = y.clone().mul(w.clone()).sum().backward();
            let weight = |l: &burn::nn::Linear<B>| l.weight.grad(&g).unwrap();
            let bias = |l: &burn::nn::Linear<B>| l.bias.as_ref().unwrap().grad(&g).unwrap();
            let mut out = vec![flat(y.inner()), flat(x.grad(&g).unwrap())];
            for l in [&mha.query, &mha.key, &mha.value, &mha.output] {
                out.push(flat(weight(l)));
                out.push(flat(bias(l)));
            }
            out
        };
        let (ours, burns) = (grads(true), grads(false));
        for (k, (a, b)) in ours.iter().zip(&burns).enumerate() {
            let diff = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            assert!(diff < tol, "output {k}: {diff}");
        }
    }
    check::<Autodiff<F>>(1e-5);
    check::<Autodiff<D64>>(1e-12);
}

#[test]
fn the_gate_switch_changes_the_layer_only_through_the_attention_branch() {
    // Same attention/FFN weights, gate on: the output differs, and a layer whose gate is
    // removed again is the plain layer.
    let device = Default::default();
    let gated = TransformerLayerConfig::new(8, 2, 16)
        .with_dropout(0.0)
        .with_fasttrees(true)
        .init::<F>(&device);
    let mut plain = gated.clone();
    plain.gate = None;
    let x = randn::<F, 3>([2, 4, 8], 1.0, &device);
    let g = gated.forward(x.clone(), None);
    let p = plain.forward(x, None);
    assert!(g.gate.is_some() && g.distances.is_some());
    assert!(p.gate.is_none() && p.distances.is_none());
    assert!(max_abs_diff(g.output, p.output) > 1e-4);
}

fn stack(
    fasttrees: bool,
    gate_input: GateInput,
    positions: PositionKind,
    norm_first: bool,
) -> TransformerEncoderConfig {
    TransformerEncoderConfig::new(6, 8)
        .with_n_heads(2)
        .with_d_ff(16)
        .with_n_layers(2)
        .with_dropout(0.0)
        .with_fasttrees(fasttrees)
        .with_chunk_size(2)
        .with_gate_input(gate_input)
        .with_positions(positions)
        .with_norm_first(norm_first)
        .with_max_len(4)
}

#[test]
fn real_positions_do_not_depend_on_the_padding() {
    let device = Default::default();
    let conv = GateInput::CausalConv { kernel_size: 2 };
    for config in [
        stack(false, GateInput::Linear, PositionKind::Sinusoidal, false),
        stack(true, GateInput::Linear, PositionKind::Sinusoidal, false),
        stack(true, conv, PositionKind::Learned, false),
        stack(true, GateInput::Linear, PositionKind::None, true),
    ] {
        let encoder = config.init::<F>(&device);
        let lengths = [6, 2, 4];
        // Huge values at padding positions: any leak would show.
        let mut x = randn::<F, 3>([3, 6, 6], 1.0, &device);
        for (b, &len) in lengths.iter().enumerate() {
            if len < 6 {
                x = x.slice_assign(
                    [b..b + 1, len..6, 0..6],
                    Tensor::full([1, 6 - len, 6], 1e4, &device),
                );
            }
        }
        let out = encoder.forward(x.clone(), &lengths);
        assert_eq!(out.outputs.dims(), [3, 6, 8]);
        assert_eq!(out.distances.len(), if config.fasttrees { 2 } else { 0 });
        for (b, &len) in lengths.iter().enumerate() {
            let alone = encoder.forward(x.clone().slice([b..b + 1, 0..len, 0..6]), &[len]);
            let batched = out.outputs.clone().slice([b..b + 1, 0..len, 0..8]);
            let diff = max_abs_diff(batched, alone.outputs);
            assert!(diff < 1e-4, "{config:?}: example {b} differs by {diff}");
            for (layer, d) in out.distances.iter().enumerate() {
                let diff = max_abs_diff(
                    d.clone().slice([b..b + 1, 0..len]),
                    alone.distances[layer].clone(),
                );
                assert!(
                    diff < 1e-4,
                    "distances of layer {layer}, example {b}: {diff}"
                );
            }
            if len < 6 {
                let pad = values(out.outputs.clone().slice([b..b + 1, len..6, 0..8]));
                assert!(pad.iter().all(|v| *v == 0.0), "padding outputs are zeros");
            }
        }
    }
}

#[test]
fn gradients_reach_every_part_and_never_padding_inputs() {
    type A = Autodiff<F>;
    let device = Default::default();
    for gate_input in [GateInput::Linear, GateInput::CausalConv { kernel_size: 3 }] {
        let encoder = stack(true, gate_input, PositionKind::Learned, false).init::<A>(&device);
        let x = randn::<A, 3>([2, 5, 6], 1.0, &device).require_grad();
        let out = encoder.forward(x.clone(), &[5, 3]);
        let weights = randn::<A, 3>([2, 5, 8], 1.0, &device);
        let grads = (out.outputs * weights).sum().backward();
        let gx = values(x.grad(&grads).expect("input gradient"));
        let real: f64 = gx[..5 * 6]
            .iter()
            .chain(&gx[5 * 6..8 * 6])
            .map(|v| v.abs())
            .sum();
        assert!(real > 0.0, "real inputs get gradients");
        assert!(
            gx[8 * 6..].iter().all(|v| *v == 0.0),
            "padding inputs get none"
        );
        let norm = |t: Option<Tensor<F, 2>>| {
            values(t.expect("a gradient"))
                .iter()
                .map(|v| v.abs())
                .sum::<f64>()
        };
        for layer in &encoder.layers {
            let gate = layer.gate.as_ref().expect("gated layers");
            let g = match &gate.projection {
                GateProjection::Linear(l) => norm(l.weight.grad(&grads)),
                GateProjection::Conv(c) => values(c.weight.grad(&grads).expect("conv gradient"))
                    .iter()
                    .map(|v| v.abs())
                    .sum(),
            };
            assert!(g > 0.0, "gate weights");
            assert!(norm(layer.mha.query.weight.grad(&grads)) > 0.0, "attention");
            assert!(
                norm(layer.pwff.linear_inner.weight.grad(&grads)) > 0.0,
                "FFN"
            );
        }
        assert!(
            norm(encoder.input.as_ref().unwrap().weight.grad(&grads)) > 0.0,
            "input projection"
        );
        let positions = encoder.positions.learned.as_ref().unwrap();
        assert!(
            norm(positions.weight.grad(&grads)) > 0.0,
            "learned positions"
        );
    }
}

#[test]
fn learned_positions_past_max_len_reuse_the_last_one_and_sinusoids_are_standard() {
    let device = Default::default();
    let encoder = stack(false, GateInput::Linear, PositionKind::Learned, false).init::<F>(&device);
    let out = encoder.forward(randn([1, 7, 6], 1.0, &device), &[7]);
    assert_eq!(out.outputs.dims(), [1, 7, 8]);
    let s = values(arbor_blocks::sinusoids::<D64>(3, 4, &Default::default()));
    let expect = [
        0.0,
        1.0,
        0.0,
        1.0, // t = 0
        1f64.sin(),
        1f64.cos(),
        0.01f64.sin(),
        0.01f64.cos(), // t = 1, 10000^(2/4) = 100
        2f64.sin(),
        2f64.cos(),
        0.02f64.sin(),
        0.02f64.cos(),
    ];
    for (a, b) in s.iter().zip(expect) {
        assert!((a - b).abs() < 1e-6, "{s:?}");
    }
}

#[test]
fn the_config_serialises() {
    let config = stack(
        true,
        GateInput::CausalConv { kernel_size: 3 },
        PositionKind::Learned,
        false,
    );
    let json = serde_json::to_string(&config).unwrap();
    assert!(
        json.contains("causal-conv") && json.contains("learned"),
        "{json}"
    );
    let back: TransformerEncoderConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back.gate_input, config.gate_input);
    assert_eq!(back.positions, PositionKind::Learned);
}
