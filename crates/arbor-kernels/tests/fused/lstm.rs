//! `lstm_sequence`: values against the plain-op reference and the layer written out on the
//! host (frozen rows included), gradients of the input, every parameter and the initial state,
//! and finite differences in f64.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// The input width used with hidden width `h` (another width than `h`, to catch a swapped
/// dimension).
fn d_in(h: usize) -> usize {
    h + 3
}

/// `lstm_sequence` inputs, each as a rank-3 tensor: `x` a strided view (`d` of `d + 3`
/// columns, as a narrowed projection would be), `w`, `b`, `u` scaled as weights, `h0`, `c0`.
fn lstm_inputs<B: Backend>(b: usize, t: usize, h: usize) -> [Tensor<B, 3>; 6] {
    let d = d_in(h);
    let x = tensor::<B, 3>([b, t, d + 3], 2.0, 51).narrow(2, 2, d);
    let w = tensor::<B, 2>([d, 4 * h], 1.0 / (d as f64).sqrt(), 56).unsqueeze_dim::<3>(0);
    let bias = tensor::<B, 2>([1, 4 * h], 0.5, 57).unsqueeze_dim::<3>(0);
    let u = tensor::<B, 2>([h, 4 * h], 1.0 / (h as f64).sqrt(), 52).unsqueeze_dim::<3>(0);
    let h0 = tensor::<B, 2>([b, h], 1.0, 53).unsqueeze_dim::<3>(0);
    let c0 = tensor::<B, 2>([b, h], 1.0, 54).unsqueeze_dim::<3>(0);
    [x, w, bias, u, h0, c0]
}

/// The fused op, or the plain-op reference forward (which autodiff differentiates op by op),
/// as the op's output: `[b, t + 1, h]`, every step's `h` then the final `c`
/// (`lstm_sequence`), or with `every_c` `[2b, t, h]`, every step's `h`, then every step's `c`
/// (`lstm_sequence_states`).
fn lstm<B: ArborBackend>(
    xs: [Tensor<B, 3>; 6],
    lengths: &[usize],
    fused: bool,
    every_c: bool,
) -> Tensor<B, 3> {
    let [x, w, bias, u, h0, c0] = xs;
    let (h, b, d) = (u.dims()[1], h0.dims()[1], x.dims()[2]);
    let (w, bias, u, h0, c0) = (
        w.reshape([d, 4 * h]),
        bias.reshape([4 * h]),
        u.reshape([h, 4 * h]),
        h0.reshape([b, h]),
        c0.reshape([b, h]),
    );
    if fused && every_c {
        let (hs, cs) = arbor_kernels::lstm_sequence_states(x, (w, bias, u), h0, c0, lengths);
        Tensor::cat(vec![hs, cs], 0)
    } else if fused {
        let (hs, c_last) = arbor_kernels::lstm_sequence(x, (w, bias, u), h0, c0, lengths);
        Tensor::cat(vec![hs, c_last.unsqueeze_dim(1)], 1)
    } else {
        let p2 = |t: Tensor<B, 2>| t.into_primitive().tensor();
        let (out, _) = reference::lstm_sequence::<B>(
            x.into_primitive().tensor(),
            [p2(w), bias.into_primitive().tensor(), p2(u), p2(h0), p2(c0)],
            lengths,
            every_c,
            false,
        );
        Tensor::from_primitive(TensorPrimitive::Float(out))
    }
}

const LSTM_CASES: [(usize, usize, usize, &[usize]); 5] = [
    (3, 5, 4, &[]),
    (4, 6, 8, &[6, 1, 0, 4]),
    (2, 1, 16, &[]),
    (1, 7, 3, &[7]),
    (
        24,
        9,
        32,
        &[
            9, 9, 3, 8, 1, 9, 2, 9, 9, 5, 9, 9, 9, 7, 9, 9, 9, 9, 4, 9, 9, 9, 9, 6,
        ],
    ),
];

