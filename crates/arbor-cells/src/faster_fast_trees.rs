//! Faster FastTrees (Pung & Chan; docs/models.md §5): every gate reads `x_t` only.

use crate::ArborBackend;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
// The fused activations: one SIMD pass over the strided gate views instead of Burn's scalar ops.
use arbor_kernels::{sigmoid, tanh};

use crate::master::n_chunks;
use crate::runner::{CellStep, RecurrentCell, ScanOutput};
use crate::{syntactic_distance, LstmState, MasterGates};

/// Configuration of a [`FasterFastTreesCell`].
#[derive(Config, Debug)]
pub struct FasterFastTreesCellConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width `H`; a multiple of `chunk_size`.
    pub d_hidden: usize,
    /// Neurons per chunk `H / C`.
    pub chunk_size: usize,
}

/// Faster FastTrees cell (QRNN-style): all gates come from `x_t` in one matmul over the whole
/// sequence, and the only recurrence is the elementwise scan
///
/// ```text
/// c_t = f̂_t ⊙ c_{t−1} + î_t ⊙ tanh(ĉ_t) ;  h_t = σ(o_t) ⊙ tanh(c_t)
/// ```
/// with `f̂`, `î` from the master gates exactly as in ON-LSTM.
///
/// **Gate order** of the input weight: `[f̃ (C), ĩ (C), i, f, ĉ, o (H each)]`. There is no
/// hidden-to-hidden weight.
#[derive(Module, Debug)]
pub struct FasterFastTreesCell<B: Backend> {
    /// `x_t → [f̃, ĩ, i, f, ĉ, o]` with bias.
    pub input: Linear<B>,
    /// Hidden width `H`.
    pub d_hidden: usize,
    /// Number of chunks `C`.
    pub n_chunks: usize,
}

impl FasterFastTreesCellConfig {
    /// Builds the cell on `device`.
    ///
    /// # Panics
    /// If `d_hidden` is not a multiple of `chunk_size`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> FasterFastTreesCell<B> {
        let h = self.d_hidden;
        let c = n_chunks(h, self.chunk_size);
        FasterFastTreesCell {
            input: LinearConfig::new(self.d_input, 4 * h + 2 * c).init(device),
            d_hidden: h,
            n_chunks: c,
        }
    }
}

impl<B: ArborBackend> RecurrentCell<B> for FasterFastTreesCell<B> {
    fn d_input(&self) -> usize {
        self.input.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.d_hidden
    }

    fn n_chunks(&self) -> Option<usize> {
        Some(self.n_chunks)
    }

    /// Every gate for every step, so that [`step`](RecurrentCell::step) is elementwise:
    /// `[B, T, d_in] → [B, T, 3H + C]` laid out as `[f̂, î ⊙ tanh(ĉ), σ(o), f̃]`.
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, _] = x.dims();
        let (h, c) = (self.d_hidden, self.n_chunks);
        let all = crate::linear_rows(&self.input, x).reshape([b * t, 4 * h + 2 * c]);
        let master = MasterGates::from_logits(all.clone().narrow(1, 0, 2 * c));
        let mut g = all.narrow(1, 2 * c, 4 * h).chunk(4, 1);
        let o = g.pop().expect("4 gates");
        let u = g.pop().expect("4 gates");
        let f = g.pop().expect("4 gates");
        let i = g.pop().expect("4 gates");
        let forget = master.forget.clone();
        let (f_hat, i_hat) = master.combine(sigmoid(f), sigmoid(i));
        let out = Tensor::cat(vec![f_hat, i_hat.mul(tanh(u)), sigmoid(o), forget], 1);
        out.reshape([b, t, 3 * h + c])
    }

    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        let h = self.d_hidden;
        let a = xp.clone().narrow(1, 0, h);
        let u = xp.clone().narrow(1, h, h);
        let o = xp.clone().narrow(1, 2 * h, h);
        let forget = xp.narrow(1, 3 * h, self.n_chunks);
        let c = a.mul(state.c).add(u);
        let h = o.mul(tanh(c.clone()));
        CellStep {
            state: LstmState { h, c },
            master_forget: Some(forget),
        }
    }

    /// The whole sequence in four fused ops: the gate activations (`ordered_gates`), the scan
    /// `c_t = f̂_t ⊙ c_{t−1} + (î ⊙ tanh(ĉ))_t` (`linear_scan`) and `h = σ(o) ⊙ tanh(c)`
    /// (`gated_output`), after the input matmul and the cumax master gates. Padded steps get
    /// `f̂ = 1` and a zero update, so the state holds through them.
    fn scan(
        &self,
        x: Tensor<B, 3>,
        init: &LstmState<B, 2>,
        pad: Option<Tensor<B, 3, Bool>>,
        _lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        // No recurrence through `h`: only the initial cell state matters.
        let c0 = init.c.clone();
        let [b, t, d_in] = x.dims();
        let (h, c) = (self.d_hidden, self.n_chunks);
        // The master-gate and gate columns as two products on the weight's columns, so that
        // each is a contiguous tensor (not a strided view the kernels would copy).
        let rows = x.reshape([b * t, d_in]);
        let master =
            MasterGates::from_logits(crate::linear_columns(&self.input, rows.clone(), 0, 2 * c));
        let gates = crate::linear_columns(&self.input, rows, 2 * c, 4 * h);
        // `a` then `u` on the last axis, which the scan reads as they are (two views of the
        // halves would each get a gradient of this whole shape).
        let mut au =
            arbor_kernels::ordered_gates(gates.clone(), master.forget.clone(), master.input)
                .reshape([b, t, 2 * h]);
        if let Some(pad) = pad {
            // Padded steps get `a = 1`, `u = 0`.
            let device = au.device();
            let fill = Tensor::cat(
                vec![
                    Tensor::<B, 3>::ones([1, 1, h], &device),
                    Tensor::zeros([1, 1, h], &device),
                ],
                2,
            );
            let full = [b, t, 2 * h];
            au = au.mask_where(pad.expand(full), fill.expand(full));
        }
        let c_all = arbor_kernels::linear_scan(au, c0);
        let h_all = arbor_kernels::gated_output(
            gates.reshape([b, t, 4 * h]),
            c_all.clone(),
            &arbor_kernels::GateLayout::lstm(),
        );
        // Padded steps leave `c` unchanged (`a = 1`, `u = 0`), so the last step's is each
        // example's final state.
        let c_last = c_all.clone().narrow(1, t - 1, 1).reshape([b, h]);
        Some(ScanOutput {
            h: h_all,
            c_last,
            distances: Some(syntactic_distance(master.forget).reshape([b, t])),
        })
    }
}
