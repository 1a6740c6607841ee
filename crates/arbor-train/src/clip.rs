//! Global-norm gradient clipping.
//!
//! Burn's `GradientClipping::Norm` clips each parameter's gradient by its own norm; the models
//! here (and the papers' code) clip by the norm of *all* gradients together, so this is written
//! here with Burn's module visitor.

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
    factor: f64,
    _b: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// The squared global L2 norm of all gradients of `model`'s parameters, as a one-element tensor
/// left on the device (`None` when no parameter has a gradient). The training loop reads it back
/// together with the loss, in one transfer.
pub(crate) fn squared_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut v = SquaredNorm::<B> { grads, total: None };
    model.visit(&mut v);
    v.total
}

/// Rescales the gradients of global norm `norm` (already read back) so that it becomes at most
/// `max_norm`; a non-finite `norm` leaves them as they are.
pub(crate) fn clip_to<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    norm: f64,
    max_norm: f64,
) {
    if norm > max_norm && norm.is_finite() {
        let mut v = Scale::<B> {
            grads,
            factor: max_norm / (norm + 1e-6),
            _b: std::marker::PhantomData,
        };
        model.visit(&mut v);
    }
}

/// The global L2 norm of all gradients of `model`'s parameters (one read-back from the device).
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> f64 {
    squared_grad_norm::<B, M>(model, grads)
        .map(|t| t.into_scalar().elem::<f64>().sqrt())
        .unwrap_or(0.0)
}

/// Rescales all gradients so their global norm is at most `max_norm`; returns the norm before
/// clipping. A non-finite norm leaves the gradients unchanged (the training loop stops on it).
pub fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> f64 {
    let norm = global_grad_norm::<B, M>(model, grads);
    clip_to::<B, M>(model, grads, norm, max_norm);
    norm
}
