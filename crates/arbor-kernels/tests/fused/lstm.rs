//! The sequence ops (`lstm_sequence`, `on_lstm_sequence`, `fast_trees_sequence`,
//! `conv_fast_trees_sequence`): values
//! against the plain-op reference and the layer written out on the host (frozen rows and the
//! distances included), gradients of the input, every parameter and the initial state, and
//! finite differences in f64.

use arbor_kernels::{reference, ArborBackend, SequenceCell};
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

/// The cells the sequence op runs: chunks of 2 units for an even `h`, of 1 otherwise.
fn cells(h: usize) -> [SequenceCell; 4] {
    let chunks = if h.is_multiple_of(2) { h / 2 } else { h };
    [
        SequenceCell::Lstm,
        SequenceCell::OnLstm { chunks },
        SequenceCell::FastTrees { chunks },
        SequenceCell::ConvFastTrees { chunks },
    ]
}

/// Sequence-op inputs for `cell`, each as a rank-3 tensor: `x` a strided view (`d` of `d + 3`
/// columns, as a narrowed projection would be; its first `cell.given()` columns are the given
/// pre-activations), `w`, `b`, `u` scaled as weights, `h0`, `c0`.
fn lstm_inputs<B: Backend>(b: usize, t: usize, h: usize, cell: SequenceCell) -> [Tensor<B, 3>; 6] {
    let d = cell.given() + d_in(h);
    let (p, uw) = (cell.w_width(h), cell.u_width(h));
    let x = tensor::<B, 3>([b, t, d + 3], 2.0, 51).narrow(2, 2, d);
    let w = tensor::<B, 2>([d_in(h), p], 1.0 / (d as f64).sqrt(), 56).unsqueeze_dim::<3>(0);
    let bias = tensor::<B, 2>([1, p], 0.5, 57).unsqueeze_dim::<3>(0);
    let u = tensor::<B, 2>([h, uw], 1.0 / (h as f64).sqrt(), 52).unsqueeze_dim::<3>(0);
    let h0 = tensor::<B, 2>([b, h], 1.0, 53).unsqueeze_dim::<3>(0);
    let c0 = tensor::<B, 2>([b, h], 1.0, 54).unsqueeze_dim::<3>(0);
    [x, w, bias, u, h0, c0]
}

