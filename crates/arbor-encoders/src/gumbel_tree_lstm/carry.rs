//! How each layer gets its candidate parents: recomposed, or carried from the layer before
//! it (the candidates themselves, or their gate pre-activations), with the two new pairs
//! around the merge composed ([`CandidateSchedule`]).

use arbor_cells::kernels::{merge_place, narrow};
use arbor_cells::ArborBackend;
use arbor_cells::LstmState;
use burn::prelude::*;

use super::GumbelTreeLstm;

/// How each layer of a [`GumbelTreeLstm`] gets its candidate parents.
///
/// Every schedule gives the same values and gradients, to rounding; they differ in time and
/// memory. Measured on the 2-core AMD EPYC VM (docs/log/bench.md, "Issue 33, round 1": carried
/// gate pre-activations), carrying the gates in training against recomposing: d300 training
/// 1.19× faster (two rounds), d100 and the length sweep level (0.95–1.05×), the same peak
/// memory (+2–4 MiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CandidateSchedule {
    /// Only the two pairs around the last merge are composed; every other candidate is carried
    /// from the previous layer. Evaluation (argmax) carries the candidates themselves: `O(n)`
    /// compositions per sentence, and on the CPU backends (without autodiff) the whole pass is
    /// one op ([`arbor_cells::kernels::argmax_tree`]: nodes kept in place, no per-layer copy of the
    /// layer). Training, on the CPU backends (autodiff included), is one op too
    /// ([`arbor_cells::kernels::st_gumbel_tree`]: candidates composed once, and a backward pass with
    /// `O(n)` matrix products per sentence); elsewhere it carries the candidates' gate
    /// pre-activations as tensor ops (as [`CandidateSchedule::CarryUnfused`]). The default.
    #[default]
    Carry,
    /// Carried candidates as tensor ops on every backend: argmax decisions carry the
    /// candidates themselves, sampled decisions their gate pre-activations (the forward
    /// products are `O(n)`; the backward pass, which must reach every candidate, is
    /// recomposition's). What `Carry` does where the backend has no fused pass.
    CarryUnfused,
    /// Argmax decisions carry the candidates themselves as tensor ops on every backend (the
    /// path `Carry` takes where the backend has no fused pass); sampled decisions recompose
    /// every pair (the default before training carried its gates).
    CarryInEvaluation,
    /// Every adjacent pair composed at every layer, as the authors' code does: the reference
    /// path, `O(n²)` compositions per sentence.
    Recompose,
}

impl CandidateSchedule {
    pub(super) fn carry(self, argmax: bool) -> Carry {
        match (self, argmax) {
            (CandidateSchedule::Recompose, _) | (CandidateSchedule::CarryInEvaluation, false) => {
                Carry::Nothing
            }
            (CandidateSchedule::Carry, true) => Carry::Fused,
            (CandidateSchedule::CarryInEvaluation | CandidateSchedule::CarryUnfused, true) => {
                Carry::Values
            }
            (CandidateSchedule::Carry, false) => Carry::FusedGates,
            (CandidateSchedule::CarryUnfused, false) => Carry::Gates,
        }
    }
}

/// What `GumbelTreeLstm::run` carries from one layer to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Carry {
    /// Nothing: every pair is recomposed at every layer.
    Nothing,
    /// The candidates' `h`, `c` and scores (argmax decisions only).
    Values,
    /// The whole pass as the backend's fused op where it has one, else `Values` (argmax
    /// decisions only).
    Fused,
    /// The candidates' gate pre-activations (any decisions; the gradients of recomposition).
    Gates,
    /// The whole training pass as the backend's fused op where it has one, else `Gates`
    /// (sampled decisions only).
    FusedGates,
}

/// What one layer of `GumbelTreeLstm::run` got from the layer before it.
pub(super) enum Carried<B: Backend> {
    /// The candidate parents and their scores (`Carry::Values`).
    Values(LstmState<B, 3>, Tensor<B, 2>),
    /// The candidates' gate pre-activations (`Carry::Gates`).
    Gates(Tensor<B, 3>),
}

impl<B: ArborBackend> GumbelTreeLstm<B> {
    /// The rows of the next layer's nodes `i − 1`, `i`, `i + 1` around the merged node `i`
    /// (`index`) in the layer's `[batch·K, D]` view, in that order (`3·batch` rows): the
    /// children of the next layer's two new pairs. Indices are clamped into the layer; at the
    /// edges the clamped pair is never placed.
    ///
    /// # Shapes
    /// - `index`: `[batch]`; `k`: the next layer's node count
    /// - output: `[3·batch]`
    fn merge_neighbour_rows(index: Tensor<B, 1, Int>, k: usize) -> Tensor<B, 1, Int> {
        let [batch] = index.dims();
        let device = index.device();
        let offsets = Tensor::<B, 1, Int>::arange(0..batch as i64, &device).mul_scalar(k as i64);
        Tensor::cat(
            [-1i64, 0, 1]
                .map(|shift| {
                    index
                        .clone()
                        .add_scalar(shift)
                        .clamp(0, k as i64 - 1)
                        .add(offsets.clone())
                })
                .to_vec(),
            0,
        )
    }

