//! What the fused-op tests share: deterministic fixtures, tolerance checks, central
//! differences, and the fused-against-plain-ops gradient comparison.

use burn::backend::NdArray;
use burn::prelude::*;
use burn::tensor::TensorData;

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

pub fn tensor<B: Backend, const D: usize>(
    shape: [usize; D],
    scale: f64,
    seed: u64,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    from_f64(values(n, scale, seed), shape)
}

/// A tensor of the backend's own float type (the device's default dtype is f32 otherwise).
pub fn from_f64<B: Backend, const D: usize>(v: Vec<f64>, shape: [usize; D]) -> Tensor<B, D> {
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(TensorData::new(v, shape), (&Default::default(), dtype))
}

pub fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

pub fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}: entry {k}: {x} vs {y}"
        );
    }
}

/// Central differences of `f` with respect to every entry of each input, with step `eps`.
pub fn central_differences<const D: usize, const N: usize>(
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
            (
                $f::<::burn::backend::Autodiff<::burn::backend::Flex>>(true $(, $arg)*),
                $f::<::burn::backend::Autodiff<::burn::backend::Flex>>(false $(, $arg)*),
            ),
            (
                $f::<::burn::backend::Autodiff<::burn::backend::NdArray>>(true $(, $arg)*),
                $f::<::burn::backend::Autodiff<::burn::backend::NdArray>>(false $(, $arg)*),
            ),
        ] {
            for (k, name) in $names.iter().enumerate() {
                $crate::support::assert_close(
                    &fused[k],
                    &want[k],
                    $tol,
                    &format!("{name} {}", $context),
                );
            }
        }
    };
}
pub(crate) use assert_fused_agrees;
