//! R2D2's composition function `f(left, right)` (docs/models.md §4): a small Transformer over
//! `[E[CLS], E[SUM], left, right]`.

use arbor_cells::{linear_rows, ArborBackend};
use burn::module::{Initializer, Param};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{log_sigmoid, softmax};
use burn::tensor::TensorData;
use std::cell::OnceCell;

use super::layer::{RoleTransformerLayer, RoleTransformerLayerConfig};

/// Large negative attention bias for masked positions.
const MASKED: f32 = -1e9;

/// What composing a batch of `(left, right)` pairs gives.
#[derive(Debug, Clone)]
pub struct Composed<B: Backend> {
    /// The mixed representation `c = LayerNorm_noaffine(w0·o_left + w1·o_right)`: `[n, D]`.
    pub repr: Tensor<B, 2>,
    /// `log p = logsigmoid(Linear_1(o[SUM]))`: `[n]`.
    pub log_p: Tensor<B, 1>,
}

/// Anything that composes a batch of adjacent chart cells: the R2D2 [`Composition`], or a stub
/// with hand-chosen scores in tests. The chart calls it once per step with every pair of that
/// step.
pub trait Compose<B: ArborBackend> {
    /// Width `D` of the representations.
    fn d_model(&self) -> usize;

    /// Composes `n` pairs at once.
    ///
    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `repr` `[n, D]`, `log_p` `[n]`
    fn compose(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Composed<B>;
}

/// How the role embeddings (task token, left, right) are laid out over the `N` layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoleEmbeddings {
    /// One `[3, D]` table per layer, as in the reference code (each `TreeEncoderLayer` owns
    /// its `position_embedding`). The default for new models.
    #[default]
    PerLayer,
    /// One `[3, D]` table shared by every layer: arbor's layout before per-layer tables, kept
    /// so that older checkpoints load and compute what they did.
    Shared,
}

/// Configuration of a [`Composition`].
#[derive(Config, Debug)]
pub struct CompositionConfig {
    /// Model width `D`.
    pub d_model: usize,
    /// Number of Transformer layers `N`.
    #[config(default = 2)]
    pub n_layers: usize,
    /// Attention heads per layer.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Feed-forward width (0: `4·D`).
    #[config(default = 0)]
    pub d_ff: usize,
    /// One role table per layer (the reference's layout) or one shared by all layers.
    /// Checkpoint metadata written before this field existed lacks it; the readers in
    /// `arbor-tasks` map it to [`RoleEmbeddings::Shared`].
    #[config(default = "RoleEmbeddings::PerLayer")]
    pub role_embeddings: RoleEmbeddings,
}

/// R2D2's composition Transformer.
///
/// Inputs are `[E[CLS], E[SUM], left, right]`; role embeddings (0: task tokens, 1: left,
/// 2: right; one table per layer by default) are added to queries and keys only. The attention mask lets each task token see
/// itself and both children, and the children see only the two children. `[CLS]` mixes
/// (`w = softmax(Linear_2(o[CLS]))`), `[SUM]` scores (`log p = logsigmoid(Linear_1(o[SUM]))`).
///
/// The same Transformer also runs the bidirectional LM's `[E[MASK], left, right]` inference
/// ([`Composition::mask_context`]).
#[derive(Module, Debug)]
pub struct Composition<B: Backend> {
    /// The `N` layers.
    pub layers: Vec<RoleTransformerLayer<B>>,
    /// Task-token embeddings `[3, D]`: rows `[CLS]`, `[SUM]`, `[MASK]`. `[0, D]` when the
    /// language model looks these tokens up in its vocabulary embedding instead
    /// ([`crate::r2d2::R2d2SpecialIds`]).
    pub task_tokens: Param<Tensor<B, 2>>,
    /// Role embeddings, three rows (task token, left, right) per table: `[3·N, D]` with one
    /// table per layer (layer `l` reads rows `3l..3l+3`, [`RoleEmbeddings::PerLayer`]) or
    /// `[3, D]` with one table for all layers ([`RoleEmbeddings::Shared`]). The layout is read
    /// from the row count, so records written before per-layer tables load unchanged.
    pub roles: Param<Tensor<B, 2>>,
    /// `Linear_1`: `o[SUM]` → merge score, `D → 1`.
    pub score: Linear<B>,
    /// `Linear_2`: `o[CLS]` → mixing weights of the two children, `D → 2`.
    pub mix: Linear<B>,
    /// Width `D`.
    pub d_model: usize,
}

