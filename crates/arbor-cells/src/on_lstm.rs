//! ON-LSTM (Shen et al. 2019, "Ordered Neurons"; docs/models.md §5).

use crate::ArborBackend;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::master::{n_chunks, ordered_scan, ordered_step};
use crate::runner::{CellStep, RecurrentCell, ScanOutput};
use crate::LstmState;

/// Configuration of an [`OnLstmCell`].
#[derive(Config, Debug)]
pub struct OnLstmCellConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width `H`; a multiple of `chunk_size`.
    pub d_hidden: usize,
    /// Neurons per chunk `H / C` (ON-LSTM's `chunk_size`).
    pub chunk_size: usize,
}

/// ON-LSTM cell: master gates `f̃ = cumax(W x_t + U h_{t−1} + b)`, `ĩ = 1 − cumax(…)`
/// (eq. 9–10).
///
/// ```text
/// ω = f̃ ⊙ ĩ ; f̂ = f ⊙ ω + (f̃ − ω) ; î = i ⊙ ω + (ĩ − ω)        (eq. 11–13)
/// c_t = f̂ ⊙ c_{t−1} + î ⊙ tanh(ĉ) ; h_t = o ⊙ tanh(c_t)           (eq. 14)
/// ```
/// **Gate order** of both fused weights: `[f̃ (C), ĩ (C), i (H), f (H), ĉ (H), o (H)]` —
/// master gates first, then the LSTM gates in [`LstmCell`](crate::LstmCell)'s order. The
/// released ON-LSTM code orders them `[ĩ, f̃, o, ĉ, i, f]` chunk-major.
#[derive(Module, Debug)]
pub struct OnLstmCell<B: Backend> {
    /// `x_t → [f̃, ĩ, i, f, ĉ, o]` with bias.
    pub input: Linear<B>,
    /// `h_{t−1} → [f̃, ĩ, i, f, ĉ, o]`, no bias.
    pub hidden: Linear<B>,
    /// Hidden width `H`.
    pub d_hidden: usize,
    /// Number of chunks `C`.
    pub n_chunks: usize,
}

impl OnLstmCellConfig {
    /// Builds the cell on `device`.
    ///
    /// # Panics
    /// If `d_hidden` is not a multiple of `chunk_size`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> OnLstmCell<B> {
        let h = self.d_hidden;
        let c = n_chunks(h, self.chunk_size);
        OnLstmCell {
            input: LinearConfig::new(self.d_input, 4 * h + 2 * c).init(device),
            hidden: LinearConfig::new(h, 4 * h + 2 * c)
                .with_bias(false)
                .init(device),
            d_hidden: h,
            n_chunks: c,
        }
    }
}

impl<B: ArborBackend> RecurrentCell<B> for OnLstmCell<B> {
    fn d_input(&self) -> usize {
        self.input.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.d_hidden
    }

    fn n_chunks(&self) -> Option<usize> {
        Some(self.n_chunks)
    }

    /// `W x_t + b` for every step: `[B, T, d_in] → [B, T, 2C + 4H]`.
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        crate::linear_rows(&self.input, x)
    }

    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        let all = xp.add(crate::linear_rows(&self.hidden, state.h));
        ordered_step(all, self.n_chunks, self.d_hidden, state.c)
    }

    /// `W x_t + U h + b` as one product sum, then the update.
    fn step_input(
        &self,
        x_t: Tensor<B, 2>,
        context_t: Option<Tensor<B, 2>>,
        state: LstmState<B, 2>,
    ) -> CellStep<B> {
        debug_assert!(context_t.is_none(), "ON-LSTM has no context");
        let all = crate::linear_pair_rows(&self.input, x_t, &self.hidden, state.h);
        ordered_step(all, self.n_chunks, self.d_hidden, state.c)
    }

    /// The whole sequence as one op ([`arbor_kernels::on_lstm_sequence`]): `W` and `U`
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
            arbor_kernels::on_lstm_sequence,
            x,
            init,
            lengths,
        ))
    }
}