    /// The rows `rows` ([`merge_neighbour_rows`](Self::merge_neighbour_rows)) of a layer's
    /// `[batch, K, D]` values, as `[3, batch, D]`.
    fn gather_neighbours(x: &Tensor<B, 3>, rows: &Tensor<B, 1, Int>) -> Tensor<B, 3> {
        let [batch, k, d] = x.dims();
        x.clone()
            .reshape([batch * k, d])
            .select(0, rows.clone())
            .reshape([3, batch, d])
    }

    /// The next layer's values of a per-candidate quantity from this layer's and the two new
    /// pairs' (see `run`).
    ///
    /// With `i` the merged pair, the next layer's pair `j` is this layer's pair `j` for
    /// `j < i − 1` and pair `j + 1` for `j > i`; pairs `i − 1` and `i` are the merged node with
    /// its left and its right neighbour (`new`, in that order). A complete example (`s = 0`)
    /// keeps its pairs `0..K − 1`.
    ///
    /// # Shapes
    /// - `old`: `[batch, K, w]`; `new`: `[2, batch, w]`
    /// - `s`: `[batch, K]` the one-hot selection (zero rows for complete examples)
    /// - output: `[batch, K − 1, w]`
    fn place(old: Tensor<B, 3>, new: Tensor<B, 3>, s: &Tensor<B, 2>) -> Tensor<B, 3> {
        // s·new_right + (1 − cum)·old_j + (cum − s)·old_{j+1}, then new_left at i − 1: one op
        // where nothing is tracked (the carried gates, evaluation), else two `select_mix` nodes.
        merge_place(old, new, s.clone())
    }

    /// The next layer's candidate parents and scores from this layer's (`Carry::Values`, see
    /// `run`): `2·batch` compositions for the two new pairs, the rest placed.
    ///
    /// # Shapes
    /// - `parent`: `[batch, K, D]` this layer's candidates, `logits`: `[batch, K]` their scores
    /// - `s`: `[batch, K]` the one-hot selection (zero rows for complete examples)
    /// - `index`: `[batch]` the selected pair
    /// - `next`: `[batch, K, D]` the next layer's nodes
    /// - output: `[batch, K − 1, D]` candidates and `[batch, K − 1]` scores
    pub(super) fn carry_values(
        &self,
        parent: &LstmState<B, 3>,
        logits: Tensor<B, 2>,
        s: &Tensor<B, 2>,
        index: Tensor<B, 1, Int>,
        next: &LstmState<B, 3>,
        query: &Tensor<B, 3>,
    ) -> (LstmState<B, 3>, Tensor<B, 2>) {
        let [batch, k, _] = parent.h.dims();
        let rows = Self::merge_neighbour_rows(index, k);
        let (h, c) = (
            Self::gather_neighbours(&next.h, &rows),
            Self::gather_neighbours(&next.c, &rows),
        );
        // Pair i − 1 is (node i − 1, node i), pair i is (node i, node i + 1).
        let fresh = self.composition.forward(
            LstmState::new(narrow(h.clone(), 0, 0, 2), narrow(c.clone(), 0, 0, 2)),
            LstmState::new(narrow(h, 0, 1, 2), narrow(c, 0, 1, 2)),
            None,
        );
        let fresh_logits = self
            .scores_with(fresh.h.clone(), query)
            .reshape([2, batch, 1]);
        let candidates = LstmState::new(
            Self::place(parent.h.clone(), fresh.h, s),
            Self::place(parent.c.clone(), fresh.c, s),
        );
        let logits =
            Self::place(logits.reshape([batch, k, 1]), fresh_logits, s).reshape([batch, k - 1]);
        (candidates, logits)
    }

    /// The next layer's gate pre-activations from this layer's (`Carry::Gates`, see `run`):
    /// the products of the two new pairs (`2·batch` rows), the rest placed; all constants for
    /// autodiff.
    ///
    /// # Shapes
    /// - `gates`: `[batch, K, 5D]` this layer's; `s`, `index` as in `carry_values`
    /// - `next_h`: `[batch, K, D]` the next layer's `h`
    /// - output: `[batch, K − 1, 5D]`
    pub(super) fn carry_gates(
        &self,
        gates: Tensor<B, 3>,
        s: &Tensor<B, 2>,
        index: Tensor<B, 1, Int>,
        next_h: &Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let rows = Self::merge_neighbour_rows(index, next_h.dims()[1]);
        let h = Self::gather_neighbours(next_h, &rows);
        // `gates_of` reads its inputs and weights as constants.
        let fresh = self
            .composition
            .gates_of(h.clone().narrow(0, 0, 2), h.narrow(0, 1, 2));
        Self::place(gates.detach(), fresh, &s.clone().detach())
    }
}
