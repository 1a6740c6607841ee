//! Conv FastTrees (Pung & Chan; docs/models.md §5): master gates from a causal temporal convolution.

use crate::ArborBackend;
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig1d};
use burn::prelude::*;
use burn::tensor::activation::relu;

use crate::fast_trees::precomputed_master_step;
use crate::master::{n_chunks, ordered_scan, MasterGates};
use crate::runner::{CellStep, RecurrentCell, ScanOutput};
use crate::LstmState;

/// Configuration of a [`ConvFastTreesCell`].
#[derive(Config, Debug)]
pub struct ConvFastTreesCellConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width `H`; a multiple of `chunk_size`.
    pub d_hidden: usize,
    /// Neurons per chunk `H / C`.
    pub chunk_size: usize,
    /// Temporal kernel width `K`: position `t` sees `x_{t−K+1} … x_t`.
    #[config(default = 3)]
    pub kernel_size: usize,
    /// Channels of the convolution (0: the input width).
    #[config(default = 0)]
    pub d_conv: usize,
}

/// Conv FastTrees cell: the master-gate pre-activations are a *causal* 1-D convolution over
/// time followed by a ReLU and a position-wise linear layer,
/// `[f̃; ĩ] = [cumax; 1 − cumax](Linear(ReLU(CausalConv(x)))_t)`; everything else is FastTrees.
///
/// The convolution runs along the time axis of each example (left-padded with `K − 1` zeros), so
/// position `t` sees `t` and earlier only, and examples never see each other. The released code
/// convolved over the batch axis by mistake; this follows the paper.
///
/// **Gate order**: the conv head produces `[f̃ (C), ĩ (C)]`; the input and hidden weights
/// produce `[i, f, ĉ, o]`.
#[derive(Module, Debug)]
pub struct ConvFastTreesCell<B: Backend> {
    /// Causal convolution over time, `d_in → d_conv` channels.
    pub conv: Conv1d<B>,
    /// Position-wise `d_conv → [f̃, ĩ]`.
    pub master: Linear<B>,
    /// `x_t → [i, f, ĉ, o]` with bias.
    pub input: Linear<B>,
    /// `h_{t−1} → [i, f, ĉ, o]`, no bias.
    pub hidden: Linear<B>,
    /// Hidden width `H`.
    pub d_hidden: usize,
    /// Number of chunks `C`.
    pub n_chunks: usize,
}

impl ConvFastTreesCellConfig {
    /// Builds the cell on `device`.
    ///
    /// # Panics
    /// If `d_hidden` is not a multiple of `chunk_size`, or `kernel_size` is 0.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> ConvFastTreesCell<B> {
        assert!(self.kernel_size > 0, "kernel_size must be at least 1");
        let h = self.d_hidden;
        let c = n_chunks(h, self.chunk_size);
        let d_conv = if self.d_conv == 0 {
            self.d_input
        } else {
            self.d_conv
        };
        ConvFastTreesCell {
            conv: Conv1dConfig::new(self.d_input, d_conv, self.kernel_size)
                .with_padding(PaddingConfig1d::Explicit(self.kernel_size - 1, 0))
                .init(device),
            master: LinearConfig::new(d_conv, 2 * c).init(device),
            input: LinearConfig::new(self.d_input, 4 * h).init(device),
            hidden: LinearConfig::new(h, 4 * h).with_bias(false).init(device),
            d_hidden: h,
            n_chunks: c,
        }
    }
}

impl<B: ArborBackend> ConvFastTreesCell<B> {
    /// The master gates' pre-activations of every step, `Linear(ReLU(CausalConv(x)))`.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_in]`
    /// - output: `[batch, time, 2C]`, `[f̃ logits; ĩ logits]`
    pub fn master_logits(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        crate::linear_rows(&self.master, relu(crate::conv1d_over_time(&self.conv, x)))
    }
}

impl<B: ArborBackend> RecurrentCell<B> for ConvFastTreesCell<B> {
    fn d_input(&self) -> usize {
        self.input.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.d_hidden
    }

    fn n_chunks(&self) -> Option<usize> {
        Some(self.n_chunks)
    }

    /// `W x_t + b` for every step: `[B, T, d_in] → [B, T, 4H]`; the master gates come from
    /// [`context`](RecurrentCell::context).
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        crate::linear_rows(&self.input, x)
    }

    /// The master gates `[f̃, ĩ]` of every step, `[B, T, d_in] → [B, T, 2C]`: the causal
    /// convolution reads the steps before `t`.
    fn context(&self, x: Tensor<B, 3>) -> Option<Tensor<B, 3>> {
        Some(MasterGates::from_logits(self.master_logits(x)).concat())
    }

    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        precomputed_master_step(&self.hidden, self.n_chunks, self.d_hidden, xp, state)
    }

    /// The whole sequence as one op ([`arbor_kernels::conv_fast_trees_sequence`]): the master
    /// gates' pre-activations of every step from the convolution first, then `W` and `U`
    /// packed once, the step loop and its backward pass inside.
    fn scan(
        &self,
        x: Tensor<B, 3>,
        init: &LstmState<B, 2>,
        _pad: Option<Tensor<B, 3, Bool>>,
        lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        let master = self.master_logits(x.clone());
        Some(ordered_scan(
            (&self.input, &self.hidden),
            self.n_chunks,
            |x, params, h0, c0, lengths, chunks| {
                arbor_kernels::conv_fast_trees_sequence(master, x, params, h0, c0, lengths, chunks)
            },
            x,
            init,
            lengths,
        ))
    }
}
