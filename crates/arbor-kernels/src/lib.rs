//! # arbor-kernels
//!
//! Fused ops for arbor's cells, each one node of the autodiff graph instead of a dozen.
//!
//! The gated cell update at the heart of the LSTM, the Tree-LSTM and (through them) the Gumbel
//! Tree-LSTM and SPINN is, written in plain tensor ops, about a dozen small elementwise ops over
//! strided views of the fused gate tensor: chunk, three sigmoids, two tanhs, three products and
//! two sums, each allocating its output and each recorded by autodiff with its own backward step.
//! On CPU that per-op overhead, not arithmetic, is where the time goes (docs/log/bench.md).
//!
//! [`ArborBackend`] is a backend-extension trait in Burn's style:
//! - its **default methods are plain Burn tensor ops** ([`mod@reference`]), so any backend gets them
//!   with an empty `impl ArborBackend for MyBackend {}`, and
//! - arbor overrides them for **Flex and NdArray** with hand-written loops over contiguous memory,
//!   vectorised with `wide` (`exp`, hence sigmoid and tanh, eight lanes at a time), and for
//!   **`Autodiff<B>`** with hand-written backward passes (Burn's custom-backward API), so a fused
//!   op is one graph node whose backward is itself one fused kernel of `B`.
//!
//! Models call the tensor-level functions [`gated_cell`] and [`gated_output`]; they stay generic
//! over `B: ArborBackend`, and a training loop uses `B: ArborAutodiffBackend`.
//!
//! The source is laid out by op: `src/ops/` has one module per fused op (or family of closely
//! related ops) with its reference definition, CPU kernel and backward pass, and the backend
//! files only wire them up (docs/kernels.md, "Source layout").
//!
//! # The fused ops
//! Gates are the last dimension of a tensor of any rank, `blocks` blocks of width `H` laid out as
//! described by a [`GateLayout`]. With `σ` the logistic sigmoid:
//! ```text
//! gated_cell:   c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k      (one forget gate per child)
//! gated_output: h = σ(o) ⊙ tanh(c)
//! ```
//! An LSTM is `gated_cell` with one child (`c_{t-1}`), a binary Tree-LSTM with two.
//!
//! [`ordered_cell`] is the ON-LSTM update (Shen et al. 2019, eqs. 9–14) shared by the FastTrees
//! family: with master gates `f̃`, `ĩ` (one value per chunk of `H / C` units, broadcast over the
//! chunk) and `ω = f̃ ⊙ ĩ`,
//! ```text
//! f̂ = σ(f) ⊙ ω + (f̃ − ω);  î = σ(i) ⊙ ω + (ĩ − ω);  c = f̂ ⊙ c_{t−1} + î ⊙ tanh(g)
//! ```
//! with gates in LSTM order `i, f, g, o`; `h = σ(o) ⊙ tanh(c)` is [`gated_output`].
//!
//! [`sigmoid`] and [`tanh`] are the activations alone, for gates computed outside a cell update.
//!
//! [`linear_scan`] runs `c_t = a_t ⊙ c_{t−1} + u_t` over a whole sequence (Faster FastTrees,
//! whose gates read the input only).
//!
//! [`select_mix`] is the Gumbel Tree-LSTM's layer update (Choi et al. 2018, eq. 7): with a
//! (straight-through one-hot) selection `s` over the `K` adjacent pairs and `cum = cumsum(s)`,
//! ```text
//! next_k = s_k · p_k + (1 − cum_k) · l_k + (cum_k − s_k) · r_k
//! ```
//! nodes left of the selected pair are copied, the pair is replaced by its parent `p`, nodes to
//! its right shift left by one.

#![warn(missing_docs)]