impl CompositionConfig {
    /// Checks the settings: a positive width and layer count, and heads dividing `d_model`.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, divides};
        at_least_one("d_model", self.d_model)?;
        at_least_one("n_layers", self.n_layers)?;
        divides("n_heads", self.n_heads, "d_model", self.d_model)
    }

    /// Builds the composition on `device`.
    ///
    /// # Panics
    /// If a width is 0 or `n_heads` does not divide `d_model`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> Composition<B> {
        assert!(
            self.d_model > 0 && self.n_layers > 0,
            "sizes must be positive"
        );
        let d = self.d_model;
        let d_ff = if self.d_ff == 0 { 4 * d } else { self.d_ff };
        let layer = RoleTransformerLayerConfig::new(d, self.n_heads, d_ff);
        let tables = match self.role_embeddings {
            RoleEmbeddings::PerLayer => self.n_layers,
            RoleEmbeddings::Shared => 1,
        };
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        Composition {
            layers: (0..self.n_layers).map(|_| layer.init(device)).collect(),
            task_tokens: normal.init([3, d], device),
            // The reference's role table is a plain `nn.Embedding`: N(0, 1) (docs/init.md).
            roles: Initializer::Normal {
                mean: 0.0,
                std: 1.0,
            }
            .init([3 * tables, d], device),
            score: LinearConfig::new(d, 1).init(device),
            mix: LinearConfig::new(d, 2).init(device),
            d_model: d,
        }
    }
}

/// `(x − mean)/sqrt(var + 1e-5)` over the last axis: LayerNorm without affine parameters (one
/// fused op, [`arbor_cells::kernels::layer_norm`]).
pub fn layer_norm_noaffine<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    arbor_cells::kernels::layer_norm(x, None, 1e-5)
}

/// The additive attention mask of a sequence of `l` positions whose first `tasks` positions are
/// task tokens: task tokens see themselves and every child; children see only the children.
fn mask_bias<B: ArborBackend>(l: usize, tasks: usize, device: &B::Device) -> Tensor<B, 2> {
    let mut values = vec![0.0f32; l * l];
    for i in 0..l {
        for j in 0..l {
            let allowed = if i < tasks {
                j == i || j >= tasks
            } else {
                j >= tasks
            };
            if !allowed {
                values[i * l + j] = MASKED;
            }
        }
    }
    Tensor::from_data(TensorData::new(values, [l, l]), device)
}

impl<B: ArborBackend> Composition<B> {
    /// The layout of the role embeddings, read from the row count of [`Composition::roles`].
    pub fn role_embeddings(&self) -> RoleEmbeddings {
        let n = self.layers.len();
        if n > 1 && self.roles.dims()[0] >= 3 * n {
            RoleEmbeddings::PerLayer
        } else {
            RoleEmbeddings::Shared
        }
    }

    /// What the layers need for sequences with roles `role_ids` whose first `tasks` positions
    /// are task tokens: every layer's role terms ([`RoleTransformerLayer::role_terms`]) and the
    /// attention mask.
    fn pattern(&self, role_ids: &[usize], tasks: usize) -> Pattern<B> {
        Pattern {
            roles: self.role_terms(role_ids),
            bias: mask_bias::<B>(role_ids.len(), tasks, &self.roles.device()),
        }
    }

