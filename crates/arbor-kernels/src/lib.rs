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
//! - its **default methods are plain Burn tensor ops** ([`reference`]), so any backend gets them
//!   with an empty `impl ArborBackend for MyBackend {}`, and
//! - arbor overrides them for **Flex and NdArray** with hand-written loops over contiguous memory,
//!   vectorised with `wide` (`exp`, hence sigmoid and tanh, eight lanes at a time), and for
//!   **`Autodiff<B>`** with hand-written backward passes (Burn's custom-backward API), so a fused
//!   op is one graph node whose backward is itself one fused kernel of `B`.
//!
//! Models call the tensor-level functions [`gated_cell`] and [`gated_output`]; they stay generic
//! over `B: ArborBackend`, and a training loop uses `B: ArborAutodiffBackend`.
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

mod autodiff;
#[cfg(feature = "counting")]
pub mod counting;
mod cpu;
mod flex;
mod host;
mod ndarray;
mod par;
pub mod reference;

#[cfg(feature = "cuda")]
mod cuda;

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorPrimitive};

/// The matrix-product kernels the CPU backends run on this CPU, as `gemm` picks them at run
/// time: `"gemm AVX-512"` with the `x86-v4` feature on a CPU with AVX-512F, `"gemm AVX2/FMA"`
/// on one with AVX2 and FMA (the default build on any AVX-512 CPU too), `"gemm"` otherwise
/// (its SSE or NEON kernels). Benchmarks print it beside the machine.
pub fn cpu_product_kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(feature = "x86-v4") && std::arch::is_x86_feature_detected!("avx512f") {
            return "gemm AVX-512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return "gemm AVX2/FMA";
        }
    }
    "gemm"
}

/// An elementwise activation with a fused kernel: see [`sigmoid`], [`tanh`] and [`gelu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// The logistic sigmoid `σ(x) = 1 / (1 + e^{−x})`.
    Sigmoid,
    /// The hyperbolic tangent.
    Tanh,
    /// The exact GELU `x·Φ(x) = x·(1 + erf(x/√2))/2` (Hendrycks & Gimpel 2016), as Burn's `gelu`.
    Gelu,
}

impl Activation {
    /// Whether the gradient is computed from the input `x` (GELU) rather than from the
    /// output `y` (sigmoid, tanh): what the autodiff node keeps for the backward pass.
    pub fn backward_from_input(self) -> bool {
        matches!(self, Activation::Gelu)
    }
}

/// Where each gate sits in a fused gate tensor: block indices, each block `H` wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateLayout {
    /// Number of `H`-wide blocks in the gate tensor's last dimension.
    pub blocks: usize,
    /// Block of the input gate `i`.
    pub input: usize,
    /// Block of the candidate `g` (squashed by `tanh`).
    pub candidate: usize,
    /// Block of the output gate `o`.
    pub output: usize,
    /// Block of each child's forget gate `f_k`, in the order the children are passed.
    pub forgets: Vec<usize>,
}

impl GateLayout {
    /// PyTorch's `LSTMCell` order `i, f, g, o`, one child `c_{t-1}`.
    pub fn lstm() -> Self {
        GateLayout {
            blocks: 4,
            input: 0,
            candidate: 2,
            output: 3,
            forgets: vec![1],
        }
    }

    /// arbor's binary Tree-LSTM order `i, f_l, f_r, o, g`, children left then right.
    pub fn binary_tree_lstm() -> Self {
        GateLayout {
            blocks: 5,
            input: 0,
            candidate: 4,
            output: 3,
            forgets: vec![1, 2],
        }
    }

    /// Checks that every block index is inside `blocks`.
    pub fn is_valid(&self) -> bool {
        let inside = |b: usize| b < self.blocks;
        inside(self.input)
            && inside(self.candidate)
            && inside(self.output)
            && self.forgets.iter().all(|&b| inside(b))
    }
}

/// A Burn backend with arbor's fused ops.
///
/// Every method has a default written in plain Burn tensor ops ([`reference`]); implement the
/// trait with an empty body to use a backend arbor does not know. The tensors are primitives of
/// any rank whose last dimension holds the features; gates are `[..., blocks·H]`, states
/// `[..., H]`, with equal leading dimensions.
pub trait ArborBackend: Backend {
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

