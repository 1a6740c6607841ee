//! What the R2D2 tests share: the serial guard for the process-wide RNG, a seeded
//! composition function, and host reads and comparisons of tensors.

use arbor_encoders::r2d2::{Composition, CompositionConfig};
use burn::prelude::*;

use crate::common::{dev, Fx};

/// The backend RNG is process-global: tests that seed it take this lock.
pub static SEED: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn composition(d: usize, seed: u64) -> Composition<Fx> {
    let _lock = SEED.lock().unwrap_or_else(|e| e.into_inner());
    Fx::seed(&dev::<Fx>(), seed);
    CompositionConfig::new(d)
        .with_n_layers(2)
        .with_n_heads(2)
        .init(&dev::<Fx>())
}

pub fn rows(t: Tensor<Fx, 2>) -> Vec<Vec<f32>> {
    let [n, d] = t.dims();
    let v: Vec<f32> = t.into_data().convert::<f32>().into_vec().unwrap();
    (0..n).map(|i| v[i * d..(i + 1) * d].to_vec()).collect()
}

pub fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{what}: {x} vs {y}\n{a:?}\n{b:?}");
    }
}