    /// The role terms of every layer for positions with roles `role_ids`
    /// ([`RoleTransformerLayer::role_terms`]).
    fn role_terms(&self, role_ids: &[usize]) -> Vec<Tensor<B, 2>> {
        let device = self.roles.device();
        let l = role_ids.len();
        // The role rows of table `t`: one `select` per table.
        let rows_of = |t: usize| {
            let ids: Vec<i64> = role_ids.iter().map(|&r| (3 * t + r) as i64).collect();
            let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [l]), &device);
            self.roles.val().select(0, ids)
        };
        let per_layer = self.role_embeddings() == RoleEmbeddings::PerLayer;
        self.layers
            .iter()
            .enumerate()
            .map(|(t, layer)| layer.role_terms(rows_of(if per_layer { t } else { 0 })))
            .collect()
    }

    /// Runs the layers over `x` with the role terms and mask of `pattern`.
    fn encode(&self, x: Tensor<B, 3>, pattern: &Pattern<B>) -> Tensor<B, 3> {
        self.layers
            .iter()
            .zip(&pattern.roles)
            .fold(x, |x, (layer, roles)| {
                layer.forward_with_role_terms(x, roles.clone(), pattern.bias.clone())
            })
    }

    /// Everything of this composition that depends on its parameters alone, computed once:
    /// the task tokens (`tokens`, `[3, D]`, or its own) and, at their first use, every layer's
    /// role terms (with the attention mask) for composing and for the LM's `[MASK]` context. A chart composes with it at
    /// every step, so these tensors join the autodiff graph once per pass instead of once per
    /// step (see [`RoleTransformerLayer::role_terms`]).
    fn prepare(&self, tokens: Option<Tensor<B, 2>>) -> Prepared<B> {
        let d = self.d_model;
        let tokens = tokens.unwrap_or_else(|| self.task_tokens.val());
        let token = |i: usize| tokens.clone().narrow(0, i, 1).reshape([1, 1, d]);
        Prepared {
            tokens: [token(0), token(1), token(2)],
            compose_pattern: OnceCell::new(),
            mask_pattern: OnceCell::new(),
        }
    }

    /// This composition with the `[CLS]`, `[SUM]`, `[MASK]` vectors taken from `tokens`
    /// instead of its own [`Composition::task_tokens`] (R2D2's LM passes rows of its
    /// vocabulary embedding, as the reference does), with its parameter-derived tensors
    /// computed once for every call ([`Composition::prepared`]).
    ///
    /// # Shapes
    /// - `tokens`: `[3, D]`, rows `[CLS]`, `[SUM]`, `[MASK]`
    pub fn with_task_tokens(&self, tokens: Tensor<B, 2>) -> WithTaskTokens<'_, B> {
        WithTaskTokens {
            composition: self,
            prepared: self.prepare(Some(tokens)),
        }
    }

    /// This composition with its own task tokens and everything else that depends on its
    /// parameters alone (the role terms of every layer) computed once, for a pass that
    /// composes many times (a chart, once per step). The same values as composing with
    /// `self`; under autodiff, these tensors then join the model's graph once per pass.
    pub fn prepared(&self) -> WithTaskTokens<'_, B> {
        WithTaskTokens {
            composition: self,
            prepared: self.prepare(None),
        }
    }

    /// The bidirectional LM's inference: the Transformer over `[E[MASK], left, right]`, and
    /// `LayerNorm_noaffine(o[MASK])`.
    ///
    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `[n, D]`
    pub fn mask_context(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Tensor<B, 2> {
        self.mask_context_with(&self.prepare(None), left, right)
    }

    /// [`Composition::mask_context`] with prepared task tokens and role terms.
    fn mask_context_with(
        &self,
        prepared: &Prepared<B>,
        left: Tensor<B, 2>,
        right: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let [n, d] = left.dims();
        let x = Tensor::cat(
            vec![
                prepared.tokens[2].clone().expand([n, 1, d]),
                left.reshape([n, 1, d]),
                right.reshape([n, 1, d]),
            ],
            1,
        );
        let pattern = prepared
            .mask_pattern
            .get_or_init(|| self.pattern(&[0, 1, 2], 1));
        let o = self.encode(x, pattern);
        layer_norm_noaffine(arbor_cells::kernels::narrow(o, 1, 0, 1).reshape([n, d]))
    }
}

