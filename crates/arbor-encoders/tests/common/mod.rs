//! Helpers shared by the encoder tests.
#![allow(dead_code)]

use arbor_cells::ArborBackend;
use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::TensorData;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The CPU backend the tests run on.
pub type Fx = Flex;
/// Autodiff over [`Fx`].
pub type Ad = Autodiff<Flex>;

/// The default device of any backend.
pub fn dev<B: ArborBackend>() -> B::Device {
    Default::default()
}

/// Seeded values in `[-scale, scale]`.
pub fn values(n: usize, scale: f64, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| ((rng.random::<f64>() * 2.0 - 1.0) * scale) as f32)
        .collect()
}

/// A tensor of seeded values.
pub fn tensor<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    scale: f64,
    seed: u64,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, scale, seed), shape), &dev::<B>())
}

/// A padded batch `[lengths.len(), time, d]` of seeded embeddings whose padded positions hold
/// large garbage (so any leak of padding into a real result shows).
pub fn padded_batch<B: ArborBackend>(
    lengths: &[usize],
    time: usize,
    d: usize,
    seed: u64,
) -> Tensor<B, 3> {
    let real = values(lengths.len() * time * d, 1.0, seed);
    let garbage = values(lengths.len() * time * d, 40.0, seed + 1000);
    let mut v = Vec::with_capacity(real.len());
    for (b, &len) in lengths.iter().enumerate() {
        for t in 0..time {
            for j in 0..d {
                let k = (b * time + t) * d + j;
                v.push(if t < len { real[k] } else { garbage[k] });
            }
        }
    }
    Tensor::from_data(TensorData::new(v, [lengths.len(), time, d]), &dev::<B>())
}

/// Example `b` of a padded batch, alone and unpadded: `[1, len, d]`.
pub fn alone<B: ArborBackend>(x: &Tensor<B, 3>, b: usize, len: usize) -> Tensor<B, 3> {
    x.clone().narrow(0, b, 1).narrow(1, 0, len)
}

/// All values of a float tensor as f64.
pub fn to_vec<B: ArborBackend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Row `b` of a `[batch, d]` tensor.
pub fn row<B: ArborBackend>(t: &Tensor<B, 2>, b: usize) -> Vec<f64> {
    to_vec(t.clone().narrow(0, b, 1))
}

/// Asserts two vectors agree to an absolute-plus-relative tolerance.
pub fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())),
            "{what}: entry {k}: {x} vs {y} (tol {tol})"
        );
    }
}

/// Largest absolute difference between two vectors.
pub fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}
