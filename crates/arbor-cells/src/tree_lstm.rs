//! Binary Tree-LSTM composition (Tai et al. 2015; docs/models.md §1).

use crate::ArborBackend;
use arbor_kernels::{gated_cell, gated_output, GateLayout};
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use crate::LstmState;

/// Configuration of a [`BinaryTreeLstm`].
#[derive(Config, Debug)]
pub struct BinaryTreeLstmConfig {
    /// Width `D` of `h` and `c`.
    pub d_hidden: usize,
    /// Width of the optional external input `e` (SPINN's tracking state); 0 for none.
    #[config(default = 0)]
    pub d_external: usize,
    /// Initial value of the two forget-gate biases (docs/models.md §1: 1).
    #[config(default = 1.0)]
    pub forget_bias: f64,
}

/// Binary Tree-LSTM composition of a left and a right child, with an optional external input.
///
/// ```text
/// [i, f_l, f_r, o, g] = W [h_l; h_r] + V e + b
/// c = σ(f_l) ⊙ c_l + σ(f_r) ⊙ c_r + σ(i) ⊙ tanh(g)
/// h = σ(o) ⊙ tanh(c)
/// ```
///
/// **Gate order** of the fused weight (`W` is `[2D, 5D]` in Burn's `[in, out]` layout, `V` is
/// `[D_e, 5D]`): `i, f_l, f_r, o, g` — the same as SPINN's release. Gumbel Tree-LSTM's release
/// uses `i, f_l, f_r, u, o`, i.e. swap our blocks 3 and 4 when importing its weights.
/// The forget-gate biases start at 1 (the Gumbel authors' constant `+1` inside σ, in trainable
/// form). "Left" is the earlier span in the sentence.
#[derive(Module, Debug)]
pub struct BinaryTreeLstm<B: Backend> {
    /// Fused `[h_l; h_r] → [i, f_l, f_r, o, g]`, with the bias `b`.
    pub children: Linear<B>,
    /// Fused `e → [i, f_l, f_r, o, g]` (no bias), when the cell has an external input.
    pub external: Option<Linear<B>>,
    /// Width `D`.
    pub d_hidden: usize,
}

impl BinaryTreeLstmConfig {
    /// Builds the module on `device`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> BinaryTreeLstm<B> {
        let d = self.d_hidden;
        let mut children = LinearConfig::new(2 * d, 5 * d).init(device);
        let mut bias = vec![0f32; 5 * d];
        for b in &mut bias[d..3 * d] {
            *b = self.forget_bias as f32;
        }
        children.bias = Some(Param::from_tensor(Tensor::from_floats(
            bias.as_slice(),
            device,
        )));
        let external = (self.d_external > 0).then(|| {
            LinearConfig::new(self.d_external, 5 * d)
                .with_bias(false)
                .init(device)
        });
        BinaryTreeLstm {
            children,
            external,
            d_hidden: d,
        }
    }
}

impl<B: ArborBackend> BinaryTreeLstm<B> {
    /// Composes `left` and `right` into their parent.
    ///
    /// `e` is the external input; it is ignored by a cell built with `d_external = 0`.
    ///
    /// # Shapes
    /// - `left.h`, `left.c`, `right.h`, `right.c`: `[..., D]`
    /// - `e`: `[..., D_e]`
    /// - output `h`, `c`: `[..., D]`
    pub fn forward<const N: usize>(
        &self,
        left: LstmState<B, N>,
        right: LstmState<B, N>,
        e: Option<Tensor<B, N>>,
    ) -> LstmState<B, N> {
        let hh = Tensor::cat(vec![left.h, right.h], N - 1);
        let gates = match (&self.external, e) {
            (Some(ext), Some(e)) => {
                // `[h_l; h_r]·W + e·W_e + b` as one product sum over rows.
                let dims = hh.dims();
                let rows = dims[..N - 1].iter().product::<usize>();
                let (d_hh, d_e) = (dims[N - 1], e.dims()[N - 1]);
                let g = crate::linear_pair_rows(
                    &self.children,
                    hh.reshape([rows, d_hh]),
                    ext,
                    e.reshape([rows, d_e]),
                );
                let mut out = dims;
                out[N - 1] = g.dims()[1];
                g.reshape(out)
            }
            _ => crate::linear_rows(&self.children, hh),
        };
        compose(gates, left.c, right.c)
    }

    /// Composes every pair of adjacent nodes of a layer (parent `k` of nodes `k` and `k + 1`),
    /// as the Gumbel Tree-LSTM does at each level; the pairs' input is one fused op
    /// (`arbor_kernels::adjacent_pairs`). There is no external input.
    ///
    /// # Shapes
    /// - `nodes.h`, `nodes.c`: `[batch, m, D]`, `m ≥ 2`
    /// - output `h`, `c`: `[batch, m − 1, D]`
    pub fn forward_adjacent(&self, nodes: &LstmState<B, 3>) -> LstmState<B, 3> {
        self.forward_adjacent_with_gates(nodes, None).0
    }

