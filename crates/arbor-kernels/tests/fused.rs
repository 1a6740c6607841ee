//! Every fused op equals its plain-op reference in values and gradients, on Flex and NdArray,
//! with contiguous and strided inputs; the autodiff nodes pass a finite-difference check in f64.

use arbor_kernels::{gated_cell, gated_output, reference, ArborBackend, GateLayout};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{TensorData, TensorPrimitive};

/// Deterministic values in `[-scale, scale]` (a small LCG; no RNG crate needed for fixtures).
fn values(n: usize, scale: f64, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor<B: Backend, const D: usize>(shape: [usize; D], scale: f64, seed: u64) -> Tensor<B, D> {
    let n = shape.iter().product();
    from_f64(values(n, scale, seed), shape)
}

/// A tensor of the backend's own float type (the device's default dtype is f32 otherwise).
fn from_f64<B: Backend, const D: usize>(v: Vec<f64>, shape: [usize; D]) -> Tensor<B, D> {
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(TensorData::new(v, shape), (&Default::default(), dtype))
}

fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}: entry {k}: {x} vs {y}"
        );
    }
}

/// Central differences of `f` with respect to every entry of each input, with step `eps`.
fn central_differences<const D: usize, const N: usize>(
    inputs: &[Tensor<NdArray<f64>, D>; N],
    eps: f64,
    f: impl Fn([Tensor<NdArray<f64>, D>; N]) -> f64,
) -> Vec<Vec<f64>> {
    (0..N)
        .map(|i| {
            let v = to_vec(inputs[i].clone());
            (0..v.len())
                .map(|j| {
                    let bump = |e: f64| {
                        let mut w = v.clone();
                        w[j] += e;
                        let mut xs = inputs.clone();
                        xs[i] = from_f64::<NdArray<f64>, D>(w, inputs[i].dims());
                        f(xs)
                    };
                    (bump(eps) - bump(-eps)) / (2.0 * eps)
                })
                .collect()
        })
        .collect()
}

/// Runs the gradient function `$f` fused (`true`) and in plain ops (`false`) on
/// `Autodiff<Flex>` and `Autodiff<NdArray>`, and asserts that each named result agrees within
/// `$tol`.
macro_rules! assert_fused_agrees {
    ($f:ident($($arg:expr),*), $names:expr, $tol:expr, $context:expr) => {
        for (fused, want) in [
            ($f::<Autodiff<Flex>>(true $(, $arg)*), $f::<Autodiff<Flex>>(false $(, $arg)*)),
            ($f::<Autodiff<NdArray>>(true $(, $arg)*), $f::<Autodiff<NdArray>>(false $(, $arg)*)),
        ] {
            for (k, name) in $names.iter().enumerate() {
                assert_close(&fused[k], &want[k], $tol, &format!("{name} {}", $context));
            }
        }
    };
}

/// The reference cell and output as tensors (plain ops, so autodiff records every one).
fn reference_both<B: Backend, const D: usize>(
    gates: Tensor<B, D>,
    children: Vec<Tensor<B, D>>,
    layout: &GateLayout,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let prims = children
        .into_iter()
        .map(|c| c.into_primitive().tensor())
        .collect();
    let c = reference::gated_cell::<B>(gates.clone().into_primitive().tensor(), prims, layout);
    let c = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(c));
    let h = reference::gated_output::<B>(
        gates.into_primitive().tensor(),
        c.clone().into_primitive().tensor(),
        layout,
    );
    (Tensor::from_primitive(TensorPrimitive::Float(h)), c)
}

fn fused_both<B: ArborBackend, const D: usize>(
    gates: Tensor<B, D>,
    children: Vec<Tensor<B, D>>,
    layout: &GateLayout,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let c = gated_cell(gates.clone(), children, layout);
    (gated_output(gates, c.clone(), layout), c)
}

/// Gates `[b, n, blocks·h]` and children that are strided views `[b, n, h]` of one
/// `[b, n + 1, h]` state (as the Gumbel Tree-LSTM's `c[:, :-1]` and `c[:, 1:]`), plus the base.
fn inputs<B: Backend>(
    layout: &GateLayout,
    b: usize,
    n: usize,
    h: usize,
    scale: f64,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let gates = tensor::<B, 3>([b, n, layout.blocks * h], scale, 1);
    let base = tensor::<B, 3>([b, n + 1, h], 1.5, 2);
    (gates, base)
}

fn children<B: Backend>(layout: &GateLayout, base: &Tensor<B, 3>) -> Vec<Tensor<B, 3>> {
    let n = base.dims()[1] - 1;
    (0..layout.forgets.len())
        .map(|k| base.clone().narrow(1, k.min(1), n))
        .collect()
}

fn layouts() -> Vec<GateLayout> {
    let three = GateLayout {
        blocks: 6,
        input: 5,
        candidate: 0,
        output: 2,
        forgets: vec![1, 3, 4],
    };
    vec![GateLayout::lstm(), GateLayout::binary_tree_lstm(), three]
}

