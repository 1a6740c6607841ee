//! The suite: every workload, with fixed parameters and seeded inputs.
//!
//! Each encoder family has its own module returning its workloads and the ratios derived
//! from them. To add a family: a module with `workloads::<B>(device)` and `ratios()`, and a line
//! in [`suite`] and [`ratio_specs`].

use arbor_cells::ArborBackend;
use burn::backend::Autodiff;
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::harness::Workload;
use crate::report::RatioSpec;

pub mod cells;
pub mod gumbel;
pub mod r2d2;
pub mod spinn;
pub mod transformer;

/// Every workload of the suite, in order, for backend `B` (timed in forward mode on `B` and in
/// forward+backward mode on `Autodiff<B>`).
pub fn suite<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    let mut all = Vec::new();
    all.extend(cells::workloads::<B>(device));
    all.extend(gumbel::workloads::<B>(device));
    all.extend(transformer::workloads::<B>(device));
    all.extend(spinn::workloads::<B>(device));
    all.extend(r2d2::workloads::<B>(device));
    all
}

/// Every derived ratio the suite reports.
pub fn ratio_specs() -> Vec<RatioSpec> {
    let mut all = Vec::new();
    all.extend(cells::ratios());
    all.extend(gumbel::ratios());
    all.extend(transformer::ratios());
    all.extend(spinn::ratios());
    all.extend(r2d2::ratios());
    all
}

/// A tensor with entries uniform in `[-1, 1)`, drawn on the host from a seeded generator, so
/// every backend gets the same input.
pub fn uniform<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Tensor::from_data(TensorData::new(data, shape), device)
}

/// `batch` lengths uniform in `lo..=hi`, from a seeded generator.
pub fn uniform_lengths(batch: usize, lo: usize, hi: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..batch).map(|_| rng.random_range(lo..=hi)).collect()
}

/// A training-mode run: `f` on `x` as a leaf of the autodiff graph, `backward()` of the sum of
/// what it returns, and the sum of `x`'s gradient read back (so the whole backward pass is
/// waited for).
pub fn backward_through<B: ArborBackend, const D: usize>(
    x: &Tensor<B, 3>,
    f: impl FnOnce(Tensor<Autodiff<B>, 3>) -> Tensor<Autodiff<B>, D>,
) -> f64 {
    let xa = Tensor::<Autodiff<B>, 3>::from_inner(x.clone()).require_grad();
    let grads = f(xa.clone()).sum().backward();
    xa.grad(&grads).map_or(f64::NAN, |g| read(g.sum()))
}

/// Reads a scalar back to the host (which also waits for the work that produced it).
pub fn read<B: ArborBackend>(t: Tensor<B, 1>) -> f64 {
    t.sum().into_scalar().elem::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn inputs_are_seeded_and_in_range() {
        let device = Default::default();
        let a = uniform::<Flex, 2>([3, 4], 7, &device).into_data();
        let b = uniform::<Flex, 2>([3, 4], 7, &device).into_data();
        let c = uniform::<Flex, 2>([3, 4], 8, &device).into_data();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|v| (-1.0..1.0).contains(v)));
        let l = uniform_lengths(100, 5, 25, 0);
        assert_eq!(l, uniform_lengths(100, 5, 25, 0));
        assert!(l.iter().all(|n| (5..=25).contains(n)));
        assert!(l.contains(&5) && l.contains(&25));
    }

    #[test]
    fn workload_names_are_unique_and_grouped() {
        let device = Default::default();
        let suite = suite::<Flex>(&device);
        let mut names: Vec<_> = suite.iter().map(|w| w.name.clone()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate workload names");
        for w in &suite {
            assert!(w.name.starts_with(&format!("{}/", w.group)), "{}", w.name);
            assert!(w.items > 0);
        }
        for spec in ratio_specs() {
            for name in [spec.numerator, spec.denominator] {
                assert!(names.iter().any(|n| n == name), "ratio uses unknown {name}");
            }
        }
    }
}
