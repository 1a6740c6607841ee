//! Helpers shared by this crate's integration tests (`mod common;` in each test file that
//! uses them): the values of a tensor, a relative comparison, and seeded inputs in the
//! backend's own float type.

use burn::prelude::*;

/// A tensor's values as `f64`, row-major.
pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

/// Asserts `|a − b| ≤ tol·(1 + |b|)` element by element, naming `what` and the index.
pub fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// The backend's own float type. Tensors are built with it explicitly: Burn fixes a device's
/// default float type for the whole process on first use, and `NdArray<f32>` and
/// `NdArray<f64>` share one device, so without it the f64 checks would compute in f32 whenever
/// an f32 test of this binary touched the device first.
pub fn own_dtype<B: Backend>() -> burn::tensor::DType {
    <B::FloatElem as burn::tensor::Element>::dtype()
}

/// Values in `[lo, hi)` from a seeded xorshift generator: the inputs are the same in every run
/// whatever else runs at the same time (the backends' own generator is global and shared by the
/// tests of this binary, which run in parallel, so a case could get different numbers each
/// run and fail rarely).
pub fn seeded<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    lo: f64,
    hi: f64,
) -> Tensor<B, D> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * ((state >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect();
    Tensor::from_data(
        TensorData::new(v, shape),
        (&Default::default(), own_dtype::<B>()),
    )
}
