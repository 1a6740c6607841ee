//! The interface every recurrent cell implements.

use crate::ArborBackend;
use burn::prelude::*;

use crate::LstmState;

/// What one recurrent step produces.
#[derive(Debug, Clone)]
pub struct CellStep<B: Backend> {
    /// The new `(h_t, c_t)`.
    pub state: LstmState<B, 2>,
    /// The master forget gate `f̃_t` `[batch, C]` of cumax cells, from which the syntactic
    /// distance is read; `None` for cells without master gates.
    pub master_forget: Option<Tensor<B, 2>>,
}

/// Every step of a sequence at once, from [`RecurrentCell::scan`].
#[derive(Debug, Clone)]
pub struct ScanOutput<B: Backend> {
    /// `h_t` for every step `[batch, time, H]` (any values at padded steps; the runner zeroes
    /// them and reads each example's last real step).
    pub h: Tensor<B, 3>,
    /// Each example's cell state after its last real step `[batch, H]`.
    pub c_last: Tensor<B, 2>,
    /// The syntactic distance `d_t = 1 − mean(f̃_t)` of every step `[batch, time]` (any
    /// values at padded steps) for cumax cells; `None` otherwise.
    pub distances: Option<Tensor<B, 2>>,
}

/// The interface every recurrent cell implements.
///
/// A cell splits its work into what depends on the input alone, computed for the whole
/// sequence in one batched op, and the per-step recurrence.
pub trait RecurrentCell<B: ArborBackend> {
    /// Input width.
    fn d_input(&self) -> usize;
    /// Hidden width `H`.
    fn d_hidden(&self) -> usize;
    /// Number of master-gate chunks `C`, for cells that have master gates.
    fn n_chunks(&self) -> Option<usize>;
    /// Everything that depends on `x` alone, for all steps at once.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`
    /// - output: `[batch, time, P]`, where `P` is the cell's own layout
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3>;
    /// The part of a step's input that reads neighbouring steps (Conv FastTrees' causal
    /// convolution), for the whole sequence; `None` (the default) when everything a step needs
    /// from `x` comes from `x_t` alone. The runner calls [`precompute`](RecurrentCell::precompute)
    /// step by step on `x_t` and gives [`step`](RecurrentCell::step) `[context_t, precompute(x_t)]`.
    ///
    /// Per-step precomputation keeps training linear in the length: slicing one precomputed
    /// `[batch, time, P]` tensor per step would give every step a full-size zero gradient of it
    /// in the autodiff graph. Only the (narrow) context is sliced.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`
    /// - output: `[batch, time, K]`, the first `K` columns of what `step` reads
    fn context(&self, _x: Tensor<B, 3>) -> Option<Tensor<B, 3>> {
        None
    }
    /// One step from the precomputed slice of step `t` and the previous state.
    ///
    /// # Shapes
    /// - `xp`: `[batch, P]`
    /// - `state`: `[batch, H]` each
    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B>;
    /// One step from the input `x_t` itself (with the context's slice of step `t` when the
    /// cell has a [`context`](RecurrentCell::context)); the runner calls this. The default is
    /// [`step`](RecurrentCell::step) on `[context_t, precompute(x_t)]`; a cell may override
    /// it to compute its input and recurrent products together (what the LSTM, ON-LSTM and
    /// FastTrees cells do, with one [`linear_pair`](crate::kernels::linear_pair)). It must
    /// compute what the default computes.
    ///
    /// # Shapes
    /// - `x_t`: `[batch, d_input]`
    /// - `context_t`: `[batch, K]`
    /// - `state`: `[batch, H]` each
    fn step_input(
        &self,
        x_t: Tensor<B, 2>,
        context_t: Option<Tensor<B, 2>>,
        state: LstmState<B, 2>,
    ) -> CellStep<B> {
        let n = x_t.dims()[0];
        let mut xp = self.precompute(x_t.unsqueeze_dim::<3>(1));
        if let Some(c) = context_t {
            xp = Tensor::cat(vec![c.unsqueeze_dim::<3>(1), xp], 2);
        }
        let width = xp.dims()[2];
        self.step(xp.reshape([n, width]), state)
    }
    /// Every step at once, for cells that have a whole-sequence op (Faster FastTrees'
    /// elementwise scan, the fused sequence ops of the LSTM, ON-LSTM, FastTrees and Conv
    /// FastTrees); `None` (the default)
    /// makes the runner call [`precompute`](RecurrentCell::precompute) and then
    /// [`step`](RecurrentCell::step) once per time step. It must compute what the steps compute.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`, the input
    /// - `init`: `[batch, H]` each, the initial state
    /// - `pad`: `[batch, time, 1]`, true at padded steps (`None`: no padding), and the same as
    ///   `lengths` (each example's real steps, at the start; `None`: no padding)
    /// - output: see [`ScanOutput`]
    fn scan(
        &self,
        _x: Tensor<B, 3>,
        _init: &LstmState<B, 2>,
        _pad: Option<Tensor<B, 3, Bool>>,
        _lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        None
    }
}