    /// [`lstm_sequence`]'s entry point: the autodiff backend records one node (and keeps the
    /// gates for it); every other backend runs [`ArborBackend::lstm_sequence`] without them.
    fn lstm_sequence_tracked(
        xp: FloatTensor<Self>,
        u: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        lengths: &[usize],
    ) -> FloatTensor<Self> {
        Self::lstm_sequence(xp, u, h0, c0, lengths, false).0
    }

    /// The LSTM recurrence over a sequence; see [`lstm_sequence`]. Returns the `[b, t, 2H]`
    /// output and, with `keep_gates`, the activated gates `[b, t, 4H]` that the backward pass
    /// reads (rows at frozen steps hold unused values).
    fn lstm_sequence(
        xp: FloatTensor<Self>,
        u: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        lengths: &[usize],
        keep_gates: bool,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        reference::lstm_sequence::<Self>(xp, u, h0, c0, lengths, keep_gates)
    }

    /// The gradients of [`ArborBackend::lstm_sequence`] with respect to `xp`, `u`, `h0` and
    /// `c0`, from its output and activated gates.
    #[allow(clippy::too_many_arguments)]
    fn lstm_sequence_backward(
        u: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        out: FloatTensor<Self>,
        gates: FloatTensor<Self>,
        lengths: &[usize],
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 4] {
        reference::lstm_sequence_backward::<Self>(u, h0, c0, out, gates, lengths, grad)
    }

    /// The linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` over every step; see [`linear_scan`].
    fn linear_scan(
        a: FloatTensor<Self>,
        u: FloatTensor<Self>,
        c0: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        reference::linear_scan::<Self>(a, u, c0)
    }

    /// The gradients of [`ArborBackend::linear_scan`] with respect to `a`, `u` and `c0`.
    fn linear_scan_backward(
        a: FloatTensor<Self>,
        u: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        reference::linear_scan_backward::<Self>(a, u, c0, grad)
    }
}

/// An autodiff backend whose inner backend has arbor's fused ops too (what training code and
/// `model.valid()` need).
pub trait ArborAutodiffBackend: ArborBackend + AutodiffBackend<InnerBackend: ArborBackend> {}

impl<B> ArborAutodiffBackend for B where
    B: ArborBackend + AutodiffBackend<InnerBackend: ArborBackend>
{
}

fn check_shapes<B: Backend, const D: usize>(
    gates: &Tensor<B, D>,
    states: &[&Tensor<B, D>],
    layout: &GateLayout,
) -> usize {
    assert!(layout.is_valid(), "gate layout out of range: {layout:?}");
    let g = gates.dims();
    assert_eq!(
        g[D - 1] % layout.blocks,
        0,
        "gates' last dimension {} is not {} blocks",
        g[D - 1],
        layout.blocks
    );
    let h = g[D - 1] / layout.blocks;
    for s in states {
        let s = s.dims();
        assert!(
            s[..D - 1] == g[..D - 1] && s[D - 1] == h,
            "state shape {s:?} does not match gates {g:?} with {} blocks",
            layout.blocks
        );
    }
    h
}

/// The fused cell update `c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k`, one op (and one autodiff node).
///
/// # Shapes
/// - `gates`: `[..., blocks·H]`, pre-activations laid out as `layout` says
/// - `children`: `layout.forgets.len()` tensors `[..., H]`
/// - output `c`: `[..., H]`
///
/// # Panics
/// When the shapes or the layout disagree (a programming error, not a data error).
pub fn gated_cell<B: ArborBackend, const D: usize>(
    gates: Tensor<B, D>,
    children: Vec<Tensor<B, D>>,
    layout: &GateLayout,
) -> Tensor<B, D> {
    assert_eq!(
        children.len(),
        layout.forgets.len(),
        "one child per forget gate"
    );
    let refs: Vec<&Tensor<B, D>> = children.iter().collect();
    check_shapes(&gates, &refs, layout);
    let children = children
        .into_iter()
        .map(|c| c.into_primitive().tensor())
        .collect();
    Tensor::from_primitive(TensorPrimitive::Float(B::gated_cell(
        gates.into_primitive().tensor(),
        children,
        layout,
    )))
}