/// The fused op, or the plain-op reference forward (which autodiff differentiates op by op),
/// as the op's output: `[rows, h]`, every step's `h` (`b·t` rows, example by example), the
/// final `c` (`b` rows), then for the ordered cells the distances in `r` rows per example
/// (`SequenceCell::distance_rows`; `lstm_sequence`, `on_lstm_sequence`,
/// `fast_trees_sequence`, `conv_fast_trees_sequence`), or with `every_c` (LSTM only) every step's `h`, then every step's
/// `c` (`lstm_sequence_states`).
fn lstm<B: ArborBackend>(
    xs: [Tensor<B, 3>; 6],
    lengths: &[usize],
    cell: SequenceCell,
    fused: bool,
    every_c: bool,
) -> Tensor<B, 2> {
    let [x, w, bias, u, h0, c0] = xs;
    let (b, h, d) = (h0.dims()[1], h0.dims()[2], x.dims()[2] - cell.given());
    let (p, uw) = (cell.w_width(h), cell.u_width(h));
    let (w, bias, u, h0, c0) = (
        w.reshape([d, p]),
        bias.reshape([p]),
        u.reshape([h, uw]),
        h0.reshape([b, h]),
        c0.reshape([b, h]),
    );
    if !fused {
        let p2 = |t: Tensor<B, 2>| t.into_primitive().tensor();
        // The given pre-activations are `x`'s first columns.
        let g = cell.given();
        let given = (g > 0).then(|| x.clone().narrow(2, 0, g).into_primitive().tensor());
        let (out, _) = reference::lstm_sequence::<B>(
            x.narrow(2, g, d).into_primitive().tensor(),
            given,
            [p2(w), bias.into_primitive().tensor(), p2(u), p2(h0), p2(c0)],
            lengths,
            cell,
            every_c,
            false,
        );
        return Tensor::from_primitive(TensorPrimitive::Float(out));
    }
    let params = (w, bias, u);
    let t = x.dims()[1];
    let r = cell.distance_rows(t, h);
    let flat = |x: Tensor<B, 3>| x.reshape([b * t, h]);
    // The op's layout: the distances in `r` rows of `h` after the final `c`.
    let ordered = |(hs, c_last, dist): (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>)| {
        let pad = r * h - t;
        let dist = if pad > 0 {
            // Zeros in the distances' own float type.
            let z = dist.clone().narrow(1, 0, 1).zeros_like().expand([b, pad]);
            Tensor::cat(vec![dist, z], 1)
        } else {
            dist
        };
        Tensor::cat(vec![flat(hs), c_last, dist.reshape([b * r, h])], 0)
    };
    match cell {
        SequenceCell::Lstm if every_c => {
            let (hs, cs) = arbor_kernels::lstm_sequence_states(x, params, h0, c0, lengths);
            Tensor::cat(vec![flat(hs), flat(cs)], 0)
        }
        SequenceCell::Lstm => {
            let (hs, c_last) = arbor_kernels::lstm_sequence(x, params, h0, c0, lengths);
            Tensor::cat(vec![flat(hs), c_last], 0)
        }
        SequenceCell::OnLstm { chunks } => ordered(arbor_kernels::on_lstm_sequence(
            x, params, h0, c0, lengths, chunks,
        )),
        SequenceCell::FastTrees { chunks } => ordered(arbor_kernels::fast_trees_sequence(
            x, params, h0, c0, lengths, chunks,
        )),
        SequenceCell::ConvFastTrees { chunks } => {
            let master = x.clone().narrow(2, 0, 2 * chunks);
            ordered(arbor_kernels::conv_fast_trees_sequence(
                master,
                x.narrow(2, 2 * chunks, d),
                params,
                h0,
                c0,
                lengths,
                chunks,
            ))
        }
    }
}

/// The output layouts each cell has: `every_c` for the LSTM only.
fn layouts(cell: SequenceCell) -> &'static [bool] {
    match cell {
        SequenceCell::Lstm => &[false, true],
        SequenceCell::OnLstm { .. }
        | SequenceCell::FastTrees { .. }
        | SequenceCell::ConvFastTrees { .. } => &[false],
    }
}

/// One step of `cell` for one example written out in f64 on the host: updates `hs`, `cs`
/// (`h` wide) from `pre` and returns the distance (0 for the LSTM).
fn host_step(cell: SequenceCell, pre: &[f64], hs: &mut [f64], cs: &mut [f64]) -> f64 {
    let h = hs.len();
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let nc = cell.chunks();
    let softmax_cumsum = |z: &[f64]| -> Vec<f64> {
        let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter()
            .scan(0.0, |acc, v| {
                *acc += v / sum;
                Some(*acc)
            })
            .collect()
    };
    let (ft, it) = if nc > 0 {
        let ft = softmax_cumsum(&pre[..nc]);
        let it: Vec<f64> = softmax_cumsum(&pre[nc..2 * nc])
            .iter()
            .map(|v| 1.0 - v)
            .collect();
        (ft, it)
    } else {
        (vec![], vec![])
    };
    let g0 = 2 * nc;
    for j in 0..h {
        let (i, f, g, o) = (
            sig(pre[g0 + j]),
            sig(pre[g0 + h + j]),
            pre[g0 + 2 * h + j].tanh(),
            sig(pre[g0 + 3 * h + j]),
        );
        let (f_hat, i_hat) = if let Some(units) = h.checked_div(nc) {
            let k = j / units;
            let w = ft[k] * it[k];
            (f * w + ft[k] - w, i * w + it[k] - w)
        } else {
            (f, i)
        };
        cs[j] = f_hat * cs[j] + i_hat * g;
        hs[j] = o * cs[j].tanh();
    }
    if nc > 0 {
        1.0 - ft.iter().sum::<f64>() / nc as f64
    } else {
        0.0
    }
}

