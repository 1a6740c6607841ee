//! One Transformer encoder layer with an optional FastTrees gate after self-attention.

use arbor_cells::ArborBackend;
use burn::nn::activation::ActivationConfig;
use burn::nn::attention::{MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::transformer::{PositionWiseFeedForward, PositionWiseFeedForwardConfig};
use burn::nn::Linear;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig};
use burn::prelude::*;
use burn::tensor::activation::{quiet_softmax, softmax};
use burn::tensor::Bool;

use crate::{FastTreesGate, FastTreesGateConfig, GateInput};

/// Configuration of a [`TransformerLayer`].
#[derive(Config, Debug)]
pub struct TransformerLayerConfig {
    /// Model width `D`.
    pub d_model: usize,
    /// Number of attention heads; must divide `d_model`.
    pub n_heads: usize,
    /// Inner width of the position-wise feed-forward network.
    pub d_ff: usize,
    /// Dropout on the attention scores, inside the feed-forward network and on both residual
    /// branches (as Burn's and Vaswani et al.'s layers).
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Insert the FastTrees gate after self-attention (`false`: a plain Transformer layer).
    #[config(default = false)]
    pub fasttrees: bool,
    /// Neurons per master-gate chunk of the gate.
    #[config(default = 1)]
    pub chunk_size: usize,
    /// The gate's input functions.
    #[config(default = "GateInput::Linear")]
    pub gate_input: GateInput,
    /// Pre-norm (LayerNorm before each sub-layer) instead of the default post-norm.
    #[config(default = false)]
    pub norm_first: bool,
    /// Activation of the feed-forward network (ReLU as in Vaswani et al.).
    #[config(default = "ActivationConfig::Relu")]
    pub activation: ActivationConfig,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
}

/// A Transformer encoder layer (Vaswani et al. 2017) with an optional FastTrees gate
/// (FastTrees §3.3) on the self-attention branch. Post-norm (the default, as the original
/// Transformer the FastTrees paper builds on):
///
/// ```text
/// A = SelfAttention(X, padding mask)
/// A' = FASTTREES(A)            (only with the gate; otherwise A' = A)
/// H = LayerNorm_attn(X + Dropout(A'))
/// Y = LayerNorm_ffn(H + Dropout(FFN(H)))
/// ```
///
/// Pre-norm (`norm_first`): `H = X + Dropout(A'(LayerNorm_attn(X)))`,
/// `Y = H + Dropout(FFN(LayerNorm_ffn(H)))`.
///
/// Without the gate this is exactly Burn's `TransformerEncoderLayer` (whose `norm_1` is
/// `norm_ffn` here in pre-norm and `norm_attn` in post-norm); the tests check that.
#[derive(Module, Debug)]
pub struct TransformerLayer<B: Backend> {
    /// Multi-head self-attention.
    pub mha: MultiHeadAttention<B>,
    /// The FastTrees gate, when switched on.
    pub gate: Option<FastTreesGate<B>>,
    /// Position-wise feed-forward network.
    pub pwff: PositionWiseFeedForward<B>,
    /// LayerNorm of the attention sub-layer.
    pub norm_attn: LayerNorm<B>,
    /// LayerNorm of the feed-forward sub-layer.
    pub norm_ffn: LayerNorm<B>,
    /// Dropout on the residual branches.
    pub dropout: Dropout,
    /// Pre-norm instead of post-norm.
    pub norm_first: bool,
}

/// What [`TransformerLayer::forward`] returns.
#[derive(Debug, Clone)]
pub struct TransformerLayerOutput<B: Backend> {
    /// The layer's output: `[batch, time, D]`.
    pub output: Tensor<B, 3>,
    /// The FastTrees gate `F` (`[batch, time, D]`), when the layer has one.
    pub gate: Option<Tensor<B, 3>>,
    /// Syntactic distances `1 − mean(A)` (`[batch, time]`), when the layer has a gate.
    pub distances: Option<Tensor<B, 2>>,
}