/// The fused output `h = σ(o) ⊙ tanh(c)`, one op (and one autodiff node).
///
/// # Shapes
/// - `gates`: `[..., blocks·H]`
/// - `c`: `[..., H]`
/// - output `h`: `[..., H]`
pub fn gated_output<B: ArborBackend, const D: usize>(
    gates: Tensor<B, D>,
    c: Tensor<B, D>,
    layout: &GateLayout,
) -> Tensor<B, D> {
    check_shapes(&gates, &[&c], layout);
    Tensor::from_primitive(TensorPrimitive::Float(B::gated_output(
        gates.into_primitive().tensor(),
        c.into_primitive().tensor(),
        layout,
    )))
}

/// The Gumbel Tree-LSTM's layer update `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r`, with
/// `cum = cumsum(s)` over the `K` nodes, one op (and one autodiff node).
///
/// # Shapes
/// - `s`: `[batch, K]`, the selection (one-hot forward, soft gradient when straight-through)
/// - `parent`, `left`, `right`: `[batch, K, D]`
/// - output: `[batch, K, D]`
pub fn select_mix<B: ArborBackend>(
    s: Tensor<B, 2>,
    parent: Tensor<B, 3>,
    left: Tensor<B, 3>,
    right: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let [b, k, _] = parent.dims();
    assert_eq!(s.dims(), [b, k], "selection shape");
    assert!(
        left.dims() == parent.dims() && right.dims() == parent.dims(),
        "parent, left and right must have one shape"
    );
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::select_mix(
        s.into_primitive().tensor(),
        p(parent),
        p(left),
        p(right),
    )))
}

/// The ON-LSTM cell update `c = f̂ ⊙ c_prev + î ⊙ tanh(g)` with master gates, one op (and one
/// autodiff node).
///
/// # Shapes
/// - `gates`: `[n, 4H]`, pre-activations `i, f, g, o`
/// - `master_forget`, `master_input`: `[n, C]`, activations (after cumax), `C` dividing `H`
/// - `c_prev`: `[n, H]`
/// - output `c`: `[n, H]`
pub fn ordered_cell<B: ArborBackend>(
    gates: Tensor<B, 2>,
    master_forget: Tensor<B, 2>,
    master_input: Tensor<B, 2>,
    c_prev: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [n, h] = c_prev.dims();
    let [_, c] = master_forget.dims();
    assert_eq!(gates.dims(), [n, 4 * h], "gates must be [n, 4H]");
    assert!(
        c > 0 && h % c == 0 && master_input.dims() == [n, c] && master_forget.dims()[0] == n,
        "master gates must be [n, C] with C dividing H = {h}"
    );
    let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::ordered_cell(
        p(gates),
        p(master_forget),
        p(master_input),
        p(c_prev),
    )))
}