/// The last case: 48 examples whose lengths cover every value from 0 to 14, with ties, so the
/// op's longest-first order and its shrinking count of running rows are exercised at scale.
const LSTM_CASES: [(usize, usize, usize, &[usize]); 6] = [
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
    (
        48,
        14,
        8,
        &[
            0, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10,
            2, 9, 1, 8, 0, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0, 7, 14,
        ],
    ),
];

#[test]
fn lstm_sequence_forward_matches_reference_and_the_recurrence() {
    fn check<B: ArborBackend>(cell_at: usize, every_c: bool) {
        for (b, t, h, lengths) in LSTM_CASES {
            let cell = cells(h)[cell_at];
            if !layouts(cell).contains(&every_c) {
                continue;
            }
            let context = format!("{cell:?} [{b}, {t}, {h}] {lengths:?} every_c {every_c}");
            let xs = lstm_inputs::<B>(b, t, h, cell);
            let fused = to_vec(lstm(xs.clone(), lengths, cell, true, every_c));
            let want = to_vec(lstm(xs.clone(), lengths, cell, false, every_c));
            assert_close(&fused, &want, 2e-5, &context);
            // Where the output keeps `h` of example `r` at step `s`, `c` (with `every_c`; the
            // final `c` otherwise), and the distances (after the final `c`).
            let n_d = cell.distance_rows(t, h);
            let h_at = |r: usize, s: usize| (r * t + s) * h;
            let c_at = |r: usize, s: usize| (b * t + r * t + s) * h;
            let c_last_at = |r: usize| (b * t + r) * h;
            let d_at = |r: usize, s: usize| (b * (t + 1) + r * n_d) * h + s;
            // The recurrence written out on the host, frozen rows included.
            let (d, p, uw, given) = (d_in(h), cell.width(h), cell.u_width(h), cell.given());
            // The input's full width: the given columns, then the `d` that `W` reads.
            let dx = given + d;
            let [x, w, bias, u, h0, c0] = xs.map(to_vec);
            let (mut hs, mut cs) = (h0.clone(), c0.clone());
            for s in 0..t {
                for r in 0..b {
                    let live = lengths.get(r).is_none_or(|&len| s < len);
                    let mut dist = 0.0;
                    if live {
                        let pre: Vec<f64> = (0..p)
                            .map(|k| {
                                let from_h = if k + uw >= p {
                                    let ku = k + uw - p;
                                    (0..h).map(|j| hs[r * h + j] * u[j * uw + ku]).sum::<f64>()
                                } else {
                                    0.0
                                };
                                let x_at = (r * t + s) * dx;
                                let from_x = if k < given {
                                    x[x_at + k]
                                } else {
                                    let (kw, pw) = (k - given, p - given);
                                    bias[kw]
                                        + (0..d)
                                            .map(|j| x[x_at + given + j] * w[j * pw + kw])
                                            .sum::<f64>()
                                };
                                from_x + from_h
                            })
                            .collect();
                        let span = r * h..(r + 1) * h;
                        dist = host_step(cell, &pre, &mut hs[span.clone()], &mut cs[span]);
                    }
                    let at = h_at(r, s);
                    for j in 0..h {
                        let got = fused[at + j];
                        assert!((got - hs[r * h + j]).abs() < 1e-4, "h step {s} {context}");
                        if every_c {
                            let c = fused[c_at(r, s) + j];
                            assert!((c - cs[r * h + j]).abs() < 1e-4, "c step {s} {context}");
                        }
                    }
                    if n_d > 0 {
                        let got = fused[d_at(r, s)];
                        assert!((got - dist).abs() < 1e-4, "distance step {s} {context}");
                    }
                }
            }
            if !every_c {
                // The last row: each example's final `c`.
                for r in 0..b {
                    for j in 0..h {
                        let at = c_last_at(r);
                        assert!(
                            (fused[at + j] - cs[r * h + j]).abs() < 1e-4,
                            "final c {context}"
                        );
                    }
                }
            }
        }
    }
    for cell_at in 0..4 {
        for every_c in [false, true] {
            check::<Flex>(cell_at, every_c);
            check::<NdArray>(cell_at, every_c);
        }
    }
}

