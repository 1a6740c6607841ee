//! The CPU kernels: loops over contiguous `f32` rows, shared by the Flex and NdArray backends.
//!
//! Sigmoid and tanh are computed eight lanes at a time with `wide`'s vectorised `exp` (the
//! backends' elementwise ops call scalar libm `expf`/`tanhf`). Both are written around
//! `t = exp(−|x|)` (or `exp(−2|x|)`), which never overflows, and NaN inputs give NaN.

// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#![allow(clippy::needless_range_loop)]

use wide::{f32x8, CmpEq, CmpGe, CmpLt};

use crate::GateLayout;

const LANES: usize = 8;

#[inline(always)]
fn sigmoid8(x: f32x8) -> f32x8 {
    let t = (-x.abs()).exp();
    let p = f32x8::ONE / (f32x8::ONE + t);
    // σ(x) = 1/(1+e^{-x}) for x ≥ 0, and e^{x}/(1+e^{x}) = t·p for x < 0.
    let r = x.cmp_ge(f32x8::ZERO).blend(p, t * p);
    x.is_nan().blend(x, r)
}

#[inline(always)]
fn tanh8(x: f32x8) -> f32x8 {
    let t = (-(x.abs() + x.abs())).exp();
    let r = (f32x8::ONE - t) / (f32x8::ONE + t);
    let r = x.cmp_lt(f32x8::ZERO).blend(-r, r);
    x.is_nan().blend(x, r)
}

/// `erf(x)` for `x ≥ 0` (Abramowitz & Stegun 7.1.26: |error| ≤ 1.5·10⁻⁷), eight lanes.
#[inline(always)]
fn erf_abs8(z: f32x8) -> f32x8 {
    let t = f32x8::ONE / (f32x8::ONE + f32x8::splat(0.327_591_1) * z);
    let poly = t
        * (f32x8::splat(0.254_829_6)
            + t * (f32x8::splat(-0.284_496_74)
                + t * (f32x8::splat(1.421_413_7)
                    + t * (f32x8::splat(-1.453_152_1) + t * f32x8::splat(1.061_405_4)))));
    f32x8::ONE - poly * (-(z * z)).exp()
}

/// `Φ(x) = (1 + erf(x/√2))/2`, eight lanes.
#[inline(always)]
fn normal_cdf8(x: f32x8) -> f32x8 {
    let e = erf_abs8(x.abs() * f32x8::splat(std::f32::consts::FRAC_1_SQRT_2));
    let e = x.cmp_lt(f32x8::ZERO).blend(-e, e);
    f32x8::splat(0.5) * (f32x8::ONE + e)
}

#[inline(always)]
fn gelu8(x: f32x8) -> f32x8 {
    // Where Φ(x) underflows to 0 the product is 0 (also at −∞, where x·Φ(x) would be NaN).
    let cdf = normal_cdf8(x);
    let r = cdf.cmp_eq(f32x8::ZERO).blend(f32x8::ZERO, x * cdf);
    x.is_nan().blend(x, r)
}

/// `dGELU/dx = Φ(x) + x·φ(x)`, eight lanes.
#[inline(always)]
fn gelu_slope8(x: f32x8) -> f32x8 {
    const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
    let pdf = f32x8::splat(FRAC_1_SQRT_2PI) * (f32x8::splat(-0.5) * x * x).exp();
    let r = normal_cdf8(x) + x * pdf;
    x.is_nan().blend(x, r)
}

/// Applies an eight-lane function to `src`, writing `dst` (equal lengths).
#[inline(always)]
fn map8(dst: &mut [f32], src: &[f32], f: impl Fn(f32x8) -> f32x8) {
    debug_assert_eq!(dst.len(), src.len());
    let mut d = dst.chunks_exact_mut(LANES);
    let mut s = src.chunks_exact(LANES);
    for (d, s) in (&mut d).zip(&mut s) {
        let v: [f32; LANES] = s.try_into().expect("eight lanes");
        d.copy_from_slice(&f(f32x8::from(v)).to_array());
    }
    let (d, s) = (d.into_remainder(), s.remainder());
    if !s.is_empty() {
        let mut v = [0f32; LANES];
        v[..s.len()].copy_from_slice(s);
        let out = f(f32x8::from(v)).to_array();
        d.copy_from_slice(&out[..s.len()]);
    }
}

/// `dst = σ(src)`.
pub fn sigmoid(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2::sigmoid(dst, src) };
    }
    map8(dst, src, sigmoid8);
}

/// `dst = tanh(src)`.
pub fn tanh(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2::tanh(dst, src) };
    }
    map8(dst, src, tanh8);
}