    /// [`forward_adjacent`](Self::forward_adjacent), also returning the gate pre-activations
    /// `[h_k; h_{k+1}]·W + b` of every pair, which a caller can carry to the next layer.
    ///
    /// With `known_gates` (carried from an earlier layer whose pairs had the same children) the
    /// product is not computed and the gradients are exactly those of computing it
    /// ([`arbor_kernels::linear_given`]); `known_gates` is a constant for autodiff and must
    /// equal `[h_k; h_{k+1}]·W + b` for the values of `nodes`.
    ///
    /// # Shapes
    /// - `nodes.h`, `nodes.c`: `[batch, m, D]`, `m ≥ 2`
    /// - `known_gates`: `[batch, m − 1, 5D]`
    /// - output `h`, `c`: `[batch, m − 1, D]`; gates `[batch, m − 1, 5D]`
    pub fn forward_adjacent_with_gates(
        &self,
        nodes: &LstmState<B, 3>,
        known_gates: Option<Tensor<B, 3>>,
    ) -> (LstmState<B, 3>, Tensor<B, 3>) {
        let [batch, m, d] = nodes.h.dims();
        let pairs = arbor_kernels::adjacent_pairs(nodes.h.clone());
        let gates = match known_gates {
            None => crate::linear_rows(&self.children, pairs),
            Some(known) => {
                let width = known.dims()[2];
                arbor_kernels::linear_given(
                    pairs.reshape([batch * (m - 1), 2 * d]),
                    self.children.weight.val(),
                    self.children.bias.as_ref().map(|b| b.val()),
                    known.reshape([batch * (m - 1), width]),
                )
                .reshape([batch, m - 1, width])
            }
        };
        let c = nodes.c.clone();
        let state = compose(
            gates.clone(),
            arbor_kernels::narrow(c.clone(), 1, 0, m - 1),
            arbor_kernels::narrow(c, 1, 1, m - 1),
        );
        (state, gates)
    }

    /// The Gumbel Tree-LSTM's layers with argmax decisions over `leaves`, as one op
    /// ([`arbor_kernels::argmax_tree`]): every adjacent pair composed by this cell and scored
    /// `query·h / √D`, the first best merged, layer after layer. `None` where the backend has
    /// no such op (autodiff, CUDA, non-`f32` data) or the cell has an external input.
    ///
    /// # Shapes
    /// - `leaves`: `[batch, n, D]` each; `query`: `[D]`; `lengths`: `batch` entries in `1..=n`
    /// - output: see [`arbor_kernels::TreePass`]
    pub fn argmax_tree(
        &self,
        leaves: &LstmState<B, 3>,
        query: Tensor<B, 1>,
        lengths: &[usize],
    ) -> Option<arbor_kernels::TreePass<B>> {
        if self.external.is_some() {
            return None;
        }
        arbor_kernels::argmax_tree(
            leaves.h.clone(),
            leaves.c.clone(),
            self.children.weight.val(),
            self.children.bias.as_ref().map(|b| b.val()),
            query,
            lengths,
            &GateLayout::binary_tree_lstm(),
        )
    }

    /// The Gumbel Tree-LSTM's layers with straight-through Gumbel-softmax decisions over
    /// `leaves` (noise given), as one op with its own backward pass
    /// ([`arbor_kernels::st_gumbel_tree`]). `None` where the backend has no such op (CUDA,
    /// non-`f32` data) or the cell has an external input.
    ///
    /// # Shapes
    /// - `leaves`: `[batch, n, D]` each; `query`: `[D]`; `lengths`: `batch` entries in `1..=n`
    /// - `noise`: `[batch, n − 1, n − 1]`, layer `t` in row `t`
    /// - output: see [`arbor_kernels::TreePass`]
    pub fn st_gumbel_tree(
        &self,
        leaves: &LstmState<B, 3>,
        query: Tensor<B, 1>,
        noise: Tensor<B, 3>,
        tau: f64,
        lengths: &[usize],
    ) -> Option<arbor_kernels::TreePass<B>> {
        if self.external.is_some() {
            return None;
        }
        arbor_kernels::st_gumbel_tree(
            leaves.h.clone(),
            leaves.c.clone(),
            self.children.weight.val(),
            self.children.bias.as_ref().map(|b| b.val()),
            query,
            noise,
            tau,
            lengths,
            &GateLayout::binary_tree_lstm(),
        )
    }

    /// The gate pre-activations `[h_l; h_r]·W + b` of given pairs, with no autodiff node (the
    /// inputs and the weights are read as constants): for values that
    /// [`forward_adjacent_with_gates`](Self::forward_adjacent_with_gates) is then given.
    ///
    /// # Shapes
    /// - `h_left`, `h_right`: `[..., D]`
    /// - output: `[..., 5D]`
    pub fn gates_of<const N: usize>(
        &self,
        h_left: Tensor<B, N>,
        h_right: Tensor<B, N>,
    ) -> Tensor<B, N> {
        let hh = Tensor::cat(vec![constant(h_left), constant(h_right)], N - 1);
        let dims = hh.dims();
        let rows = dims[..N - 1].iter().product::<usize>();
        let g = arbor_kernels::linear(
            hh.reshape([rows, dims[N - 1]]),
            constant(self.children.weight.val()),
            self.children.bias.as_ref().map(|b| constant(b.val())),
        );
        let mut out = dims;
        out[N - 1] = g.dims()[1];
        g.reshape(out)
    }
}

/// `c = σ(f_l) ⊙ c_l + σ(f_r) ⊙ c_r + σ(i) ⊙ tanh(g)`, `h = σ(o) ⊙ tanh(c)`, as two fused ops.
fn compose<B: ArborBackend, const N: usize>(
    gates: Tensor<B, N>,
    c_left: Tensor<B, N>,
    c_right: Tensor<B, N>,
) -> LstmState<B, N> {
    let layout = GateLayout::binary_tree_lstm();
    let c = gated_cell(gates.clone(), vec![c_left, c_right], &layout);
    let h = gated_output(gates, c.clone(), &layout);
    LstmState { h, c }
}

/// `t` as a constant for autodiff. `detach` alone is not enough: Burn 0.21's `detach` keeps a
/// parameter's `require_grad`, so a product of detached weights would still be a tracked node
/// (a branch of the graph that no gradient reaches, but whose saved inputs live until the
/// backward pass: one `[batch, K, 5D]` tensor per Gumbel layer).
fn constant<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    t.detach().set_require_grad(false)
}
