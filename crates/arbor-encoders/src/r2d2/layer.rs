//! One post-LayerNorm Transformer encoder layer with role embeddings on queries and keys and a
//! fixed attention mask (R2D2's composition block, docs/models.md §4).

use arbor_cells::kernels::gelu;
use arbor_cells::linear_rows;
use arbor_cells::ArborBackend;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;

/// Configuration of a [`RoleTransformerLayer`].
#[derive(Config, Debug)]
pub struct RoleTransformerLayerConfig {
    /// Model width `D`.
    pub d_model: usize,
    /// Number of attention heads (must divide `d_model`).
    pub n_heads: usize,
    /// Width of the feed-forward block.
    pub d_ff: usize,
}

/// A Transformer encoder layer: multi-head self-attention, then a GELU feed-forward block,
/// each followed by a residual connection and LayerNorm (post-LN).
///
/// Role embeddings `r` are added to the queries' and keys' inputs only:
/// `Q = (x + r)·W_q`, `K = (x + r)·W_k`, `V = x·W_v`. The three projections are one fused
/// matmul `x·[W_q W_k W_v]`; the role part `r·[W_q W_k]` is added afterwards.
#[derive(Module, Debug)]
pub struct RoleTransformerLayer<B: Backend> {
    /// Fused `[W_q W_k W_v]`, `D → 3D`.
    pub qkv: Linear<B>,
    /// Output projection of the attention, `D → D`.
    pub out: Linear<B>,
    /// LayerNorm after the attention residual.
    pub norm_attn: LayerNorm<B>,
    /// First feed-forward map, `D → d_ff`.
    pub ff_in: Linear<B>,
    /// Second feed-forward map, `d_ff → D`.
    pub ff_out: Linear<B>,
    /// LayerNorm after the feed-forward residual.
    pub norm_ff: LayerNorm<B>,
    /// Number of heads.
    pub n_heads: usize,
}

impl RoleTransformerLayerConfig {
    /// Builds the layer on `device`.
    ///
    /// # Panics
    /// If `n_heads` is 0 or does not divide `d_model`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> RoleTransformerLayer<B> {
        assert!(
            self.n_heads > 0 && self.d_model.is_multiple_of(self.n_heads),
            "n_heads ({}) must divide d_model ({})",
            self.n_heads,
            self.d_model
        );
        let d = self.d_model;
        RoleTransformerLayer {
            qkv: LinearConfig::new(d, 3 * d).init(device),
            out: LinearConfig::new(d, d).init(device),
            norm_attn: LayerNormConfig::new(d).init(device),
            ff_in: LinearConfig::new(d, self.d_ff).init(device),
            ff_out: LinearConfig::new(self.d_ff, d).init(device),
            norm_ff: LayerNormConfig::new(d).init(device),
            n_heads: self.n_heads,
        }
    }
}

impl<B: ArborBackend> RoleTransformerLayer<B> {
    /// Applies the layer.
    ///
    /// # Shapes
    /// - `x`: `[n, l, D]` (`n` independent sequences of `l` positions)
    /// - `roles`: `[l, D]`, the role embedding of each position
    /// - `mask_bias`: `[l, l]`, 0 where query row `i` may attend to key column `j`, a large
    ///   negative number elsewhere
    /// - output: `[n, l, D]`
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        roles: Tensor<B, 2>,
        mask_bias: Tensor<B, 2>,
    ) -> Tensor<B, 3> {
        let role_qkv = self.role_terms(roles);
        self.forward_with_role_terms(x, role_qkv, mask_bias)
    }

    /// The role part of the in-projection, `[r·W_q, r·W_k, 0]` for every position, flattened:
    /// what [`forward_with_role_terms`](Self::forward_with_role_terms) adds to `x·W_qkv + b`.
    ///
    /// It depends on the parameters alone, so a caller that applies the layer many times in
    /// one pass (the chart, once per step) computes it once: in Burn 0.21's autodiff, an op
    /// whose only tracked inputs are parameters starts a graph of its own, and merging it into
    /// the model's graph at every step costs time that grows with the graph.
    ///
    /// # Shapes
    /// - `roles`: `[l, D]`
    /// - output: `[1, l·3D]`
    pub fn role_terms(&self, roles: Tensor<B, 2>) -> Tensor<B, 2> {
        let [l, d] = roles.dims();
        // (x + r)·W_{q,k} = x·W_{q,k} + r·W_{q,k}: the role part has no bias.
        let w_qk = self.qkv.weight.val().narrow(1, 0, 2 * d);
        let role_qk = roles.matmul(w_qk); // [l, 2D]
        let zeros = arbor_cells::kernels::zeros([l, d], &role_qk.device());
        Tensor::cat(vec![role_qk, zeros], 1).reshape([1, l * 3 * d])
    }

    /// [`forward`](Self::forward) with the role terms computed beforehand
    /// ([`role_terms`](Self::role_terms)).
    ///
    /// # Shapes
    /// - `x`: `[n, l, D]`
    /// - `role_qkv`: `[1, l·3D]`
    /// - `mask_bias`: `[l, l]`
    /// - output: `[n, l, D]`
    pub fn forward_with_role_terms(
        &self,
        x: Tensor<B, 3>,
        role_qkv: Tensor<B, 2>,
        mask_bias: Tensor<B, 2>,
    ) -> Tensor<B, 3> {
        let [n, l, d] = x.dims();
        // Broadcasts are written over whole rows (`[n, l·3D] + [1, l·3D]`), which the CPU
        // backends add with one vectorised pass instead of a strided walk over three dims.
        let qkv = linear_rows(&self.qkv, x.clone())
            .reshape([n, l * 3 * d])
            .add(role_qkv)
            .reshape([n, l, 3 * d]);
        // The attention of every group and head as one op (`grouped_attention`): `q`, `k`, `v`
        // are column views of `qkv`, read in place on the CPU backends.
        let part = |i: usize| arbor_cells::kernels::narrow(qkv.clone(), 2, i * d, d);
        let spec = arbor_cells::kernels::AttentionSpec {
            heads: self.n_heads,
            quiet: false,
        };
        let attn = arbor_cells::kernels::grouped_attention(
            part(0),
            part(1),
            part(2),
            Some(mask_bias.reshape([1, l, l])),
            spec,
        ); // [n, l, D]
        let x = arbor_cells::layer_norm(&self.norm_attn, x.add(linear_rows(&self.out, attn)));
        let ff = linear_rows(&self.ff_out, gelu(linear_rows(&self.ff_in, x.clone())));
        arbor_cells::layer_norm(&self.norm_ff, x.add(ff))
    }
}