fn forward_matches<B: ArborBackend>() {
    for layout in layouts() {
        // h = 11 is not a multiple of the eight SIMD lanes; scale 6 reaches the tails of σ/tanh.
        for (b, n, h) in [(3, 4, 11), (2, 1, 16), (1, 5, 3), (40, 9, 64)] {
            let (gates, base) = inputs::<B>(&layout, b, n, h, 6.0);
            let kids = children(&layout, &base);
            let (h_ref, c_ref) = reference_both(gates.clone(), kids.clone(), &layout);
            let (h_fused, c_fused) = fused_both(gates.clone(), kids.clone(), &layout);
            let what = format!("{layout:?} [{b}, {n}, {h}]");
            assert_close(&to_vec(c_fused), &to_vec(c_ref), 1e-6, &format!("c {what}"));
            assert_close(&to_vec(h_fused), &to_vec(h_ref), 1e-6, &format!("h {what}"));
            // Rank 2, contiguous children.
            let g2 = gates.reshape([b * n, layout.blocks * h]);
            let k2: Vec<Tensor<B, 2>> = kids.into_iter().map(|c| c.reshape([b * n, h])).collect();
            let (h_ref, c_ref) = reference_both(g2.clone(), k2.clone(), &layout);
            let (h_fused, c_fused) = fused_both(g2, k2, &layout);
            assert_close(
                &to_vec(c_fused),
                &to_vec(c_ref),
                1e-6,
                &format!("c2 {what}"),
            );
            assert_close(
                &to_vec(h_fused),
                &to_vec(h_ref),
                1e-6,
                &format!("h2 {what}"),
            );
        }
    }
}

#[test]
fn forward_matches_reference_flex() {
    forward_matches::<Flex>();
}

#[test]
fn forward_matches_reference_ndarray() {
    forward_matches::<NdArray>();
}

/// Gradients of a random projection of `h` and `c` with respect to the gates and the base
/// state the children are views of.
fn grads<B: AutodiffBackend + ArborBackend>(
    layout: &GateLayout,
    fused: bool,
    b: usize,
    n: usize,
    h: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (gates, base) = inputs::<B>(layout, b, n, h, 4.0);
    let (gates, base) = (gates.require_grad(), base.require_grad());
    let kids = children(layout, &base);
    let (hh, cc) = if fused {
        fused_both(gates.clone(), kids, layout)
    } else {
        reference_both(gates.clone(), kids, layout)
    };
    let wh = tensor::<B, 3>([b, n, h], 1.0, 7);
    let wc = tensor::<B, 3>([b, n, h], 1.0, 8);
    let loss = hh.mul(wh).sum().add(cc.mul(wc).sum());
    let g = loss.backward();
    (
        to_vec(gates.grad(&g).expect("gates grad")),
        to_vec(base.grad(&g).expect("base grad")),
    )
}

fn gradients_match<B: AutodiffBackend + ArborBackend>() {
    for layout in layouts() {
        for (b, n, h) in [(2, 3, 9), (1, 2, 16), (24, 5, 48)] {
            let (g_ref, s_ref) = grads::<B>(&layout, false, b, n, h);
            let (g_fused, s_fused) = grads::<B>(&layout, true, b, n, h);
            let what = format!("{layout:?} [{b}, {n}, {h}]");
            assert_close(&g_fused, &g_ref, 1e-5, &format!("d gates {what}"));
            assert_close(&s_fused, &s_ref, 1e-5, &format!("d children {what}"));
        }
    }
}

#[test]
fn gradients_match_reference_flex() {
    gradients_match::<Autodiff<Flex>>();
}

#[test]
fn gradients_match_reference_ndarray() {
    gradients_match::<Autodiff<NdArray>>();
}

/// The autodiff nodes against central finite differences, in f64 (NdArray<f64> runs the
/// plain-op backward kernels behind the fused nodes).
#[test]
fn finite_differences_f64() {
    type Ad = Autodiff<NdArray<f64>>;
    type Inner = NdArray<f64>;
    for layout in layouts() {
        let (b, n, h) = (1, 2, 3);
        let (_, fd_gates, fd_base) = {
            let (gates, base) = inputs::<Inner>(&layout, b, n, h, 4.0);
            let wh = tensor::<Inner, 3>([b, n, h], 1.0, 7);
            let wc = tensor::<Inner, 3>([b, n, h], 1.0, 8);
            let f = |gates: Tensor<Inner, 3>, base: Tensor<Inner, 3>| -> f64 {
                let (hh, cc) = fused_both(gates, children(&layout, &base), &layout);
                hh.mul(wh.clone())
                    .sum()
                    .add(cc.mul(wc.clone()).sum())
                    .into_scalar()
            };
            // Burn computes sigmoid and tanh of f64 tensors in f32 (`to_full_precision`), so a
            // tiny step would measure rounding noise; 1e-2 keeps both error terms near 1e-5.
            let eps = 1e-2;
            let diff = |t: &Tensor<Inner, 3>, other: &Tensor<Inner, 3>, first: bool| {
                let v = to_vec(t.clone());
                (0..v.len())
                    .map(|k| {
                        let bump = |d: f64| {
                            let mut w = v.clone();
                            w[k] += d;
                            let p = from_f64::<Inner, 3>(w, t.dims());
                            if first {
                                f(p, other.clone())
                            } else {
                                f(other.clone(), p)
                            }
                        };
                        (bump(eps) - bump(-eps)) / (2.0 * eps)
                    })
                    .collect::<Vec<f64>>()
            };
            (0, diff(&gates, &base, true), diff(&base, &gates, false))
        };
        let (g_ad, s_ad) = grads::<Ad>(&layout, true, b, n, h);
        assert_close(&g_ad, &fd_gates, 2e-4, &format!("fd gates {layout:?}"));
        assert_close(&s_ad, &fd_base, 2e-4, &format!("fd children {layout:?}"));
    }
}