#[test]
fn lstm_sequence_forward_matches_reference_and_the_recurrence() {
    fn check<B: ArborBackend>(every_c: bool) {
        for (b, t, h, lengths) in LSTM_CASES {
            let xs = lstm_inputs::<B>(b, t, h);
            let fused = to_vec(lstm(xs.clone(), lengths, true, every_c));
            let want = to_vec(lstm(xs.clone(), lengths, false, every_c));
            assert_close(
                &fused,
                &want,
                2e-5,
                &format!("lstm [{b}, {t}, {h}] {lengths:?} every_c {every_c}"),
            );
            // Where the output keeps `h` and `c` of example `r` at step `s` (`c` with
            // `every_c`; the final `c` otherwise).
            let rows = if every_c { t } else { t + 1 };
            let h_at = |r: usize, s: usize| (r * rows + s) * h;
            // The recurrence written out on the host, frozen rows included.
            let d = d_in(h);
            let [x, w, bias, u, h0, c0] = xs.map(to_vec);
            let (mut hs, mut cs) = (h0.clone(), c0.clone());
            let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
            for s in 0..t {
                for r in 0..b {
                    let live = lengths.get(r).is_none_or(|&len| s < len);
                    if live {
                        let pre: Vec<f64> = (0..4 * h)
                            .map(|k| {
                                bias[k]
                                    + (0..d)
                                        .map(|j| x[(r * t + s) * d + j] * w[j * 4 * h + k])
                                        .sum::<f64>()
                                    + (0..h)
                                        .map(|j| hs[r * h + j] * u[j * 4 * h + k])
                                        .sum::<f64>()
                            })
                            .collect();
                        for j in 0..h {
                            let (i, f, g, o) = (
                                sig(pre[j]),
                                sig(pre[h + j]),
                                pre[2 * h + j].tanh(),
                                sig(pre[3 * h + j]),
                            );
                            cs[r * h + j] = f * cs[r * h + j] + i * g;
                            hs[r * h + j] = o * cs[r * h + j].tanh();
                        }
                    }
                    for j in 0..h {
                        let at = h_at(r, s);
                        assert!((fused[at + j] - hs[r * h + j]).abs() < 1e-4, "h step {s}");
                        if every_c {
                            let c = fused[h_at(b + r, s) + j];
                            assert!((c - cs[r * h + j]).abs() < 1e-4, "c step {s}");
                        }
                    }
                }
            }
            if !every_c {
                // The last row: each example's final `c`.
                for r in 0..b {
                    for j in 0..h {
                        let at = h_at(r, t);
                        assert!((fused[at + j] - cs[r * h + j]).abs() < 1e-4, "final c");
                    }
                }
            }
        }
    }
    for every_c in [false, true] {
        check::<Flex>(every_c);
        check::<NdArray>(every_c);
    }
}

/// Weights for the output's entries (a loss that reaches every one of them differently).
fn out_weights<B: Backend>(b: usize, t: usize, h: usize, every_c: bool) -> Tensor<B, 3> {
    if every_c {
        tensor::<B, 3>([2 * b, t, h], 1.0, 55)
    } else {
        tensor::<B, 3>([b, t + 1, h], 1.0, 55)
    }
}

fn lstm_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    h: usize,
    lengths: &[usize],
    every_c: bool,
) -> Vec<Vec<f64>> {
    let xs = lstm_inputs::<B>(b, t, h).map(|x| x.require_grad());
    let w = out_weights::<B>(b, t, h, every_c);
    let g = lstm(xs.clone(), lengths, fused, every_c)
        .mul(w)
        .sum()
        .backward();
    xs.iter().map(|x| to_vec(x.grad(&g).unwrap())).collect()
}

#[test]
fn lstm_sequence_gradients_match_reference() {
    for (b, t, h, lengths) in LSTM_CASES {
        for every_c in [false, true] {
            assert_fused_agrees!(
                lstm_grads(b, t, h, lengths, every_c),
                ["d x", "d w", "d b", "d u", "d h0", "d c0"],
                5e-5,
                format!("[{b}, {t}, {h}] {lengths:?} every_c {every_c}")
            );
        }
    }
}

#[test]
fn lstm_sequence_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let cases = [
        (2, 4, 3, &[][..], false),
        (3, 4, 2, &[4, 2, 0][..], false),
        (3, 4, 2, &[4, 2, 0][..], true),
    ];
    for (b, t, h, lengths, every_c) in cases {
        let ad = lstm_grads::<Autodiff<Inner>>(true, b, t, h, lengths, every_c);
        let inputs = lstm_inputs::<Inner>(b, t, h);
        let w = out_weights::<Inner>(b, t, h, every_c);
        let f = |xs: [Tensor<Inner, 3>; 6]| -> f64 {
            lstm(xs, lengths, true, every_c)
                .mul(w.clone())
                .sum()
                .into_scalar()
        };
        let fd = central_differences(&inputs, 1e-5, f);
        for i in 0..6 {
            assert_close(
                &ad[i],
                &fd[i],
                1e-6,
                &format!("fd lstm input {i} {lengths:?}"),
            );
        }
    }
}