/// Trait methods that hand their arguments to a function of an op module: each
/// `fn name(arg: Type, …) -> Ret => function;` becomes `fn name(arg: Type, …) -> Ret {
/// function(arg, …) }`. The backends' `impl ArborBackend` blocks (`host.rs`, `autodiff.rs`) are
/// lists of these.
macro_rules! delegate {
    ($(
        $(#[$attr:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $f:path;
    )*) => {
        $(
            $(#[$attr])*
            fn $name($($arg: $ty),*) -> $ret {
                $f($($arg),*)
            }
        )*
    };
}
pub(crate) use delegate;

mod autodiff;
#[cfg(feature = "counting")]
pub mod counting;
mod flex;
mod host;
mod isa;
mod lanes;
mod ndarray;
mod ops;
mod packed;
mod par;
pub mod reference;
#[cfg(test)]
mod testing;

#[cfg(feature = "cuda")]
mod cuda;

pub use ops::activation::{gelu, relu, sigmoid, tanh, Activation};
pub use ops::adjacent::adjacent_pairs;
pub use ops::argmax_tree::{argmax_tree, ArgmaxTreeParts, TreePass};
pub use ops::attention::{grouped_attention, AttentionSpec};
pub use ops::gated_cell::{gated_cell, gated_output, GateLayout};
pub use ops::gumbel_tree::{st_gumbel_tree, StGumbelTreeParts, StGumbelTreeSaved};
pub use ops::layer_norm::layer_norm;
pub use ops::linear::{cpu_product_kernels, linear, linear_given, linear_pair};
pub use ops::linear_scan::linear_scan;
pub use ops::lstm::{
    conv_fast_trees_sequence, fast_trees_sequence, lstm_sequence, lstm_sequence_states,
    on_lstm_sequence, LstmParams, SequenceCell, SequenceGrads,
};
pub use ops::memory::{contiguous, zeros};
pub use ops::ordered_cell::{ordered_cell, ordered_gates};
pub use ops::rows::{narrow, select_rows, write_rows};
pub use ops::select_mix::{merge_place, select_mix, select_mix_adjacent};
pub use ops::thin_stack::{StackSide, ThinStack};
pub use ops::window::causal_windows;

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Shape;

/// A Burn backend with arbor's fused ops.
///
/// Every method has a default written in plain Burn tensor ops ([`mod@reference`]); implement the
/// trait with an empty body to use a backend arbor does not know. The tensors are primitives of
/// any rank whose last dimension holds the features; gates are `[..., blocks·H]`, states
/// `[..., H]`, with equal leading dimensions.
pub trait ArborBackend: Backend {
    /// Whether the backend's tensors live in host memory and its ops run to completion before
    /// they return (arbor's CPU backends), so that reading a few values back costs a copy and
    /// no device synchronisation. Code that keeps its shapes independent of the data only to
    /// avoid reading back inside a training step (R2D2's pruned chart) may read small values
    /// where this holds. `false` (the default, and CUDA's): a read may wait for the device.
    const HOST_MEMORY: bool = false;

    /// `c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k`; see [`gated_cell`].
    fn gated_cell(
        gates: FloatTensor<Self>,
        children: Vec<FloatTensor<Self>>,
        layout: &GateLayout,
    ) -> FloatTensor<Self> {
        reference::gated_cell::<Self>(gates, children, layout)
    }

    /// The gradients of [`ArborBackend::gated_cell`] with respect to the gates (zero in the
    /// blocks it does not read) and to each child, given the gradient `grad` of its output.
    fn gated_cell_backward(
        gates: FloatTensor<Self>,
        children: Vec<FloatTensor<Self>>,
        grad: FloatTensor<Self>,
        layout: &GateLayout,
    ) -> (FloatTensor<Self>, Vec<FloatTensor<Self>>) {
        reference::gated_cell_backward::<Self>(gates, children, grad, layout)
    }

    /// `h = σ(o) ⊙ tanh(c)`; see [`gated_output`].
    fn gated_output(
        gates: FloatTensor<Self>,
        c: FloatTensor<Self>,
        layout: &GateLayout,
    ) -> FloatTensor<Self> {
        reference::gated_output::<Self>(gates, c, layout)
    }

    /// The gradients of [`ArborBackend::gated_output`] with respect to the gates (zero outside
    /// the output block) and to `c`.
    fn gated_output_backward(
        gates: FloatTensor<Self>,
        c: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        layout: &GateLayout,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::gated_output_backward::<Self>(gates, c, grad, layout)
    }

    /// The ON-LSTM cell update with master gates; see [`ordered_cell`].
    fn ordered_cell(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
        c_prev: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::ordered_cell::<Self>(gates, master_forget, master_input, c_prev)
    }

    /// The gradients of [`ArborBackend::ordered_cell`] with respect to the gates (zero in the
    /// output block), both master gates and `c_prev`.
    fn ordered_cell_backward(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
        c_prev: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 4] {
        reference::ordered_cell_backward::<Self>(gates, master_forget, master_input, c_prev, grad)
    }

    /// The Gumbel Tree-LSTM's next layer `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r`, with
    /// `cum = cumsum(s)` along the nodes; see [`select_mix`].
    fn select_mix(
        s: FloatTensor<Self>,
        parent: FloatTensor<Self>,
        left: FloatTensor<Self>,
        right: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::select_mix::<Self>(s, parent, left, right)
    }

    /// The gradients of [`ArborBackend::select_mix`] with respect to `s`, `parent`, `left` and
    /// `right`.
    fn select_mix_backward(
        s: FloatTensor<Self>,
        parent: FloatTensor<Self>,
        left: FloatTensor<Self>,
        right: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 4] {
        reference::select_mix_backward::<Self>(s, parent, left, right, grad)
    }

    /// `[f̂ | î ⊙ tanh(g)]`, the ON-LSTM gate activations without the cell update; see
    /// [`ordered_gates`].
    fn ordered_gates(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::ordered_gates::<Self>(gates, master_forget, master_input)
    }

    /// The gradients of [`ArborBackend::ordered_gates`] with respect to the gates (zero in the
    /// output block) and both master gates.
    fn ordered_gates_backward(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        reference::ordered_gates_backward::<Self>(gates, master_forget, master_input, grad)
    }

    /// Each node beside its right neighbour, `[x_k ; x_{k+1}]`; see [`adjacent_pairs`].
    fn adjacent_pairs(x: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::adjacent_pairs::<Self>(x)
    }

    /// The gradient of [`ArborBackend::adjacent_pairs`]: `dx_k = g_k[..D] + g_{k−1}[D..]`.
    fn adjacent_pairs_backward(grad: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::adjacent_pairs_backward::<Self>(grad)
    }

    /// Each step's window of the last `k` steps; see [`causal_windows`].
    fn causal_windows(x: FloatTensor<Self>, k: usize) -> FloatTensor<Self> {
        reference::causal_windows::<Self>(x, k)
    }

    /// The gradient of [`ArborBackend::causal_windows`]: each window block's gradient added
    /// back to the step it copied.
    fn causal_windows_backward(grad: FloatTensor<Self>, k: usize) -> FloatTensor<Self> {
        reference::causal_windows_backward::<Self>(grad, k)
    }

    /// `σ(x)`, `tanh(x)` or `GELU(x)` elementwise; see [`sigmoid`], [`tanh`] and [`gelu`].
    fn activation(x: FloatTensor<Self>, act: Activation) -> FloatTensor<Self> {
        reference::activation::<Self>(x, act)
    }

    /// The gradient of [`ArborBackend::activation`], from its output `y` for the sigmoid
    /// (`grad ⊙ y ⊙ (1 − y)`) and tanh (`grad ⊙ (1 − y²)`), from its input `x` for GELU
    /// (`grad ⊙ (Φ(x) + x·φ(x))`); see [`Activation::backward_from_input`].
    fn activation_backward(
        y: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        act: Activation,
    ) -> FloatTensor<Self> {
        reference::activation_backward::<Self>(y, grad, act)
    }

    /// [`ArborBackend::select_mix`] of a layer's adjacent nodes; see [`select_mix_adjacent`]. The
    /// default runs `select_mix` on the two views.
    fn select_mix_adjacent(
        s: FloatTensor<Self>,
        parent: FloatTensor<Self>,
        x: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        ops::select_mix::select_mix_adjacent_by_views::<Self>(s, parent, x)
    }

    /// The gradients of [`ArborBackend::select_mix_adjacent`] with respect to `s`, `parent` and
    /// `x`.
    fn select_mix_adjacent_backward(
        s: FloatTensor<Self>,
        parent: FloatTensor<Self>,
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        ops::select_mix::select_mix_adjacent_backward_by_views::<Self>(s, parent, x, grad)
    }

    /// The Gumbel Tree-LSTM's carried per-candidate values; see [`merge_place`]. The default
    /// runs the two [`ArborBackend::select_mix`] calls it stands for.
    fn merge_place(
        old: FloatTensor<Self>,
        new: FloatTensor<Self>,
        s: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        ops::select_mix::merge_place_by_select_mix::<Self>(old, new, s)
    }

    /// `x.narrow(dim, start, len)`; see [`narrow`].
    fn narrow(x: FloatTensor<Self>, dim: usize, start: usize, len: usize) -> FloatTensor<Self> {
        reference::narrow::<Self>(x, dim, start, len)
    }

    /// The gradient of [`ArborBackend::narrow`] for an input of `shape`: zeros with `grad`
    /// at `start..` of dimension `dim`.
    fn narrow_backward(
        grad: FloatTensor<Self>,
        shape: Shape,
        dim: usize,
        start: usize,
    ) -> FloatTensor<Self> {
        reference::narrow_backward::<Self>(grad, shape, dim, start)
    }

    /// Rows `rows` of `t` (Burn's `select` on dimension 0); see [`select_rows`].
    fn select_rows(t: FloatTensor<Self>, rows: &[usize]) -> FloatTensor<Self> {
        reference::select_rows::<Self>(t, rows)
    }

    /// The gradient of [`ArborBackend::select_rows`] for a `[n, w]` input: a zero `[n, w]`
    /// tensor with row `g` of `grad` added into row `rows[g]` (repeated rows add up).
    fn select_rows_backward(
        grad: FloatTensor<Self>,
        rows: &[usize],
        n: usize,
    ) -> FloatTensor<Self> {
        reference::select_rows_backward::<Self>(grad, rows, n)
    }

    /// `t` with rows `start..start + r` replaced by `rows`; see [`write_rows`].
    fn write_rows(
        t: FloatTensor<Self>,
        start: usize,
        rows: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::write_rows::<Self>(t, start, rows)
    }

    /// [`grouped_attention`]'s entry point: the autodiff backend records one node (and keeps
    /// the softmax weights for it); every other backend runs
    /// [`ArborBackend::grouped_attention`] without them.
    fn grouped_attention_tracked(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        spec: AttentionSpec,
    ) -> FloatTensor<Self> {
        Self::grouped_attention(q, k, v, bias, spec, false).0
    }

    /// Multi-head self-attention inside groups; see [`grouped_attention`]. With `keep`, also the
    /// softmax weights `[n, heads, l, l]` the backward pass reads.
    fn grouped_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        spec: AttentionSpec,
        keep: bool,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        reference::grouped_attention::<Self>(q, k, v, bias, spec, keep)
    }

    /// The gradients of [`ArborBackend::grouped_attention`] with respect to `q`, `k`, `v` and (when
    /// its shape is given) the bias, from the inputs, the kept softmax weights and the
    /// output's gradient.
    #[allow(clippy::type_complexity)]
    fn grouped_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        bias_shape: Option<Shape>,
        spec: AttentionSpec,
        grad: FloatTensor<Self>,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        Option<FloatTensor<Self>>,
    ) {
        reference::grouped_attention_backward::<Self>(q, k, v, weights, bias_shape, spec, grad)
    }

    /// `x·w + b` for matrices; see [`linear`].
    fn affine(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        reference::linear::<Self>(x, w, b)
    }

    /// `known` in the forward pass, the gradient of [`ArborBackend::affine`] at `x`, `w`, `b`
    /// in the backward pass; see [`linear_given`]. Without autodiff there is no backward pass,
    /// so every backend returns `known` (the autodiff backend records the product's node).
    fn affine_given(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
        known: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let _ = (x, w, b);
        known
    }

    /// Layer normalisation of the rows of a `[rows, d]` tensor, with an optional affine map
    /// (`gamma` and `beta` both, or neither); see [`layer_norm`].
    fn layer_norm_rows(
        x: FloatTensor<Self>,
        affine: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        reference::layer_norm::<Self>(x, affine, epsilon)
    }

    /// The gradients of [`ArborBackend::layer_norm_rows`] with respect to `x`, and (with `gamma`)
    /// to `gamma` and `beta`, recomputed from the saved input.
    #[allow(clippy::type_complexity)]
    fn layer_norm_rows_backward(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        epsilon: f64,
        grad: FloatTensor<Self>,
    ) -> (
        FloatTensor<Self>,
        Option<(FloatTensor<Self>, FloatTensor<Self>)>,
    ) {
        reference::layer_norm_backward::<Self>(x, gamma, epsilon, grad)
    }

    /// `x·w + h·u + b` for matrices; see [`linear_pair`].
    fn affine_pair(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        h: FloatTensor<Self>,
        u: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        reference::linear_pair::<Self>(x, w, h, u, b)
    }

    /// `x` with its elements in row-major order in memory of its own; see [`contiguous`]. The
    /// default returns `x` as it is (a backend's own ops then copy views as they need).
    fn contiguous(x: FloatTensor<Self>) -> FloatTensor<Self> {
        x
    }

    /// A tensor of zeros of the default float type; see [`zeros`].
    fn zeros(shape: Shape, device: &Device<Self>) -> FloatTensor<Self> {
        reference::zeros::<Self>(shape, device)
    }

    /// A new [`ThinStack`] of `rows` zero rows of width `width`: the tensor that stands for it
    /// in the graph, and its host rows where it keeps them. The default is the whole stack as
    /// one zero tensor and no host side; the autodiff backend over a CPU backend keeps the rows
    /// on the host and a one-element token in the graph.
    fn thin_stack_new(
        rows: usize,
        width: usize,
        device: &Device<Self>,
    ) -> (FloatTensor<Self>, Option<StackSide>) {
        (Self::zeros(Shape::new([rows, width]), device), None)
    }

    /// [`ThinStack::from_rows`]'s entry point: a stack whose rows are all of `rows`, already
    /// written. The default is `rows` itself as the stack tensor and no host side; the autodiff
    /// backend over a CPU backend moves the rows to the host (without a copy when no other
    /// tensor shares them) and puts a one-element token in the graph.
    fn thin_stack_from_rows(rows: FloatTensor<Self>) -> (FloatTensor<Self>, Option<StackSide>) {
        (rows, None)
    }

    /// [`ThinStack::write`]'s entry point: by default [`ArborBackend::write_rows`] on the stack
    /// tensor (`side` is `None` there).
    fn thin_stack_write(
        stack: FloatTensor<Self>,
        side: Option<&StackSide>,
        start: usize,
        rows: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let _ = side;
        Self::write_rows(stack, start, rows)
    }

    /// [`ThinStack::read`]'s entry point: by default [`ArborBackend::select_rows`] on the stack
    /// tensor (`side` is `None` there).
    fn thin_stack_read(
        stack: FloatTensor<Self>,
        side: Option<&StackSide>,
        rows: &[usize],
    ) -> FloatTensor<Self> {
        let _ = side;
        Self::select_rows(stack, rows)
    }

    /// [`lstm_sequence`]'s entry point: the autodiff backend records one node (and keeps the
    /// gates for it); every other backend runs [`ArborBackend::lstm_sequence`] without them.
    /// `params` are `[w, b, u, h0, c0]`; `given` the pre-activations a cell takes from outside
    /// the op (`[b, t, G]` with `G = cell.given()`: Conv FastTrees' master gates), `None` for
    /// the other cells.
    fn lstm_sequence_tracked(
        x: FloatTensor<Self>,
        given: Option<FloatTensor<Self>>,
        params: [FloatTensor<Self>; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
    ) -> FloatTensor<Self> {
        Self::lstm_sequence(x, given, params, lengths, cell, every_c, false).0
    }

    /// An LSTM-family layer (`cell`) over a sequence; see [`lstm_sequence`] and
    /// [`on_lstm_sequence`] (`params` are `[w, b, u, h0, c0]`). Returns the `[rows, H]` output
    /// (every step's `h`, then every step's `c` with `every_c` or else the final `c`, then the
    /// ordered cells' distances; `ops::lstm::SequenceLayout`), and, with `keep_gates`, what
    /// the backward pass reads (the activated gates and
    /// `c`), in a layout of the backend's own (the plain-op default: `[b, t, P + 2H]` with `h`
    /// too; the CPU kernels: the running rows only).
    fn lstm_sequence(
        x: FloatTensor<Self>,
        given: Option<FloatTensor<Self>>,
        params: [FloatTensor<Self>; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
        keep_gates: bool,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        reference::lstm_sequence::<Self>(x, given, params, lengths, cell, every_c, keep_gates)
    }

    /// The gradients of [`ArborBackend::lstm_sequence`] with respect to `x`, `w`, `b`, `u`,
    /// `h0` and `c0`, and to `given` for a cell that has such columns, from its input,
    /// parameters (`[w, u, h0, c0]`), what it saved and the output's gradient (the given
    /// columns' values are not needed: their gradient is their pre-activations'). The output
    /// itself is not an input: the node does not keep it alive through the backward pass (a
    /// whole `[b·t, H]` block), and every layout of `saved` holds what the steps' `h` are
    /// computed from.
    fn lstm_sequence_backward(
        x: FloatTensor<Self>,
        params: [FloatTensor<Self>; 4],
        saved: FloatTensor<Self>,
        lengths: &[usize],
        cell: SequenceCell,
        grad: FloatTensor<Self>,
    ) -> SequenceGrads<Self> {
        reference::lstm_sequence_backward::<Self>(x, params, saved, lengths, cell, grad)
    }

    /// The Gumbel Tree-LSTM's layers with argmax decisions as one op; see [`argmax_tree`].
    /// `None` (the default): the backend has no such op, and the caller runs the layers as
    /// tensor ops.
    #[allow(clippy::too_many_arguments)]
    fn argmax_tree(
        leaf_h: FloatTensor<Self>,
        leaf_c: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        query: FloatTensor<Self>,
        lengths: &[usize],
        layout: &GateLayout,
    ) -> Option<ArgmaxTreeParts<Self>> {
        let _ = (leaf_h, leaf_c, weight, bias, query, lengths, layout);
        None
    }

    /// The Gumbel Tree-LSTM's layers with straight-through Gumbel-softmax decisions as one op
    /// with its own backward pass; see [`st_gumbel_tree`]. `None` (the default): the backend
    /// has no such op, and the caller runs the layers as tensor ops.
    #[allow(clippy::too_many_arguments)]
    fn st_gumbel_tree(
        leaf_h: FloatTensor<Self>,
        leaf_c: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        query: FloatTensor<Self>,
        noise: FloatTensor<Self>,
        tau: f64,
        lengths: &[usize],
        layout: &GateLayout,
    ) -> Option<StGumbelTreeParts<Self>> {
        let _ = (
            leaf_h, leaf_c, weight, bias, query, noise, tau, lengths, layout,
        );
        None
    }

    /// The linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` over every step, `a` and `u` the
    /// halves of `au`'s last axis; see [`linear_scan`].
    fn linear_scan(au: FloatTensor<Self>, c0: FloatTensor<Self>) -> FloatTensor<Self> {
        reference::linear_scan::<Self>(au, c0)
    }

    /// The gradients of [`ArborBackend::linear_scan`] with respect to `au` (one tensor, `a`'s
    /// then `u`'s) and `c0`.
    fn linear_scan_backward(
        au: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 2] {
        reference::linear_scan_backward::<Self>(au, c0, grad)
    }
}

/// An autodiff backend whose inner backend has arbor's fused ops too (what training code and
/// `model.valid()` need).
pub trait ArborAutodiffBackend: ArborBackend + AutodiffBackend<InnerBackend: ArborBackend> {}

impl<B> ArborAutodiffBackend for B where
    B: ArborBackend + AutodiffBackend<InnerBackend: ArborBackend>
{
}