/// The LSTM recurrence over a whole sequence as one op and one autodiff node: with the input
/// projections `xp_t = W x_t + b` precomputed for every step (one large product, by the
/// caller), each step is `[i, f, g, o] = xp_t + U h_{t−1}` (gate order `i, f, g, o`, as
/// [`GateLayout::lstm`]), `c_t = σ(f) c_{t−1} + σ(i) tanh(g)`, `h_t = σ(o) tanh(c_t)`.
///
/// On the CPU backends the step loop runs inside the op: one product per step accumulated into
/// the step's rows of `xp` (no per-step graph node, no per-step gradient of `U`), the fused
/// update of every row in parallel. The backward pass is backpropagation through time in one
/// node: one product `δ_t·Uᵀ` per step and `dU = Σ_t h_{t−1}ᵀ δ_t` as one product at the end
/// (where the step loop of separate nodes computes one `dU` product per step and sums them).
///
/// `lengths` (one entry per example, each `≤ time`, or empty for all `time` steps): an
/// example's state is frozen after its last real step, so its output rows there repeat its last
/// state and its final state is the one after its own last step.
///
/// # Shapes
/// - `xp`: `[batch, time, 4H]`
/// - `u`: `[H, 4H]` (the recurrent weight, `h_{t−1}·u`)
/// - `h0`, `c0`: `[batch, H]`
/// - output: `[batch, time, 2H]`, `h_t` in columns `0..H` and `c_t` in `H..2H`
///
/// # Panics
/// If the shapes disagree or `lengths` has another count than `batch` or an entry over `time`.
pub fn lstm_sequence<B: ArborBackend>(
    xp: Tensor<B, 3>,
    u: Tensor<B, 2>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
) -> Tensor<B, 3> {
    let [b, t, w] = xp.dims();
    let h = w / 4;
    assert_eq!(w, 4 * h, "lstm_sequence: xp's width {w} is not 4H");
    assert_eq!(u.dims(), [h, w], "lstm_sequence: u must be [{h}, {w}]");
    assert_eq!(h0.dims(), [b, h], "lstm_sequence: h0 must be [{b}, {h}]");
    assert_eq!(c0.dims(), [b, h], "lstm_sequence: c0 must be [{b}, {h}]");
    assert!(
        lengths.is_empty() || (lengths.len() == b && lengths.iter().all(|&l| l <= t)),
        "lstm_sequence: {} lengths for {b} rows of {t} steps",
        lengths.len()
    );
    let p2 = |x: Tensor<B, 2>| x.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::lstm_sequence_tracked(
        xp.into_primitive().tensor(),
        p2(u),
        p2(h0),
        p2(c0),
        lengths,
    )))
}

/// The linear recurrence `c_t = a_t ⊙ c_{t−1} + u_t` along the time axis, `c_{−1} = c0`, for
/// every step in one op (and one autodiff node): the scan of QRNN-style cells such as Faster
/// FastTrees, whose gates come from the input alone.
///
/// # Shapes
/// - `a`, `u`: `[batch, time, H]`
/// - `c0`: `[batch, H]`
/// - output `c`: `[batch, time, H]`, every step's state
pub fn linear_scan<B: ArborBackend>(
    a: Tensor<B, 3>,
    u: Tensor<B, 3>,
    c0: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let [b, _, h] = a.dims();
    assert_eq!(a.dims(), u.dims(), "a and u must have one shape");
    assert_eq!(c0.dims(), [b, h], "c0 must be [batch, H]");
    Tensor::from_primitive(TensorPrimitive::Float(B::linear_scan(
        a.into_primitive().tensor(),
        u.into_primitive().tensor(),
        c0.into_primitive().tensor(),
    )))
}

/// `σ(x)` elementwise, one op (and one autodiff node). On the CPU backends it runs eight lanes
/// at a time on contiguous memory (a strided view is copied once), where Burn's own sigmoid is
/// several ops of scalar `exp` over strided iteration.
///
/// # Shapes
/// - `x`, output: any shape
pub fn sigmoid<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Sigmoid)
}

/// `tanh(x)` elementwise, one op (and one autodiff node); see [`sigmoid`].
///
/// # Shapes
/// - `x`, output: any shape
pub fn tanh<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Tanh)
}

/// The exact GELU `x·Φ(x)` elementwise (Burn's `gelu`), one op (and one autodiff node). On the
/// CPU backends it runs eight lanes at a time with a vectorised `erf` (|error| < 2·10⁻⁷), where
/// Burn's is scalar libm `erff` forward and several ops backward.
///
/// # Shapes
/// - `x`, output: any shape
pub fn gelu<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    activate(x, Activation::Gelu)
}

fn activate<B: ArborBackend, const D: usize>(x: Tensor<B, D>, act: Activation) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::activation(
        x.into_primitive().tensor(),
        act,
    )))
}

/// `t` with rows `start..start + r` replaced by `rows`: `t.slice_assign([start..start + r, ..], rows)`,
/// one op (and one autodiff node), that writes into `t`'s memory when no other tensor shares it
/// instead of copying all of `t` (Flex copies on every `slice_assign`). SPINN's thin stack writes
/// one step's rows per transition this way.
///
/// # Shapes
/// - `t`: `[n, w]`
/// - `rows`: `[r, w]`, with `start + r ≤ n`
/// - output: `[n, w]`
pub fn write_rows<B: ArborBackend>(
    t: Tensor<B, 2>,
    start: usize,
    rows: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let ([n, w], [r, rw]) = (t.dims(), rows.dims());
    assert!(
        w == rw && start + r <= n,
        "write_rows: rows [{r}, {rw}] at {start} do not fit in [{n}, {w}]"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::write_rows(
        t.into_primitive().tensor(),
        start,
        rows.into_primitive().tensor(),
    )))
}

