//! The optimizer and the learning rate: Adam or AdamW behind one type, linear warm-up
//! ([`warmed_up`]) and decay on plateau; and seeding ([`seed_everything`], [`step_seed`]).

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, AdaptiveMomentumState, GradientsParams, Optimizer,
};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;

use super::config::{OptimizerKind, TrainConfig};

/// Seeds the backend's generator (initialisation, dropout) on `device`.
pub fn seed_everything<B: Backend>(device: &B::Device, seed: u64) {
    B::seed(device, seed);
}

/// The seed used for step `step` of a run seeded with `seed` (splitmix64 of both).
pub fn step_seed(seed: u64, step: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The optimizer the configuration names, with its state.
pub(super) enum Optim<B: AutodiffBackend, M: AutodiffModule<B>> {
    Adam(OptimizerAdaptor<Adam, M, B>),
    AdamW(OptimizerAdaptor<AdamW, M, B>),
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Optim<B, M> {
    /// A fresh optimizer as `config` says.
    pub(super) fn new(config: &TrainConfig) -> Self {
        match config.optimizer {
            OptimizerKind::Adam => {
                let decay = (config.weight_decay > 0.0)
                    .then(|| WeightDecayConfig::new(config.weight_decay as f32));
                Optim::Adam(AdamConfig::new().with_weight_decay(decay).init())
            }
            OptimizerKind::AdamW => Optim::AdamW(
                AdamWConfig::new()
                    .with_weight_decay(config.weight_decay as f32)
                    .init(),
            ),
        }
    }

    /// One update of `model` with `grads` at learning rate `lr`.
    pub(super) fn step(&mut self, lr: f64, model: M, grads: GradientsParams) -> M {
        match self {
            Optim::Adam(o) => o.step(lr, model, grads),
            Optim::AdamW(o) => o.step(lr, model, grads),
        }
    }

    /// The optimizer state as bytes (for a checkpoint).
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        match self {
            Optim::Adam(o) => Recorder::<B>::record(&rec, o.to_record(), ()),
            Optim::AdamW(o) => Recorder::<B>::record(&rec, o.to_record(), ()),
        }
        .expect("in-memory recording cannot fail")
    }

    /// Checks that every moment of the optimizer state has the shape of its parameter in
    /// `model` (a state restored from another model's checkpoint would otherwise fail inside a
    /// step). May panic on a malformed state: the caller catches it.
    pub(super) fn check_shapes(&self, model: &M) -> Result<(), String> {
        let mut check = CheckMoments::<B, M> {
            records: match self {
                Optim::Adam(o) => Records::Adam(o.to_record()),
                Optim::AdamW(o) => Records::AdamW(o.to_record()),
            },
            error: None,
        };
        model.visit(&mut check);
        check.error.map_or(Ok(()), Err)
    }

    /// Restores the optimizer state from [`Optim::to_bytes`] output.
    pub(super) fn load_bytes(self, bytes: Vec<u8>, device: &B::Device) -> Result<Self, String> {
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        Ok(match self {
            Optim::Adam(o) => Optim::Adam(
                o.load_record(Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?),
            ),
            Optim::AdamW(o) => Optim::AdamW(
                o.load_record(Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?),
            ),
        })
    }
}

/// The learning rate used at optimizer step `step` (0-based): `lr` after the linear warm-up.
pub fn warmed_up(config: &TrainConfig, step: u64, lr: f64) -> f64 {
    if config.warmup_steps == 0 || step >= config.warmup_steps {
        lr
    } else {
        lr * (step + 1) as f64 / config.warmup_steps as f64
    }
}

/// Counts one evaluation without improvement in `bad_evals`; once more than
/// `config.plateau_patience` have run in a row, multiplies `lr` by `config.plateau_factor`
/// (never going below `config.min_lr`) and restarts the count. Returns whether `lr` decayed.
///
/// The loop calls it after every evaluation that does not improve the best validation metric
/// (and resets `bad_evals` to 0 after one that does).
pub fn plateau_decay(config: &TrainConfig, bad_evals: &mut u32, lr: &mut f64) -> bool {
    *bad_evals += 1;
    if *bad_evals > config.plateau_patience {
        *lr = (*lr * config.plateau_factor).max(config.min_lr);
        *bad_evals = 0;
        true
    } else {
        false
    }
}

/// The optimizer state of either optimizer, by parameter.
enum Records<B: AutodiffBackend, M: AutodiffModule<B>> {
    Adam(<OptimizerAdaptor<Adam, M, B> as Optimizer<M, B>>::Record),
    AdamW(<OptimizerAdaptor<AdamW, M, B> as Optimizer<M, B>>::Record),
}

/// Compares the shapes of the moments in `records` with those of the visited parameters; the
/// first mismatch lands in `error`.
struct CheckMoments<B: AutodiffBackend, M: AutodiffModule<B>> {
    records: Records<B, M>,
    error: Option<String>,
}

fn moment_shapes<B: burn::tensor::backend::Backend, const D: usize>(
    m: &AdaptiveMomentumState<B, D>,
) -> Vec<Vec<usize>> {
    let mut v = vec![m.moment_1.dims().to_vec(), m.moment_2.dims().to_vec()];
    v.extend(m.max_moment_2.as_ref().map(|t| t.dims().to_vec()));
    v
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> ModuleVisitor<B> for CheckMoments<B, M> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.error.is_some() {
            return;
        }
        let shapes = match &self.records {
            Records::Adam(r) => r
                .get(&param.id)
                .map(|r| moment_shapes(&r.clone().into_state::<D>().momentum)),
            Records::AdamW(r) => r
                .get(&param.id)
                .map(|r| moment_shapes(&r.clone().into_state::<D>().momentum)),
        };
        let expected = param.lazy_shape().to_vec();
        if let Some(bad) = shapes.into_iter().flatten().find(|s| *s != expected) {
            self.error = Some(format!(
                "the optimizer state of parameter {} has shape {bad:?}, the parameter {expected:?}",
                param.id
            ));
        }
    }
}
