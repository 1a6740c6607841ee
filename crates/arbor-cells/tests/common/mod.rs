//! Helpers shared by the cell tests.
#![allow(dead_code)]

use arbor_cells::ArborBackend;
use burn::backend::{Autodiff, NdArray};
use burn::prelude::*;
use burn::tensor::TensorData;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// f64 backend for finite-difference checks.
pub type F64 = NdArray<f64>;
/// Autodiff over [`F64`].
pub type Ad64 = Autodiff<F64>;

/// Runs `init` with the f64 backend's generator seeded, under a lock so that parallel tests
/// cannot interleave their draws: parameter initialisation, and so every check, is reproducible.
pub fn seeded<T>(seed: u64, init: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    F64::seed(&Default::default(), seed);
    init()
}

/// Seeded normal-ish values in `[-scale, scale]`.
pub fn values(n: usize, scale: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (rng.random::<f64>() * 2.0 - 1.0) * scale)
        .collect()
}

/// A tensor of seeded values.
pub fn tensor<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    scale: f64,
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, scale, seed), shape), device)
}

/// All values of a float tensor as f64.
pub fn to_vec<B: ArborBackend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float data")
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

/// Checks the autodiff gradient of `f` against central finite differences in f64.
///
/// `inputs` are rank-3 tensors given as (values, shape); `f` maps them to any tensor, which is
/// reduced to a scalar by a fixed random projection so that every output entry matters.
pub fn check_gradients<const D: usize>(
    inputs: &[(Vec<f64>, [usize; 3])],
    f: impl Fn(&[Tensor<Ad64, 3>]) -> Tensor<Ad64, D>,
) {
    let device = Default::default();
    let make = |vals: &[(Vec<f64>, [usize; 3])]| -> Vec<Tensor<Ad64, 3>> {
        vals.iter()
            .map(|(v, s)| Tensor::from_data(TensorData::new(v.clone(), *s), &device))
            .collect()
    };
    // Fixed projection of the output.
    let probe = f(&make(inputs));
    let n_out: usize = probe.dims().iter().product();
    let weights =
        Tensor::<Ad64, 1>::from_data(TensorData::new(values(n_out, 1.0, 99), [n_out]), &device);
    let loss = |out: Tensor<Ad64, D>| -> Tensor<Ad64, 1> {
        out.reshape([n_out]).mul(weights.clone()).sum()
    };
    let scalar = |vals: &[(Vec<f64>, [usize; 3])]| -> f64 {
        loss(f(&make(vals))).into_scalar().elem::<f64>()
    };

    // Burn 0.21's default `sigmoid` (which NdArray uses) evaluates through f32 even on an f64
    // backend, so every output carries rounding of a few f32 ulps. Bound that noise in the loss
    // by 4 ulps of `sum |w_i out_i|`; the finite difference below amplifies it by at most 3/eps.
    let f32_noise = {
        let out = f(&make(inputs)).reshape([n_out]);
        let spread: f64 = to_vec(out.mul(weights.clone()).abs().sum().inner())[0];
        4.0 * f64::from(f32::EPSILON) * spread
    };
    let tensors: Vec<_> = make(inputs).into_iter().map(|t| t.require_grad()).collect();
    let grads = loss(f(&tensors)).backward();
    // A larger step with Richardson extrapolation (error O(eps^4)) keeps the truncation error
    // small while dividing the f32 noise by a step that is not tiny.
    let eps = 1e-2;
    // (4·c(eps/2) − c(eps))/3 with |noise| ≤ n in each loss value: ≤ (4·2n/eps + 2n/(2eps))/3.
    let noise_tol = 3.0 * f32_noise / eps;
    let central = |k: usize, j: usize, h: f64| -> f64 {
        let mut plus = inputs.to_vec();
        plus[k].0[j] += h;
        let mut minus = inputs.to_vec();
        minus[k].0[j] -= h;
        (scalar(&plus) - scalar(&minus)) / (2.0 * h)
    };
    let mut checked = 0;
    for (k, (vals, _)) in inputs.iter().enumerate() {
        let analytic = to_vec(
            tensors[k]
                .grad(&grads)
                .map(|g| Tensor::<F64, 3>::from_data(g.into_data(), &Default::default()))
                .unwrap_or_else(|| Tensor::zeros(inputs[k].1, &Default::default())),
        );
        for (j, &a) in analytic.iter().enumerate().take(vals.len()) {
            let numeric = (4.0 * central(k, j, eps / 2.0) - central(k, j, eps)) / 3.0;
            assert!(
                (a - numeric).abs() <= 1e-6 + noise_tol + 1e-3 * numeric.abs().max(a.abs()),
                "input {k} entry {j}: autodiff {a} vs finite difference {numeric} \
                 (f32 noise bound {noise_tol:.2e})"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "nothing was checked");
}

/// A cell run through the trait's defaults only: its `context`, then `precompute(x_t)` and
/// `step` per time step, without the cell's own `step_input` or `scan` (what the fused paths
/// are checked against).
pub struct StepByStep<'a, C>(pub &'a C);

impl<B: ArborBackend, C: arbor_cells::RecurrentCell<B>> arbor_cells::RecurrentCell<B>
    for StepByStep<'_, C>
{
    fn d_input(&self) -> usize {
        self.0.d_input()
    }
    fn d_hidden(&self) -> usize {
        self.0.d_hidden()
    }
    fn n_chunks(&self) -> Option<usize> {
        self.0.n_chunks()
    }
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.0.precompute(x)
    }
    fn context(&self, x: Tensor<B, 3>) -> Option<Tensor<B, 3>> {
        self.0.context(x)
    }
    fn step(
        &self,
        xp: Tensor<B, 2>,
        state: arbor_cells::LstmState<B, 2>,
    ) -> arbor_cells::CellStep<B> {
        self.0.step(xp, state)
    }
}
