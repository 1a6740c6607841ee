//! The activations alone: `sigmoid`, `tanh`, the exact GELU and ReLU, any shape, one op and
//! one autodiff node each; also the SIMD sigmoid and tanh every gated kernel is built on.
//!
//! The CPU loops compute sigmoid and tanh eight lanes at a time with `wide`'s vectorised `exp`
//! (the backends' elementwise ops call scalar libm `expf`/`tanhf`). Both are written around
//! `t = exp(−|x|)` (or `exp(−2|x|)`), which never overflows, and NaN inputs give NaN.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// An elementwise activation with a fused kernel: see [`sigmoid`], [`tanh`], [`gelu`] and
/// [`relu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// The logistic sigmoid `σ(x) = 1 / (1 + e^{−x})`.
    Sigmoid,
    /// The hyperbolic tangent.
    Tanh,
    /// The exact GELU `x·Φ(x) = x·(1 + erf(x/√2))/2` (Hendrycks & Gimpel 2016), as Burn's `gelu`.
    Gelu,
    /// `max(x, 0)`, as Burn's `relu`; NaN stays NaN (as PyTorch and Burn's generic `relu`;
    /// Flex's own gives 0); the gradient at 0 is 0.
    Relu,
}

impl Activation {
    /// Whether the gradient is computed from the input `x` (GELU) rather than from the
    /// output `y` (sigmoid, tanh, ReLU: `y > 0` exactly where `x > 0`): what the autodiff node
    /// keeps for the backward pass.
    pub fn backward_from_input(self) -> bool {
        matches!(self, Activation::Gelu)
    }
}

/// `σ(x)` elementwise, one op (and one autodiff node). On the CPU backends it runs eight lanes
/// at a time on contiguous memory (a strided view is copied once), where Burn's own sigmoid is
/// several ops of scalar `exp` over strided iteration.
///
/// # Shapes
/// - `x`, output: any shape
pub fn sigmoid<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Sigmoid)
}

/// `tanh(x)` elementwise, one op (and one autodiff node); see [`sigmoid`].
///
/// # Shapes
/// - `x`, output: any shape
pub fn tanh<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Tanh)
}

/// The exact GELU `x·Φ(x)` elementwise (Burn's `gelu`), one op (and one autodiff node). On the
/// CPU backends it runs eight lanes at a time with a vectorised `erf` (|error| < 2·10⁻⁷), where
/// Burn's is scalar libm `erff` forward and several ops backward.
///
/// # Shapes
/// - `x`, output: any shape
pub fn gelu<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Gelu)
}

/// `max(x, 0)` elementwise (Burn's `relu`), one op (and one autodiff node). On the CPU backends
/// its loop runs on rayon's pool, where Flex's runs on the calling thread alone (the
/// Transformer's feed-forward activation).
///
/// # Shapes
/// - `x`, output: any shape
pub fn relu<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Relu)
}

fn activate<B: ArborBackend, const D: usize>(x: Tensor<B, D>, act: Activation) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::activation(
        x.into_primitive().tensor(),
        act,
    )))
}

/// The activations in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::activation::{gelu, relu, sigmoid, tanh};
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorMetadata;

    use super::Activation;
    use crate::reference::{rows, unrows};

    /// `√2`, and `1/√(2π)` (the standard normal density at 0).
    const SQRT_2: f64 = std::f64::consts::SQRT_2;

    const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

    /// `σ(x)` or `tanh(x)` with Burn's own activations.
    pub fn activation<B: Backend>(x: FloatTensor<B>, act: Activation) -> FloatTensor<B> {
        let shape = x.shape();
        let x = rows::<B>(x);
        let y = match act {
            Activation::Sigmoid => sigmoid(x),
            Activation::Tanh => tanh(x),
            Activation::Gelu => gelu(x),
            Activation::Relu => relu(x),
        };
        unrows::<B>(y, shape)
    }

    /// The gradient of [`activation`] from its output `y` (sigmoid, tanh, ReLU) or its input
    /// (GELU: `Φ(x) + x·φ(x)`).
    pub fn activation_backward<B: Backend>(
        y: FloatTensor<B>,
        grad: FloatTensor<B>,
        act: Activation,
    ) -> FloatTensor<B> {
        let shape = y.shape();
        let (y, g) = (rows::<B>(y), rows::<B>(grad));
        let slope = match act {
            Activation::Sigmoid => y.clone().mul(y.neg().add_scalar(1.0)),
            Activation::Tanh => y.clone().mul(y).neg().add_scalar(1.0),
            // Burn's `relu_backward`: the gradient passes where `y ≤ 0` is false (NaN included).
            Activation::Relu => {
                return unrows::<B>(g.mask_fill(y.lower_equal_elem(0.0), 0.0), shape)
            }
            Activation::Gelu => {
                let x = y;
                let cdf = x
                    .clone()
                    .div_scalar(SQRT_2)
                    .erf()
                    .add_scalar(1.0)
                    .mul_scalar(0.5);
                let pdf = x
                    .clone()
                    .powi_scalar(2)
                    .mul_scalar(-0.5)
                    .exp()
                    .mul_scalar(FRAC_1_SQRT_2PI);
                cdf.add(x.mul(pdf))
            }
        };
        unrows::<B>(g.mul(slope), shape)
    }
}

