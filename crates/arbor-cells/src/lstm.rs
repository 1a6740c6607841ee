//! A plain LSTM cell with fused gates.

use crate::ArborBackend;
use arbor_kernels::{gated_cell, gated_output, GateLayout};
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::runner::{CellStep, RecurrentCell, ScanOutput};
use crate::LstmState;

/// Configuration of an [`LstmCell`].
#[derive(Config, Debug)]
pub struct LstmCellConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width `H`.
    pub d_hidden: usize,
    /// `None` (default): every bias starts as PyTorch's `LSTMCell` does, `U(±1/√d_input)`.
    /// `Some(v)`: the biases start at 0 except the forget gate's, which starts at `v` (the Gumbel
    /// Tree-LSTM reference's leaf LSTM uses 1; see docs/init.md).
    #[config(default = "None")]
    pub forget_bias: Option<f64>,
}

/// LSTM cell (Hochreiter & Schmidhuber 1997) with one fused matmul per input.
///
/// ```text
/// [i, f, g, o] = W x_t + b + U h_{t-1}
/// c_t = σ(f) ⊙ c_{t-1} + σ(i) ⊙ tanh(g) ;  h_t = σ(o) ⊙ tanh(c_t)
/// ```
/// **Gate order** `i, f, g, o` (PyTorch's `LSTMCell` order), each block `H` wide.
#[derive(Module, Debug)]
pub struct LstmCell<B: Backend> {
    /// `x_t → [i, f, g, o]` with bias.
    pub input: Linear<B>,
    /// `h_{t-1} → [i, f, g, o]`, no bias.
    pub hidden: Linear<B>,
    /// Hidden width `H`.
    pub d_hidden: usize,
}

impl LstmCellConfig {
    /// Builds the cell on `device`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> LstmCell<B> {
        let h = self.d_hidden;
        let mut input = LinearConfig::new(self.d_input, 4 * h).init(device);
        if let Some(forget) = self.forget_bias {
            let mut bias = vec![0f32; 4 * h];
            bias[h..2 * h].fill(forget as f32);
            input.bias = Some(Param::from_tensor(Tensor::from_floats(
                bias.as_slice(),
                device,
            )));
        }
        LstmCell {
            input,
            hidden: LinearConfig::new(h, 4 * h).with_bias(false).init(device),
            d_hidden: h,
        }
    }
}

/// The LSTM update from gate pre-activations `[i, f, g, o]`: two fused ops (one autodiff node
/// each) instead of a chunk and a dozen elementwise ops.
pub(crate) fn lstm_update<B: ArborBackend>(
    gates: Tensor<B, 2>,
    c_prev: Tensor<B, 2>,
) -> LstmState<B, 2> {
    let layout = GateLayout::lstm();
    let c = gated_cell(gates.clone(), vec![c_prev], &layout);
    let h = gated_output(gates, c.clone(), &layout);
    LstmState { h, c }
}

impl<B: ArborBackend> LstmCell<B> {
    /// Every step's state over a whole sequence as one fused op
    /// ([`arbor_kernels::lstm_sequence`]: the step loop inside the op, with the input and
    /// recurrent weights packed once for the sequence, only the examples still running computed
    /// at each step, and one backward node). Computes what the step loop computes; an
    /// example's state is frozen after its length. The runner's path
    /// ([`RecurrentCell::scan`]).
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`
    /// - `init`: `[batch, H]` each (`None`: zeros)
    /// - `lengths`: `batch` entries `≤ time`, or empty for all `time` steps
    /// - output: `h_t` of every step `[batch, time, H]` (an ended example's rows repeat its
    ///   last `h`) and each example's final `c` `[batch, H]`
    pub fn sequence(
        &self,
        x: Tensor<B, 3>,
        init: Option<LstmState<B, 2>>,
        lengths: &[usize],
    ) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let init = self.initial(&x, init);
        let params = crate::linear::sequence_params(&self.input, &self.hidden);
        arbor_kernels::lstm_sequence(x, params, init.h, init.c, lengths)
    }

    /// [`LstmCell::sequence`] with every step's cell state too
    /// ([`arbor_kernels::lstm_sequence_states`]), for callers that read them.
    ///
    /// # Shapes
    /// - `x`, `init`, `lengths`: as [`LstmCell::sequence`]
    /// - output `h`, `c`: `[batch, time, H]` (an ended example's rows repeat its last state)
    pub fn sequence_states(
        &self,
        x: Tensor<B, 3>,
        init: Option<LstmState<B, 2>>,
        lengths: &[usize],
    ) -> LstmState<B, 3> {
        let init = self.initial(&x, init);
        let params = crate::linear::sequence_params(&self.input, &self.hidden);
        let (h, c) = arbor_kernels::lstm_sequence_states(x, params, init.h, init.c, lengths);
        LstmState::new(h, c)
    }

    /// `init`, or zeros for `x`'s batch.
    fn initial(&self, x: &Tensor<B, 3>, init: Option<LstmState<B, 2>>) -> LstmState<B, 2> {
        let [batch, _, _] = x.dims();
        init.unwrap_or_else(|| LstmState::zeros([batch, self.d_hidden], &x.device()))
    }
}

impl<B: ArborBackend> RecurrentCell<B> for LstmCell<B> {
    fn d_input(&self) -> usize {
        self.input.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.d_hidden
    }

    fn n_chunks(&self) -> Option<usize> {
        None
    }

    /// `W x_t + b` for every step: `[B, T, d_in] → [B, T, 4H]`.
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        crate::linear_rows(&self.input, x)
    }

    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        let gates = xp.add(crate::linear_rows(&self.hidden, state.h));
        CellStep {
            state: lstm_update(gates, state.c),
            master_forget: None,
        }
    }

    /// `W x_t + U h + b` as one product sum, then the update.
    fn step_input(
        &self,
        x_t: Tensor<B, 2>,
        context_t: Option<Tensor<B, 2>>,
        state: LstmState<B, 2>,
    ) -> CellStep<B> {
        debug_assert!(context_t.is_none(), "the LSTM has no context");
        let gates = crate::linear_pair_rows(&self.input, x_t, &self.hidden, state.h);
        CellStep {
            state: lstm_update(gates, state.c),
            master_forget: None,
        }
    }

    /// The whole sequence as one op: [`LstmCell::sequence`].
    fn scan(
        &self,
        x: Tensor<B, 3>,
        init: &LstmState<B, 2>,
        _pad: Option<Tensor<B, 3, Bool>>,
        lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        let (h, c_last) = self.sequence(x, Some(init.clone()), lengths.unwrap_or(&[]));
        Some(ScanOutput {
            h,
            c_last,
            distances: None,
        })
    }
}