#[test]
fn extremes_and_nan() {
    let layout = GateLayout::lstm();
    let gates = Tensor::<Flex, 2>::from_floats(
        [[100.0, -100.0, 100.0, -100.0], [f32::NAN, 0.0, 0.0, 0.0]],
        &Default::default(),
    );
    let c_prev = Tensor::<Flex, 2>::from_floats([[3.0], [1.0]], &Default::default());
    let c = gated_cell(gates.clone(), vec![c_prev], &layout);
    let h = gated_output(gates, c.clone(), &layout);
    let (c, h) = (to_vec(c), to_vec(h));
    // Row 0: i, g saturate at 1, f at 0: c = 1; o at 0: h = 0.
    assert!(
        (c[0] - 1.0).abs() < 1e-6 && h[0].abs() < 1e-6,
        "{c:?} {h:?}"
    );
    assert!(
        c[1].is_nan() && h[1].is_nan(),
        "NaN must propagate: {c:?} {h:?}"
    );
}

#[test]
#[should_panic(expected = "one child per forget gate")]
fn wrong_child_count_is_a_clear_panic() {
    let gates = Tensor::<Flex, 2>::zeros([1, 4], &Default::default());
    let _ = gated_cell(gates, vec![], &GateLayout::lstm());
}

/// `select_mix` inputs: a soft selection (any values, so every gradient term is exercised) and
/// parent/left/right states, where left and right are the Gumbel encoder's strided views.
fn mix_inputs<B: Backend>(b: usize, k: usize, d: usize) -> [Tensor<B, 3>; 3] {
    [
        tensor::<B, 3>([b, k, 1], 1.0, 11),
        tensor::<B, 3>([b, k, d], 1.0, 12),
        tensor::<B, 3>([b, k + 1, d], 1.0, 13),
    ]
}

fn mix<B: ArborBackend>(
    s: Tensor<B, 3>,
    p: Tensor<B, 3>,
    base: Tensor<B, 3>,
    fused: bool,
) -> Tensor<B, 3> {
    let [b, k, _] = s.dims();
    let s = s.reshape([b, k]);
    let (l, r) = (base.clone().narrow(1, 0, k), base.narrow(1, 1, k));
    if fused {
        arbor_kernels::select_mix(s, p, l, r)
    } else {
        let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::select_mix::<B>(
            s.into_primitive().tensor(),
            prim(p),
            prim(l),
            prim(r),
        )))
    }
}

fn mix_forward_matches<B: ArborBackend>() {
    for (b, k, d) in [(3, 5, 11), (1, 1, 8), (2, 7, 3), (16, 12, 64)] {
        let [s, p, base] = mix_inputs::<B>(b, k, d);
        let fused = mix(s.clone(), p.clone(), base.clone(), true);
        let want = mix(s, p, base, false);
        assert_close(
            &to_vec(fused),
            &to_vec(want),
            1e-6,
            &format!("mix [{b}, {k}, {d}]"),
        );
    }
}

#[test]
fn select_mix_forward_matches_reference() {
    mix_forward_matches::<Flex>();
    mix_forward_matches::<NdArray>();
}

fn mix_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    k: usize,
    d: usize,
) -> Vec<Vec<f64>> {
    let [s, p, base] = mix_inputs::<B>(b, k, d);
    let (s, p, base) = (s.require_grad(), p.require_grad(), base.require_grad());
    let out = mix(s.clone(), p.clone(), base.clone(), fused);
    let w = tensor::<B, 3>([b, k, d], 1.0, 14);
    let g = out.mul(w).sum().backward();
    vec![
        to_vec(s.grad(&g).unwrap()),
        to_vec(p.grad(&g).unwrap()),
        to_vec(base.grad(&g).unwrap()),
    ]
}

#[test]
fn select_mix_gradients_match_reference() {
    for (b, k, d) in [(2, 4, 9), (1, 6, 16), (16, 8, 48)] {
        assert_fused_agrees!(
            mix_grads(b, k, d),
            ["d s", "d parent", "d left/right"],
            1e-5,
            format!("[{b}, {k}, {d}]")
        );
    }
}