/// The ON-LSTM gate activations without the cell update, `[f̂ | î ⊙ tanh(g)]`, one op (and one
/// autodiff node): what a cell whose gates all come from the input (Faster FastTrees) computes
/// for every step before its scan `c_t = f̂_t ⊙ c_{t−1} + (î ⊙ tanh(g))_t`; see [`ordered_cell`]
/// for `f̂` and `î`.
///
/// # Shapes
/// - `gates`: `[n, 4H]`, pre-activations `i, f, g, o` (`o` is not read)
/// - `master_forget`, `master_input`: `[n, C]`, `C` dividing `H`
/// - output: `[n, 2H]`
pub fn ordered_gates<B: ArborBackend>(
    gates: Tensor<B, 2>,
    master_forget: Tensor<B, 2>,
    master_input: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [n, g4] = gates.dims();
    let [_, c] = master_forget.dims();
    let h = g4 / 4;
    assert!(
        g4 % 4 == 0 && c > 0 && h % c == 0,
        "ordered_gates: gates [n, 4H] and master gates [n, C] with C dividing H"
    );
    assert!(
        master_forget.dims()[0] == n && master_input.dims() == [n, c],
        "ordered_gates: master gates must be [n, C]"
    );
    let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::ordered_gates(
        p(gates),
        p(master_forget),
        p(master_input),
    )))
}

/// Rows `rows` of `t`: `t.select(0, rows)`, one op (and one autodiff node) whose backward pass
/// writes the gradient rows into one zero tensor of `t`'s shape. Burn's own `select` backward
/// (0.21, flex) fills a zero tensor and then copies all of it before adding the rows; reading
/// several sets of rows through one `select_rows` also gives `t` one full-size gradient
/// instead of one per read. SPINN's thin stack reads its stack and buffer this way.
///
/// # Shapes
/// - `t`: `[n, w]`
/// - `rows`: `r` indices, each `< n`
/// - output: `[r, w]`
///
/// # Panics
/// If a row index is out of range.
pub fn select_rows<B: ArborBackend>(t: Tensor<B, 2>, rows: &[usize]) -> Tensor<B, 2> {
    let [n, _] = t.dims();
    if let Some(&bad) = rows.iter().find(|&&r| r >= n) {
        panic!("select_rows: row {bad} of a {n}-row tensor");
    }
    Tensor::from_primitive(TensorPrimitive::Float(B::select_rows(
        t.into_primitive().tensor(),
        rows,
    )))
}

/// Every node beside its right neighbour: `out[:, k] = [x[:, k] ; x[:, k + 1]]`, the input of a
/// binary composition over all adjacent pairs (the Gumbel Tree-LSTM's layer), one op (and one
/// autodiff node) instead of two strided views and a concatenation.
///
/// # Shapes
/// - `x`: `[batch, m, D]`, `m ≥ 2`
/// - output: `[batch, m − 1, 2D]`
pub fn adjacent_pairs<B: ArborBackend>(x: Tensor<B, 3>) -> Tensor<B, 3> {
    assert!(x.dims()[1] >= 2, "adjacent_pairs needs at least two nodes");
    Tensor::from_primitive(TensorPrimitive::Float(B::adjacent_pairs(
        x.into_primitive().tensor(),
    )))
}

/// `Tensor::zeros(shape, device)`, without the CPU backends' copy: Flex 0.21 allocates zeros as
/// bytes and then copies them into a freshly aligned buffer, touching every page twice; here
/// the CPU backends take one zeroed `f32` allocation, whose pages the system maps only when
/// they are first written. A large buffer that fills up over time (SPINN's thin stack) costs
/// nothing up front. Other backends use their own zeros.
///
/// # Shapes
/// - output: `shape`
pub fn zeros<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::zeros(Shape::from(shape), device)))
}

