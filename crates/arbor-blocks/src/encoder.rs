//! The Transformer encoder stack (with or without FastTrees gates) over padded batches.

use arbor_cells::ArborBackend;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::Bool;

use crate::{GateInput, PositionKind, Positions, TransformerLayer, TransformerLayerConfig};

/// The attention heads arbor uses for a `d_model`-wide Transformer when none are asked for: the
/// largest divisor of `d_model` that is at most 4.
pub fn default_heads(d_model: usize) -> usize {
    (1..=4.min(d_model.max(1)))
        .rev()
        .find(|h| d_model.is_multiple_of(*h))
        .unwrap_or(1)
}

/// Configuration of a [`TransformerEncoder`].
#[derive(Config, Debug)]
pub struct TransformerEncoderConfig {
    /// Width of the input vectors (projected to `d_model` when different).
    pub d_input: usize,
    /// Model width `D`.
    pub d_model: usize,
    /// Attention heads per layer; must divide `d_model`.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Inner width of the feed-forward networks.
    #[config(default = 512)]
    pub d_ff: usize,
    /// Number of layers.
    #[config(default = 2)]
    pub n_layers: usize,
    /// Dropout on the input (after adding positions) and inside every layer.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// FastTrees gate in every layer (`false`: a plain Transformer encoder).
    #[config(default = false)]
    pub fasttrees: bool,
    /// Neurons per master-gate chunk of the gates.
    #[config(default = 1)]
    pub chunk_size: usize,
    /// The gates' input functions.
    #[config(default = "GateInput::Linear")]
    pub gate_input: GateInput,
    /// Pre-norm layers (then a final LayerNorm closes the stack) instead of post-norm.
    #[config(default = false)]
    pub norm_first: bool,
    /// Position information.
    #[config(default = "PositionKind::Sinusoidal")]
    pub positions: PositionKind,
    /// Number of learned positions (ignored by the other kinds).
    #[config(default = 512)]
    pub max_len: usize,
}

/// A stack of [`TransformerLayer`]s over a padded batch:
/// `X → [Linear] → + positions → Dropout → layers → [final LayerNorm (pre-norm only)]`.
#[derive(Module, Debug)]
pub struct TransformerEncoder<B: Backend> {
    /// `d_input → d_model`, when they differ.
    pub input: Option<Linear<B>>,
    /// Position vectors added to the (projected) inputs.
    pub positions: Positions<B>,
    /// Dropout after adding positions.
    pub dropout: Dropout,
    /// The layers.
    pub layers: Vec<TransformerLayer<B>>,
    /// Final LayerNorm of a pre-norm stack.
    pub final_norm: Option<LayerNorm<B>>,
    /// Model width `D`.
    pub d_model: usize,
}

/// What [`TransformerEncoder::forward`] returns.
#[derive(Debug, Clone)]
pub struct TransformerEncoderOutput<B: Backend> {
    /// The top layer's outputs: `[batch, time, D]`, zeros at padding positions.
    pub outputs: Tensor<B, 3>,
    /// Per layer (bottom first), the gate's syntactic distances `[batch, time]`; empty without
    /// FastTrees gates. Values at padding positions are unspecified.
    pub distances: Vec<Tensor<B, 2>>,
}

impl TransformerEncoderConfig {
    /// Checks the settings: positive widths and layer count, heads dividing `d_model`, dropout
    /// in `[0, 1)`, and with gates a `chunk_size` dividing `d_model` (and a causal-convolution
    /// kernel of at least 1).
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, divides, dropout};
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_model", self.d_model)?;
        at_least_one("n_layers", self.n_layers)?;
        at_least_one("d_ff", self.d_ff)?;
        divides("n_heads", self.n_heads, "d_model", self.d_model)?;
        dropout("dropout", self.dropout)?;
        if self.fasttrees {
            divides("chunk_size", self.chunk_size, "d_model", self.d_model)?;
            if let GateInput::CausalConv { kernel_size } = self.gate_input {
                at_least_one("kernel_size", kernel_size)?;
            }
        }
        Ok(())
    }

    /// The configuration of each layer.
    pub fn layer(&self) -> TransformerLayerConfig {
        TransformerLayerConfig::new(self.d_model, self.n_heads, self.d_ff)
            .with_dropout(self.dropout)
            .with_fasttrees(self.fasttrees)
            .with_chunk_size(self.chunk_size)
            .with_gate_input(self.gate_input)
            .with_norm_first(self.norm_first)
    }

    /// Builds the stack on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0, or `n_heads` or `chunk_size` does not divide `d_model`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> TransformerEncoder<B> {
        assert!(self.n_layers > 0, "a Transformer encoder needs a layer");
        let layer = self.layer();
        TransformerEncoder {
            input: (self.d_input != self.d_model)
                .then(|| LinearConfig::new(self.d_input, self.d_model).init(device)),
            positions: Positions::new(self.positions, self.d_model, self.max_len, device),
            dropout: DropoutConfig::new(self.dropout).init(),
            layers: (0..self.n_layers).map(|_| layer.init(device)).collect(),
            final_norm: self
                .norm_first
                .then(|| LayerNormConfig::new(self.d_model).init(device)),
            d_model: self.d_model,
        }
    }
}

/// The padding mask of a batch: `true` at `t ≥ lengths[b]`.
///
/// # Shapes
/// - output: `[lengths.len(), time]`
pub fn padding_mask<B: ArborBackend>(
    lengths: &[usize],
    time: usize,
    device: &B::Device,
) -> Tensor<B, 2, Bool> {
    let values: Vec<bool> = lengths
        .iter()
        .flat_map(|&len| (0..time).map(move |t| t >= len))
        .collect();
    Tensor::from_data(TensorData::new(values, [lengths.len(), time]), device)
}

impl<B: ArborBackend> TransformerEncoder<B> {
    /// Width of the outputs.
    pub fn d_model(&self) -> usize {
        self.d_model
    }

    /// Whether the layers have FastTrees gates.
    pub fn has_gates(&self) -> bool {
        self.layers.iter().any(|l| l.gate.is_some())
    }

    /// Encodes a padded batch. Every real position gets what it would get with its sentence
    /// alone (attention never reads padding); padding positions come out as zeros.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`, padded at the end of each sentence
    /// - `lengths`: `batch` entries, each `1 ≤ len ≤ time`
    /// - output: see [`TransformerEncoderOutput`] (`outputs` `[batch, time, D]`, each distance
    ///   tensor `[batch, time]`)
    pub fn forward(&self, x: Tensor<B, 3>, lengths: &[usize]) -> TransformerEncoderOutput<B> {
        let [_, time, _] = x.dims();
        let device = x.device();
        let mask = padding_mask::<B>(lengths, time, &device);
        let mut h = match &self.input {
            Some(linear) => arbor_cells::linear_rows(linear, x),
            None => x,
        };
        h = self.dropout.forward(self.positions.forward(h));
        let mut distances = Vec::new();
        for layer in &self.layers {
            let out = layer.forward(h, Some(mask.clone()));
            h = out.output;
            distances.extend(out.distances);
        }
        if let Some(norm) = &self.final_norm {
            h = arbor_cells::layer_norm(norm, h);
        }
        let outputs = h.mask_fill(mask.unsqueeze_dim::<3>(2), 0.0);
        TransformerEncoderOutput { outputs, distances }
    }
}