/// Weights for the output's entries (a loss that reaches every one of them differently).
fn out_weights<B: Backend>(
    b: usize,
    t: usize,
    h: usize,
    cell: SequenceCell,
    every_c: bool,
) -> Tensor<B, 2> {
    let r = cell.distance_rows(t, h);
    let rows = if every_c { 2 * b * t } else { b * (t + 1 + r) };
    tensor::<B, 2>([rows, h], 1.0, 55)
}

fn lstm_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    h: usize,
    lengths: &[usize],
    cell: SequenceCell,
    every_c: bool,
) -> Vec<Vec<f64>> {
    let xs = lstm_inputs::<B>(b, t, h, cell).map(|x| x.require_grad());
    let w = out_weights::<B>(b, t, h, cell, every_c);
    let g = lstm(xs.clone(), lengths, cell, fused, every_c)
        .mul(w)
        .sum()
        .backward();
    xs.iter().map(|x| to_vec(x.grad(&g).unwrap())).collect()
}

#[test]
fn lstm_sequence_gradients_match_reference() {
    for (b, t, h, lengths) in LSTM_CASES {
        for cell in cells(h) {
            for &every_c in layouts(cell) {
                assert_fused_agrees!(
                    lstm_grads(b, t, h, lengths, cell, every_c),
                    ["d x", "d w", "d b", "d u", "d h0", "d c0"],
                    5e-5,
                    format!("{cell:?} [{b}, {t}, {h}] {lengths:?} every_c {every_c}")
                );
            }
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
        (2, 3, 4, &[3, 1][..], false),
    ];
    for (b, t, h, lengths, every_c) in cases {
        for cell in cells(h) {
            if !layouts(cell).contains(&every_c) {
                continue;
            }
            let ad = lstm_grads::<Autodiff<Inner>>(true, b, t, h, lengths, cell, every_c);
            let inputs = lstm_inputs::<Inner>(b, t, h, cell);
            let w = out_weights::<Inner>(b, t, h, cell, every_c);
            let f = |xs: [Tensor<Inner, 3>; 6]| -> f64 {
                lstm(xs, lengths, cell, true, every_c)
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
                    &format!("fd {cell:?} input {i} {lengths:?}"),
                );
            }
        }
    }
}

/// The states the public functions return are views of contiguous memory, on Flex: `h` (and
/// `c` with every step's states) of `[b, t, H]` and the final `c` of `[b, H]`, so whatever
/// reads them next (a loss, a product, a mask) reads them in place instead of walking a strided
/// window element by element or copying it first; and `c` is a view of the op's own output
/// (after every `h`), not a copy.
#[test]
fn sequence_states_are_contiguous_views() {
    /// Where the contiguous view `t` starts in its buffer.
    fn start<const D: usize>(t: Tensor<Flex, D>, what: &str) -> usize {
        let dims = t.dims();
        let flex = t.into_primitive().tensor();
        let (start, end) = flex
            .layout()
            .contiguous_offsets()
            .unwrap_or_else(|| panic!("{what} {dims:?} is a strided view"));
        assert_eq!(end - start, dims.iter().product::<usize>(), "{what}");
        start
    }
    let (b, t, h) = (3, 5, 4);
    let lengths = [5, 2, 0];
    for cell in cells(h) {
        let [x, w, bias, u, h0, c0] = lstm_inputs::<Flex>(b, t, h, cell);
        let (p, uw, d) = (cell.w_width(h), cell.u_width(h), d_in(h));
        let params = (w.reshape([d, p]), bias.reshape([p]), u.reshape([h, uw]));
        let (h0, c0) = (h0.reshape([b, h]), c0.reshape([b, h]));
        let what = format!("{cell:?}");
        let check = |hs: Tensor<Flex, 3>, c_last: Tensor<Flex, 2>| {
            assert_eq!(start(hs, &format!("{what} h")), 0, "{what} h");
            let c_at = start(c_last, &format!("{what} final c"));
            assert_eq!(c_at, b * t * h, "{what}: the final c is not a view");
        };
        match cell {
            SequenceCell::Lstm => {
                let (hs, c_last) = arbor_kernels::lstm_sequence(
                    x.clone(),
                    params.clone(),
                    h0.clone(),
                    c0.clone(),
                    &lengths,
                );
                check(hs, c_last);
                let (hs, cs) = arbor_kernels::lstm_sequence_states(x, params, h0, c0, &lengths);
                assert_eq!(start(hs, &format!("{what} every h")), 0, "{what}");
                let c_at = start(cs, &format!("{what} every c"));
                assert_eq!(c_at, b * t * h, "{what}: every c is not a view");
            }
            SequenceCell::OnLstm { chunks } => {
                let (hs, c_last, _) =
                    arbor_kernels::on_lstm_sequence(x, params, h0, c0, &lengths, chunks);
                check(hs, c_last);
            }
            SequenceCell::FastTrees { chunks } => {
                let (hs, c_last, _) =
                    arbor_kernels::fast_trees_sequence(x, params, h0, c0, &lengths, chunks);
                check(hs, c_last);
            }
            SequenceCell::ConvFastTrees { chunks } => {
                let (master, x) = (
                    x.clone().narrow(2, 0, 2 * chunks),
                    x.narrow(2, 2 * chunks, d),
                );
                let (hs, c_last, _) = arbor_kernels::conv_fast_trees_sequence(
                    master, x, params, h0, c0, &lengths, chunks,
                );
                check(hs, c_last);
            }
        }
    }
}

