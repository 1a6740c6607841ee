//! Reductions over contiguous `f32` slices in eight interleaved partial sums, for the CPU
//! loops. A single running sum is a serial chain of dependent additions that LLVM may not
//! reorder (floating-point addition is not associative), so it runs one element per addition's
//! latency; eight independent sums fill one 256-bit register (two SSE registers on the baseline
//! target) once vectorised. Inlined into their callers, they take the callers' instruction set
//! (the `#[target_feature(enable = "avx2,fma")]` copies chosen at run time).

// The loops index several equal-length chunks at once; indices keep them readable and LLVM
// vectorises them.
#![allow(clippy::needless_range_loop)]

/// `Σ x` in eight interleaved partial sums (one vector register once vectorised: a single
/// running sum is a serial chain that LLVM may not reorder).
#[inline(always)]
pub(crate) fn sum8(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let whole = x.len() / 8 * 8;
    let tail: f32 = x[whole..].iter().sum();
    for c in (0..whole).step_by(8) {
        let c = chunk(x, c);
        for l in 0..8 {
            acc[l] += c[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `x[at..at + 8]` as an array: one bounds check per chunk. The loops here index chunks by
/// position rather than zipping `chunks_exact` iterators: in the AVX-512 copies of the Gumbel
/// Tree-LSTM's backward (`ops::gumbel_tree`), LLVM left `Zip::next` and
/// `ChunksExact::__iterator_get_unchecked` as calls in the dot products' loops, which then ran
/// one scalar multiply-add per call (16% of `gumbel/length/d100-affine-n64`'s samples in those
/// two functions alone, 2026-12-02, Xeon model 167).
#[inline(always)]
fn chunk(x: &[f32], at: usize) -> &[f32; 8] {
    x[at..at + 8].try_into().expect("eight values")
}

/// `Σ (x − m)²` likewise.
#[inline(always)]
pub(crate) fn sum_sq8(x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; 8];
    let whole = x.len() / 8 * 8;
    let tail: f32 = x[whole..].iter().map(|&v| (v - m) * (v - m)).sum();
    for c in (0..whole).step_by(8) {
        let c = chunk(x, c);
        for l in 0..8 {
            let v = c[l] - m;
            acc[l] += v * v;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ a ⊙ (x − m)` likewise.
#[inline(always)]
pub(crate) fn sum_dot8(a: &[f32], x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; 8];
    let n = a.len().min(x.len());
    let whole = n / 8 * 8;
    let tail: f32 = a[whole..n]
        .iter()
        .zip(&x[whole..n])
        .map(|(&a, &v)| a * (v - m))
        .sum();
    for c in (0..whole).step_by(8) {
        let (a, x) = (chunk(a, c), chunk(x, c));
        for l in 0..8 {
            acc[l] += a[l] * (x[l] - m);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ a ⊙ b` likewise: [`sum_dot8`] with `m = 0` (`x − 0` is `x` exactly, and the
/// subtraction folds away once inlined).
#[inline(always)]
pub(crate) fn dot8(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    sum_dot8(a, b, 0.0)
}

/// Whether every value of `x` is finite: `Σ 0·x` in eight partial sums, which is zero when
/// they all are and NaN when one is infinite or NaN (vectorised, where `all(is_finite)` stops
/// at each element to branch).
#[inline(always)]
pub(crate) fn all_finite(x: &[f32]) -> bool {
    let mut acc = [0f32; 8];
    let whole = x.len() / 8 * 8;
    for c in (0..whole).step_by(8) {
        let c = chunk(x, c);
        for l in 0..8 {
            acc[l] += 0.0 * c[l];
        }
    }
    acc.iter().chain(&x[whole..]).all(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sums_equal_the_plain_ones() {
        for len in [0usize, 1, 7, 8, 9, 23, 64, 101] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let close = |x: f32, y: f64| assert!((x as f64 - y).abs() < 1e-4, "{len}: {x} vs {y}");
            close(sum8(&a), a.iter().map(|&v| v as f64).sum());
            close(
                dot8(&a, &b),
                a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum(),
            );
            let m = 0.25f32;
            close(
                sum_sq8(&a, m),
                a.iter().map(|&v| ((v - m) as f64).powi(2)).sum(),
            );
            close(
                sum_dot8(&b, &a, m),
                a.iter()
                    .zip(&b)
                    .map(|(&x, &g)| g as f64 * (x - m) as f64)
                    .sum(),
            );
        }
    }

    #[test]
    fn all_finite_finds_any_non_finite_value_at_any_place() {
        for len in [0usize, 1, 7, 8, 9, 23, 64, 101] {
            let x: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 1e30).collect();
            assert!(all_finite(&x), "{len}");
            for at in 0..len {
                for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                    let mut y = x.clone();
                    y[at] = bad;
                    assert!(!all_finite(&y), "{len}: {bad} at {at}");
                }
            }
        }
    }
}