/// The mix is linear in each input, so central differences are exact up to rounding.
#[test]
fn select_mix_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (b, k, d) = (2, 4, 3);
    let ad = mix_grads::<Autodiff<Inner>>(true, b, k, d);
    let [s, p, base] = mix_inputs::<Inner>(b, k, d);
    let w = tensor::<Inner, 3>([b, k, d], 1.0, 14);
    let f = |xs: [Tensor<Inner, 3>; 3]| -> f64 {
        let [s, p, base] = xs;
        mix(s, p, base, true).mul(w.clone()).sum().into_scalar()
    };
    let fd = central_differences(&[s, p, base], 1e-3, f);
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 1e-6, &format!("fd input {i}"));
    }
}

/// `ordered_cell` inputs: gates `[n, 4h]`, master gates in (0, 1) `[n, c]`, `c_prev` `[n, h]`.
fn ordered_inputs<B: Backend>(n: usize, c: usize, h: usize) -> [Tensor<B, 2>; 4] {
    let unit = |seed| tensor::<B, 2>([n, c], 0.45, seed).add_scalar(0.5);
    [
        tensor::<B, 2>([n, 4 * h], 4.0, 21),
        unit(22),
        unit(23),
        tensor::<B, 2>([n, h], 1.5, 24),
    ]
}

fn ordered<B: ArborBackend>(xs: [Tensor<B, 2>; 4], fused: bool) -> Tensor<B, 2> {
    let [g, mf, mi, cp] = xs;
    if fused {
        arbor_kernels::ordered_cell(g, mf, mi, cp)
    } else {
        let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::ordered_cell::<B>(
            p(g),
            p(mf),
            p(mi),
            p(cp),
        )))
    }
}

#[test]
fn ordered_cell_forward_matches_reference() {
    fn check<B: ArborBackend>() {
        for (n, c, h) in [(3, 4, 12), (2, 1, 9), (5, 10, 40), (160, 8, 64)] {
            let xs = ordered_inputs::<B>(n, c, h);
            let fused = to_vec(ordered(xs.clone(), true));
            let want = to_vec(ordered(xs, false));
            assert_close(&fused, &want, 1e-6, &format!("ordered [{n}, {c}, {h}]"));
        }
    }
    check::<Flex>();
    check::<NdArray>();
}

fn ordered_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    n: usize,
    c: usize,
    h: usize,
) -> Vec<Vec<f64>> {
    let xs = ordered_inputs::<B>(n, c, h).map(|t| t.require_grad());
    let w = tensor::<B, 2>([n, h], 1.0, 25);
    let g = ordered(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|t| to_vec(t.grad(&g).unwrap())).collect()
}

#[test]
fn ordered_cell_gradients_match_reference() {
    for (n, c, h) in [(3, 4, 12), (2, 3, 9), (96, 8, 64)] {
        assert_fused_agrees!(
            ordered_grads(n, c, h),
            ["d gates", "d master forget", "d master input", "d c_prev"],
            1e-5,
            format!("[{n}, {c}, {h}]")
        );
    }
}

#[test]
fn ordered_cell_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (n, c, h) = (2, 2, 4);
    let ad = ordered_grads::<Autodiff<Inner>>(true, n, c, h);
    let inputs = ordered_inputs::<Inner>(n, c, h);
    let w = tensor::<Inner, 2>([n, h], 1.0, 25);
    let f =
        |xs: [Tensor<Inner, 2>; 4]| -> f64 { ordered(xs, true).mul(w.clone()).sum().into_scalar() };
    // Sigmoid/tanh of f64 tensors run in f32 in Burn: a 1e-2 step (see above).
    let fd = central_differences(&inputs, 1e-2, f);
    for i in 0..4 {
        assert_close(&ad[i], &fd[i], 2e-4, &format!("fd ordered input {i}"));
    }
}

/// `linear_scan` inputs: `a` in (0.1, 1.1) as forget gates are, `u`, `c0`; `a` and `u` are
/// strided views of one `[b, t, 2h]` tensor (as a cell's precomputed gates are).
fn scan_inputs<B: Backend>(b: usize, t: usize, h: usize) -> [Tensor<B, 3>; 3] {
    let both = tensor::<B, 3>([b, t, 2 * h], 1.0, 31);
    let a = both.clone().narrow(2, 0, h).mul_scalar(0.5).add_scalar(0.6);
    let u = both.narrow(2, h, h);
    let c0 = tensor::<B, 2>([b, h], 1.0, 32).unsqueeze_dim::<3>(1);
    [a, u, c0]
}

fn scan<B: ArborBackend>(xs: [Tensor<B, 3>; 3], fused: bool) -> Tensor<B, 3> {
    let [a, u, c0] = xs;
    let [b, _, h] = a.dims();
    let c0 = c0.reshape([b, h]);
    if fused {
        arbor_kernels::linear_scan(a, u, c0)
    } else {
        let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::linear_scan::<B>(
            p(a),
            p(u),
            c0.into_primitive().tensor(),
        )))
    }
}