/// No steps: every op returns empty per-step outputs and the initial `c` as the final one, on
/// the fused path and the plain-op one, instead of panicking on an empty slice.
#[test]
fn empty_sequences_give_the_initial_state() {
    fn check<B: ArborBackend>() {
        let (b, h) = (2, 4);
        for cell in cells(h) {
            let [x, w, bias, u, h0, c0] = lstm_inputs::<B>(b, 3, h, cell);
            let d = d_in(h);
            let x = Tensor::<B, 3>::zeros([b, 0, d], &x.device());
            let (p, uw) = (cell.w_width(h), cell.u_width(h));
            let params = (w.reshape([d, p]), bias.reshape([p]), u.reshape([h, uw]));
            let (h0, c0) = (h0.reshape([b, h]), c0.reshape([b, h]));
            let what = format!("{cell:?}");
            let c_last = match cell {
                SequenceCell::Lstm => {
                    let (hs, cs) = arbor_kernels::lstm_sequence_states(
                        x.clone(),
                        params.clone(),
                        h0.clone(),
                        c0.clone(),
                        &[0, 0],
                    );
                    assert_eq!((hs.dims(), cs.dims()), ([b, 0, h], [b, 0, h]), "{what}");
                    let (hs, c_last) = arbor_kernels::lstm_sequence(x, params, h0, c0.clone(), &[]);
                    assert_eq!(hs.dims(), [b, 0, h], "{what}");
                    c_last
                }
                SequenceCell::OnLstm { chunks } => {
                    let (hs, c_last, dist) =
                        arbor_kernels::on_lstm_sequence(x, params, h0, c0.clone(), &[], chunks);
                    assert_eq!((hs.dims(), dist.dims()), ([b, 0, h], [b, 0]), "{what}");
                    c_last
                }
                SequenceCell::FastTrees { chunks } => {
                    let (hs, c_last, dist) =
                        arbor_kernels::fast_trees_sequence(x, params, h0, c0.clone(), &[], chunks);
                    assert_eq!((hs.dims(), dist.dims()), ([b, 0, h], [b, 0]), "{what}");
                    c_last
                }
                SequenceCell::ConvFastTrees { chunks } => {
                    let master = Tensor::<B, 3>::zeros([b, 0, 2 * chunks], &x.device());
                    let (hs, c_last, dist) = arbor_kernels::conv_fast_trees_sequence(
                        master,
                        x,
                        params,
                        h0,
                        c0.clone(),
                        &[],
                        chunks,
                    );
                    assert_eq!((hs.dims(), dist.dims()), ([b, 0, h], [b, 0]), "{what}");
                    c_last
                }
            };
            assert_close(&to_vec(c_last), &to_vec(c0), 0.0, &what);
        }
    }
    check::<Flex>();
    check::<NdArray>();
    check::<Autodiff<Flex>>();
}