impl TransformerLayerConfig {
    /// Builds the layer on `device`.
    ///
    /// # Panics
    /// If `n_heads` does not divide `d_model`, or the gate's chunk size does not.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> TransformerLayer<B> {
        assert!(
            self.n_heads > 0 && self.d_model.is_multiple_of(self.n_heads),
            "d_model {} must be a multiple of n_heads {}",
            self.d_model,
            self.n_heads
        );
        let norm = || {
            LayerNormConfig::new(self.d_model)
                .with_epsilon(self.layer_norm_eps)
                .init(device)
        };
        TransformerLayer {
            mha: MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
                .with_dropout(self.dropout)
                .init(device),
            gate: self.fasttrees.then(|| {
                FastTreesGateConfig::new(self.d_model)
                    .with_chunk_size(self.chunk_size)
                    .with_input(self.gate_input)
                    .init(device)
            }),
            pwff: PositionWiseFeedForwardConfig::new(self.d_model, self.d_ff)
                .with_dropout(self.dropout)
                .with_activation(self.activation.clone())
                .init(device),
            norm_attn: norm(),
            norm_ffn: norm(),
            dropout: DropoutConfig::new(self.dropout).init(),
            norm_first: self.norm_first,
        }
    }
}

impl<B: ArborBackend> TransformerLayer<B> {
    /// Runs the layer.
    ///
    /// `mask_pad` is `true` at padding positions: no position attends to them. Real positions
    /// get the same output whatever the padding (with a causal-conv gate too, since padding
    /// comes after the real tokens); outputs at padding positions are unspecified.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, D]`
    /// - `mask_pad`: `[batch, time]`
    /// - output: see [`TransformerLayerOutput`]
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        mask_pad: Option<Tensor<B, 2, Bool>>,
    ) -> TransformerLayerOutput<B> {
        let attn_in = if self.norm_first {
            arbor_cells::layer_norm(&self.norm_attn, x.clone())
        } else {
            x.clone()
        };
        let attended = self_attention(&self.mha, attn_in, mask_pad);
        let (attended, gate, distances) = match &self.gate {
            Some(gate) => {
                let g = gate.forward(attended);
                (g.output, Some(g.gate), Some(g.distances))
            }
            None => (attended, None, None),
        };
        let mut h = x + self.dropout.forward(attended);
        if !self.norm_first {
            h = arbor_cells::layer_norm(&self.norm_attn, h);
        }
        let ffn_in = if self.norm_first {
            arbor_cells::layer_norm(&self.norm_ffn, h.clone())
        } else {
            h.clone()
        };
        // Position-wise, so run on `[batch·time, D]`: a rank-2 Linear's weight gradient is one
        // matmul (see `arbor_cells::linear_rows`).
        let [batch, time, d] = ffn_in.dims();
        // `PositionWiseFeedForward::forward`, with each Linear as one fused op.
        let pwff = &self.pwff;
        let inner = arbor_cells::linear_rows(&pwff.linear_inner, ffn_in.reshape([batch * time, d]));
        let inner = pwff
            .dropout
            .forward(arbor_cells::activation(&pwff.activation, inner));
        let ffn = arbor_cells::linear_rows(&pwff.linear_outer, inner).reshape([batch, time, d]);
        let mut y = h + self.dropout.forward(ffn);
        if !self.norm_first {
            y = arbor_cells::layer_norm(&self.norm_ffn, y);
        }
        TransformerLayerOutput {
            output: y,
            gate,
            distances,
        }
    }
}