/// `x` with its elements in row-major order, in both passes: one op (and one autodiff node)
/// whose forward pass copies a strided view into memory of its own, and whose backward pass
/// does the same to the gradient. The value is `x`; only the memory layout changes.
///
/// Put it where a reshape meets a permuted view, e.g. attention heads: `x.reshape(..)` then
/// `contiguous` then `swap_dims(..)`. Flex 0.21 copies a permuted view of rank ≥ 3 one element
/// at a time when it is reshaped, in the forward pass (`swap_dims` then `reshape`) and in the
/// backward pass (the gradient of `swap_dims` is a permuted view, which the gradient of the
/// `reshape` before it copies); the CPU backends here copy by contiguous runs instead.
///
/// # Shapes
/// - `x`, output: any shape
pub fn contiguous<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::contiguous(
        x.into_primitive().tensor(),
    )))
}

/// The affine map `x·w + b` of matrices (Burn's `linear` on rank 2), one op (and one autodiff
/// node whose backward pass is three products of the same kind: `g·wᵀ`, `xᵀ·g` and the column
/// sums of `g`).
///
/// On the CPU backends the product runs on arbor's own output buffer: prefilled with the bias
/// rows and accumulated into by the matrix product, where Burn 0.21's Flex allocates its output
/// as zeroed bytes, copies them into a freshly aligned buffer, and then adds the bias in another
/// pass. Any strides are read in place (transposed and narrowed views included).
///
/// # Shapes
/// - `x`: `[m, k]`
/// - `weight`: `[k, n]`
/// - `bias`: `[n]`
/// - output: `[m, n]`
pub fn linear<B: ArborBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, 2> {
    let ([_, k], [kw, n]) = (x.dims(), weight.dims());
    assert_eq!(k, kw, "linear: x [m, {k}] and weight [{kw}, {n}]");
    if let Some(b) = &bias {
        assert_eq!(b.dims(), [n], "linear: bias for {n} outputs");
    }
    Tensor::from_primitive(TensorPrimitive::Float(B::affine(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
    )))
}

/// [`linear`] whose value is already known: returns `known` (which must equal `x·w + b`, e.g.
/// computed at an earlier step for the same rows and carried over) and records the product's
/// autodiff node, so that the backward pass is exactly [`linear`]'s at `x`, `w` and `b`: the
/// forward product is skipped, the gradients are not changed.
///
/// `known` is a constant for autodiff: no gradient reaches it or anything it was computed
/// from. That it equals `x·w + b` is the caller's promise, and the caller's tests' to check
/// (checking here would read the device back inside a training step).
///
/// # Shapes
/// - `x`: `[m, k]`
/// - `weight`: `[k, n]`
/// - `bias`: `[n]`
/// - `known`, output: `[m, n]`
pub fn linear_given<B: ArborBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    known: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let ([m, k], [kw, n]) = (x.dims(), weight.dims());
    assert_eq!(k, kw, "linear_given: x [m, {k}] and weight [{kw}, {n}]");
    assert_eq!(known.dims(), [m, n], "linear_given: known for [{m}, {n}]");
    if let Some(b) = &bias {
        assert_eq!(b.dims(), [n], "linear_given: bias for {n} outputs");
    }
    Tensor::from_primitive(TensorPrimitive::Float(B::affine_given(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        known.into_primitive().tensor(),
    )))
}