/// A rayon pool of `threads` threads, for the tests that compare thread counts.
fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a local pool")
}

/// With enough work the forward splits across threads: the LSTM by its hidden units (two or
/// three parts, one wait per step), the ordered cells by rows (one task per thread over its
/// own rows for the whole sequence); with one thread, one task over every row. The output, and
/// on `Autodiff` the output of the forward that keeps the gates, are the same bits every way,
/// and the gradients (read from the saved gates, which the LSTM's parts write unit range by
/// unit range) agree. 64 ragged rows (zeros and ties included) so the row cut falls between
/// rows of different lengths and the LSTM's parts gather their inputs, and 64 rows of one
/// length, whose inputs are read in place.
#[test]
fn parallel_tasks_give_the_bits_of_one_task() {
    let (b, t, h) = (64, 10, 48);
    let ragged: Vec<usize> = (0..b).map(|r| (r * 7 + 3) % (t + 1)).collect();
    for lengths in [ragged, vec![t; b]] {
        for cell in cells(h) {
            for &every_c in layouts(cell) {
                let context = format!("{cell:?} every_c {every_c}, lengths {lengths:?}");
                let run = |threads: usize| {
                    pool(threads).install(|| {
                        let out = to_vec(lstm(
                            lstm_inputs::<Flex>(b, t, h, cell),
                            &lengths,
                            cell,
                            true,
                            every_c,
                        ));
                        let tracked =
                            lstm_inputs::<Autodiff<Flex>>(b, t, h, cell).map(|x| x.require_grad());
                        let kept = lstm(tracked, &lengths, cell, true, every_c);
                        (out, to_vec(kept))
                    })
                };
                let (one, one_kept) = run(1);
                assert_eq!(
                    one, one_kept,
                    "keeping the gates changed the output, {context}"
                );
                let grads = |threads| {
                    pool(threads).install(|| {
                        lstm_grads::<Autodiff<Flex>>(true, b, t, h, &lengths, cell, every_c)
                    })
                };
                let g1 = grads(1);
                for threads in [2, 3] {
                    let (many, many_kept) = run(threads);
                    assert_eq!(one, many, "evaluation, {threads} threads, {context}");
                    assert_eq!(
                        one_kept, many_kept,
                        "the forward that keeps the gates, {threads} threads, {context}"
                    );
                    let g = grads(threads);
                    for (name, (a, b)) in ["d x", "d w", "d b", "d u", "d h0", "d c0"]
                        .iter()
                        .zip(g1.iter().zip(&g))
                    {
                        assert_close(a, b, 1e-5, &format!("{name}, {threads} threads, {context}"));
                    }
                }
            }
        }
    }
}

/// The LSTM's parts are claimed, not assigned: with the pool's other thread busy for the
/// whole call, the one worker that runs computes every part of every step, and the output is
/// the one-thread output (an op that waited for a second worker would never return).
#[test]
fn lstm_parts_finish_when_only_one_worker_runs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (b, t, h) = (64, 10, 48);
    let cell = SequenceCell::Lstm;
    let lengths = vec![t; b];
    let run = move || {
        to_vec(lstm(
            lstm_inputs::<Flex>(b, t, h, cell),
            &lengths,
            cell,
            true,
            false,
        ))
    };
    let want = pool(1).install(run.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let busy = AtomicBool::new(true);
        let got = pool(2).install(|| {
            let (got, ()) = rayon::join(
                || {
                    let got = run();
                    busy.store(false, Ordering::Release);
                    got
                },
                || {
                    while busy.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                },
            );
            got
        });
        tx.send(got).expect("the test waits for the output");
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the op returned with the pool's other thread busy");
    assert_eq!(want, got);
}

