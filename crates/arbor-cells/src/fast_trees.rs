//! FastTrees (Pung & Chan; docs/models.md §5): ON-LSTM whose master gates read `x_t` only.

use crate::ArborBackend;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::master::{n_chunks, ordered_scan, ordered_step, ordered_update};
use crate::runner::{CellStep, RecurrentCell, ScanOutput};
use crate::{LstmState, MasterGates};

/// Configuration of a [`FastTreesCell`].
#[derive(Config, Debug)]
pub struct FastTreesCellConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width `H`; a multiple of `chunk_size`.
    pub d_hidden: usize,
    /// Neurons per chunk `H / C`.
    pub chunk_size: usize,
}

/// FastTrees cell: `f̃_t = cumax(W_f̃ x_t + b)`, `ĩ_t = 1 − cumax(W_ĩ x_t + b)`, computed for the
/// whole sequence in one batched op before the time loop; the ordinary gates still read
/// `h_{t−1}` and the cell update is ON-LSTM's.
///
/// **Gate order**: the input weight produces `[f̃ (C), ĩ (C), i, f, ĉ, o (H each)]`, the hidden
/// weight `[i, f, ĉ, o]`.
#[derive(Module, Debug)]
pub struct FastTreesCell<B: Backend> {
    /// `x_t → [f̃, ĩ, i, f, ĉ, o]` with bias.
    pub input: Linear<B>,
    /// `h_{t−1} → [i, f, ĉ, o]`, no bias.
    pub hidden: Linear<B>,
    /// Hidden width `H`.
    pub d_hidden: usize,
    /// Number of chunks `C`.
    pub n_chunks: usize,
}

impl FastTreesCellConfig {
    /// Builds the cell on `device`.
    ///
    /// # Panics
    /// If `d_hidden` is not a multiple of `chunk_size`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> FastTreesCell<B> {
        let h = self.d_hidden;
        let c = n_chunks(h, self.chunk_size);
        FastTreesCell {
            input: LinearConfig::new(self.d_input, 4 * h + 2 * c).init(device),
            hidden: LinearConfig::new(h, 4 * h).with_bias(false).init(device),
            d_hidden: h,
            n_chunks: c,
        }
    }
}

/// Replaces the master-gate logits `[..., 0..2C]` of a precomputed projection by their
/// activations, for the whole sequence at once.
pub(crate) fn activate_master<B3>(xp: Tensor<B3, 3>, n_chunks: usize) -> Tensor<B3, 3>
where
    B3: ArborBackend,
{
    let [_, _, width] = xp.dims();
    let c2 = 2 * n_chunks;
    let master = MasterGates::from_logits(xp.clone().narrow(2, 0, c2)).concat();
    Tensor::cat(vec![master, xp.narrow(2, c2, width - c2)], 2)
}

/// One step of a cell whose master gates were precomputed: `xp = [f̃, ĩ, W x_t + b]`.
pub(crate) fn precomputed_master_step<B: ArborBackend>(
    hidden: &Linear<B>,
    n_chunks: usize,
    d_hidden: usize,
    xp: Tensor<B, 2>,
    state: LstmState<B, 2>,
) -> CellStep<B> {
    let c2 = 2 * n_chunks;
    let master = MasterGates::split(xp.clone().narrow(1, 0, c2));
    // The input part is a column window of `xp`: copied by runs first, so that the sum is a
    // contiguous one (Flex adds a strided operand element by element).
    let gates = arbor_kernels::contiguous(xp.narrow(1, c2, 4 * d_hidden))
        .add(crate::linear_rows(hidden, state.h));
    let forget = master.forget.clone();
    CellStep {
        state: ordered_update(master, gates, state.c),
        master_forget: Some(forget),
    }
}

impl<B: ArborBackend> RecurrentCell<B> for FastTreesCell<B> {
    fn d_input(&self) -> usize {
        self.input.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.d_hidden
    }

    fn n_chunks(&self) -> Option<usize> {
        Some(self.n_chunks)
    }

    /// `[f̃, ĩ, W x_t + b]` for every step: `[B, T, d_in] → [B, T, 2C + 4H]`.
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        activate_master(crate::linear_rows(&self.input, x), self.n_chunks)
    }

    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        precomputed_master_step(&self.hidden, self.n_chunks, self.d_hidden, xp, state)
    }

    /// `[f̃, ĩ, gates]` pre-activations as one product sum: the input weight's whole output,
    /// with `h·W_hh` added to its last `4H` (gate) columns, so no weight is narrowed per step.
    fn step_input(
        &self,
        x_t: Tensor<B, 2>,
        context_t: Option<Tensor<B, 2>>,
        state: LstmState<B, 2>,
    ) -> CellStep<B> {
        debug_assert!(context_t.is_none(), "FastTrees has no context");
        let all = crate::linear_pair_rows(&self.input, x_t, &self.hidden, state.h);
        ordered_step(all, self.n_chunks, self.d_hidden, state.c)
    }

    /// The whole sequence as one op ([`arbor_kernels::fast_trees_sequence`]): `W` and `U`
    /// packed once, the step loop and its backward pass inside.
    fn scan(
        &self,
        x: Tensor<B, 3>,
        init: &LstmState<B, 2>,
        _pad: Option<Tensor<B, 3, Bool>>,
        lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        Some(ordered_scan(
            (&self.input, &self.hidden),
            self.n_chunks,
            arbor_kernels::fast_trees_sequence,
            x,
            init,
            lengths,
        ))
    }
}
