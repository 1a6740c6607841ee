//! Master gates shared by the ON-LSTM/FastTrees family (docs/models.md §5).

use crate::ArborBackend;
use burn::prelude::*;

use crate::runner::ScanOutput;
use crate::{cumax, LstmState};

/// The chunk-level master gates `f̃ = cumax(·)` and `ĩ = 1 − cumax(·)`.
#[derive(Debug, Clone)]
pub struct MasterGates<B: Backend, const D: usize> {
    /// Master forget gate `f̃`, non-decreasing over chunks; its top chunk is 1.
    pub forget: Tensor<B, D>,
    /// Master input gate `ĩ`, non-increasing over chunks; its top chunk is 0.
    pub input: Tensor<B, D>,
}

impl<B: ArborBackend, const D: usize> MasterGates<B, D> {
    /// Applies the activations to pre-activations `[f̃ logits; ĩ logits]` (last axis `2C`).
    ///
    /// # Shapes
    /// - `logits`: `[..., 2C]`
    /// - output `forget`, `input`: `[..., C]`
    pub fn from_logits(logits: Tensor<B, D>) -> Self {
        let mut parts = logits.chunk(2, D - 1);
        let input_logits = parts.pop().expect("two halves");
        let forget_logits = parts.pop().expect("two halves");
        Self {
            forget: cumax(forget_logits),
            input: cumax(input_logits).neg().add_scalar(1.0),
        }
    }

    /// `[f̃; ĩ]` along the last axis.
    pub fn concat(self) -> Tensor<B, D> {
        Tensor::cat(vec![self.forget, self.input], D - 1)
    }

    /// Splits `[f̃; ĩ]` (already activated) back into the two gates.
    pub fn split(both: Tensor<B, D>) -> Self {
        let mut parts = both.chunk(2, D - 1);
        let input = parts.pop().expect("two halves");
        let forget = parts.pop().expect("two halves");
        Self { forget, input }
    }
}

impl<B: ArborBackend> MasterGates<B, 2> {
    /// Combines the master gates with the ordinary (already σ-activated) gates `f`, `i`:
    /// `ω = f̃ ⊙ ĩ`, `f̂ = f ⊙ ω + (f̃ − ω)`, `î = i ⊙ ω + (ĩ − ω)` (ON-LSTM eq. 11–13), each
    /// master entry broadcast over its chunk of `H / C` neurons. Returns `(f̂, î)`.
    ///
    /// # Shapes
    /// - `self.forget`, `self.input`: `[N, C]`
    /// - `f`, `i`: `[N, H]`
    /// - output: two `[N, H]`
    pub fn combine(self, f: Tensor<B, 2>, i: Tensor<B, 2>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let [n, h] = f.dims();
        let [_, c] = self.forget.dims();
        let s = h / c;
        let ft: Tensor<B, 3> = self.forget.unsqueeze_dim(2);
        let it: Tensor<B, 3> = self.input.unsqueeze_dim(2);
        let omega = ft.clone().mul(it.clone());
        let f = f.reshape([n, c, s]);
        let i = i.reshape([n, c, s]);
        let f_hat = f.mul(omega.clone()).add(ft.sub(omega.clone()));
        let i_hat = i.mul(omega.clone()).add(it.sub(omega));
        (f_hat.reshape([n, h]), i_hat.reshape([n, h]))
    }
}

/// Syntactic distance `d_t = 1 − mean(f̃_t)` over the chunks (docs/models.md §5).
///
/// # Shapes
/// - `master_forget`: `[..., C]`
/// - output: `[..., 1]`
pub fn syntactic_distance<B: ArborBackend, const D: usize>(
    master_forget: Tensor<B, D>,
) -> Tensor<B, D> {
    master_forget.mean_dim(D - 1).neg().add_scalar(1.0)
}