#[test]
fn linear_scan_forward_matches_reference() {
    fn check<B: ArborBackend>() {
        for (b, t, h) in [(3, 5, 7), (2, 1, 16), (1, 9, 3), (24, 12, 64)] {
            let xs = scan_inputs::<B>(b, t, h);
            let fused = to_vec(scan(xs.clone(), true));
            let want = to_vec(scan(xs.clone(), false));
            assert_close(&fused, &want, 1e-6, &format!("scan [{b}, {t}, {h}]"));
            // And the recurrence itself, written out on the host.
            let [a, u, c0] = xs.map(to_vec);
            let mut c = c0.clone();
            for s in 0..t {
                for bi in 0..b {
                    for j in 0..h {
                        let o = (bi * t + s) * h + j;
                        c[bi * h + j] = a[o] * c[bi * h + j] + u[o];
                        assert!((fused[o] - c[bi * h + j]).abs() < 1e-5, "scan step {s}");
                    }
                }
            }
        }
    }
    check::<Flex>();
    check::<NdArray>();
}

fn scan_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    h: usize,
) -> Vec<Vec<f64>> {
    let xs = scan_inputs::<B>(b, t, h).map(|x| x.require_grad());
    let w = tensor::<B, 3>([b, t, h], 1.0, 33);
    let g = scan(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|x| to_vec(x.grad(&g).unwrap())).collect()
}

#[test]
fn linear_scan_gradients_match_reference() {
    for (b, t, h) in [(3, 5, 7), (2, 1, 9), (16, 10, 48)] {
        assert_fused_agrees!(
            scan_grads(b, t, h),
            ["d a", "d u", "d c0"],
            1e-5,
            format!("[{b}, {t}, {h}]")
        );
    }
}

#[test]
fn linear_scan_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (b, t, h) = (2, 4, 3);
    let ad = scan_grads::<Autodiff<Inner>>(true, b, t, h);
    let inputs = scan_inputs::<Inner>(b, t, h);
    let w = tensor::<Inner, 3>([b, t, h], 1.0, 33);
    let f =
        |xs: [Tensor<Inner, 3>; 3]| -> f64 { scan(xs, true).mul(w.clone()).sum().into_scalar() };
    let fd = central_differences(&inputs, 1e-4, f);
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 1e-6, &format!("fd scan input {i}"));
    }
}

/// Sigmoid, tanh, GELU and the input's gradient, fused or with Burn's own activations, on a
/// strided view (60 of 62 columns) of values up to ±12; large enough that the CPU kernels split
/// the work across threads.
fn activations<B: AutodiffBackend + ArborBackend>(fused: bool) -> [Vec<f64>; 4] {
    use burn::tensor::activation;
    let x = tensor::<B, 3>([24, 40, 62], 12.0, 41)
        .narrow(2, 1, 60)
        .require_grad();
    let w = tensor::<B, 3>([24, 40, 60], 1.0, 42);
    let (ys, yt, yg) = if fused {
        (
            arbor_kernels::sigmoid(x.clone()),
            arbor_kernels::tanh(x.clone()),
            arbor_kernels::gelu(x.clone()),
        )
    } else {
        (
            activation::sigmoid(x.clone()),
            activation::tanh(x.clone()),
            activation::gelu(x.clone()),
        )
    };
    // GELU's gradient is checked on its own below: Burn 0.21 differentiates the tanh
    // approximation of GELU, not the exact GELU it computes.
    let loss = ys.clone().mul(w.clone()).add(yt.clone().mul(w.flip([2])));
    let grads = loss.sum().backward();
    [
        to_vec(ys),
        to_vec(yt),
        to_vec(yg),
        to_vec(x.grad(&grads).unwrap()),
    ]
}

/// GELU's gradient is the exact derivative `Φ(x) + x·φ(x)`: the fused kernel (f32, split
/// across threads) against the plain-op formula, and that formula against central differences
/// of the forward pass in f64.
#[test]
fn gelu_gradient_is_the_exact_derivative() {
    fn grad<B: AutodiffBackend + ArborBackend>(x: Tensor<B, 2>, w: Tensor<B, 2>) -> Vec<f64> {
        let x = x.require_grad();
        let g = arbor_kernels::gelu(x.clone()).mul(w).sum().backward();
        to_vec(x.grad(&g).unwrap())
    }
    let x = tensor::<Flex, 2>([300, 130], 6.0, 43);
    let w = tensor::<Flex, 2>([300, 130], 1.0, 44);
    let fused =
        grad::<Autodiff<Flex>>(Tensor::from_inner(x.clone()), Tensor::from_inner(w.clone()));
    let want = to_vec(Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(
        reference::activation_backward::<Flex>(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            arbor_kernels::Activation::Gelu,
        ),
    )));
    assert_close(&fused, &want, 2e-6, "fused GELU gradient");

    let x = tensor::<NdArray<f64>, 2>([3, 7], 4.0, 45);
    let w = tensor::<NdArray<f64>, 2>([3, 7], 1.0, 46);
    let ad = grad::<Autodiff<NdArray<f64>>>(
        Tensor::from_inner(x.clone()),
        Tensor::from_inner(w.clone()),
    );
    let fd = central_differences(&[x], 1e-4, |[x]| {
        arbor_kernels::gelu(x).mul(w.clone()).sum().into_scalar()
    });
    assert_close(&ad, &fd[0], 1e-6, "GELU gradient vs finite differences");
}

