//! Straight-through Gumbel-softmax (docs/models.md §1; Jang et al. 2017, Choi et al. 2018 §3.2).

use crate::ArborBackend;
use burn::prelude::*;
use burn::tensor::{Distribution, TensorData};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Smallest uniform sample used for Gumbel noise. `−log(−log(u))` is finite for every `u` in
/// `[U_MIN, U_MAX]`; the authors' `1e-20` epsilon underflows in half precision.
const U_MIN: f64 = 1e-10;
/// Largest uniform sample used for Gumbel noise (strictly below 1 in f32).
const U_MAX: f64 = 1.0 - 1e-7;
/// Fill value for invalid entries before a max/argmax.
const NEG_BIG: f64 = -1e30;

/// A source of Gumbel(0, 1) noise `g = −log(−log(u))`, `u ~ U(0, 1)`.
///
/// Either the backend's own generator ([`GumbelSampler::backend`], seeded globally with
/// `B::seed`) or a private seeded generator ([`GumbelSampler::seeded`]), whose noise is
/// identical on every backend and independent of anything else that draws random numbers.
/// Tests that need exact noise can skip the sampler and pass the noise tensor directly to
/// [`st_gumbel_softmax`].
#[derive(Debug)]
pub struct GumbelSampler {
    rng: Option<StdRng>,
    /// A temperature that overrides the model's own (annealing), or `None`.
    temperature: Option<f64>,
    /// `false`: every sample is 0 ([`GumbelSampler::without_noise`]).
    noise: bool,
}

impl GumbelSampler {
    /// Draws from the backend's random generator.
    pub fn backend() -> Self {
        Self {
            rng: None,
            temperature: None,
            noise: true,
        }
    }

    /// Draws from a private generator seeded with `seed` (reproducible on every backend).
    pub fn seeded(seed: u64) -> Self {
        Self {
            rng: Some(StdRng::seed_from_u64(seed)),
            temperature: None,
            noise: true,
        }
    }

    /// Makes every model that samples with this sampler use the Gumbel-softmax temperature
    /// `tau` instead of its own (an annealed τ from the training loop); `None` keeps the
    /// models' own. A non-positive or non-finite `tau` is ignored.
    pub fn with_temperature(mut self, tau: Option<f64>) -> Self {
        self.temperature = tau.filter(|t| t.is_finite() && *t > 0.0);
        self
    }

    /// Makes every sample 0: the models then select by straight-through softmax of their own
    /// scores, deterministically (an ablation of the Gumbel noise; what a test that compares
    /// two ways of batching the same step needs).
    pub fn without_noise(mut self) -> Self {
        self.noise = false;
        self
    }

    /// The temperature to use for a model whose own temperature is `own`.
    pub fn temperature_or(&self, own: f64) -> f64 {
        self.temperature.unwrap_or(own)
    }

    /// Gumbel noise of the given shape; every entry is finite.
    ///
    /// # Shapes
    /// - output: `shape`
    pub fn sample<B: ArborBackend, const D: usize>(
        &mut self,
        shape: [usize; D],
        device: &B::Device,
    ) -> Tensor<B, D> {
        if !self.noise {
            return Tensor::zeros(shape, device);
        }
        match &mut self.rng {
            Some(rng) => {
                let n: usize = shape.iter().product();
                let values: Vec<f32> = (0..n)
                    .map(|_| {
                        let u: f64 = rng.random::<f64>().clamp(U_MIN, U_MAX);
                        (-(-u.ln()).ln()) as f32
                    })
                    .collect();
                Tensor::from_data(TensorData::new(values, shape), device)
            }
            None => {
                let u = Tensor::<B, D>::random(shape, Distribution::Uniform(0.0, 1.0), device)
                    .clamp(U_MIN, U_MAX);
                u.log().neg().log().neg()
            }
        }
    }
}

/// The result of selecting one entry per row.
#[derive(Debug, Clone)]
pub struct Selection<B: Backend> {
    /// The straight-through selection: its forward value is `one_hot(argmax)`, its gradient is
    /// that of [`Selection::soft`] (`y_hard − y.detach() + y`). At evaluation it is the plain
    /// one-hot with no gradient path.
    pub hard: Tensor<B, 2>,
    /// The soft distribution `y` over the valid entries (zeros on invalid entries).
    pub soft: Tensor<B, 2>,
    /// The selected index of each row.
    pub index: Tensor<B, 1, Int>,
}