/// Sigmoid and tanh compiled for AVX2 + FMA and chosen at run time.
///
/// `wide` picks its instructions when it is compiled, so for the default `x86-64` target its
/// eight lanes are two SSE halves. These loops are plain `f32` code (an `exp` by range reduction
/// and a degree-6 polynomial, Cephes' `expf`, within 2 ulp) that LLVM vectorises to 256-bit FMA
/// code inside `#[target_feature]` functions; other CPUs keep the `wide` path.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::sync::OnceLock;

    pub(super) fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    /// `e^x` for `x ≤ 0`; 0 below −87.3 (where `e^x` leaves the normal range).
    #[inline(always)]
    fn exp_nonpositive(x: f32) -> f32 {
        let under = x < -87.336_54;
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        // `max` clamps, and maps NaN to the bound too (the callers return NaN themselves), so
        // `k` is always an integer in −126..=0.
        let x = x.max(-87.336_54);
        let k = (x * LOG2E + 0.5).floor();
        let r = k.mul_add(-LN2_LO, k.mul_add(-LN2_HI, x));
        let mut p = 1.987_569_1e-4_f32;
        p = p.mul_add(r, 1.398_199_9e-3);
        p = p.mul_add(r, 8.333_452e-3);
        p = p.mul_add(r, 4.166_579_6e-2);
        p = p.mul_add(r, 1.666_666_5e-1);
        p = p.mul_add(r, 0.5);
        let e = (p * r).mul_add(r, r) + 1.0;
        // `k as i32` saturates and maps NaN to 0, which the compiler does lane by lane with
        // scalar compares; `k` is a small finite integer here, so the plain conversion is exact
        // and vectorises.
        // SAFETY: `k` is finite and in −126..=0 (see above), inside `i32`.
        let k = unsafe { k.to_int_unchecked::<i32>() };
        let y = e * f32::from_bits(((k + 127) << 23) as u32);
        if under {
            0.0
        } else {
            y
        }
    }

    #[inline(always)]
    fn sigmoid1(x: f32) -> f32 {
        let t = exp_nonpositive(-x.abs());
        let p = 1.0 / (1.0 + t);
        let r = if x >= 0.0 { p } else { t * p };
        if x.is_nan() {
            x
        } else {
            r
        }
    }

    #[inline(always)]
    fn tanh1(x: f32) -> f32 {
        let t = exp_nonpositive(-2.0 * x.abs());
        let r = (1.0 - t) / (1.0 + t);
        let r = if x < 0.0 { -r } else { r };
        if x.is_nan() {
            x
        } else {
            r
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sigmoid(dst: &mut [f32], src: &[f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = sigmoid1(x);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tanh(dst: &mut [f32], src: &[f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = tanh1(x);
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_avx2_loops_match_the_wide_path() {
            if !super::available() {
                return;
            }
            let xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
            let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
            for (fast, wide) in [
                (
                    super::sigmoid as unsafe fn(&mut [f32], &[f32]),
                    super::super::sigmoid8 as fn(_) -> _,
                ),
                (super::tanh, super::super::tanh8),
            ] {
                unsafe { fast(&mut a, &xs) };
                super::super::map8(&mut b, &xs, wide);
                for ((&x, &p), &q) in xs.iter().zip(&a).zip(&b) {
                    assert!((p - q).abs() <= 2.5e-7, "x = {x}: {p} vs {q}");
                }
            }
        }
    }
}

/// `dst = GELU(src) = src·Φ(src)`.
pub fn gelu(dst: &mut [f32], src: &[f32]) {
    map8(dst, src, gelu8);
}

/// `dst = grad ⊙ GELU′(x)`.
pub fn gelu_backward(dst: &mut [f32], x: &[f32], grad: &[f32]) {
    map8(dst, x, gelu_slope8);
    for (d, g) in dst.iter_mut().zip(grad) {
        *d *= g;
    }
}

/// Scratch rows reused across the rows of one call.
struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    f: Vec<f32>,
}

impl Scratch {
    fn new(h: usize) -> Self {
        Scratch {
            a: vec![0.0; h],
            b: vec![0.0; h],
            f: vec![0.0; h],
        }
    }
}

/// `out = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k` over `rows` rows; `gates` is `[rows, blocks·h]`,
/// each child and `out` `[rows, h]`.
pub fn gated_cell(
    gates: &[f32],
    children: &[&[f32]],
    layout: &GateLayout,
    h: usize,
    out: &mut [f32],
) {
    let w = layout.blocks * h;
    let mut s = Scratch::new(h);
    for (r, o) in out.chunks_exact_mut(h).enumerate() {
        let g = &gates[r * w..(r + 1) * w];
        let blk = |b: usize| &g[b * h..(b + 1) * h];
        sigmoid(&mut s.a, blk(layout.input));
        tanh(&mut s.b, blk(layout.candidate));
        for j in 0..h {
            o[j] = s.a[j] * s.b[j];
        }
        for (child, &f) in children.iter().zip(&layout.forgets) {
            sigmoid(&mut s.f, blk(f));
            let c = &child[r * h..(r + 1) * h];
            for j in 0..h {
                o[j] += s.f[j] * c[j];
            }
        }
    }
}

/// The gradients of [`gated_cell`]: `d_gates` `[rows, blocks·h]` (zeroed here outside the
/// blocks read) and one `[rows, h]` buffer per child.
pub fn gated_cell_backward(
    gates: &[f32],
    children: &[&[f32]],
    grad: &[f32],
    layout: &GateLayout,
    h: usize,
    d_gates: &mut [f32],
    d_children: &mut [&mut [f32]],
) {
    let w = layout.blocks * h;
    let mut s = Scratch::new(h);
    d_gates.fill(0.0);
    for (r, gc) in grad.chunks_exact(h).enumerate() {
        let g = &gates[r * w..(r + 1) * w];
        let blk = |b: usize| &g[b * h..(b + 1) * h];
        let dg = &mut d_gates[r * w..(r + 1) * w];
        sigmoid(&mut s.a, blk(layout.input));
        tanh(&mut s.b, blk(layout.candidate));
        {
            let di = &mut dg[layout.input * h..(layout.input + 1) * h];
            for j in 0..h {
                di[j] = gc[j] * s.b[j] * s.a[j] * (1.0 - s.a[j]);
            }
        }
        {
            let du = &mut dg[layout.candidate * h..(layout.candidate + 1) * h];
            for j in 0..h {
                du[j] = gc[j] * s.a[j] * (1.0 - s.b[j] * s.b[j]);
            }
        }
        for ((child, &f), dc) in children
            .iter()
            .zip(&layout.forgets)
            .zip(d_children.iter_mut())
        {
            sigmoid(&mut s.f, blk(f));
            let c = &child[r * h..(r + 1) * h];
            let dc = &mut dc[r * h..(r + 1) * h];
            let df = &mut dg[f * h..(f + 1) * h];
            for j in 0..h {
                df[j] += gc[j] * c[j] * s.f[j] * (1.0 - s.f[j]);
                dc[j] = gc[j] * s.f[j];
            }
        }
    }
}

/// `out = σ(o) ⊙ tanh(c)`.
pub fn gated_output(gates: &[f32], c: &[f32], layout: &GateLayout, h: usize, out: &mut [f32]) {
    let w = layout.blocks * h;
    let mut s = Scratch::new(h);
    for (r, o) in out.chunks_exact_mut(h).enumerate() {
        let g = &gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
        sigmoid(&mut s.a, g);
        tanh(&mut s.b, &c[r * h..(r + 1) * h]);
        for j in 0..h {
            o[j] = s.a[j] * s.b[j];
        }
    }
}

/// The gradients of [`gated_output`]: `d_gates` (zero outside the output block) and `d_c`.
pub fn gated_output_backward(
    gates: &[f32],
    c: &[f32],
    grad: &[f32],
    layout: &GateLayout,
    h: usize,
    d_gates: &mut [f32],
    d_c: &mut [f32],
) {
    let w = layout.blocks * h;
    let mut s = Scratch::new(h);
    d_gates.fill(0.0);
    for (r, gh) in grad.chunks_exact(h).enumerate() {
        let g = &gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
        sigmoid(&mut s.a, g);
        tanh(&mut s.b, &c[r * h..(r + 1) * h]);
        let d_o = &mut d_gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
        let dc = &mut d_c[r * h..(r + 1) * h];
        for j in 0..h {
            d_o[j] = gh[j] * s.b[j] * s.a[j] * (1.0 - s.a[j]);
            dc[j] = gh[j] * s.a[j] * (1.0 - s.b[j] * s.b[j]);
        }
    }
}

/// `out = s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` for `[batch, k]` selections and
/// `[batch, k, d]` states.
pub fn select_mix(s: &[f32], p: &[f32], l: &[f32], r: &[f32], k: usize, d: usize, out: &mut [f32]) {
    for (b, sel) in s.chunks_exact(k).enumerate() {
        let mut cum = 0f32;
        for (j, &sj) in sel.iter().enumerate() {
            cum += sj;
            let (a, bl, c) = (sj, 1.0 - cum, cum - sj);
            let at = (b * k + j) * d;
            let (p, l, r) = (&p[at..at + d], &l[at..at + d], &r[at..at + d]);
            let o = &mut out[at..at + d];
            for e in 0..d {
                o[e] = a * p[e] + bl * l[e] + c * r[e];
            }
        }
    }
}

/// The gradients of [`select_mix`], written into `d_s` `[batch, k]` and `d_p`, `d_l`, `d_r`
/// `[batch, k, d]`.
#[allow(clippy::too_many_arguments)]
pub fn select_mix_backward(
    s: &[f32],
    p: &[f32],
    l: &[f32],
    r: &[f32],
    grad: &[f32],
    k: usize,
    d: usize,
    d_s: &mut [f32],
    d_p: &mut [f32],
    d_l: &mut [f32],
    d_r: &mut [f32],
) {
    let mut shift = vec![0f32; k];
    for (b, sel) in s.chunks_exact(k).enumerate() {
        let mut cum = 0f32;
        let ds = &mut d_s[b * k..(b + 1) * k];
        for (j, &sj) in sel.iter().enumerate() {
            cum += sj;
            let at = (b * k + j) * d;
            let (pp, ll, rr) = (&p[at..at + d], &l[at..at + d], &r[at..at + d]);
            let g = &grad[at..at + d];
            let (mut own, mut sh) = (0f32, 0f32);
            for e in 0..d {
                own += g[e] * (pp[e] - rr[e]);
                sh += g[e] * (rr[e] - ll[e]);
                d_p[at + e] = g[e] * sj;
                d_l[at + e] = g[e] * (1.0 - cum);
                d_r[at + e] = g[e] * (cum - sj);
            }
            ds[j] = own;
            shift[j] = sh;
        }
        // ∂/∂s_j also gets Σ_{k ≥ j} shift_k: s_j enters every later `cum`.
        let mut tail = 0f32;
        for j in (0..k).rev() {
            tail += shift[j];
            ds[j] += tail;
        }
    }
}

/// The ON-LSTM update `out = f̂ ⊙ c_prev + î ⊙ tanh(g)` over `[n, 4h]` gates (`i, f, g, o`),
/// `[n, c]` master gates and `[n, h]` states.
pub fn ordered_cell(
    gates: &[f32],
    mf: &[f32],
    mi: &[f32],
    cp: &[f32],
    c: usize,
    h: usize,
    out: &mut [f32],
) {
    ordered_rows(gates, mf, mi, c, h, |i, u| {
        out[i] = u.f_hat() * cp[i] + u.i_hat() * u.tu;
    });
}

/// One unit of the ON-LSTM update: the index `k` of its chunk's master gates `f̃`, `ĩ`,
/// `ω = f̃ ĩ`, and its `σ(f)`, `σ(i)`, `tanh(g)`.
struct Unit {
    k: usize,
    ft: f32,
    it: f32,
    w: f32,
    sf: f32,
    si: f32,
    tu: f32,
}

impl Unit {
    /// `f̂ = σ(f) ω + f̃ − ω`.
    fn f_hat(&self) -> f32 {
        self.sf * self.w + self.ft - self.w
    }

    /// `î = σ(i) ω + ĩ − ω`.
    fn i_hat(&self) -> f32 {
        self.si * self.w + self.it - self.w
    }
}

/// Calls `visit(r·h + j, unit)` for every unit of `[n, 4h]` gates (`i, f, g, o`) and `[n, c]`
/// master gates.
fn ordered_rows(
    gates: &[f32],
    mf: &[f32],
    mi: &[f32],
    c: usize,
    h: usize,
    mut visit: impl FnMut(usize, &Unit),
) {
    let s_len = h / c;
    let rows = mf.len() / c.max(1);
    let mut s = Scratch::new(h);
    for r in 0..rows {
        let g = &gates[r * 4 * h..(r + 1) * 4 * h];
        sigmoid(&mut s.a, &g[..h]);
        sigmoid(&mut s.f, &g[h..2 * h]);
        tanh(&mut s.b, &g[2 * h..3 * h]);
        for j in 0..h {
            let k = r * c + j / s_len;
            let (ft, it) = (mf[k], mi[k]);
            let unit = Unit {
                k,
                ft,
                it,
                w: ft * it,
                sf: s.f[j],
                si: s.a[j],
                tu: s.b[j],
            };
            visit(r * h + j, &unit);
        }
    }
}

/// The gradients of [`ordered_cell`]: `d_gates` `[n, 4h]` (zero in the output block),
/// `d_mf`, `d_mi` `[n, c]`, `d_cp` `[n, h]`.
#[allow(clippy::too_many_arguments)]
pub fn ordered_cell_backward(
    gates: &[f32],
    mf: &[f32],
    mi: &[f32],
    cp: &[f32],
    grad: &[f32],
    c: usize,
    h: usize,
    d_gates: &mut [f32],
    d_mf: &mut [f32],
    d_mi: &mut [f32],
    d_cp: &mut [f32],
) {
    ordered_backward(gates, mf, mi, c, h, d_gates, d_mf, d_mi, |i, f_hat| {
        d_cp[i] = grad[i] * f_hat;
        (grad[i] * cp[i], grad[i])
    });
}

/// `out = [f̂ | î ⊙ tanh(g)]` `[n, 2h]` from gates `[n, 4h]` (`i, f, g, o`) and master gates
/// `[n, c]`: the ON-LSTM gate activations without the cell update.
pub fn ordered_gates(gates: &[f32], mf: &[f32], mi: &[f32], c: usize, h: usize, out: &mut [f32]) {
    ordered_rows(gates, mf, mi, c, h, |i, u| {
        let (r, j) = (i / h, i % h);
        out[r * 2 * h + j] = u.f_hat();
        out[r * 2 * h + h + j] = u.i_hat() * u.tu;
    });
}

/// The gradients of [`ordered_gates`] given `grad` `[n, 2h]`: `d_gates` `[n, 4h]` (zero in the
/// output block), `d_mf`, `d_mi` `[n, c]`.
#[allow(clippy::too_many_arguments)]
pub fn ordered_gates_backward(
    gates: &[f32],
    mf: &[f32],
    mi: &[f32],
    grad: &[f32],
    c: usize,
    h: usize,
    d_gates: &mut [f32],
    d_mf: &mut [f32],
    d_mi: &mut [f32],
) {
    ordered_backward(gates, mf, mi, c, h, d_gates, d_mf, d_mi, |i, _| {
        let (r, j) = (i / h, i % h);
        (grad[r * 2 * h + j], grad[r * 2 * h + h + j])
    });
}

/// The backward pass shared by [`ordered_cell_backward`] and [`ordered_gates_backward`]: for the
/// flat element index `r·h + j` and its `f̂`, `upstream` gives the gradients reaching `f̂` and
/// `î ⊙ tanh(g)`.
#[allow(clippy::too_many_arguments)]
fn ordered_backward(
    gates: &[f32],
    mf: &[f32],
    mi: &[f32],
    c: usize,
    h: usize,
    d_gates: &mut [f32],
    d_mf: &mut [f32],
    d_mi: &mut [f32],
    mut upstream: impl FnMut(usize, f32) -> (f32, f32),
) {
    d_gates.fill(0.0);
    d_mf.fill(0.0);
    d_mi.fill(0.0);
    ordered_rows(gates, mf, mi, c, h, |i, u| {
        let (d_fhat, gu) = upstream(i, u.f_hat());
        let d_ihat = gu * u.tu;
        let (r, j) = (i / h, i % h);
        let dg = &mut d_gates[r * 4 * h..(r + 1) * 4 * h];
        dg[j] = d_ihat * u.w * u.si * (1.0 - u.si);
        dg[h + j] = d_fhat * u.w * u.sf * (1.0 - u.sf);
        dg[2 * h + j] = gu * u.i_hat() * (1.0 - u.tu * u.tu);
        let d_w = d_fhat * (u.sf - 1.0) + d_ihat * (u.si - 1.0);
        d_mf[u.k] += d_fhat + d_w * u.it;
        d_mi[u.k] += d_ihat + d_w * u.ft;
    });
}

/// `out[b, k] = [x[b, k] ; x[b, k + 1]]` for `x` `[b, m, d]`.
/// One LSTM step for `pre.len() / 4h` rows: from pre-activations `[i, f, g, o]` (each `h`
/// wide) and `c_prev`, writes the activated gates `σ(i), σ(f), tanh(g), σ(o)` into `act`,
/// `c = σ(f) c_prev + σ(i) tanh(g)` into `c` and `h = σ(o) tanh(c)` into `h_out`.
pub fn lstm_step(
    pre: &[f32],
    c_prev: &[f32],
    h: usize,
    act: &mut [f32],
    h_out: &mut [f32],
    c: &mut [f32],
) {
    let w = 4 * h;
    for ((pre, act), (cp, (ho, cn))) in pre.chunks_exact(w).zip(act.chunks_exact_mut(w)).zip(
        c_prev
            .chunks_exact(h)
            .zip(h_out.chunks_exact_mut(h).zip(c.chunks_exact_mut(h))),
    ) {
        sigmoid(&mut act[..2 * h], &pre[..2 * h]);
        tanh(&mut act[2 * h..3 * h], &pre[2 * h..3 * h]);
        sigmoid(&mut act[3 * h..], &pre[3 * h..]);
        let (i, rest) = act.split_at(h);
        let (f, rest) = rest.split_at(h);
        let (g, o) = rest.split_at(h);
        for j in 0..h {
            cn[j] = f[j] * cp[j] + i[j] * g[j];
        }
        tanh(ho, cn);
        for (hv, ov) in ho.iter_mut().zip(o) {
            *hv *= ov;
        }
    }
}

/// The backward pass of [`lstm_step`] for `act.len() / 4h` rows, given the gradients `g_h`,
/// `g_c` reaching the step's `h` and `c`: writes the pre-activations' gradient into `d_pre`
/// and `c_prev`'s into `d_c_prev`. `scratch` holds `h` values.
#[allow(clippy::too_many_arguments)]
pub fn lstm_step_backward(
    act: &[f32],
    c: &[f32],
    c_prev: &[f32],
    g_h: &[f32],
    g_c: &[f32],
    h: usize,
    d_pre: &mut [f32],
    d_c_prev: &mut [f32],
    scratch: &mut [f32],
) {
    let w = 4 * h;
    let tc = &mut scratch[..h];
    for (row, (act, d_pre)) in act
        .chunks_exact(w)
        .zip(d_pre.chunks_exact_mut(w))
        .enumerate()
    {
        let span = row * h..(row + 1) * h;
        let (c, cp, gh, gc) = (
            &c[span.clone()],
            &c_prev[span.clone()],
            &g_h[span.clone()],
            &g_c[span.clone()],
        );
        let dcp = &mut d_c_prev[span];
        tanh(tc, c);
        let (i, rest) = act.split_at(h);
        let (f, rest) = rest.split_at(h);
        let (g, o) = rest.split_at(h);
        let (di, rest) = d_pre.split_at_mut(h);
        let (df, rest) = rest.split_at_mut(h);
        let (dg, d_o) = rest.split_at_mut(h);
        for j in 0..h {
            let t = tc[j];
            let dc = gc[j] + gh[j] * o[j] * (1.0 - t * t);
            d_o[j] = gh[j] * t * o[j] * (1.0 - o[j]);
            di[j] = dc * g[j] * i[j] * (1.0 - i[j]);
            dg[j] = dc * i[j] * (1.0 - g[j] * g[j]);
            df[j] = dc * cp[j] * f[j] * (1.0 - f[j]);
            dcp[j] = dc * f[j];
        }
    }
}

pub fn adjacent_pairs(x: &[f32], (b, m, d): (usize, usize, usize), out: &mut [f32]) {
    for bi in 0..b {
        for k in 0..m - 1 {
            let src = &x[(bi * m + k) * d..(bi * m + k + 2) * d];
            let o = (bi * (m - 1) + k) * 2 * d;
            out[o..o + 2 * d].copy_from_slice(src);
        }
    }
}

/// The gradient of [`adjacent_pairs`]: `dx[b, k] = g[b, k][..d] + g[b, k − 1][d..]`.
pub fn adjacent_pairs_backward(g: &[f32], (b, m, d): (usize, usize, usize), dx: &mut [f32]) {
    dx.fill(0.0);
    for bi in 0..b {
        for k in 0..m - 1 {
            let o = (bi * (m - 1) + k) * 2 * d;
            let (left, right) = g[o..o + 2 * d].split_at(d);
            let (l, r) = ((bi * m + k) * d, (bi * m + k + 1) * d);
            for j in 0..d {
                dx[l + j] += left[j];
                dx[r + j] += right[j];
            }
        }
    }
}

/// `c_t = a_t ⊙ c_{t−1} + u_t` over `[b, t, h]` rows, `c_{−1}` from `c0` `[b, h]`.
pub fn linear_scan(
    a: &[f32],
    u: &[f32],
    c0: &[f32],
    (b, t, h): (usize, usize, usize),
    out: &mut [f32],
) {
    for bi in 0..b {
        for s in 0..t {
            let o = (bi * t + s) * h;
            let (done, rest) = out.split_at_mut(o);
            let prev = if s == 0 {
                &c0[bi * h..(bi + 1) * h]
            } else {
                &done[o - h..o]
            };
            let (a, u, dst) = (&a[o..o + h], &u[o..o + h], &mut rest[..h]);
            for j in 0..h {
                dst[j] = a[j] * prev[j] + u[j];
            }
        }
    }
}

/// The gradients of [`linear_scan`]: `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`, `∂a_t = δ_t ⊙ c_{t−1}`,
/// `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0` (the outputs `c` are recomputed).
#[allow(clippy::too_many_arguments)]
pub fn linear_scan_backward(
    a: &[f32],
    u: &[f32],
    c0: &[f32],
    grad: &[f32],
    (b, t, h): (usize, usize, usize),
    d_a: &mut [f32],
    d_u: &mut [f32],
    d_c0: &mut [f32],
) {
    let mut c = vec![0f32; b * t * h];
    linear_scan(a, u, c0, (b, t, h), &mut c);
    for bi in 0..b {
        let carry = &mut d_c0[bi * h..(bi + 1) * h];
        carry.fill(0.0);
        for s in (0..t).rev() {
            let o = (bi * t + s) * h;
            let prev = if s == 0 {
                &c0[bi * h..(bi + 1) * h]
            } else {
                &c[o - h..o]
            };
            for j in 0..h {
                let delta = grad[o + j] + carry[j];
                d_u[o + j] = delta;
                d_a[o + j] = delta * prev[j];
                carry[j] = a[o + j] * delta;
            }
        }
    }
}

/// `Σ x` in eight interleaved partial sums (one vector register once vectorised: a single
/// running sum is a serial chain that LLVM may not reorder).
#[inline(always)]
fn sum8(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ (x − m)²` likewise.
#[inline(always)]
fn sum_sq8(x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|&v| (v - m) * (v - m)).sum();
    for c in chunks {
        for l in 0..8 {
            let v = c[l] - m;
            acc[l] += v * v;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ a ⊙ (x − m)` likewise.
#[inline(always)]
fn sum_dot8(a: &[f32], x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cx) = (a.chunks_exact(8), x.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cx.remainder())
        .map(|(&a, &v)| a * (v - m))
        .sum();
    for (a, x) in ca.zip(cx) {
        for l in 0..8 {
            acc[l] += a[l] * (x[l] - m);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Mean and `1 / sqrt(var + ε)` of one row (two passes).
#[inline(always)]
fn row_stats(x: &[f32], epsilon: f32) -> (f32, f32) {
    let n = x.len().max(1) as f32;
    let mean = sum8(x) / n;
    let var = sum_sq8(x, mean) / n;
    (mean, 1.0 / (var + epsilon).sqrt())
}

#[inline(always)]
fn layer_norm_backward_body(
    dx: &mut [f32],
    stats: &mut [f32],
    x: &[f32],
    grad: &[f32],
    d: usize,
    gamma: Option<&[f32]>,
    epsilon: f32,
) {
    let mut gh = vec![0f32; d];
    for (((o, st), x), g) in dx
        .chunks_exact_mut(d)
        .zip(stats.chunks_exact_mut(2))
        .zip(x.chunks_exact(d))
        .zip(grad.chunks_exact(d))
    {
        let (mean, rstd) = row_stats(x, epsilon);
        st.copy_from_slice(&[mean, rstd]);
        match gamma {
            Some(gamma) => {
                for ((h, &g), &w) in gh.iter_mut().zip(g).zip(gamma) {
                    *h = g * w;
                }
            }
            None => gh.copy_from_slice(g),
        }
        let mean_g = sum8(&gh) / d as f32;
        let mean_gx = sum_dot8(&gh, x, mean) * rstd / d as f32;
        for ((o, &x), &h) in o.iter_mut().zip(x).zip(&gh) {
            let xhat = (x - mean) * rstd;
            *o = (h - mean_g - xhat * mean_gx) * rstd;
        }
    }
}

#[inline(always)]
fn layer_norm_affine_backward_body(
    d_gamma: &mut [f32],
    d_beta: &mut [f32],
    stats: &[f32],
    x: &[f32],
    grad: &[f32],
    d: usize,
) {
    d_gamma.fill(0.0);
    d_beta.fill(0.0);
    for ((st, x), g) in stats
        .chunks_exact(2)
        .zip(x.chunks_exact(d))
        .zip(grad.chunks_exact(d))
    {
        let (mean, rstd) = (st[0], st[1]);
        for (((dg, db), &x), &g) in d_gamma.iter_mut().zip(d_beta.iter_mut()).zip(x).zip(g) {
            *dg += g * (x - mean) * rstd;
            *db += g;
        }
    }
}

/// The layer-norm backward loops compiled for AVX2 + FMA, chosen at run time like sigmoid and tanh.
#[cfg(target_arch = "x86_64")]
mod avx2_norm {
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn layer_norm_backward(
        dx: &mut [f32],
        stats: &mut [f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
        gamma: Option<&[f32]>,
        epsilon: f32,
    ) {
        super::layer_norm_backward_body(dx, stats, x, grad, d, gamma, epsilon)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn layer_norm_affine_backward(
        d_gamma: &mut [f32],
        d_beta: &mut [f32],
        stats: &[f32],
        x: &[f32],
        grad: &[f32],
        d: usize,
    ) {
        super::layer_norm_affine_backward_body(d_gamma, d_beta, stats, x, grad, d)
    }
}

/// `dx` of layer normalisation (width `d`, `f32` statistics) for the rows of `x` (statistics
/// recomputed, and written to `stats` as `(mean, 1/σ)` per row for
/// [`layer_norm_affine_backward`]): `dx = (ĝ − mean(ĝ) − x̂ ⊙ mean(ĝ ⊙ x̂)) / σ`, `ĝ = g ⊙ γ`
/// (`g` without `γ`).
pub fn layer_norm_backward(
    dx: &mut [f32],
    stats: &mut [f32],
    x: &[f32],
    grad: &[f32],
    d: usize,
    gamma: Option<&[f32]>,
    epsilon: f64,
) {
    if d == 0 {
        return;
    }
    let epsilon = epsilon as f32;
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2_norm::layer_norm_backward(dx, stats, x, grad, d, gamma, epsilon) };
    }
    layer_norm_backward_body(dx, stats, x, grad, d, gamma, epsilon)
}

/// `dγ = Σ_rows g ⊙ x̂` and `dβ = Σ_rows g` of layer normalisation, with each row's
/// `(mean, 1/σ)` from [`layer_norm_backward`].
pub fn layer_norm_affine_backward(
    d_gamma: &mut [f32],
    d_beta: &mut [f32],
    stats: &[f32],
    x: &[f32],
    grad: &[f32],
    d: usize,
) {
    if d == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe {
            avx2_norm::layer_norm_affine_backward(d_gamma, d_beta, stats, x, grad, d)
        };
    }
    layer_norm_affine_backward_body(d_gamma, d_beta, stats, x, grad, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigmoid_and_tanh_match_libm() {
        let xs: Vec<f32> = (-400..=400)
            .map(|i| i as f32 * 0.25)
            .chain([1e-8, -1e-8, 0.0])
            .collect();
        let mut s = vec![0.0; xs.len()];
        let mut t = vec![0.0; xs.len()];
        sigmoid(&mut s, &xs);
        tanh(&mut t, &xs);
        for ((&x, &s), &t) in xs.iter().zip(&s).zip(&t) {
            let s_ref = 1.0 / (1.0 + (-x as f64).exp());
            assert!(
                (s as f64 - s_ref).abs() < 2e-7,
                "σ({x}) = {s}, want {s_ref}"
            );
            let t_ref = (x as f64).tanh();
            assert!(
                (t as f64 - t_ref).abs() < 3e-7,
                "tanh({x}) = {t}, want {t_ref}"
            );
        }
    }

    #[test]
    fn gelu_and_its_slope_match_the_exact_formula() {
        // erf through f64: erf(z) = 1 − erfc(z), with erfc from its continued fraction is
        // overkill here; the f64 identity Φ(x) = (1 + erf(x/√2))/2 is checked against a
        // numerically integrated normal density instead.
        fn phi(x: f64) -> f64 {
            // Simpson's rule over [−10, x] (the density below −10 is < 1e-22).
            let (a, n) = (-10.0f64, 20_000);
            if x <= a {
                return 0.0;
            }
            let h = (x - a) / n as f64;
            let f = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let mut s = f(a) + f(x);
            for i in 1..n {
                s += f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
            }
            s * h / 3.0
        }
        let xs: Vec<f32> = (-80..=80)
            .map(|i| i as f32 * 0.1)
            .chain([1e-6, -1e-6, 0.0])
            .collect();
        let ones = vec![1.0; xs.len()];
        let (mut g, mut d) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
        gelu(&mut g, &xs);
        gelu_backward(&mut d, &xs, &ones);
        for ((&x, &g), &d) in xs.iter().zip(&g).zip(&d) {
            let x64 = x as f64;
            let want = x64 * phi(x64);
            assert!(
                (g as f64 - want).abs() < 3e-7 * (1.0 + x64.abs()),
                "GELU({x}) = {g}, want {want}"
            );
            let pdf = (-0.5 * x64 * x64).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let slope = phi(x64) + x64 * pdf;
            assert!(
                (d as f64 - slope).abs() < 5e-7,
                "GELU'({x}) = {d}, want {slope}"
            );
        }
        let (mut g, mut d) = ([0.0; 3], [0.0; 3]);
        gelu(&mut g, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        gelu_backward(&mut d, &[f32::NAN, 40.0, -40.0], &[1.0; 3]);
        assert!(g[0].is_nan() && d[0].is_nan());
        assert_eq!((g[1], g[2]), (f32::INFINITY, 0.0));
        assert_eq!((d[1], d[2]), (1.0, 0.0));
    }

    #[test]
    fn nan_and_infinities() {
        let xs = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        let mut s = [0.0; 3];
        let mut t = [0.0; 3];
        sigmoid(&mut s, &xs);
        tanh(&mut t, &xs);
        assert!(s[0].is_nan() && t[0].is_nan());
        assert_eq!((s[1], s[2]), (1.0, 0.0));
        assert_eq!((t[1], t[2]), (1.0, -1.0));
    }
}
