//! The AWD-LSTM regularisers (Merity et al. 2018, §4), active only with autodiff.

use arbor_cells::AnyCell;
use arbor_cells::ArborBackend;
use burn::module::{Param, ParamId};
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::Distribution;

/// A `{0, 1/(1−p)}` mask of `shape`, each entry kept with probability `1 − p`.
fn keep_mask<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    p: f64,
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::<B, D>::random(shape, Distribution::Bernoulli(1.0 - p), device).div_scalar(1.0 - p)
}

/// Locked (variational) dropout: one mask per sequence and feature, shared by every time step
/// (Gal & Ghahramani 2016; AWD-LSTM's `LockedDropout`). Identity without autodiff or when
/// `p = 0`.
///
/// # Shapes
/// - `x`: `[batch, time, d]`
/// - output: `[batch, time, d]`
pub fn locked_dropout<B: ArborBackend>(x: Tensor<B, 3>, p: f64) -> Tensor<B, 3> {
    let device = x.device();
    if p <= 0.0 || !B::ad_enabled(&device) {
        return x;
    }
    let [batch, _, d] = x.dims();
    x.mul(keep_mask::<B, 3>([batch, 1, d], p, &device))
}

/// Embedding dropout: drops whole rows (words) of the embedding matrix, so every occurrence of a
/// dropped word in the batch gets a zero vector; kept rows are scaled by `1/(1−p)` (AWD-LSTM's
/// `embedded_dropout`). Identity without autodiff or when `p = 0`.
///
/// # Shapes
/// - `weight`: `[vocab, d]`
/// - output: `[vocab, d]`
pub fn embedding_dropout<B: ArborBackend>(weight: Tensor<B, 2>, p: f64) -> Tensor<B, 2> {
    let device = weight.device();
    if p <= 0.0 || !B::ad_enabled(&device) {
        return weight;
    }
    let [vocab, _] = weight.dims();
    weight.mul(keep_mask::<B, 2>([vocab, 1], p, &device))
}

/// `linear` with DropConnect on its weight: a fresh mask, scaled by `1/(1−p)`. The returned
/// layer's weight is a function of the original parameter, so gradients reach it.
fn drop_connect<B: ArborBackend>(linear: &Linear<B>, p: f64) -> Linear<B> {
    let w = linear.weight.val();
    let mask = keep_mask::<B, 2>(w.dims(), p, &w.device());
    let mut out = linear.clone();
    out.weight = Param::initialized(ParamId::new(), w.mul(mask));
    out
}

/// DropConnect on a cell's hidden-to-hidden matrix `U` (Wan et al. 2013; AWD-LSTM's
/// `WeightDrop`): returns a copy of the cell whose `U` is masked once for this forward pass, so
/// every time step of the batch uses the same dropped matrix. Identity without autodiff or when
/// `p = 0`.
///
/// Faster FastTrees has no hidden-to-hidden matrix (every gate reads `x_t` only), so it is
/// returned unchanged.
pub fn weight_drop<B: ArborBackend>(cell: &AnyCell<B>, p: f64) -> AnyCell<B> {
    let active = match cell {
        AnyCell::Lstm(c) => B::ad_enabled(&c.hidden.weight.device()),
        AnyCell::OnLstm(c) => B::ad_enabled(&c.hidden.weight.device()),
        AnyCell::FastTrees(c) => B::ad_enabled(&c.hidden.weight.device()),
        AnyCell::ConvFastTrees(c) => B::ad_enabled(&c.hidden.weight.device()),
        AnyCell::FasterFastTrees(_) => false,
    };
    if p <= 0.0 || !active {
        return cell.clone();
    }
    match cell.clone() {
        AnyCell::Lstm(mut c) => {
            c.hidden = drop_connect(&c.hidden, p);
            AnyCell::Lstm(c)
        }
        AnyCell::OnLstm(mut c) => {
            c.hidden = drop_connect(&c.hidden, p);
            AnyCell::OnLstm(c)
        }
        AnyCell::FastTrees(mut c) => {
            c.hidden = drop_connect(&c.hidden, p);
            AnyCell::FastTrees(c)
        }
        AnyCell::ConvFastTrees(mut c) => {
            c.hidden = drop_connect(&c.hidden, p);
            AnyCell::ConvFastTrees(c)
        }
        other => other,
    }
}