/// Softmax over the valid entries of each row; invalid entries get probability 0.
///
/// A row with no valid entry yields all zeros (never NaN). Gradients never flow into invalid
/// entries.
///
/// # Shapes
/// - `logits`: `[rows, k]`
/// - `mask`: `[rows, k]`, true where an entry is valid (`None`: all valid)
/// - output: `[rows, k]`
pub fn masked_softmax<B: ArborBackend>(
    logits: Tensor<B, 2>,
    mask: Option<Tensor<B, 2, Bool>>,
) -> Tensor<B, 2> {
    match mask {
        None => burn::tensor::activation::softmax(logits, 1),
        Some(mask) => {
            let invalid = mask.clone().bool_not();
            let filled = logits.mask_fill(invalid.clone(), NEG_BIG);
            let max = filled.clone().max_dim(1).detach();
            // Invalid entries become exp(0)·0 = 0, so they neither overflow nor receive gradient.
            let shifted = filled.sub(max).mask_fill(invalid, 0.0);
            let e = shifted.exp().mul(mask.float());
            let z = e.clone().sum_dim(1).clamp_min(1e-12);
            e.div(z)
        }
    }
}

/// `one_hot(index)` over `k` entries, computed on the device as `index == arange(k)`.
///
/// Burn's `Tensor::one_hot` reads the indices back to the host twice (its bounds check and
/// its conversion to `i64`), which would make every training step wait for the device; the
/// comparison gives the same `1.0`/`0.0` values with no read, for any `k ≥ 1`. An index
/// outside `0..k` (never produced by an argmax over `k` entries) gives a row of zeros.
///
/// # Shapes
/// - `index`: `[rows]`
/// - output: `[rows, k]`
fn one_hot<B: ArborBackend>(index: Tensor<B, 1, Int>, k: usize) -> Tensor<B, 2> {
    let rows = index.dims()[0];
    // In the indices' own integer type, so that the comparison is like for like.
    let classes = Tensor::<B, 1, Int>::arange(0..k as i64, (&index.device(), index.dtype()))
        .unsqueeze_dim::<2>(0)
        .expand([rows, k]);
    index
        .unsqueeze_dim::<2>(1)
        .expand([rows, k])
        .equal(classes)
        .float()
}

fn masked_argmax<B: ArborBackend>(
    scores: Tensor<B, 2>,
    mask: Option<Tensor<B, 2, Bool>>,
) -> Tensor<B, 1, Int> {
    let scores = match mask {
        Some(mask) => scores.mask_fill(mask.bool_not(), NEG_BIG),
        None => scores,
    };
    scores.argmax(1).squeeze_dim(1)
}

/// Straight-through Gumbel-softmax selection of one entry per row (training mode).
///
/// `y = softmax((logits + g)/τ)` over the valid entries; the forward value of
/// [`Selection::hard`] is `one_hot(argmax y)` and its backward pass is the gradient of the soft
/// `y`. `noise` is the Gumbel noise `g` (draw it with a [`GumbelSampler`] or pass any tensor for
/// deterministic tests); `None` means no noise, which gives the straight-through softmax.
///
/// # Shapes
/// - `logits`: `[rows, k]`
/// - `mask`: `[rows, k]`, true where an entry may be selected (`None`: all valid)
/// - `noise`: `[rows, k]`
/// - output tensors: `hard`, `soft` `[rows, k]`; `index` `[rows]`
pub fn st_gumbel_softmax<B: ArborBackend>(
    logits: Tensor<B, 2>,
    mask: Option<Tensor<B, 2, Bool>>,
    tau: f64,
    noise: Option<Tensor<B, 2>>,
) -> Selection<B> {
    let [_, k] = logits.dims();
    let perturbed = match noise {
        Some(g) => logits.add(g),
        None => logits,
    };
    let scores = perturbed.div_scalar(tau);
    let soft = masked_softmax(scores.clone(), mask.clone());
    let index = masked_argmax(scores.detach(), mask);
    let hard = one_hot(index.clone(), k)
        .sub(soft.clone().detach())
        .add(soft.clone());
    Selection { hard, soft, index }
}

/// Evaluation-mode selection: a plain argmax over the valid entries with no noise.
///
/// [`Selection::hard`] is the one-hot of the argmax (no gradient path) and
/// [`Selection::soft`] the masked softmax of the logits, for inspection.
///
/// # Shapes
/// - `logits`: `[rows, k]`
/// - `mask`: `[rows, k]` (`None`: all valid)
/// - output tensors: `hard`, `soft` `[rows, k]`; `index` `[rows]`
pub fn argmax_select<B: ArborBackend>(
    logits: Tensor<B, 2>,
    mask: Option<Tensor<B, 2, Bool>>,
) -> Selection<B> {
    let [_, k] = logits.dims();
    let soft = masked_softmax(logits.clone(), mask.clone()).detach();
    let index = masked_argmax(logits.detach(), mask);
    let hard = one_hot(index.clone(), k);
    Selection { hard, soft, index }
}