/// The sum of two affine maps `x·w + h·u + b` (a recurrent cell's gates from its input and its
/// previous state), one op and one autodiff node: `linear(x, w, b) + linear(h, u, None)`
/// without the sum's pass, its output buffer and its two extra graph nodes.
///
/// `h·u` may be narrower than `x·w`: it is then added to the *last* columns of the output
/// (FastTrees: the input weight makes `[f̃, ĩ, gates]`, the recurrent one only the gates), so
/// a cell needs no narrowed view of a weight (whose gradients, one per step, Burn's autodiff
/// would hold until the end of the backward pass).
///
/// On the CPU backends both products accumulate into one output buffer (prefilled with the
/// bias rows), reading any strides in place, so column windows of a fused weight are not
/// copied. The backward pass is `g·wᵀ`, `xᵀ·g`, `g·uᵀ`, `hᵀ·g` and the column sums of `g`, each
/// only for an input that needs it.
///
/// # Shapes
/// - `x`: `[m, k]`, `weight`: `[k, n]`
/// - `h`: `[m, j]`, `weight_h`: `[j, n_h]`, `n_h ≤ n` (added to output columns `n − n_h..n`)
/// - `bias`: `[n]`
/// - output: `[m, n]`
pub fn linear_pair<B: ArborBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    h: Tensor<B, 2>,
    weight_h: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, 2> {
    let ([m, k], [kw, n]) = (x.dims(), weight.dims());
    let ([mh, j], [jw, nh]) = (h.dims(), weight_h.dims());
    assert_eq!(k, kw, "linear_pair: x [m, {k}] and weight [{kw}, {n}]");
    assert_eq!(j, jw, "linear_pair: h [m, {j}] and weight_h [{jw}, {nh}]");
    assert!(
        m == mh && nh <= n,
        "linear_pair: x·w is [{m}, {n}] but h·u is [{mh}, {nh}]"
    );
    if let Some(b) = &bias {
        assert_eq!(b.dims(), [n], "linear_pair: bias for {n} outputs");
    }
    Tensor::from_primitive(TensorPrimitive::Float(B::affine_pair(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        h.into_primitive().tensor(),
        weight_h.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
    )))
}

/// Layer normalisation over the last dimension, `(x − mean) / sqrt(var + ε) ⊙ γ + β` (the
/// biased variance, as Burn's `LayerNorm` and PyTorch's), as one op and one autodiff node.
///
/// Burn's `LayerNorm::forward` is about ten ops, and two of them reshape `γ` and `β`: an op
/// whose only tracked input is a parameter starts an autodiff graph of its own, which the next
/// op merges into the model's graph, at a cost that grows with the graph (Burn 0.21 moves
/// either graph into the other). Here `x`, `γ` and `β` are the node's direct inputs, so no
/// graph is started and none merged. The backward pass recomputes the statistics from `x`:
/// `dx = (ĝ − mean(ĝ) − x̂ ⊙ mean(ĝ ⊙ x̂)) / σ` with `ĝ = g ⊙ γ`, `dγ = Σ g ⊙ x̂`, `dβ = Σ g`,
/// one row loop on the CPU backends. The forward pass is Burn's own ops on every backend: Flex
/// runs them as vectorised whole-tensor passes, which measured faster than a row loop
/// (`cargo run --release -p arbor-bench --example layer_norm_vs_burn`).
///
/// `affine`: `(γ, β)`, or `None` for no affine map (R2D2's `LayerNorm(elementwise_affine =
/// False)`).
///
/// # Shapes
/// - `x`, output: `[..., d]`
/// - `γ`, `β`: `[d]`
pub fn layer_norm<B: ArborBackend, const D: usize>(
    x: Tensor<B, D>,
    affine: Option<(Tensor<B, 1>, Tensor<B, 1>)>,
    epsilon: f64,
) -> Tensor<B, D> {
    let dims = x.dims();
    let d = dims[D - 1];
    if let Some((g, b)) = &affine {
        assert!(
            g.dims() == [d] && b.dims() == [d],
            "layer_norm: gamma {:?} and beta {:?} for width {d}",
            g.dims(),
            b.dims()
        );
    }
    let rows = dims[..D - 1].iter().product::<usize>();
    let x2 = x.reshape([rows, d]);
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::layer_norm_rows(
        x2.into_primitive().tensor(),
        affine.map(|(g, b)| (g.into_primitive().tensor(), b.into_primitive().tensor())),
        epsilon,
    )));
    y.reshape(dims)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_avx512_products_are_named_only_when_compiled_and_present() {
        let kernels = super::cpu_product_kernels();
        #[cfg(target_arch = "x86_64")]
        {
            let v4 = cfg!(feature = "x86-v4") && std::arch::is_x86_feature_detected!("avx512f");
            assert_eq!(kernels == "gemm AVX-512", v4, "{kernels}");
        }
        assert!(kernels.starts_with("gemm"), "{kernels}");
    }
}