#[test]
fn activations_match_burn_in_values_and_gradients() {
    assert_fused_agrees!(activations(), ["sigmoid", "tanh", "gelu", "d x"], 1e-5, "");
}

#[test]
fn write_rows_matches_slice_assign_and_never_changes_a_shared_tensor() {
    fn check<B: ArborBackend>() {
        let t = tensor::<B, 2>([6, 5], 1.0, 51);
        let rows = tensor::<B, 2>([2, 5], 1.0, 52);
        let want = to_vec(t.clone().slice_assign([3..5, 0..5], rows.clone()));
        // `t` is shared with `kept`: the write must copy, and `kept` must keep its values.
        let kept = t.clone();
        let before = to_vec(kept.clone());
        let out = arbor_kernels::write_rows(t, 3, rows.clone());
        assert_close(&to_vec(out.clone()), &want, 0.0, "write_rows (shared)");
        assert_close(&to_vec(kept), &before, 0.0, "the shared tensor");
        // `out` is its own: this write may go in place, with the same result.
        let want = to_vec(out.clone().slice_assign([0..2, 0..5], rows.clone()));
        let again = arbor_kernels::write_rows(out, 0, rows.clone());
        assert_close(&to_vec(again), &want, 0.0, "write_rows (own memory)");
        // A strided `rows` (every other column of a wider tensor).
        let wide = tensor::<B, 2>([1, 10], 1.0, 53).reshape([2, 5]);
        let t = tensor::<B, 2>([4, 5], 1.0, 54);
        let want = to_vec(t.clone().slice_assign([1..3, 0..5], wide.clone()));
        assert_close(
            &to_vec(arbor_kernels::write_rows(t, 1, wide)),
            &want,
            0.0,
            "write_rows (reshaped rows)",
        );
    }
    check::<Flex>();
    check::<NdArray>();
}

fn write_grads<B: AutodiffBackend + ArborBackend>(fused: bool) -> Vec<Vec<f64>> {
    let t = tensor::<B, 2>([6, 4], 1.0, 55).require_grad();
    let rows = tensor::<B, 2>([2, 4], 1.0, 56).require_grad();
    // Two writes, as a stack gets them, the second over part of the first.
    let write = |t: Tensor<B, 2>, start: usize, rows: Tensor<B, 2>| {
        if fused {
            arbor_kernels::write_rows(t, start, rows)
        } else {
            t.slice_assign([start..start + 2, 0..4], rows)
        }
    };
    let out = write(t.clone().mul_scalar(2.0), 1, rows.clone());
    let out = write(out, 2, rows.clone().exp());
    let w = tensor::<B, 2>([6, 4], 1.0, 57);
    let g = out.mul(w).sum().backward();
    vec![to_vec(t.grad(&g).unwrap()), to_vec(rows.grad(&g).unwrap())]
}

#[test]
fn write_rows_gradients_match_slice_assign() {
    assert_fused_agrees!(write_grads(), ["d t", "d rows"], 1e-6, "");
}

/// `ordered_gates` on the same inputs as `ordered_cell` (its `c_prev` unused), with the gates a
/// strided view (columns 2.. of a wider tensor, as a cell's gate split gives them).
fn gate_inputs<B: Backend>(n: usize, c: usize, h: usize) -> [Tensor<B, 2>; 3] {
    let [g, mf, mi, _] = ordered_inputs::<B>(n, c, h);
    let wide = Tensor::cat(vec![tensor::<B, 2>([n, 2], 1.0, 71), g], 1);
    [wide.narrow(1, 2, 4 * h), mf, mi]
}

fn gates_out<B: ArborBackend>(xs: [Tensor<B, 2>; 3], fused: bool) -> Tensor<B, 2> {
    let [g, mf, mi] = xs;
    if fused {
        arbor_kernels::ordered_gates(g, mf, mi)
    } else {
        let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::ordered_gates::<B>(
            p(g),
            p(mf),
            p(mi),
        )))
    }
}

fn gates_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    (n, c, h): (usize, usize, usize),
) -> Vec<Vec<f64>> {
    let xs = gate_inputs::<B>(n, c, h).map(|t| t.require_grad());
    let w = tensor::<B, 2>([n, 2 * h], 1.0, 72);
    let g = gates_out(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|t| to_vec(t.grad(&g).unwrap())).collect()
}