/// A composition's parameter-derived tensors ([`Composition::prepare`]).
#[derive(Debug, Clone)]
struct Prepared<B: Backend> {
    /// `[CLS]`, `[SUM]`, `[MASK]`, each `[1, 1, D]`.
    tokens: [Tensor<B, 3>; 3],
    /// Every layer's role terms and the mask for `[CLS, SUM, left, right]`, once first needed.
    compose_pattern: OnceCell<Pattern<B>>,
    /// The same for `[MASK, left, right]`.
    mask_pattern: OnceCell<Pattern<B>>,
}

/// Every layer's role terms and the attention mask for one sequence pattern
/// ([`Composition::pattern`]).
#[derive(Debug, Clone)]
struct Pattern<B: Backend> {
    roles: Vec<Tensor<B, 2>>,
    bias: Tensor<B, 2>,
}

/// A [`Composition`] with its task tokens (its own, or from elsewhere) and role terms computed
/// once ([`Composition::prepared`], [`Composition::with_task_tokens`]).
#[derive(Debug, Clone)]
pub struct WithTaskTokens<'a, B: Backend> {
    composition: &'a Composition<B>,
    prepared: Prepared<B>,
}

impl<B: ArborBackend> WithTaskTokens<'_, B> {
    /// [`Composition::mask_context`] with these task tokens.
    ///
    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `[n, D]`
    pub fn mask_context(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Tensor<B, 2> {
        self.composition
            .mask_context_with(&self.prepared, left, right)
    }
}

impl<B: ArborBackend> Compose<B> for WithTaskTokens<'_, B> {
    fn d_model(&self) -> usize {
        self.composition.d_model
    }

    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `repr` `[n, D]`, `log_p` `[n]`
    fn compose(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Composed<B> {
        self.composition.compose_with(&self.prepared, left, right)
    }
}

impl<B: ArborBackend> Composition<B> {
    /// `f(left, right)` with prepared task tokens and role terms.
    fn compose_with(
        &self,
        prepared: &Prepared<B>,
        left: Tensor<B, 2>,
        right: Tensor<B, 2>,
    ) -> Composed<B> {
        let [n, d] = left.dims();
        let x = Tensor::cat(
            vec![
                prepared.tokens[0].clone().expand([n, 1, d]),
                prepared.tokens[1].clone().expand([n, 1, d]),
                left.reshape([n, 1, d]),
                right.reshape([n, 1, d]),
            ],
            1,
        );
        let pattern = prepared
            .compose_pattern
            .get_or_init(|| self.pattern(&[0, 0, 1, 2], 2));
        let o = self.encode(x, pattern);
        let pick = |i: usize| arbor_cells::kernels::narrow(o.clone(), 1, i, 1).reshape([n, d]);
        let (o_cls, o_sum, o_left, o_right) = (pick(0), pick(1), pick(2), pick(3));
        // One fused `linear` each (a `Linear::forward` reshapes its bias: one more graph to
        // merge per step under autodiff).
        let w = softmax(linear_rows(&self.mix, o_cls), 1); // [n, 2]
        let mixed = o_left
            .mul(w.clone().narrow(1, 0, 1))
            .add(o_right.mul(w.narrow(1, 1, 1)));
        let log_p = log_sigmoid(linear_rows(&self.score, o_sum)).reshape([n]);
        Composed {
            repr: layer_norm_noaffine(mixed),
            log_p,
        }
    }
}

impl<B: ArborBackend> Compose<B> for Composition<B> {
    fn d_model(&self) -> usize {
        self.d_model
    }

    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `repr` `[n, D]`, `log_p` `[n]`
    fn compose(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Composed<B> {
        self.compose_with(&self.prepare(None), left, right)
    }
}
