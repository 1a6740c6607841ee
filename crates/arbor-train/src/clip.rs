//! Global-norm gradient clipping, on the device.
//!
//! Burn's `GradientClipping::Norm` clips each parameter's gradient by its own norm; the models
//! here (and the papers' code) clip by the norm of *all* gradients together, so this is written
//! here with Burn's module visitor. The norm and the scale factor stay on the device
//! ([`grad_norm_on_device`], [`clip_on_device`]): the training loop reads nothing back to clip.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            let sq = g.powi_scalar(2).sum();
            self.total = Some(match self.total.take() {
                Some(t) => t.add(sq),
                None => sq,
            });
        }
    }
}

struct Scale<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    factor: Tensor<B::InnerBackend, 1>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let factor = self.factor.clone().unsqueeze::<D>();
            self.grads.register(param.id, g.mul(factor));
        }
    }
}

/// The global L2 norm of all gradients of `model`'s parameters, as a one-element tensor left
/// on the device (`None` when no parameter has a gradient).
pub fn grad_norm_on_device<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut v = SquaredNorm::<B> { grads, total: None };
    model.visit(&mut v);
    v.total.map(|sq| sq.sqrt())
}

/// The factor that brings a global norm `norm` (one element) down to `max_norm`, on the device:
/// `max_norm / (norm + 1e-6)` when `norm > max_norm` and `norm` is finite, exactly 1 otherwise
/// (small gradients are left bit for bit as they are; a NaN or infinite norm leaves the
/// gradients alone, and the training loop stops on it at its next read).
pub fn clip_factor<B: Backend>(norm: Tensor<B, 1>, max_norm: f64) -> Tensor<B, 1> {
    let over = norm
        .clone()
        .greater_elem(max_norm)
        .bool_and(norm.clone().is_finite());
    let factor = norm.full_like(max_norm).div(norm.clone().add_scalar(1e-6));
    norm.ones_like().mask_where(over, factor)
}

/// Rescales all gradients of `model` whose global norm is `norm` (from
/// [`grad_norm_on_device`]) so that it becomes at most `max_norm` ([`clip_factor`]), without
/// reading anything back.
pub fn clip_on_device<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    norm: Tensor<B::InnerBackend, 1>,
    max_norm: f64,
) {
    let mut v = Scale::<B> {
        grads,
        factor: clip_factor(norm, max_norm),
    };
    model.visit(&mut v);
}

/// The global L2 norm of all gradients of `model`'s parameters (one read-back from the device).
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> f64 {
    grad_norm_on_device::<B, M>(model, grads)
        .map(|t| t.into_scalar().elem::<f64>())
        .unwrap_or(0.0)
}

/// Rescales all gradients so their global norm is at most `max_norm`; returns the norm before
/// clipping (one read-back; the training loop uses [`clip_on_device`], which reads nothing). A
/// non-finite norm leaves the gradients unchanged.
pub fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> f64 {
    match grad_norm_on_device::<B, M>(model, grads) {
        Some(norm) => {
            let value = norm.clone().into_scalar().elem::<f64>();
            clip_on_device::<B, M>(model, grads, norm, max_norm);
            value
        }
        None => 0.0,
    }
}