#[test]
fn ordered_gates_match_reference_and_ordered_cell() {
    for (n, c, h) in [(3, 4, 12), (2, 1, 9), (5, 10, 40), (160, 8, 64)] {
        for fused in [
            to_vec(gates_out(gate_inputs::<Flex>(n, c, h), true)),
            to_vec(gates_out(gate_inputs::<NdArray>(n, c, h), true)),
        ] {
            let want = to_vec(gates_out(gate_inputs::<Flex>(n, c, h), false));
            assert_close(
                &fused,
                &want,
                1e-6,
                &format!("ordered_gates [{n}, {c}, {h}]"),
            );
            // With c_prev = 1, ordered_cell is f̂ + î ⊙ tanh(g): the sum of the two halves.
            let [g, mf, mi] = gate_inputs::<Flex>(n, c, h);
            let cell = to_vec(arbor_kernels::ordered_cell(
                g,
                mf,
                mi,
                Tensor::ones([n, h], &Default::default()),
            ));
            for r in 0..n {
                for j in 0..h {
                    let sum = fused[r * 2 * h + j] + fused[r * 2 * h + h + j];
                    assert!((sum - cell[r * h + j]).abs() < 1e-5, "row {r} unit {j}");
                }
            }
        }
        assert_fused_agrees!(
            gates_grads((n, c, h)),
            ["d gates", "d master forget", "d master input"],
            1e-5,
            format!("[{n}, {c}, {h}]")
        );
    }
}

#[test]
fn ordered_gates_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let dims = (2, 2, 4);
    let ad = gates_grads::<Autodiff<Inner>>(true, dims);
    let inputs = gate_inputs::<Inner>(dims.0, dims.1, dims.2);
    let w = tensor::<Inner, 2>([dims.0, 2 * dims.2], 1.0, 72);
    // Sigmoid/tanh of f64 tensors run in f32 in Burn: a 1e-2 step (see above).
    let fd = central_differences(&inputs, 1e-2, |xs| {
        gates_out(xs, true).mul(w.clone()).sum().into_scalar()
    });
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 2e-4, &format!("fd ordered_gates input {i}"));
    }
}

fn pairs<B: AutodiffBackend + ArborBackend>(fused: bool, b: usize, m: usize) -> [Vec<f64>; 2] {
    // A strided view (the first m of m + 1 nodes), as a layer's `h` can be.
    let x = tensor::<B, 3>([b, m + 1, 5], 1.0, 81)
        .narrow(1, 0, m)
        .require_grad();
    let y = if fused {
        arbor_kernels::adjacent_pairs(x.clone())
    } else {
        Tensor::from_primitive(TensorPrimitive::Float(reference::adjacent_pairs::<B>(
            x.clone().into_primitive().tensor(),
        )))
    };
    let w = tensor::<B, 3>([b, m - 1, 10], 1.0, 82);
    let grads = y.clone().mul(w).sum().backward();
    [to_vec(y), to_vec(x.grad(&grads).unwrap())]
}

#[test]
fn adjacent_pairs_match_reference_in_values_and_gradients() {
    // The last size is split across threads by the CPU kernels.
    for (b, m) in [(2, 2), (2, 3), (2, 7), (40, 64)] {
        for (fused, want) in [
            (
                pairs::<Autodiff<Flex>>(true, b, m),
                pairs::<Autodiff<Flex>>(false, b, m),
            ),
            (
                pairs::<Autodiff<NdArray>>(true, b, m),
                pairs::<Autodiff<NdArray>>(false, b, m),
            ),
        ] {
            assert_close(&fused[0], &want[0], 0.0, &format!("pairs m = {m}"));
            assert_close(&fused[1], &want[1], 1e-6, &format!("d x m = {m}"));
        }
    }
}

/// `select_rows` is Burn's `select` on dimension 0 in values and gradients, repeated rows
/// included, through an autodiff graph where the same tensor is read twice.
#[test]
fn select_rows_matches_select_in_values_and_gradients() {
    fn run<B: AutodiffBackend + ArborBackend>(fused: bool) -> [Vec<f64>; 2] {
        let t = tensor::<B, 2>([7, 5], 1.0, 91).require_grad();
        let (a, b) = ([6usize, 0, 3, 3, 1], [2usize, 6]);
        let read = |rows: &[usize]| {
            if fused {
                arbor_kernels::select_rows(t.clone(), rows)
            } else {
                let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
                let idx = Tensor::<B, 1, Int>::from_data(
                    burn::tensor::TensorData::new(ids, [rows.len()]),
                    &t.device(),
                );
                t.clone().select(0, idx)
            }
        };
        let (ya, yb) = (read(&a), read(&b));
        let loss = ya
            .clone()
            .mul(tensor::<B, 2>([5, 5], 1.0, 92))
            .sum()
            .add(yb.clone().mul(tensor::<B, 2>([2, 5], 1.0, 93)).sum());
        let g = loss.backward();
        let mut values = to_vec(ya);
        values.extend(to_vec(yb));
        [values, to_vec(t.grad(&g).unwrap())]
    }
    for (fused, want) in [
        (run::<Autodiff<Flex>>(true), run::<Autodiff<Flex>>(false)),
        (
            run::<Autodiff<NdArray>>(true),
            run::<Autodiff<NdArray>>(false),
        ),
        (
            run::<Autodiff<NdArray<f64>>>(true),
            run::<Autodiff<NdArray<f64>>>(false),
        ),
    ] {
        assert_close(&fused[0], &want[0], 0.0, "select_rows values");
        assert_close(&fused[1], &want[1], 1e-6, "select_rows gradient");
    }
}

