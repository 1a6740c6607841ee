//! The FastTrees gate (Pung & Chan, §3.3; docs/models.md §5), inserted after self-attention.

use arbor_cells::cumax;
use arbor_cells::kernels::{narrow, sigmoid};
use arbor_cells::ArborBackend;
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig1d};
use burn::prelude::*;

/// How the gate functions `F_a`, `F_b`, `F_h` read their input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateInput {
    /// Position-wise linear layers (the paper's default): position `t` sees `x_t` only.
    Linear,
    /// A causal 1-D convolution over time with this kernel width `K`: position `t` sees
    /// `x_{t−K+1} … x_t` (left-padded with zeros), never a later position or another example.
    CausalConv {
        /// Kernel width `K ≥ 1`.
        kernel_size: usize,
    },
}

/// Configuration of a [`FastTreesGate`].
#[derive(Config, Debug)]
pub struct FastTreesGateConfig {
    /// Model width `D`.
    pub d_model: usize,
    /// Neurons per master-gate chunk `D / C`; `D` must be a multiple of it. 1 gives one
    /// master-gate entry per neuron, exactly the equations as written.
    #[config(default = 1)]
    pub chunk_size: usize,
    /// Position-wise linear or causal convolution.
    #[config(default = "GateInput::Linear")]
    pub input: GateInput,
}

/// The fused gate function: one matmul (or one convolution) producing `[F_a; F_b; F_h]`.
#[derive(Module, Debug)]
pub enum GateProjection<B: Backend> {
    /// Position-wise: `D → 2C + D`.
    Linear(Linear<B>),
    /// Causal temporal convolution: `D → 2C + D` channels, kernel `K`, left padding `K − 1`.
    Conv(Conv1d<B>),
}

/// The FastTrees gate:
///
/// ```text
/// A = cumax(F_a(X))           master "forget" gate, non-decreasing over chunks, in [0, 1]
/// B = 1 − cumax(F_b(X))       master "input" gate, non-increasing over chunks, in [0, 1]
/// ω = A ⊙ B
/// F = σ(F_h(X)) ⊙ ω + (A − ω)
/// Y = F ⊙ X
/// ```
///
/// `A` and `B` have one entry per chunk (`C = D / chunk_size`), broadcast over the chunk's
/// neurons; `F_h` is per neuron (as ON-LSTM's ordinary gates). Since `0 ≤ ω ≤ A ≤ 1`,
/// `A − ω ≤ F ≤ A`, so `0 ≤ F ≤ 1`.
///
/// **Fused weight order**: the projection's output is `[F_a (C), F_b (C), F_h (D)]`.
///
/// **Syntactic distance** per position, as ON-LSTM reads it from its master forget gate:
/// `d_t = 1 − mean_c(A_t)`.
#[derive(Module, Debug)]
pub struct FastTreesGate<B: Backend> {
    /// `X → [F_a; F_b; F_h]`.
    pub projection: GateProjection<B>,
    /// Model width `D`.
    pub d_model: usize,
    /// Number of chunks `C`.
    pub n_chunks: usize,
}

/// What [`FastTreesGate::forward`] returns.
#[derive(Debug, Clone)]
pub struct FastTreesGateOutput<B: Backend> {
    /// `Y = F ⊙ X`: `[batch, time, D]`.
    pub output: Tensor<B, 3>,
    /// The gate `F`: `[batch, time, D]`, in `[0, 1]`.
    pub gate: Tensor<B, 3>,
    /// The master gate `A` per chunk: `[batch, time, C]`.
    pub master_forget: Tensor<B, 3>,
    /// The master gate `B` per chunk: `[batch, time, C]`.
    pub master_input: Tensor<B, 3>,
    /// Syntactic distances `1 − mean_c(A)`: `[batch, time]`.
    pub distances: Tensor<B, 2>,
}

impl FastTreesGateConfig {
    /// Builds the gate on `device`.
    ///
    /// # Panics
    /// If `chunk_size` is 0 or does not divide `d_model`, or a convolution's `kernel_size` is 0.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> FastTreesGate<B> {
        let d = self.d_model;
        assert!(
            self.chunk_size > 0 && d.is_multiple_of(self.chunk_size),
            "d_model {d} must be a multiple of chunk_size {}",
            self.chunk_size
        );
        let c = d / self.chunk_size;
        let width = 2 * c + d;
        let projection = match self.input {
            GateInput::Linear => GateProjection::Linear(LinearConfig::new(d, width).init(device)),
            GateInput::CausalConv { kernel_size } => {
                assert!(kernel_size > 0, "kernel_size must be at least 1");
                GateProjection::Conv(
                    Conv1dConfig::new(d, width, kernel_size)
                        .with_padding(PaddingConfig1d::Explicit(kernel_size - 1, 0))
                        .init(device),
                )
            }
        };
        FastTreesGate {
            projection,
            d_model: d,
            n_chunks: c,
        }
    }
}

impl<B: ArborBackend> FastTreesGate<B> {
    /// The fused pre-activations `[F_a(X); F_b(X); F_h(X)]`.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, D]`
    /// - output: `[batch, time, 2C + D]`
    pub fn logits(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        match &self.projection {
            GateProjection::Linear(linear) => arbor_cells::linear_rows(linear, x),
            GateProjection::Conv(conv) => arbor_cells::conv1d_over_time(conv, x),
        }
    }

    /// Gates `x`: `Y = F ⊙ X` with `F` from `x` itself.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, D]`
    /// - output: see [`FastTreesGateOutput`]
    pub fn forward(&self, x: Tensor<B, 3>) -> FastTreesGateOutput<B> {
        let [batch, time, d] = x.dims();
        let c = self.n_chunks;
        let logits = self.logits(x.clone());
        let a = cumax(narrow(logits.clone(), 2, 0, c));
        let b = cumax(narrow(logits.clone(), 2, c, c)).neg().add_scalar(1.0);
        let h = sigmoid(narrow(logits, 2, 2 * c, d));
        // ω = A ⊙ B; F = σ(F_h) ⊙ ω + (A − ω), chunk entries broadcast over D / C neurons.
        let omega = a.clone() * b.clone();
        let expand = |g: Tensor<B, 3>| -> Tensor<B, 3> {
            g.unsqueeze_dim::<4>(3)
                .expand([batch, time, c, d / c])
                .reshape([batch, time, d])
        };
        let omega_d = expand(omega);
        let a_d = expand(a.clone());
        let gate = h * omega_d.clone() + (a_d - omega_d);
        let distances = a
            .clone()
            .mean_dim(2)
            .reshape([batch, time])
            .neg()
            .add_scalar(1.0);
        FastTreesGateOutput {
            output: gate.clone() * x,
            gate,
            master_forget: a,
            master_input: b,
            distances,
        }
    }
}
