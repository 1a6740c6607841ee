//! # arbor-blocks
//!
//! Transformer blocks with the FastTrees gate (Pung & Chan, §3.3; `docs/models.md` §5):
//!
//! | item | what it computes |
//! | --- | --- |
//! | [`FastTreesGate`] | `F = σ(F_h(X)) ⊙ (A ⊙ B) + (A − A ⊙ B)`, `Y = F ⊙ X` with `A = cumax(F_a(X))`, `B = 1 − cumax(F_b(X))`; `F_*` fused, position-wise linear or causal convolution |
//! | [`TransformerLayer`] | self-attention with a padding mask, the optional gate, residual + LayerNorm, feed-forward network (post-norm by default) |
//! | [`TransformerEncoder`] | input projection, positions (sinusoidal or learned), a stack of layers, padding masks |
//!
//! The gate is a config switch on the same layer type: without it a layer is a plain
//! Transformer encoder layer:
//!
//! ```
//! use arbor_blocks::TransformerEncoderConfig;
//! use burn::backend::Flex;
//! use burn::prelude::*;
//! use burn::tensor::Distribution;
//!
//! let device = Default::default();
//! let encoder = TransformerEncoderConfig::new(16, 32)
//!     .with_fasttrees(true)
//!     .with_d_ff(64)
//!     .init::<Flex>(&device);
//! let x = Tensor::<Flex, 3>::random([2, 5, 16], Distribution::Normal(0.0, 1.0), &device);
//! let lengths = vec![5, 3];
//! let out = encoder.forward(x, &lengths);
//! assert_eq!(out.outputs.dims(), [2, 5, 32]);
//! assert_eq!(out.distances.len(), 2);
//! ```

#![warn(missing_docs)]

mod encoder;
mod gate;
mod layer;
mod positions;

pub use encoder::{
    default_heads, padding_mask, TransformerEncoder, TransformerEncoderConfig,
    TransformerEncoderOutput,
};
pub use gate::{
    FastTreesGate, FastTreesGateConfig, FastTreesGateOutput, GateInput, GateProjection,
};
pub use layer::{self_attention, TransformerLayer, TransformerLayerConfig, TransformerLayerOutput};
pub use positions::{sinusoids, PositionKind, Positions};