#[test]
#[should_panic(expected = "select_rows: row 7 of a 7-row tensor")]
fn select_rows_refuses_an_out_of_range_row() {
    let t = Tensor::<Flex, 2>::zeros([7, 2], &Default::default());
    let _ = arbor_kernels::select_rows(t, &[0, 7]);
}

/// `lstm_sequence` inputs: `xp` a strided view (`4h` of `4h + 3` columns, as a narrowed
/// projection would be), `u` scaled as a recurrent weight, `h0`, `c0`.
fn lstm_inputs<B: Backend>(b: usize, t: usize, h: usize) -> [Tensor<B, 3>; 4] {
    let xp = tensor::<B, 3>([b, t, 4 * h + 3], 2.0, 51).narrow(2, 2, 4 * h);
    let u = tensor::<B, 2>([h, 4 * h], 1.0 / (h as f64).sqrt(), 52).unsqueeze_dim::<3>(0);
    let h0 = tensor::<B, 2>([b, h], 1.0, 53).unsqueeze_dim::<3>(0);
    let c0 = tensor::<B, 2>([b, h], 1.0, 54).unsqueeze_dim::<3>(0);
    [xp, u, h0, c0]
}

/// The fused op, or the plain-op reference forward (which autodiff differentiates op by op).
fn lstm<B: ArborBackend>(xs: [Tensor<B, 3>; 4], lengths: &[usize], fused: bool) -> Tensor<B, 3> {
    let [xp, u, h0, c0] = xs;
    let (h, b) = (u.dims()[1], h0.dims()[1]);
    let (u, h0, c0) = (
        u.reshape([h, 4 * h]),
        h0.reshape([b, h]),
        c0.reshape([b, h]),
    );
    if fused {
        arbor_kernels::lstm_sequence(xp, u, h0, c0, lengths)
    } else {
        let p2 = |t: Tensor<B, 2>| t.into_primitive().tensor();
        let (out, _) = reference::lstm_sequence::<B>(
            xp.into_primitive().tensor(),
            p2(u),
            p2(h0),
            p2(c0),
            lengths,
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
    fn check<B: ArborBackend>() {
        for (b, t, h, lengths) in LSTM_CASES {
            let xs = lstm_inputs::<B>(b, t, h);
            let fused = to_vec(lstm(xs.clone(), lengths, true));
            let want = to_vec(lstm(xs.clone(), lengths, false));
            assert_close(
                &fused,
                &want,
                2e-5,
                &format!("lstm [{b}, {t}, {h}] {lengths:?}"),
            );
            // The recurrence written out on the host, frozen rows included.
            let [xp, u, h0, c0] = xs.map(to_vec);
            let (mut hs, mut cs) = (h0.clone(), c0.clone());
            let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
            for s in 0..t {
                for r in 0..b {
                    let live = lengths.get(r).is_none_or(|&len| s < len);
                    if live {
                        let pre: Vec<f64> = (0..4 * h)
                            .map(|k| {
                                xp[(r * t + s) * 4 * h + k]
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
                        let at = (r * t + s) * 2 * h;
                        assert!((fused[at + j] - hs[r * h + j]).abs() < 1e-4, "h step {s}");
                        assert!(
                            (fused[at + h + j] - cs[r * h + j]).abs() < 1e-4,
                            "c step {s}"
                        );
                    }
                }
            }
        }
    }
    check::<Flex>();
    check::<NdArray>();
}

fn lstm_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    h: usize,
    lengths: &[usize],
) -> Vec<Vec<f64>> {
    let xs = lstm_inputs::<B>(b, t, h).map(|x| x.require_grad());
    let w = tensor::<B, 3>([b, t, 2 * h], 1.0, 55);
    let g = lstm(xs.clone(), lengths, fused).mul(w).sum().backward();
    xs.iter().map(|x| to_vec(x.grad(&g).unwrap())).collect()
}

#[test]
fn lstm_sequence_gradients_match_reference() {
    for (b, t, h, lengths) in LSTM_CASES {
        assert_fused_agrees!(
            lstm_grads(b, t, h, lengths),
            ["d xp", "d u", "d h0", "d c0"],
            5e-5,
            format!("[{b}, {t}, {h}] {lengths:?}")
        );
    }
}

#[test]
fn lstm_sequence_finite_differences_f64() {
    type Inner = NdArray<f64>;
    for (b, t, h, lengths) in [(2, 4, 3, &[][..]), (3, 4, 2, &[4, 2, 0][..])] {
        let ad = lstm_grads::<Autodiff<Inner>>(true, b, t, h, lengths);
        let inputs = lstm_inputs::<Inner>(b, t, h);
        let w = tensor::<Inner, 3>([b, t, 2 * h], 1.0, 55);
        let f = |xs: [Tensor<Inner, 3>; 4]| -> f64 {
            lstm(xs, lengths, true).mul(w.clone()).sum().into_scalar()
        };
        let fd = central_differences(&inputs, 1e-5, f);
        for i in 0..4 {
            assert_close(
                &ad[i],
                &fd[i],
                1e-6,
                &format!("fd lstm input {i} {lengths:?}"),
            );
        }
    }
}