/// The SIMD loops over contiguous `f32` memory.
pub(crate) mod cpu {
    use wide::{f32x8, CmpEq, CmpGe, CmpLt};

    use crate::isa::widest;

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
        widest!(loops, sigmoid(dst, src) else map8(dst, src, sigmoid8))
    }

    /// `dst = tanh(src)`.
    pub fn tanh(dst: &mut [f32], src: &[f32]) {
        widest!(loops, tanh(dst, src) else map8(dst, src, tanh8))
    }

    /// `max(x, 0)`, NaN kept (zero exactly where `x ≤ 0`, as Burn's generic `relu`): a compare
    /// and a select, which the compiler vectorises for the target it builds for (a branch
    /// around a store would not).
    #[inline(always)]
    pub(crate) fn relu1(x: f32) -> f32 {
        if x <= 0.0 {
            0.0
        } else {
            x
        }
    }

    /// `dst = relu(src)`.
    pub fn relu(dst: &mut [f32], src: &[f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = relu1(x);
        }
    }

    /// Sigmoid, tanh and GELU (forward, and its backward with the gradient's product in the
    /// same pass) one element at a time, for the vectorised loops of [`loops`].
    ///
    /// `wide` picks its instructions when it is compiled, so for the default `x86-64` target its
    /// eight lanes are two SSE halves. These are plain `f32` code (an `exp` by range reduction
    /// and a degree-6 polynomial, Cephes' `expf`, within 2 ulp) that LLVM vectorises to 256-bit
    /// or 512-bit FMA code inside the `#[target_feature]` copies; other CPUs keep the `wide`
    /// path.
    #[cfg(target_arch = "x86_64")]
    pub(crate) mod scalar {
        /// `e^x` for `x ≤ 0`; 0 below −87.3 (where `e^x` leaves the normal range).
        #[inline(always)]
        pub(crate) fn exp_nonpositive(x: f32) -> f32 {
            let under = x < -87.336_54;
            const LOG2E: f32 = std::f32::consts::LOG2_E;
            const LN2_HI: f32 = 0.693_359_4;
            const LN2_LO: f32 = -2.121_944_4e-4;
            // `max` clamps, and maps NaN to the bound too (the callers return NaN themselves), so
            // `k` is always an integer in −126..=0.
            let x = x.max(-87.336_54);
            let k = (x * LOG2E + 0.5).floor();
            let r = k.mul_add(-LN2_LO, k.mul_add(-LN2_HI, x));
            // Cephes' polynomial by Estrin's scheme (pairs, then `r²`, `r⁴`): two dependent
            // multiply-adds after `r⁴` where Horner's rule chains five, so the loops are less
            // bound by latency (`--example activations`, one thread, 4 M floats, interleaved:
            // GELU 17.8–17.9 → 15.4–15.6 ms, sigmoid 11.9–12.1 → 11.7, tanh 12.5 → 12.1–12.2; the
            // same scheme for `erf`'s polynomial made GELU slower, 19.1, and is not used).
            let r2 = r * r;
            let p01 = 1.666_666_5e-1f32.mul_add(r, 0.5);
            let p23 = 8.333_452e-3f32.mul_add(r, 4.166_579_6e-2);
            let p45 = 1.987_569_1e-4f32.mul_add(r, 1.398_199_9e-3);
            let p = (r2 * r2).mul_add(p45, r2.mul_add(p23, p01));
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
        pub(crate) fn sigmoid1(x: f32) -> f32 {
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
        pub(crate) fn tanh1(x: f32) -> f32 {
            let t = exp_nonpositive(-2.0 * x.abs());
            let r = (1.0 - t) / (1.0 + t);
            let r = if x < 0.0 { -r } else { r };
            if x.is_nan() {
                x
            } else {
                r
            }
        }

        /// `erf(z)` for `z ≥ 0` (Abramowitz & Stegun 7.1.26, as `erf_abs8`).
        #[inline(always)]
        fn erf_abs1(z: f32) -> f32 {
            let t = 1.0 / 0.327_591_1f32.mul_add(z, 1.0);
            let mut p = 1.061_405_4f32;
            p = p.mul_add(t, -1.453_152_1);
            p = p.mul_add(t, 1.421_413_7);
            p = p.mul_add(t, -0.284_496_74);
            p = p.mul_add(t, 0.254_829_6);
            1.0 - p * t * exp_nonpositive(-(z * z))
        }

        /// `Φ(x) = (1 + erf(x/√2))/2`.
        #[inline(always)]
        fn normal_cdf1(x: f32) -> f32 {
            let e = erf_abs1(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
            let e = if x < 0.0 { -e } else { e };
            0.5 * (1.0 + e)
        }

        #[inline(always)]
        pub(crate) fn gelu1(x: f32) -> f32 {
            // As `gelu8`: 0 where Φ(x) underflows to 0 (also at −∞).
            let cdf = normal_cdf1(x);
            let r = if cdf == 0.0 { 0.0 } else { x * cdf };
            if x.is_nan() {
                x
            } else {
                r
            }
        }

        /// `g·(Φ(x) + x·φ(x))`.
        #[inline(always)]
        pub(crate) fn gelu_backward1(x: f32, g: f32) -> f32 {
            const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
            let pdf = FRAC_1_SQRT_2PI * exp_nonpositive(-0.5 * x * x);
            let r = x.mul_add(pdf, normal_cdf1(x));
            if x.is_nan() {
                x
            } else {
                r * g
            }
        }
    }

    /// The loops of sigmoid, tanh and GELU over slices, one copy per instruction set
    /// ([`crate::isa::simd_copies`]), called through [`crate::isa::widest`].
    #[cfg(target_arch = "x86_64")]
    mod loops {
        use super::scalar::{gelu1, gelu_backward1, sigmoid1, tanh1};

        crate::isa::simd_copies! {
            fn gelu(dst: &mut [f32], src: &[f32]) {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = gelu1(x);
                }
            }

            fn gelu_backward(dst: &mut [f32], x: &[f32], grad: &[f32]) {
                for ((d, &x), &g) in dst.iter_mut().zip(x).zip(grad) {
                    *d = gelu_backward1(x, g);
                }
            }

            fn sigmoid(dst: &mut [f32], src: &[f32]) {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = sigmoid1(x);
                }
            }

            fn tanh(dst: &mut [f32], src: &[f32]) {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = tanh1(x);
                }
            }
        }

        #[cfg(test)]
        mod tests {
            use crate::isa;

            type Map = unsafe fn(&mut [f32], &[f32]);
            type Zip = unsafe fn(&mut [f32], &[f32], &[f32]);

            /// Each copy this CPU runs: its name, sigmoid, tanh, GELU and GELU's backward.
            fn copies() -> Vec<(&'static str, [Map; 3], Zip)> {
                let mut out: Vec<(&'static str, [Map; 3], Zip)> = Vec::new();
                if isa::avx2_fma() {
                    use super::avx2::*;
                    out.push(("AVX2", [sigmoid, tanh, gelu], gelu_backward));
                }
                if isa::avx512() {
                    use super::avx512::*;
                    out.push(("AVX-512", [sigmoid, tanh, gelu], gelu_backward));
                }
                out
            }

            #[test]
            fn the_vector_loops_match_the_wide_path() {
                let xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
                let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
                for (name, [sigmoid, tanh, _], _) in copies() {
                    for (fast, wide) in [
                        (sigmoid, super::super::sigmoid8 as fn(_) -> _),
                        (tanh, super::super::tanh8),
                    ] {
                        unsafe { fast(&mut a, &xs) };
                        super::super::map8(&mut b, &xs, wide);
                        for ((&x, &p), &q) in xs.iter().zip(&a).zip(&b) {
                            assert!((p - q).abs() <= 2.5e-7, "{name} x = {x}: {p} vs {q}");
                        }
                    }
                }
            }

            /// GELU and its backward (the slope times a gradient that is not 1) against the
            /// `wide` path, over the range where both differ from their limits, at the
            /// underflow edge and at the special values.
            #[test]
            fn the_vector_gelu_loops_match_the_wide_path() {
                let xs: Vec<f32> = (-2000..=2000)
                    .map(|i| i as f32 * 0.01)
                    .chain([-13.0, -13.2, -14.0, -20.0, 20.0, 1e-8, -1e-8, 0.0])
                    .collect();
                let grad: Vec<f32> = (0..xs.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
                let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
                for (name, [_, _, gelu], gelu_backward) in copies() {
                    unsafe { gelu(&mut a, &xs) };
                    super::super::map8(&mut b, &xs, super::super::gelu8);
                    for ((&x, &p), &q) in xs.iter().zip(&a).zip(&b) {
                        let tol = 3e-7 * (1.0 + x.abs());
                        assert!((p - q).abs() <= tol, "{name} gelu({x}): {p} vs {q}");
                    }
                    unsafe { gelu_backward(&mut a, &xs, &grad) };
                    super::super::map8(&mut b, &xs, super::super::gelu_slope8);
                    for (((&x, &p), &q), &g) in xs.iter().zip(&a).zip(&b).zip(&grad) {
                        let tol = 3e-7 * g * (1.0 + x.abs());
                        assert!(
                            (p - q * g).abs() <= tol,
                            "{name} gelu'({x})·{g}: {p} vs {}",
                            q * g
                        );
                    }
                    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
                    let mut out = [0f32; 3];
                    unsafe { gelu(&mut out, &special) };
                    assert!(
                        out[0].is_nan() && out[1] == f32::INFINITY && out[2] == 0.0,
                        "{name} {out:?}"
                    );
                    unsafe { gelu_backward(&mut out, &[f32::NAN, 40.0, -40.0], &[2.0; 3]) };
                    assert!(
                        out[0].is_nan() && out[1] == 2.0 && out[2] == 0.0,
                        "{name} {out:?}"
                    );
                }
            }

            /// Every copy gives the bits of the AVX2 copy (the same source; Rust neither
            /// reassociates nor contracts floating-point operations).
            #[test]
            fn every_copy_gives_the_same_bits() {
                let xs: Vec<f32> = (-3000..=3000).map(|i| i as f32 * 0.013).collect();
                let g: Vec<f32> = xs.iter().map(|x| 1.0 + x.sin()).collect();
                let run = |(fs, back): ([Map; 3], Zip)| -> Vec<Vec<u32>> {
                    let mut outs = Vec::new();
                    for f in fs {
                        let mut o = vec![0f32; xs.len()];
                        unsafe { f(&mut o, &xs) };
                        outs.push(o.iter().map(|v| v.to_bits()).collect());
                    }
                    let mut o = vec![0f32; xs.len()];
                    unsafe { back(&mut o, &xs, &g) };
                    outs.push(o.iter().map(|v| v.to_bits()).collect());
                    outs
                };
                let all = copies();
                if let Some((_, fs, back)) = all.first() {
                    let want = run((*fs, *back));
                    for (name, fs, back) in &all[1..] {
                        assert!(run((*fs, *back)) == want, "{name} differs from AVX2");
                    }
                }
            }
        }
    }

    /// `dst = GELU(src) = src·Φ(src)`.
    pub fn gelu(dst: &mut [f32], src: &[f32]) {
        widest!(loops, gelu(dst, src) else map8(dst, src, gelu8))
    }

    /// `dst = grad ⊙ GELU′(x)`.
    pub fn gelu_backward(dst: &mut [f32], x: &[f32], grad: &[f32]) {
        debug_assert!(dst.len() == x.len() && x.len() == grad.len());
        widest!(
            loops,
            gelu_backward(dst, x, grad) else {
                map8(dst, x, gelu_slope8);
                for (d, g) in dst.iter_mut().zip(grad) {
                    *d *= g;
                }
            }
        )
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
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;

    use super::{cpu, reference, Activation};
    use crate::host::HostTensor;
    use crate::par;

    /// The CPU kernel on `f32` memory, [`reference::activation`] otherwise.
    pub(crate) fn activation<B: Backend>(x: FloatTensor<B>, act: Activation) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        let x = match act {
            Activation::Relu => match relu_in_place(x) {
                Ok(y) => return y,
                Err(x) => x,
            },
            Activation::Sigmoid | Activation::Tanh | Activation::Gelu => x,
        };
        activation_f32(&x, act).unwrap_or_else(|| reference::activation::<B>(x, act))
    }

    /// ReLU written over `x`'s own memory, when no other tensor shares it (the Transformer's
    /// feed-forward product, which nothing else reads): no output buffer to zero or fill.
    /// Gives `x` back otherwise.
    fn relu_in_place<T: HostTensor>(mut x: T) -> Result<T, T> {
        let Some(data) = x.host_mut() else {
            return Err(x);
        };
        par::rows(data.len(), 1, vec![(data, 1)], &|_, o| {
            for v in o[0].iter_mut() {
                *v = cpu::relu1(*v);
            }
        });
        Ok(x)
    }

    fn activation_f32<T: HostTensor>(x: &T, act: Activation) -> Option<T> {
        let xx = x.host()?;
        let shape = x.shape();
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(out.len(), 4, vec![(&mut out, 1)], &|r, o| {
            let src = par::at(&xx, &r, 1);
            match act {
                Activation::Sigmoid => cpu::sigmoid(o[0], src),
                Activation::Tanh => cpu::tanh(o[0], src),
                Activation::Gelu => cpu::gelu(o[0], src),
                Activation::Relu => cpu::relu(o[0], src),
            }
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`reference::activation_backward`] otherwise.
    pub(crate) fn activation_backward<B: Backend>(
        y: FloatTensor<B>,
        grad: FloatTensor<B>,
        act: Activation,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        activation_backward_f32(&y, &grad, act)
            .unwrap_or_else(|| reference::activation_backward::<B>(y, grad, act))
    }

    fn activation_backward_f32<T: HostTensor>(y: &T, grad: &T, act: Activation) -> Option<T> {
        let (yy, g) = (y.host()?, grad.host()?);
        let shape = y.shape();
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(out.len(), 2, vec![(&mut out, 1)], &|r, o| {
            let (y, g) = (par::at(&yy, &r, 1), par::at(&g, &r, 1));
            match act {
                Activation::Sigmoid => {
                    for ((o, y), g) in o[0].iter_mut().zip(y).zip(g) {
                        *o = g * y * (1.0 - y);
                    }
                }
                Activation::Tanh => {
                    for ((o, y), g) in o[0].iter_mut().zip(y).zip(g) {
                        *o = g * (1.0 - y * y);
                    }
                }
                // `y` is the input here (Activation::backward_from_input).
                Activation::Gelu => cpu::gelu_backward(o[0], y, g),
                Activation::Relu => {
                    for ((o, &y), &g) in o[0].iter_mut().zip(y).zip(g) {
                        // As Burn's `relu_backward`: zero where `y ≤ 0` (a NaN passes `g`).
                        *o = if y <= 0.0 { 0.0 } else { g };
                    }
                }
            }
        });
        Some(T::from_f32(out, shape))
    }
}

/// One autodiff node per activation.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use super::Activation;
    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// The backward step of `sigmoid`/`tanh` (from the output) and `gelu` (from the input).
    #[derive(Debug)]
    struct Activate(Activation);

    impl<B: ArborBackend> Backward<B, 1> for Activate {
        type State = FloatTensor<B>;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |y, grad| {
                [B::activation_backward(y, grad, self.0)]
            });
        }
    }

    /// `activation` as one node: it keeps the output (sigmoid, tanh) or the input (GELU).
    pub(crate) fn activation<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        act: Activation,
    ) -> FloatTensor<Autodiff<B, C>> {
        let input = act.backward_from_input().then(|| x.primitive.clone());
        let out = B::activation(x.primitive, act);
        match Activate(act)
            .prepare::<C>([x.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(input.unwrap_or_else(|| out.clone()), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
