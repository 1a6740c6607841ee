//! The choice among a cell's splits (eq. 1–5): compose every split's children, score the
//! splits, and select one by straight-through Gumbel-softmax (training) or argmax
//! (evaluation).

use arbor_cells::kernels::narrow;
use arbor_cells::ArborBackend;
use arbor_cells::{argmax_select, st_gumbel_softmax};
use burn::prelude::*;

use super::{Cells, ChartConfig};
use crate::r2d2::composition::Compose;
use crate::Decisions;

/// What eq. 2–5 give for `c` cells of `k` splits each.
pub(super) struct Chosen<B: Backend> {
    /// The cells, with their gradients.
    pub(super) cells: Cells<B>,
    /// Un-noised `log p̃_ijk`, detached: `[c, k]`.
    pub(super) scores: Tensor<B, 2>,
    /// Index of the split `α` picked: `[c]`.
    pub(super) chosen: Tensor<B, 1, Int>,
    /// `log p_ijk` of the chosen split, detached: `[c]`.
    pub(super) lp_chosen: Tensor<B, 1>,
}

/// Composes `c` cells of `k` splits each (eq. 1–5). `children` are rows of `e` and `lpt`: the
/// left child of every split, cell by cell, then the right ones in the same order.
///
/// # Shapes
/// - `e`: `[rows, D]`; `lpt`: `[rows]`; `children`: `[2·c·k]`
pub(super) fn choose<B: ArborBackend, C: Compose<B>>(
    compose: &C,
    e: Tensor<B, 2>,
    lpt: Tensor<B, 1>,
    children: Tensor<B, 1, Int>,
    [c, k]: [usize; 2],
    config: &ChartConfig,
    decisions: &mut Decisions<'_>,
) -> Chosen<B> {
    let n = c * k;
    let e = e.select(0, children.clone());
    let lpt = lpt.select(0, children);
    let (left, right) = (narrow(e.clone(), 0, 0, n), narrow(e, 0, n, n));
    let (lpt_left, lpt_right) = (narrow(lpt.clone(), 0, 0, n), narrow(lpt, 0, n, n));
    let device = left.device();
    let d = left.dims()[1];
    let composed = compose.compose(left, right);
    // eq. 1: log p̃_ijk = log p_ijk + log p̃_ik + log p̃_(k+1)j.
    let lpt_k = composed
        .log_p
        .clone()
        .add(lpt_left)
        .add(lpt_right)
        .reshape([c, k]);
    let scores = lpt_k.clone().detach();
    let log_p = composed.log_p.reshape([c, k]);
    if k == 1 {
        return Chosen {
            cells: Cells {
                e: composed.repr,
                lpt: lpt_k.reshape([c]),
                lp: log_p.clone().reshape([c]),
            },
            scores,
            chosen: Tensor::zeros([c], &device),
            lp_chosen: log_p.detach().reshape([c]),
        };
    }
    // eq. 2–5.
    let sel = match decisions {
        Decisions::Sample(sampler) => {
            let noise = sampler.sample::<B, 2>([c, k], &device);
            let tau = sampler.temperature_or(config.tau);
            st_gumbel_softmax(lpt_k.clone(), None, tau, Some(noise))
        }
        Decisions::Argmax => argmax_select(lpt_k.clone(), None),
    };
    let alpha = sel.hard;
    let e = composed
        .repr
        .reshape([c, k, d])
        .mul(alpha.clone().reshape([c, k, 1]))
        .sum_dim(1)
        .reshape([c, d]);
    let lp_chosen = log_p
        .clone()
        .detach()
        .gather(1, sel.index.clone().reshape([c, 1]))
        .reshape([c]);
    // log p_ij = Σ_k α_k log p_ijk: in training the soft α's gradient reaches every split's
    // score, as in the reference.
    let lp = log_p.mul(alpha.clone()).sum_dim(1).reshape([c]);
    let lpt = lpt_k.mul(alpha).sum_dim(1).reshape([c]);
    Chosen {
        cells: Cells { e, lpt, lp },
        scores,
        chosen: sel.index,
        lp_chosen,
    }
}