/// The ON-LSTM cell update from master gates and ordinary gate pre-activations `[i, f, g, o]`:
/// `c_t = f̂ ⊙ c_{t-1} + î ⊙ tanh(g)`, `h_t = σ(o) ⊙ tanh(c_t)`.
pub(crate) fn ordered_update<B: ArborBackend>(
    master: MasterGates<B, 2>,
    gates: Tensor<B, 2>,
    c_prev: Tensor<B, 2>,
) -> LstmState<B, 2> {
    // Two fused ops: c (master gates and all) and h = σ(o) ⊙ tanh(c).
    let c = arbor_kernels::ordered_cell(gates.clone(), master.forget, master.input, c_prev);
    let h = arbor_kernels::gated_output(gates, c.clone(), &arbor_kernels::GateLayout::lstm());
    LstmState { h, c }
}

/// One ON-LSTM step (eqs. 9–14) from the pre-activations `[f̃, ĩ, i, f, ĉ, o]` of all gates
/// (`2C + 4H` columns): the master gates by cumax, then [`ordered_update`]. ON-LSTM's gates
/// read `x_t` and `h`; FastTrees' master gates read `x_t` only, but its step gathers the same
/// pre-activations.
pub(crate) fn ordered_step<B: ArborBackend>(
    all: Tensor<B, 2>,
    n_chunks: usize,
    d_hidden: usize,
    c_prev: Tensor<B, 2>,
) -> crate::CellStep<B> {
    let c2 = 2 * n_chunks;
    let master = MasterGates::from_logits(all.clone().narrow(1, 0, c2));
    let gates = all.narrow(1, c2, 4 * d_hidden);
    let forget = master.forget.clone();
    crate::CellStep {
        state: ordered_update(master, gates, c_prev),
        master_forget: Some(forget),
    }
}

/// The whole sequence of an ON-LSTM, FastTrees or Conv FastTrees cell as one op (`op`) from
/// its input (`x → [f̃, ĩ, i, f, ĉ, o]`, or `x → [i, f, ĉ, o]` when the master gates are given,
/// with bias) and hidden (`h → …`, no bias) weights and its `n_chunks` chunks.
///
/// `op` is [`arbor_kernels::on_lstm_sequence`], [`arbor_kernels::fast_trees_sequence`] or a
/// closure around [`arbor_kernels::conv_fast_trees_sequence`]: from the input, the parameters,
/// `h0`, `c0`, the lengths and the chunk count, every step's `h`, each example's final `c` and
/// every step's distance.
///
/// # Shapes
/// - `x`: `[batch, time, d_input]`; `init`: `[batch, H]` each; `lengths`: `batch` entries
///   (`None`: all `time` steps)
/// - output: see [`ScanOutput`]
pub(crate) fn ordered_scan<B: ArborBackend>(
    (input, hidden): (&burn::nn::Linear<B>, &burn::nn::Linear<B>),
    n_chunks: usize,
    op: impl FnOnce(
        Tensor<B, 3>,
        arbor_kernels::LstmParams<B>,
        Tensor<B, 2>,
        Tensor<B, 2>,
        &[usize],
        usize,
    ) -> (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>),
    x: Tensor<B, 3>,
    init: &LstmState<B, 2>,
    lengths: Option<&[usize]>,
) -> ScanOutput<B> {
    let params = crate::linear::sequence_params(input, hidden);
    let (h, c_last, distances) = op(
        x,
        params,
        init.h.clone(),
        init.c.clone(),
        lengths.unwrap_or(&[]),
        n_chunks,
    );
    ScanOutput {
        h,
        c_last,
        distances: Some(distances),
    }
}

/// Checks `d_hidden` against `chunk_size` and returns the number of chunks `C`.
pub(crate) fn n_chunks(d_hidden: usize, chunk_size: usize) -> usize {
    assert!(
        chunk_size > 0 && d_hidden.is_multiple_of(chunk_size),
        "d_hidden ({d_hidden}) must be a positive multiple of chunk_size ({chunk_size})"
    );
    d_hidden / chunk_size
}