/// Burn's `MultiHeadAttention::forward` for self-attention, with the same weights, dropout,
/// masking and softmax, computed with fewer and larger products:
///
/// - the query, key, value and output projections run on `[batch·time, D]` (one matrix product
///   each, and one for each weight gradient) instead of on `[batch, time, D]`, which Burn
///   broadcasts into `batch` small products and, in the backward pass, `batch` weight-gradient
///   products summed afterwards;
/// - the attention itself (scores, mask, softmax, weighted sum, every head) is one op and one
///   autodiff node, [`arbor_cells::kernels::grouped_attention`]: on the CPU backends one loop
///   per sequence, the sequences in parallel, instead of a dozen single-threaded passes with
///   the heads split and merged by copies. The padding mask is its bias, [`PADDED_KEY_BIAS`]
///   at padded keys, so their softmax weight is exactly 0 however large their scores are. (It
///   was Burn's `min_float`, −10⁴, added to the scores: a padded key whose score was above
///   about 10⁴, as with the test's 10⁴-valued padding, kept a weight, and one draw in about
///   sixty of `real_positions_do_not_depend_on_the_padding` failed, once in CI.)
///   With attention dropout active (training, probability above 0), which the fused op does
///   not draw, the heads are strided views read by batched products, as Burn's MHA.
///
/// `mask_pad` is `true` at padding positions (keys nobody attends to).
///
/// # Shapes
/// - `x`: `[batch, time, D]`
/// - `mask_pad`: `[batch, time]`
/// - output: `[batch, time, D]`
pub fn self_attention<B: ArborBackend>(
    mha: &MultiHeadAttention<B>,
    x: Tensor<B, 3>,
    mask_pad: Option<Tensor<B, 2, Bool>>,
) -> Tensor<B, 3> {
    let [batch, time, d] = x.dims();
    let heads = mha.n_heads;
    let dropout = B::ad_enabled(&x.device()) && mha.dropout.prob > 0.0;
    let rows = x.reshape([batch * time, d]);
    let project = |linear: &Linear<B>| {
        arbor_cells::linear_rows(linear, rows.clone()).reshape([batch, time, d])
    };
    let (query, key, value) = (project(&mha.query), project(&mha.key), project(&mha.value));
    let context = if dropout {
        attention_with_dropout(mha, [query, key, value], mask_pad)
    } else {
        let bias = mask_pad.map(|m| {
            Tensor::<B, 2>::zeros(m.dims(), &m.device())
                .mask_fill(m, PADDED_KEY_BIAS)
                .reshape([batch, 1, time])
        });
        let spec = arbor_cells::kernels::AttentionSpec {
            heads,
            quiet: mha.quiet_softmax,
        };
        arbor_cells::kernels::grouped_attention(query, key, value, bias, spec)
    };
    arbor_cells::linear_rows(&mha.output, context.reshape([batch * time, d]))
        .reshape([batch, time, d])
}

/// The bias the fused attention adds to a padded key's scores: far below any score, yet finite,
/// so a row whose keys are all padding still has finite weights, as with Burn's MHA.
const PADDED_KEY_BIAS: f32 = -1e30;

/// The attention of [`self_attention`] in plain ops, with dropout on the scores as Burn's MHA.
///
/// # Shapes
/// - `qkv`: `[batch, time, D]` each
/// - `mask_pad`: `[batch, time]`
/// - output: `[batch, time, D]`
fn attention_with_dropout<B: ArborBackend>(
    mha: &MultiHeadAttention<B>,
    [query, key, value]: [Tensor<B, 3>; 3],
    mask_pad: Option<Tensor<B, 2, Bool>>,
) -> Tensor<B, 3> {
    let [batch, time, d] = query.dims();
    let (heads, d_k) = (mha.n_heads, mha.d_k);
    // The heads as permuted views; `contiguous` copies their gradients by runs before the
    // reshape's (Flex copies a permuted rank-4 view element by element).
    let split = |t: Tensor<B, 3>| {
        arbor_cells::kernels::contiguous(t.reshape([batch, time, heads, d_k])).swap_dims(1, 2)
    };
    let (query, key, value) = (split(query), split(key), split(value));
    let scores = query
        .matmul(key.swap_dims(2, 3))
        .div_scalar((d_k as f32).sqrt());
    let mut scores = mha.dropout.forward(scores);
    if let Some(mask) = mask_pad {
        scores = scores.mask_fill(mask.reshape([batch, 1, 1, time]), mha.min_float);
    }
    let weights = if mha.quiet_softmax {
        quiet_softmax(scores, 3)
    } else {
        softmax(scores, 3)
    };
    arbor_cells::kernels::contiguous(weights.matmul(value).swap_dims(1, 2))
        .reshape([batch, time, d])
}