/// From a zero initial state the LSTM's parts leave out the first step's `h_0·U` and the
/// backward its `h_0ᵀ·δ_0` (both zero): the output is the bits of one task (which computes
/// them), the gradients the reference's. Where those products are not zero, a non-finite `U`
/// (forward) or `δ_0` (backward, from a NaN in the first step's output gradient), they are
/// computed, and the NaNs fall where the reference puts them.
#[test]
fn a_zero_initial_state_leaves_out_the_first_products_and_keeps_their_nans() {
    type Ad = Autodiff<Flex>;
    let (b, t, h) = (64, 10, 48);
    let cell = SequenceCell::Lstm;
    // The places of the NaNs (compared as lists of indices: short messages).
    let nans = |v: &[f64]| {
        v.iter()
            .enumerate()
            .filter(|(_, x)| x.is_nan())
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    };
    let ragged: Vec<usize> = (0..b).map(|r| (r * 7 + 3) % (t + 1)).collect();
    for lengths in [ragged, vec![t; b]] {
        for inf_in_u in [false, true] {
            let inputs = |xs: [Tensor<Flex, 3>; 6]| {
                let [x, w, bias, u, h0, c0] = with_zero_h0(xs);
                let u = if inf_in_u {
                    u.slice_assign(
                        [0..1, 5..6, 7..8],
                        Tensor::full([1, 1, 1], f32::INFINITY, &Default::default()),
                    )
                } else {
                    u
                };
                [x, w, bias, u, h0, c0]
            };
            let context = format!("inf in U {inf_in_u}, lengths {lengths:?}");
            let run = |threads: usize| {
                pool(threads).install(|| {
                    to_vec(lstm(
                        inputs(lstm_inputs::<Flex>(b, t, h, cell)),
                        &lengths,
                        cell,
                        true,
                        false,
                    ))
                })
            };
            let one = run(1);
            let two = run(2);
            assert_eq!(nans(&one), nans(&two), "NaNs, {context}");
            assert_eq!(!nans(&one).is_empty(), inf_in_u, "{context}");
            for (x, y) in one.iter().zip(&two).filter(|(x, _)| !x.is_nan()) {
                assert_eq!(x, y, "{context}");
            }
        }
        // The backward: a NaN in the output gradient at the first step of example 0 makes
        // `δ_0` NaN there, and `dU` NaN through `h_0ᵀ·δ_0` alone.
        for nan_at_first in [false, true] {
            let grads = |fused: bool| {
                pool(2).install(|| {
                    let xs =
                        with_zero_h0(lstm_inputs::<Ad>(b, t, h, cell)).map(|x| x.require_grad());
                    let mut w = to_vec(out_weights::<Ad>(b, t, h, cell, false));
                    if nan_at_first {
                        w[3] = f64::NAN;
                    }
                    let w = Tensor::<Ad, 1>::from_floats(
                        w.iter().map(|&v| v as f32).collect::<Vec<_>>().as_slice(),
                        &Default::default(),
                    )
                    .reshape([b * (t + 1), h]);
                    let g = lstm(xs.clone(), &lengths, cell, fused, false)
                        .mul(w)
                        .sum()
                        .backward();
                    xs.iter()
                        .map(|x| to_vec(x.grad(&g).unwrap()))
                        .collect::<Vec<_>>()
                })
            };
            let (fused, reference) = (grads(true), grads(false));
            for (name, (a, r)) in ["d x", "d w", "d b", "d u", "d h0", "d c0"]
                .iter()
                .zip(fused.iter().zip(&reference))
            {
                let context =
                    format!("{name}, NaN at the first step {nan_at_first}, lengths {lengths:?}");
                assert_eq!(nans(a), nans(r), "NaNs, {context}");
                let finite = |v: &[f64]| {
                    v.iter()
                        .map(|x| if x.is_nan() { 0.0 } else { *x })
                        .collect::<Vec<_>>()
                };
                assert_close(&finite(a), &finite(r), 5e-5, &context);
            }
            assert_eq!(!nans(&fused[3]).is_empty(), nan_at_first, "d u");
        }
    }
}

/// [`lstm_inputs`]' tensors with the initial `h` set to zeros.
fn with_zero_h0<B: Backend>(xs: [Tensor<B, 3>; 6]) -> [Tensor<B, 3>; 6] {
    let [x, w, bias, u, h0, c0] = xs;
    [x, w, bias, u, h0.zeros_like(), c0]
}
