//! `lstm_sequence` and `ordered_sequence`: the recurrence of an LSTM-family layer (LSTM,
//! ON-LSTM, FastTrees) over a whole sequence as one op and one autodiff node (the step loop
//! inside the op, backpropagation through time in one backward pass).

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The cell a sequence op runs; every cell's step is `pre = x_t·W + b + h_{t−1}·U` and then
/// the cell's update from `pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCell {
    /// The LSTM: `pre = [i, f, g, o]` (`4H` columns, [`GateLayout::lstm`]'s order),
    /// `c_t = σ(f) c_{t−1} + σ(i) tanh(g)`, `h_t = σ(o) tanh(c_t)`; `U` is `[H, 4H]`.
    ///
    /// [`GateLayout::lstm`]: crate::GateLayout::lstm
    Lstm,
    /// ON-LSTM (Shen et al. 2019, eqs. 9–14): `pre = [f̃, ĩ, i, f, g, o]` (`2C + 4H` columns),
    /// master gates `f̃ = cumax(·)`, `ĩ = 1 − cumax(·)` over `chunks` chunks of `H / C` units,
    /// `ω = f̃ ĩ`, `f̂ = σ(f) ω + f̃ − ω`, `î = σ(i) ω + ĩ − ω`, `c_t = f̂ c_{t−1} + î tanh(g)`,
    /// `h_t = σ(o) tanh(c_t)`; every gate reads `h`, so `U` is `[H, 2C + 4H]`.
    OnLstm {
        /// The number of chunks `C` (dividing `H`).
        chunks: usize,
    },
    /// FastTrees (Pung & Chan): ON-LSTM whose master gates read `x_t` only, so `U` is
    /// `[H, 4H]` and adds to the last `4H` columns of `pre`.
    FastTrees {
        /// The number of chunks `C` (dividing `H`).
        chunks: usize,
    },
    /// Conv FastTrees (Pung & Chan): FastTrees whose master gates' pre-activations are computed
    /// outside the op (from a causal convolution over the whole sequence) and given to it as a
    /// second input `[batch, time, 2C]`, the first `2C` columns of `pre`; `W` reads the input
    /// and gives the last `4H` columns of `pre`, and `U` is `[H, 4H]` as for FastTrees.
    ConvFastTrees {
        /// The number of chunks `C` (dividing `H`).
        chunks: usize,
    },
}

impl SequenceCell {
    /// The master gates' chunk count `C`; 0 for the LSTM.
    pub fn chunks(self) -> usize {
        match self {
            Self::Lstm => 0,
            Self::OnLstm { chunks }
            | Self::FastTrees { chunks }
            | Self::ConvFastTrees { chunks } => chunks,
        }
    }

    /// The leading columns of `pre` that the op is given as they are instead of computing them
    /// through `W`: the master gates' `2C` pre-activations for Conv FastTrees, none for the
    /// others.
    pub fn given(self) -> usize {
        match self {
            Self::Lstm | Self::OnLstm { .. } | Self::FastTrees { .. } => 0,
            Self::ConvFastTrees { chunks } => 2 * chunks,
        }
    }

    /// The width of `W` and `b` for hidden width `h`: [`width`](Self::width) less the
    /// [`given`](Self::given) columns.
    pub fn w_width(self, h: usize) -> usize {
        self.width(h) - self.given()
    }

    /// The width of `pre` for hidden width `h` (and of `W`, `b`, except for the
    /// [`given`](Self::given) columns).
    pub fn width(self, h: usize) -> usize {
        2 * self.chunks() + 4 * h
    }

    /// The width of `U` for hidden width `h`: the last `u_width` columns of `pre` read `h`.
    pub fn u_width(self, h: usize) -> usize {
        match self {
            Self::Lstm | Self::FastTrees { .. } | Self::ConvFastTrees { .. } => 4 * h,
            Self::OnLstm { .. } => self.width(h),
        }
    }

    /// The ordered cells' syntactic distance `d_t = 1 − mean(f̃_t)`: 1 value per step for
    /// them, none for the LSTM.
    pub(crate) fn distances(self) -> usize {
        match self {
            Self::Lstm => 0,
            Self::OnLstm { .. } | Self::FastTrees { .. } | Self::ConvFastTrees { .. } => 1,
        }
    }

    /// The rows of `H` values in the op's output that hold an example's `t` distances, one
    /// step after another (the last row padded with zeros; the op's output layout): `⌈t / H⌉` for
    /// the ordered cells, none for the LSTM.
    pub fn distance_rows(self, t: usize, h: usize) -> usize {
        match self.distances() {
            0 => 0,
            _ => t.div_ceil(h.max(1)),
        }
    }
}

/// Where a sequence op's one output (`[rows, H]`) keeps each state, in three blocks:
/// 1. `h`: `b·t` rows, example `e`'s step `s` at row `e·t + s`;
/// 2. `c`: `b·t` rows in the same order with every step's `c` (`every_c`), else `b` rows, each
///    example's final `c`;
/// 3. the ordered cells' distances: `r` rows per example ([`SequenceCell::distance_rows`]),
///    example `e`'s distance of step `s` at element `s` of its rows.
///
/// So `h` and `c` are contiguous blocks: the tensors the public functions return are
/// contiguous views of the output, which whatever reads them next (a sum, a product, a mask)
/// reads at full speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SequenceLayout {
    pub(crate) b: usize,
    pub(crate) t: usize,
    /// Distance rows per example.
    pub(crate) r: usize,
    pub(crate) every_c: bool,
}

impl SequenceLayout {
    pub(crate) fn new(b: usize, t: usize, h: usize, cell: SequenceCell, every_c: bool) -> Self {
        let r = cell.distance_rows(t, h);
        Self { b, t, r, every_c }
    }

    /// The layout of an output with `rows` rows: it holds every step's `c` when it has the
    /// rows for them. With one step the two layouts have the same rows and the same values
    /// (the only step's `c` is the final one), so either reading is right.
    pub(crate) fn of_output(b: usize, t: usize, h: usize, cell: SequenceCell, rows: usize) -> Self {
        let r = cell.distance_rows(t, h);
        let every_c = b > 0 && rows == b * (2 * t + r);
        Self { b, t, r, every_c }
    }

    /// Cell-state rows per example: `t` with `every_c`, else 1.
    pub(crate) fn c_steps(&self) -> usize {
        if self.every_c {
            self.t
        } else {
            1
        }
    }

    /// The output's row count.
    pub(crate) fn rows(&self) -> usize {
        self.b * (self.t + self.c_steps() + self.r)
    }

    /// The row of example `e`'s `h` at step `s`.
    pub(crate) fn h_row(&self, e: usize, s: usize) -> usize {
        e * self.t + s
    }

    /// The first `c` row (of example 0).
    pub(crate) fn c_start(&self) -> usize {
        self.b * self.t
    }

    /// The row of example `e`'s `c` at step `s`, with `every_c`.
    pub(crate) fn c_row(&self, e: usize, s: usize) -> Option<usize> {
        self.every_c.then(|| self.c_start() + e * self.t + s)
    }

    /// The row of example `e`'s final `c`, without `every_c`.
    pub(crate) fn c_last_row(&self, e: usize) -> Option<usize> {
        (!self.every_c).then(|| self.c_start() + e)
    }

    /// The first distance row (of example 0).
    pub(crate) fn d_start(&self) -> usize {
        self.b * (self.t + self.c_steps())
    }
}

/// An LSTM layer over a whole sequence as one op and one autodiff node: each step is
/// `[i, f, g, o] = x_t·W + b + h_{t−1}·U` (gate order `i, f, g, o`, as [`GateLayout::lstm`]),
/// `c_t = σ(f) c_{t−1} + σ(i) tanh(g)`, `h_t = σ(o) tanh(c_t)`.
///
/// On the CPU backends the step loop runs inside the op, with `W` and `U` packed once for the
/// sequence (arbor's own product kernel, `src/packed.rs`) and each step's projection computed
/// into one cache-resident buffer; only the examples still running at a step are computed (the
/// examples are ordered longest first inside the op, as PyTorch's packed sequences are). The
/// backward pass is backpropagation through time in one node: per step `δ_t·Wᵀ` and `δ_t·Uᵀ`
/// (both packed once) and the parameter gradients accumulated, so no whole-sequence buffer
/// beyond the saved gates and `c` and the input gradient is allocated (each step's `h_{t−1}`
/// is recomputed from them; the node does not keep the output).
///
/// `lengths` (one entry per example, each `≤ time`, or empty for all `time` steps): an
/// example's state is frozen after its last real step, so its output rows there repeat its last
/// state and its final state is the one after its own last step. With no step (`time = 0`) or no
/// example, the per-step outputs are empty and the final `c` is `c0` (the same for
/// [`lstm_sequence_states`], [`on_lstm_sequence`] and [`fast_trees_sequence`]).
///
/// # Shapes
/// - `x`: `[batch, time, d]`
/// - `w`: `[d, 4H]` (the input weight, `x_t·w`), `b`: `[4H]`
/// - `u`: `[H, 4H]` (the recurrent weight, `h_{t−1}·u`)
/// - `h0`, `c0`: `[batch, H]`
/// - output: `h_t` of every step `[batch, time, H]` (an ended example's rows repeat its last
///   `h`), and each example's final cell state `[batch, H]` (after its own last step)
///
/// # Panics
/// If the shapes disagree or `lengths` has another count than `batch` or an entry over `time`.
///
/// [`GateLayout::lstm`]: crate::GateLayout::lstm
pub fn lstm_sequence<B: ArborBackend>(
    x: Tensor<B, 3>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
) -> (Tensor<B, 3>, Tensor<B, 2>) {
    let [batch, t, _] = x.dims();
    let h = params.2.dims()[0];
    // One output ([`SequenceLayout`]): the `h` rows, then the final `c` (so the op is one
    // autodiff node with no whole-sequence `c` in its output).
    let device = x.device();
    let Some(out) = checked(
        x,
        None,
        params,
        h0,
        c0.clone(),
        lengths,
        SequenceCell::Lstm,
        false,
    ) else {
        return (Tensor::zeros([batch, t, h], &device), c0);
    };
    let c_start = SequenceLayout::new(batch, t, h, SequenceCell::Lstm, false).c_start();
    // arbor's `narrow`: its backward writes the gradient into one zero block (Burn's also
    // copies that block once more), and the op's output is the largest tensor here.
    let c_last = crate::narrow(out.clone(), 0, c_start, batch);
    (
        crate::narrow(out, 0, 0, batch * t).reshape([batch, t, h]),
        c_last,
    )
}

/// [`lstm_sequence`] with every step's cell state too, for callers that read them (the Gumbel
/// Tree-LSTM's leaves are every step's `(h, c)`).
///
/// # Shapes
/// As [`lstm_sequence`], but the output is `h_t` and `c_t` of every step, `[batch, time, H]`
/// each (an ended example's rows repeat its last state).
///
/// # Panics
/// As [`lstm_sequence`].
pub fn lstm_sequence_states<B: ArborBackend>(
    x: Tensor<B, 3>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [batch, t, _] = x.dims();
    let h = params.2.dims()[0];
    // Every step's `h`, then every step's `c` ([`SequenceLayout`]: two contiguous halves).
    let device = x.device();
    let Some(out) = checked(x, None, params, h0, c0, lengths, SequenceCell::Lstm, true) else {
        let empty = || Tensor::zeros([batch, t, h], &device);
        return (empty(), empty());
    };
    // Reshaped before the split, so both halves are views (Flex copies a reshape of a view
    // that does not start at the buffer's start).
    let out = out.reshape([2 * batch, t, h]);
    (
        crate::narrow(out.clone(), 0, 0, batch),
        crate::narrow(out, 0, batch, batch),
    )
}

/// An ON-LSTM layer over a whole sequence as one op and one autodiff node, as
/// [`lstm_sequence`] is for the LSTM: each step is `pre = x_t·W + b + h_{t−1}·U` with columns
/// `[f̃ (C), ĩ (C), i, f, g, o]` and the update of [`SequenceCell::OnLstm`]; the op also
/// gives every step's syntactic distance `d_t = 1 − mean(f̃_t)`.
///
/// # Shapes
/// - `x`: `[batch, time, d]`
/// - `w`: `[d, 2C + 4H]`, `b`: `[2C + 4H]`, `u`: `[H, 2C + 4H]`
/// - `h0`, `c0`: `[batch, H]`
/// - output: `h_t` of every step `[batch, time, H]`, each example's final cell state
///   `[batch, H]` and the distances `[batch, time]` (an ended example's `h` rows repeat its last
///   `h`; its distances there are 0)
///
/// # Panics
/// If the shapes disagree, `chunks` does not divide `H`, or `lengths` has another count than
/// `batch` or an entry over `time`.
pub fn on_lstm_sequence<B: ArborBackend>(
    x: Tensor<B, 3>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
    chunks: usize,
) -> (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>) {
    ordered(
        x,
        None,
        params,
        h0,
        c0,
        lengths,
        SequenceCell::OnLstm { chunks },
    )
}

/// A FastTrees layer over a whole sequence as one op and one autodiff node: as
/// [`on_lstm_sequence`], but the master gates read `x_t` only ([`SequenceCell::FastTrees`]),
/// so `u` is `[H, 4H]` (adding to the last `4H` columns of `pre`).
///
/// # Shapes
/// As [`on_lstm_sequence`], with `u`: `[H, 4H]`.
///
/// # Panics
/// As [`on_lstm_sequence`].
pub fn fast_trees_sequence<B: ArborBackend>(
    x: Tensor<B, 3>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
    chunks: usize,
) -> (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>) {
    ordered(
        x,
        None,
        params,
        h0,
        c0,
        lengths,
        SequenceCell::FastTrees { chunks },
    )
}

/// A Conv FastTrees layer over a whole sequence as one op and one autodiff node: as
/// [`fast_trees_sequence`], but the master gates' pre-activations `[f̃, ĩ]` of every step are
/// given (`master`: Conv FastTrees computes them with a causal convolution over the sequence,
/// which no step-by-step product can), so each step is `pre = [master_t, x_t·W + b +
/// h_{t−1}·U]` ([`SequenceCell::ConvFastTrees`]); the gradient reaches `master` as it reaches
/// `x`.
///
/// # Shapes
/// - `master`: `[batch, time, 2C]`
/// - `x`: `[batch, time, d]`
/// - `w`: `[d, 4H]`, `b`: `[4H]`, `u`: `[H, 4H]`
/// - `h0`, `c0`: `[batch, H]`
/// - output: as [`on_lstm_sequence`]
///
/// # Panics
/// As [`on_lstm_sequence`], and if `master` is not `[batch, time, 2C]`.
pub fn conv_fast_trees_sequence<B: ArborBackend>(
    master: Tensor<B, 3>,
    x: Tensor<B, 3>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
    chunks: usize,
) -> (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>) {
    // `checked` refuses a `master` of another shape than `[batch, time, 2C]`.
    ordered(
        x,
        Some(master),
        params,
        h0,
        c0,
        lengths,
        SequenceCell::ConvFastTrees { chunks },
    )
}

/// The ordered cells' op and the split of its output ([`SequenceLayout`]: every step's `h`, the
/// final `c`, then the distances in `r` rows per example).
fn ordered<B: ArborBackend>(
    x: Tensor<B, 3>,
    given: Option<Tensor<B, 3>>,
    params: LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
    cell: SequenceCell,
) -> (Tensor<B, 3>, Tensor<B, 2>, Tensor<B, 2>) {
    let [batch, t, _] = x.dims();
    let h = params.2.dims()[0];
    let device = x.device();
    let Some(out) = checked(x, given, params, h0, c0.clone(), lengths, cell, false) else {
        return (
            Tensor::zeros([batch, t, h], &device),
            c0,
            Tensor::zeros([batch, t], &device),
        );
    };
    let layout = SequenceLayout::new(batch, t, h, cell, false);
    let r = layout.r;
    let distances = if r == 0 {
        Tensor::zeros([batch, 0], &device)
    } else {
        let rows = crate::narrow(out.clone(), 0, layout.d_start(), batch * r);
        crate::narrow(rows.reshape([batch, r * h]), 1, 0, t)
    };
    // arbor's `narrow`, as in [`lstm_sequence`].
    let c_last = crate::narrow(out.clone(), 0, layout.c_start(), batch);
    (
        crate::narrow(out, 0, 0, batch * t).reshape([batch, t, h]),
        c_last,
        distances,
    )
}

/// An LSTM-family layer's parameters for the sequence ops: the input weight `[d, P]`, the bias
/// `[P]` and the recurrent weight `[H, ·]` (`P` and `U`'s width as [`SequenceCell::width`] and
/// [`SequenceCell::u_width`]; `[d, 4H]`, `[4H]`, `[H, 4H]` for [`lstm_sequence`]).
pub type LstmParams<B> = (Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 2>);

/// The shape checks and the op: its output in the [`SequenceLayout`] for `every_c`, or `None`
/// when there is no step or no example (nothing to run: the per-step outputs are empty and the
/// final `c` is `c0`; Burn can neither narrow nor reshape to an empty block, as its `reshape`
/// reads a 0 as "keep this dimension").
#[allow(clippy::too_many_arguments)]
fn checked<B: ArborBackend>(
    x: Tensor<B, 3>,
    given: Option<Tensor<B, 3>>,
    (w, b, u): LstmParams<B>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
    cell: SequenceCell,
    every_c: bool,
) -> Option<Tensor<B, 2>> {
    let [batch, t, d] = x.dims();
    let [h, uw] = u.dims();
    let (width, chunks, g) = (cell.w_width(h), cell.chunks(), cell.given());
    assert!(
        cell == SequenceCell::Lstm || (chunks > 0 && h % chunks == 0),
        "{cell:?}: {chunks} chunks do not divide H = {h}"
    );
    assert_eq!(
        given.as_ref().map(|m| m.dims()),
        (g > 0).then_some([batch, t, g]),
        "{cell:?}: the given pre-activations must be [{batch}, {t}, {g}] (none without given columns)"
    );
    assert_eq!(
        uw,
        cell.u_width(h),
        "{cell:?}: u's width {uw} is not {} for H = {h}",
        cell.u_width(h)
    );
    assert_eq!(w.dims(), [d, width], "{cell:?}: w must be [{d}, {width}]");
    assert_eq!(b.dims(), [width], "{cell:?}: b must be [{width}]");
    assert_eq!(h0.dims(), [batch, h], "{cell:?}: h0 must be [{batch}, {h}]");
    assert_eq!(c0.dims(), [batch, h], "{cell:?}: c0 must be [{batch}, {h}]");
    assert!(
        lengths.is_empty() || (lengths.len() == batch && lengths.iter().all(|&l| l <= t)),
        "{cell:?}: {} lengths for {batch} rows of {t} steps",
        lengths.len()
    );
    if batch * t == 0 {
        return None;
    }
    let p = |x: Tensor<B, 2>| x.into_primitive().tensor();
    Some(Tensor::from_primitive(TensorPrimitive::Float(
        B::lstm_sequence_tracked(
            x.into_primitive().tensor(),
            given.map(|m| m.into_primitive().tensor()),
            [p(w), b.into_primitive().tensor(), p(u), p(h0), p(c0)],
            lengths,
            cell,
            every_c,
        ),
    )))
}

/// The gradients of [`ArborBackend::lstm_sequence_backward`]: `inputs` of `x`, `w`, `b`, `u`,
/// `h0` and `c0`, in that order, and `given` of the given pre-activations (`[b, t, G]`) for a
/// cell that takes them ([`SequenceCell::given`]), `None` otherwise.
pub struct SequenceGrads<B: Backend> {
    /// The gradients of `x`, `w`, `b`, `u`, `h0` and `c0`.
    pub inputs: [FloatTensor<B>; 6],
    /// The given pre-activations' gradient.
    pub given: Option<FloatTensor<B>>,
}

/// The recurrence in plain Burn ops, one step per time step.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use super::{SequenceCell, SequenceGrads, SequenceLayout};
    use crate::reference::{t2, t3};

    /// Row `b`'s state is frozen at step `s` (past its length), as a `[b, 1]` mask; `None` when no
    /// row is.
    fn frozen_rows<B: Backend>(
        lengths: &[usize],
        b: usize,
        s: usize,
        device: &B::Device,
    ) -> Option<Tensor<B, 2, burn::tensor::Bool>> {
        let rows: Vec<bool> = (0..b)
            .map(|r| lengths.get(r).is_some_and(|&len| s >= len))
            .collect();
        rows.iter().any(|&f| f).then(|| {
            Tensor::<B, 2, burn::tensor::Bool>::from_data(
                burn::tensor::TensorData::new(rows, [b, 1]),
                device,
            )
        })
    }

    /// `1 / (1 + e^(−x))` in the float type itself: Burn 0.21's `sigmoid` computes in `f32`
    /// whatever the type, which would make this reference too coarse for f64 checks.
    fn sig<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
        x.neg().exp().add_scalar(1.0).recip()
    }

    /// The softmax of each row, in the float type itself (as [`sig`]).
    fn softmax_rows<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
        let e = x.clone().sub(x.max_dim(1)).exp();
        e.clone().div(e.sum_dim(1))
    }

    /// `[n, C]` chunk values broadcast over their `H / C` units: `[n, H]`.
    fn per_unit<B: Backend>(x: Tensor<B, 2>, h: usize) -> Tensor<B, 2> {
        let [n, c] = x.dims();
        x.unsqueeze_dim::<3>(2)
            .expand([n, c, h / c])
            .reshape([n, h])
    }

    /// `[n, H]` unit values summed over each chunk of `H / C`: `[n, C]`.
    fn per_chunk<B: Backend>(x: Tensor<B, 2>, c: usize) -> Tensor<B, 2> {
        let [n, h] = x.dims();
        x.reshape([n, c, h / c]).sum_dim(2).reshape([n, c])
    }

    /// The sequence op in plain ops ([`crate::lstm_sequence`], [`crate::on_lstm_sequence`],
    /// [`crate::fast_trees_sequence`]): the input projection of every step as one product, then
    /// `recurrence`. Returns the output in its `SequenceLayout` and, with `keep_gates`,
    /// what the backward pass reads: the activated gates and every step's `h` and `c`,
    /// `[b, t, P + 2H]`.
    pub fn lstm_sequence<B: Backend>(
        x: FloatTensor<B>,
        given: Option<FloatTensor<B>>,
        [w, bias, u, h0, c0]: [FloatTensor<B>; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
        keep_gates: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        let (x, w, bias) = (
            t3::<B>(x),
            t2::<B>(w),
            Tensor::<B, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(bias)),
        );
        let [b, t, d] = x.dims();
        let width = w.dims()[1];
        let projected = x
            .reshape([b * t, d])
            .matmul(w)
            .add(bias.unsqueeze_dim(0))
            .reshape([b, t, width]);
        // The given pre-activations (Conv FastTrees' master gates) first, as they are.
        let xp = match given {
            None => projected,
            Some(given) => Tensor::cat(vec![t3::<B>(given), projected], 2),
        };
        let hd = t2::<B>(c0.clone()).dims()[1];
        let e = cell.distances();
        let first_c = t2::<B>(c0.clone());
        let (hcd, gates) = recurrence::<B>(
            xp.into_primitive().tensor(),
            u,
            h0,
            c0,
            lengths,
            cell,
            keep_gates,
        );
        let hcd = t3::<B>(hcd);
        let (h_all, c_all) = (hcd.clone().narrow(2, 0, hd), hcd.clone().narrow(2, hd, hd));
        let r = cell.distance_rows(t, hd);
        // The blocks of the [`SequenceLayout`]: `h`, `c`, the distances as `r` rows of `H` per
        // example (the last padded with zeros).
        let mut blocks = vec![h_all.reshape([b * t, hd])];
        blocks.push(if every_c {
            c_all.reshape([b * t, hd])
        } else if t == 0 {
            first_c
        } else {
            c_all.narrow(1, t - 1, 1).reshape([b, hd])
        });
        if r > 0 {
            let d = hcd.clone().narrow(2, 2 * hd, e).reshape([b, t]);
            let pad = r * hd - t;
            let d = if pad > 0 {
                let z = d.clone().narrow(1, 0, 1).zeros_like().expand([b, pad]);
                Tensor::cat(vec![d, z], 1)
            } else {
                d
            };
            blocks.push(d.reshape([b * r, hd]));
        }
        let out = Tensor::cat(blocks, 0);
        let saved = gates.map(|g| {
            Tensor::cat(vec![t3::<B>(g), hcd.narrow(2, 0, 2 * hd)], 2)
                .into_primitive()
                .tensor()
        });
        (out.into_primitive().tensor(), saved)
    }

    /// The gradients of [`lstm_sequence`] with respect to `x`, `w`, `b`, `u`, `h0`, `c0` and the
    /// given pre-activations in plain ops: `recurrence_backward`, then the input projection's.
    #[allow(clippy::too_many_arguments)]
    pub fn lstm_sequence_backward<B: Backend>(
        x: FloatTensor<B>,
        [w, u, h0, c0]: [FloatTensor<B>; 4],
        saved: FloatTensor<B>,
        lengths: &[usize],
        cell: SequenceCell,
        grad: FloatTensor<B>,
    ) -> SequenceGrads<B> {
        let (saved, grad) = (t3::<B>(saved), t2::<B>(grad));
        let [b, t, d] = t3::<B>(x.clone()).dims();
        let hd = t2::<B>(u.clone()).dims()[0];
        let (width, e, given) = (cell.width(hd), cell.distances(), cell.given());
        // The output's layout, from its gradient's rows: every step's `c` or the final one.
        let layout = SequenceLayout::of_output(b, t, hd, cell, grad.dims()[0]);
        let (every_c, r) = (layout.every_c, layout.r);
        if t == 0 {
            // No step: the final `c` is `c0`.
            let x = t3::<B>(x);
            let w = t2::<B>(w);
            let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
            // No step reads the given pre-activations: a `[b, 0, G]` block (Burn's `zeros_like`
            // of `x` keeps its float type; a constructor's default type may differ).
            let d_given = (given > 0).then(|| {
                x.clone()
                    .narrow(2, 0, 1)
                    .zeros_like()
                    .expand([b, 0, given])
                    .into_primitive()
                    .tensor()
            });
            return SequenceGrads {
                inputs: [
                    x.zeros_like().into_primitive().tensor(),
                    p(w.clone().zeros_like()),
                    // Zeros in `w`'s float type (a constructor's default type may differ).
                    w.sum_dim(0)
                        .reshape([width - given])
                        .zeros_like()
                        .into_primitive()
                        .tensor(),
                    p(t2::<B>(u).zeros_like()),
                    p(t2::<B>(h0).zeros_like()),
                    if every_c {
                        p(t2::<B>(c0).zeros_like())
                    } else {
                        // The output is the final `c` alone.
                        p(grad)
                    },
                ],
                given: d_given,
            };
        }
        let gates = saved.clone().narrow(2, 0, width);
        let hc = saved.narrow(2, width, 2 * hd);
        // The gradient of every step's `h`, `c` and distance (without `every_c`, `c`'s only at
        // the last step: the final `c`).
        let d_h = grad.clone().narrow(0, 0, b * t).reshape([b, t, hd]);
        let d_c = if every_c {
            grad.clone()
                .narrow(0, layout.c_start(), b * t)
                .reshape([b, t, hd])
        } else {
            let last = grad
                .clone()
                .narrow(0, layout.c_start(), b)
                .reshape([b, 1, hd]);
            Tensor::cat(
                vec![last.clone().expand([b, t - 1, hd]).zeros_like(), last],
                1,
            )
        };
        let mut d_hcd = vec![d_h, d_c];
        if e > 0 {
            // The distances' gradient from their rows, as one column.
            let d_d = grad
                .narrow(0, layout.d_start(), b * r)
                .reshape([b, r * hd])
                .narrow(1, 0, t)
                .reshape([b, t, e]);
            d_hcd.push(d_d);
        }
        let d_hcd = Tensor::cat(d_hcd, 2);
        let p3 = |t: Tensor<B, 3>| t.into_primitive().tensor();
        let [d_xp, d_u, d_h0, d_c0] =
            recurrence_backward::<B>(u, h0, c0, p3(hc), p3(gates), lengths, cell, p3(d_hcd));
        let (x, w, d_xp) = (t3::<B>(x), t2::<B>(w), t3::<B>(d_xp));
        let d_xp = d_xp.reshape([b * t, width]);
        // The given pre-activations' gradient is theirs in `pre`; the others' goes through
        // `W`. (Burn's `narrow` refuses an empty range.)
        let d_given = (given > 0).then(|| {
            d_xp.clone()
                .narrow(1, 0, given)
                .reshape([b, t, given])
                .into_primitive()
                .tensor()
        });
        let d_xp = d_xp.narrow(1, given, width - given);
        let d_x = d_xp.clone().matmul(w.transpose()).reshape([b, t, d]);
        let d_w = x.reshape([b * t, d]).transpose().matmul(d_xp.clone());
        let d_b = d_xp.sum_dim(0).reshape([width - given]);
        SequenceGrads {
            inputs: [
                d_x.into_primitive().tensor(),
                d_w.into_primitive().tensor(),
                d_b.into_primitive().tensor(),
                d_u,
                d_h0,
                d_c0,
            ],
            given: d_given,
        }
    }

    /// `pre = xp_t + h·U` for `cell` (`U` adds to the last [`SequenceCell::u_width`] columns).
    fn pre_activations<B: Backend>(
        xp_t: Tensor<B, 2>,
        h: Tensor<B, 2>,
        u: &Tensor<B, 2>,
        cell: SequenceCell,
    ) -> Tensor<B, 2> {
        let [_, w] = xp_t.dims();
        let uw = u.dims()[1];
        let hu = h.matmul(u.clone());
        if uw == w {
            xp_t + hu
        } else {
            let lead = xp_t.clone().narrow(1, 0, w - uw);
            debug_assert!(matches!(
                cell,
                SequenceCell::FastTrees { .. } | SequenceCell::ConvFastTrees { .. }
            ));
            Tensor::cat(vec![lead, xp_t.narrow(1, w - uw, uw) + hu], 1)
        }
    }

    /// The master gates from the activated `[p_f̃, p_ĩ]` (each row's softmax): `f̃ = cumsum(p_f̃)`,
    /// `ĩ = 1 − cumsum(p_ĩ)`, per chunk `[n, C]`.
    fn master<B: Backend>(act: &Tensor<B, 2>, c: usize) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let ft = act.clone().narrow(1, 0, c).cumsum(1);
        let it = act.clone().narrow(1, c, c).cumsum(1).neg().add_scalar(1.0);
        (ft, it)
    }

    /// One step's activated gates (`[p_f̃, p_ĩ]` the master gates' softmax, then `σ(i)`,
    /// `σ(f)`, `tanh(g)`, `σ(o)`), new `c` and `h`, and distance (`[n, 1]`, ordered cells
    /// only), from the pre-activations and `c_prev`.
    fn step<B: Backend>(
        pre: Tensor<B, 2>,
        c_prev: Tensor<B, 2>,
        cell: SequenceCell,
    ) -> (
        Tensor<B, 2>,
        Tensor<B, 2>,
        Tensor<B, 2>,
        Option<Tensor<B, 2>>,
    ) {
        let hd = c_prev.dims()[1];
        let c2 = 2 * cell.chunks();
        let block = |k: usize| pre.clone().narrow(1, c2 + k * hd, hd);
        let (i, f, g, o) = (sig(block(0)), sig(block(1)), block(2).tanh(), sig(block(3)));
        let (act, c_new, distance) = match cell {
            SequenceCell::Lstm => {
                let c_new = f.clone().mul(c_prev) + i.clone().mul(g.clone());
                (Tensor::cat(vec![i, f, g, o.clone()], 1), c_new, None)
            }
            SequenceCell::OnLstm { chunks }
            | SequenceCell::FastTrees { chunks }
            | SequenceCell::ConvFastTrees { chunks } => {
                let p = Tensor::cat(
                    vec![
                        softmax_rows(pre.clone().narrow(1, 0, chunks)),
                        softmax_rows(pre.clone().narrow(1, chunks, chunks)),
                    ],
                    1,
                );
                let (ft, it) = master(&p, chunks);
                let distance = ft.clone().mean_dim(1).neg().add_scalar(1.0);
                let (ft, it) = (per_unit(ft, hd), per_unit(it, hd));
                let w = ft.clone().mul(it.clone());
                let f_hat = f.clone().mul(w.clone()) + ft - w.clone();
                let i_hat = i.clone().mul(w.clone()) + it - w;
                let c_new = f_hat.mul(c_prev) + i_hat.mul(g.clone());
                (
                    Tensor::cat(vec![p, i, f, g, o.clone()], 1),
                    c_new,
                    Some(distance),
                )
            }
        };
        let h_new = o.mul(c_new.clone().tanh());
        (act, c_new, h_new, distance)
    }

    /// The recurrence from precomputed input projections `xp` (`[b, t, P]`), in plain ops, one
    /// step per time step: every step's `[h, c, d]` (`[b, t, 2H + e]`; the distance `d` of
    /// the ordered cells is 0 where an example has ended) and, with `keep_gates`, the activated
    /// gates `[b, t, P]`.
    pub(crate) fn recurrence<B: Backend>(
        xp: FloatTensor<B>,
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        lengths: &[usize],
        cell: SequenceCell,
        keep_gates: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        let (xp, u, mut h, mut c) = (t3::<B>(xp), t2::<B>(u), t2::<B>(h0), t2::<B>(c0));
        let [b, t, w] = xp.dims();
        let hd = h.dims()[1];
        let e = cell.distances();
        let device = xp.device();
        let mut outs = Vec::with_capacity(t);
        let mut gates = Vec::with_capacity(t);
        for s in 0..t {
            let pre = pre_activations(
                xp.clone().narrow(1, s, 1).reshape([b, w]),
                h.clone(),
                &u,
                cell,
            );
            let (act, c_new, h_new, mut distance) = step(pre, c.clone(), cell);
            match frozen_rows::<B>(lengths, b, s, &device) {
                Some(frozen) => {
                    distance = distance.map(|d| d.mask_fill(frozen.clone(), 0.0));
                    let frozen = frozen.expand([b, hd]);
                    h = h_new.mask_where(frozen.clone(), h);
                    c = c_new.mask_where(frozen, c);
                }
                None => {
                    h = h_new;
                    c = c_new;
                }
            }
            let mut row = vec![h.clone(), c.clone()];
            row.extend(distance);
            outs.push(Tensor::cat(row, 1).unsqueeze_dim::<3>(1));
            if keep_gates {
                gates.push(act.unsqueeze_dim::<3>(1));
            }
        }
        let out = if t == 0 {
            Tensor::<B, 3>::zeros([b, 0, 2 * hd + e], &device)
        } else {
            Tensor::cat(outs, 1)
        };
        let gates = keep_gates.then(|| {
            if t == 0 {
                Tensor::<B, 3>::zeros([b, 0, w], &device)
            } else {
                Tensor::cat(gates, 1)
            }
            .into_primitive()
            .tensor()
        });
        (out.into_primitive().tensor(), gates)
    }

    /// The gradients of [`recurrence`] with respect to `xp`, `u`, `h0` and `c0` in plain ops
    /// (backpropagation through time), from every step's `[h, c]` (`out`), the activated gates
    /// and the gradient of every step's `[h, c, d]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn recurrence_backward<B: Backend>(
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        out: FloatTensor<B>,
        gates: FloatTensor<B>,
        lengths: &[usize],
        cell: SequenceCell,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let (u, h0, c0) = (t2::<B>(u), t2::<B>(h0), t2::<B>(c0));
        let (out, gates, grad) = (t3::<B>(out), t3::<B>(gates), t3::<B>(grad));
        let [b, t, w] = gates.dims();
        let hd = h0.dims()[1];
        let (chunks, uw) = (cell.chunks(), cell.u_width(hd));
        let c2 = 2 * chunks;
        let device = gates.device();
        let at = |x: &Tensor<B, 3>, s: usize, k: usize, width: usize| {
            x.clone()
                .narrow(1, s, 1)
                .narrow(2, k, width)
                .reshape([b, width])
        };
        let (mut dh, mut dc) = (h0.zeros_like(), c0.zeros_like());
        let mut d_pre = vec![None; t];
        let mut d_u = u.zeros_like();
        for s in (0..t).rev() {
            let g_h = at(&grad, s, 0, hd) + dh.clone();
            let g_c = at(&grad, s, hd, hd) + dc.clone();
            let c = at(&out, s, hd, hd);
            let (c_prev, h_prev) = if s > 0 {
                (at(&out, s - 1, hd, hd), at(&out, s - 1, 0, hd))
            } else {
                (c0.clone(), h0.clone())
            };
            let (i, f, g, o) = (
                at(&gates, s, c2, hd),
                at(&gates, s, c2 + hd, hd),
                at(&gates, s, c2 + 2 * hd, hd),
                at(&gates, s, c2 + 3 * hd, hd),
            );
            let tc = c.tanh();
            let one = |x: &Tensor<B, 2>| x.ones_like();
            let d_c = g_c.clone()
                + g_h
                    .clone()
                    .mul(o.clone())
                    .mul(one(&tc) - tc.clone().powi_scalar(2));
            let d_o = g_h.clone().mul(tc).mul(o.clone()).mul(one(&o) - o);
            // The gradients of the pre-activations, and `c_prev`'s through the update.
            let (mut dp, d_c_prev) = match cell {
                SequenceCell::Lstm => {
                    let d_i = d_c
                        .clone()
                        .mul(g.clone())
                        .mul(i.clone())
                        .mul(one(&i) - i.clone());
                    let d_g = d_c.clone().mul(i).mul(one(&g) - g.powi_scalar(2));
                    let d_f = d_c
                        .clone()
                        .mul(c_prev)
                        .mul(f.clone())
                        .mul(one(&f) - f.clone());
                    (Tensor::cat(vec![d_i, d_f, d_g, d_o], 1), d_c.mul(f))
                }
                SequenceCell::OnLstm { .. }
                | SequenceCell::FastTrees { .. }
                | SequenceCell::ConvFastTrees { .. } => {
                    let act = at(&gates, s, 0, c2);
                    let (pf, pi) = (
                        act.clone().narrow(1, 0, chunks),
                        act.narrow(1, chunks, chunks),
                    );
                    let (ft, it) = master(&at(&gates, s, 0, c2), chunks);
                    let (ft_u, it_u) = (per_unit(ft.clone(), hd), per_unit(it.clone(), hd));
                    let om = ft_u.clone().mul(it_u.clone());
                    let f_hat = f.clone().mul(om.clone()) + ft_u.clone() - om.clone();
                    let i_hat = i.clone().mul(om.clone()) + it_u.clone() - om.clone();
                    let d_fhat = d_c.clone().mul(c_prev);
                    let d_ihat = d_c.clone().mul(g.clone());
                    let d_i = d_ihat
                        .clone()
                        .mul(om.clone())
                        .mul(i.clone())
                        .mul(one(&i) - i.clone());
                    let d_f = d_fhat
                        .clone()
                        .mul(om.clone())
                        .mul(f.clone())
                        .mul(one(&f) - f.clone());
                    let d_g = d_c.clone().mul(i_hat).mul(one(&g) - g.powi_scalar(2));
                    let d_om = d_fhat.clone().mul(f - one(&om)) + d_ihat.clone().mul(i - one(&om));
                    let g_d = at(&grad, s, 2 * hd, 1);
                    let d_ft = per_chunk(d_fhat + d_om.clone().mul(it_u), chunks)
                        - g_d.div_scalar(chunks as f64);
                    let d_it = per_chunk(d_ihat + d_om.mul(ft_u), chunks);
                    // `f̃ = cumsum(p_f̃)`: `∂/∂p_j = Σ_{k ≥ j} ∂/∂f̃_k`; `ĩ = 1 − cumsum(p_ĩ)`
                    // likewise with the sign turned; then the softmax's backward.
                    let rev_cumsum =
                        |x: Tensor<B, 2>| x.clone().sum_dim(1) - x.clone().cumsum(1) + x;
                    let soft_back = |p: Tensor<B, 2>, dp: Tensor<B, 2>| {
                        let dot = p.clone().mul(dp.clone()).sum_dim(1);
                        p.mul(dp - dot)
                    };
                    let dz_f = soft_back(pf, rev_cumsum(d_ft));
                    let dz_i = soft_back(pi, rev_cumsum(d_it.neg()));
                    (
                        Tensor::cat(vec![dz_f, dz_i, d_i, d_f, d_g, d_o], 1),
                        d_c.mul(f_hat),
                    )
                }
            };
            let frozen = frozen_rows::<B>(lengths, b, s, &device);
            if let Some(frozen) = &frozen {
                dp = dp.mask_fill(frozen.clone().expand([b, w]), 0.0);
            }
            let dp_u = dp.clone().narrow(1, w - uw, uw);
            let through = dp_u.clone().matmul(u.clone().transpose());
            match frozen {
                Some(frozen) => {
                    let frozen = frozen.expand([b, hd]);
                    dh = through.mask_where(frozen.clone(), g_h);
                    dc = d_c_prev.mask_where(frozen, g_c);
                }
                None => {
                    dh = through;
                    dc = d_c_prev;
                }
            }
            d_u = d_u + h_prev.transpose().matmul(dp_u);
            d_pre[s] = Some(dp.unsqueeze_dim::<3>(1));
        }
        let d_xp = if t == 0 {
            Tensor::<B, 3>::zeros([b, 0, w], &device)
        } else {
            Tensor::cat(d_pre.into_iter().flatten().collect(), 1)
        };
        [
            d_xp.into_primitive().tensor(),
            d_u.into_primitive().tensor(),
            dh.into_primitive().tensor(),
            dc.into_primitive().tensor(),
        ]
    }
}

/// One step of every row, over contiguous `f32` memory.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use crate::ops::activation::cpu::{sigmoid, tanh};

    /// `h = σ(o)·tanh(c)` for one row, from the activated output gate `o`: the one place the
    /// sequence ops compute a step's `h`, so that the backward pass, which recomputes
    /// `h_{t−1}` from the saved `o` and `c` instead of keeping the output, gets the same bits.
    pub(crate) fn hidden(h: &mut [f32], c: &[f32], o: &[f32]) {
        tanh(h, c);
        for (hv, ov) in h.iter_mut().zip(o) {
            *hv *= ov;
        }
    }

    /// One LSTM step for `pre.len() / 4h` rows: from pre-activations `[i, f, g, o]` (each `h`
    /// wide) and `c_prev`, writes the activated gates `σ(i), σ(f), tanh(g), σ(o)` into `act`,
    /// `c = σ(f) c_prev + σ(i) tanh(g)` into `c` and `h = σ(o) tanh(c)` into `h_out`.
    pub fn lstm_step(
        pre: &[f32],
        c_prev: &[f32],
        h: usize,
        act: &mut [f32],
        h_out: &mut [f32],
        c: &mut [f32],
    ) {
        let w = 4 * h;
        for ((pre, act), (cp, (ho, cn))) in pre.chunks_exact(w).zip(act.chunks_exact_mut(w)).zip(
            c_prev
                .chunks_exact(h)
                .zip(h_out.chunks_exact_mut(h).zip(c.chunks_exact_mut(h))),
        ) {
            sigmoid(&mut act[..2 * h], &pre[..2 * h]);
            tanh(&mut act[2 * h..3 * h], &pre[2 * h..3 * h]);
            sigmoid(&mut act[3 * h..], &pre[3 * h..]);
            let (i, rest) = act.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            for j in 0..h {
                cn[j] = f[j] * cp[j] + i[j] * g[j];
            }
            hidden(ho, cn, o);
        }
    }

    /// The backward pass of [`lstm_step`] for `act.len() / 4h` rows, given the gradients `g_h`,
    /// `g_c` reaching the step's `h` and `c`: writes the pre-activations' gradient into `d_pre`
    /// and `c_prev`'s into `d_c_prev`. `scratch` holds `h` values.
    #[allow(clippy::too_many_arguments)]
    pub fn lstm_step_backward(
        act: &[f32],
        c: &[f32],
        c_prev: &[f32],
        g_h: &[f32],
        g_c: &[f32],
        h: usize,
        d_pre: &mut [f32],
        d_c_prev: &mut [f32],
        scratch: &mut [f32],
    ) {
        let w = 4 * h;
        let tc = &mut scratch[..h];
        for (row, (act, d_pre)) in act
            .chunks_exact(w)
            .zip(d_pre.chunks_exact_mut(w))
            .enumerate()
        {
            let span = row * h..(row + 1) * h;
            let (c, cp, gh, gc) = (
                &c[span.clone()],
                &c_prev[span.clone()],
                &g_h[span.clone()],
                &g_c[span.clone()],
            );
            let dcp = &mut d_c_prev[span];
            tanh(tc, c);
            let (i, rest) = act.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            let (di, rest) = d_pre.split_at_mut(h);
            let (df, rest) = rest.split_at_mut(h);
            let (dg, d_o) = rest.split_at_mut(h);
            for j in 0..h {
                let t = tc[j];
                let dc = gc[j] + gh[j] * o[j] * (1.0 - t * t);
                d_o[j] = gh[j] * t * o[j] * (1.0 - o[j]);
                di[j] = dc * g[j] * i[j] * (1.0 - i[j]);
                dg[j] = dc * i[j] * (1.0 - g[j] * g[j]);
                df[j] = dc * cp[j] * f[j] * (1.0 - f[j]);
                dcp[j] = dc * f[j];
            }
        }
    }

    /// `dst = softmax(src)` (one row).
    fn softmax(dst: &mut [f32], src: &[f32]) {
        let max = src.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = (x - max).exp();
            sum += *d;
        }
        let inv = 1.0 / sum;
        for d in dst.iter_mut() {
            *d *= inv;
        }
    }

    /// One ON-LSTM/FastTrees step for `pre.len() / (2c + 4h)` rows: from pre-activations
    /// `[f̃, ĩ, i, f, g, o]` (`c` master columns each, then `h` per gate) and `c_prev`, writes
    /// the activated gates (the master gates' softmax `p_f̃`, `p_ĩ`, then `σ(i)`, `σ(f)`,
    /// `tanh(g)`, `σ(o)`) into `act`, `c = f̂ c_prev + î tanh(g)` into `c_out`,
    /// `h = σ(o) tanh(c)` into `h_out` and the distance `1 − mean(f̃)` into `dist`, where
    /// `f̃ = cumsum(p_f̃)`, `ĩ = 1 − cumsum(p_ĩ)`, `ω = f̃ ĩ`, `f̂ = σ(f) ω + f̃ − ω`,
    /// `î = σ(i) ω + ĩ − ω`, each chunk's master values shared by its `h / c` units.
    #[allow(clippy::too_many_arguments)]
    pub fn ordered_step(
        pre: &[f32],
        c_prev: &[f32],
        c: usize,
        h: usize,
        act: &mut [f32],
        h_out: &mut [f32],
        c_out: &mut [f32],
        dist: &mut [f32],
    ) {
        let (w, s_len) = (2 * c + 4 * h, h / c);
        for (((pre, act), (cp, (ho, cn))), d) in pre
            .chunks_exact(w)
            .zip(act.chunks_exact_mut(w))
            .zip(
                c_prev
                    .chunks_exact(h)
                    .zip(h_out.chunks_exact_mut(h).zip(c_out.chunks_exact_mut(h))),
            )
            .zip(dist.iter_mut())
        {
            softmax(&mut act[..c], &pre[..c]);
            softmax(&mut act[c..2 * c], &pre[c..2 * c]);
            let g0 = 2 * c;
            sigmoid(&mut act[g0..g0 + 2 * h], &pre[g0..g0 + 2 * h]);
            tanh(
                &mut act[g0 + 2 * h..g0 + 3 * h],
                &pre[g0 + 2 * h..g0 + 3 * h],
            );
            sigmoid(&mut act[g0 + 3 * h..], &pre[g0 + 3 * h..]);
            let (p, gates) = act.split_at(g0);
            let (i, rest) = gates.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            let (mut ft, mut cum_i, mut ft_sum) = (0f32, 0f32, 0f32);
            for k in 0..c {
                ft += p[k];
                cum_i += p[c + k];
                ft_sum += ft;
                let it = 1.0 - cum_i;
                let om = ft * it;
                for j in k * s_len..(k + 1) * s_len {
                    let f_hat = f[j] * om + ft - om;
                    let i_hat = i[j] * om + it - om;
                    cn[j] = f_hat * cp[j] + i_hat * g[j];
                }
            }
            *d = 1.0 - ft_sum / c as f32;
            hidden(ho, cn, o);
        }
    }

    /// The backward pass of [`ordered_step`] for `act.len() / (2c + 4h)` rows, given the
    /// gradients `g_h`, `g_c`, `g_d` reaching the step's `h`, `c` and distance: writes the
    /// pre-activations' gradient into `d_pre` and `c_prev`'s into `d_c_prev`. `scratch` holds
    /// `h + 4c` values.
    #[allow(clippy::too_many_arguments)]
    pub fn ordered_step_backward(
        act: &[f32],
        c_state: &[f32],
        c_prev: &[f32],
        (g_h, g_c, g_d): (&[f32], &[f32], &[f32]),
        c: usize,
        h: usize,
        d_pre: &mut [f32],
        d_c_prev: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (w, s_len) = (2 * c + 4 * h, h / c);
        let (tc, rest) = scratch[..h + 4 * c].split_at_mut(h);
        let (ft, rest) = rest.split_at_mut(c);
        let (it, rest) = rest.split_at_mut(c);
        let (d_ft, d_it) = rest.split_at_mut(c);
        for (row, (act, d_pre)) in act
            .chunks_exact(w)
            .zip(d_pre.chunks_exact_mut(w))
            .enumerate()
        {
            let span = row * h..(row + 1) * h;
            let (cs, cp, gh, gc) = (
                &c_state[span.clone()],
                &c_prev[span.clone()],
                &g_h[span.clone()],
                &g_c[span.clone()],
            );
            let dcp = &mut d_c_prev[span];
            tanh(tc, cs);
            let (p, gates) = act.split_at(2 * c);
            let (pf, pi) = p.split_at(c);
            let (i, rest) = gates.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            let (dz, d_gates) = d_pre.split_at_mut(2 * c);
            let (di, rest) = d_gates.split_at_mut(h);
            let (df, rest) = rest.split_at_mut(h);
            let (dg, d_o) = rest.split_at_mut(h);
            let (mut acc_f, mut acc_i) = (0f32, 0f32);
            for k in 0..c {
                acc_f += pf[k];
                acc_i += pi[k];
                ft[k] = acc_f;
                it[k] = 1.0 - acc_i;
            }
            let dd = -g_d[row] / c as f32;
            for k in 0..c {
                let (ftk, itk) = (ft[k], it[k]);
                let om = ftk * itk;
                let (mut sum_f, mut sum_i) = (dd, 0f32);
                for j in k * s_len..(k + 1) * s_len {
                    let t = tc[j];
                    let dc = gc[j] + gh[j] * o[j] * (1.0 - t * t);
                    d_o[j] = gh[j] * t * o[j] * (1.0 - o[j]);
                    let f_hat = f[j] * om + ftk - om;
                    let i_hat = i[j] * om + itk - om;
                    let d_fhat = dc * cp[j];
                    let d_ihat = dc * g[j];
                    di[j] = d_ihat * om * i[j] * (1.0 - i[j]);
                    df[j] = d_fhat * om * f[j] * (1.0 - f[j]);
                    dg[j] = dc * i_hat * (1.0 - g[j] * g[j]);
                    let d_om = d_fhat * (f[j] - 1.0) + d_ihat * (i[j] - 1.0);
                    sum_f += d_fhat + d_om * itk;
                    sum_i += d_ihat + d_om * ftk;
                    dcp[j] = dc * f_hat;
                }
                d_ft[k] = sum_f;
                // `ĩ = 1 − cumsum(p_ĩ)`: the cumsum's gradient is `−∂/∂ĩ`.
                d_it[k] = -sum_i;
            }
            // Through the cumsums (`∂/∂p_j = Σ_{k ≥ j} ∂/∂cumsum_k`), then the softmaxes.
            let (dz_f, dz_i) = dz.split_at_mut(c);
            for (pv, dv, out) in [(pf, &mut *d_ft, dz_f), (pi, &mut *d_it, dz_i)] {
                let mut acc = 0f32;
                for k in (0..c).rev() {
                    acc += dv[k];
                    dv[k] = acc;
                }
                let dot: f32 = pv.iter().zip(dv.iter()).map(|(a, b)| a * b).sum();
                for k in 0..c {
                    out[k] = pv[k] * (dv[k] - dot);
                }
            }
        }
    }
}

/// The CPU backends' entry points: the step loop around the packed products and the row
/// kernels.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, reference, SequenceCell, SequenceGrads, SequenceLayout};
    use crate::host::{dims3, HostTensor};
    use crate::ops::linear::host::gemm_slices;
    use std::ops::Range;

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use crate::lanes;
    use crate::packed::{PackedRhs, Start, TASK_WORK};
    use crate::par::{self, Disjoint};

    /// The examples longest first (a stable sort: equal lengths keep their order), so that the
    /// ones still running at step `s` are the first [`Running::at`]`(s)` rows of the op's
    /// state, and each step computes those rows only (as PyTorch's packed sequences do).
    struct Running {
        /// `order[i]`: the example in row `i` of the op's state.
        order: Vec<usize>,
        /// The length of row `i`'s example.
        sorted: Vec<usize>,
    }

    impl Running {
        fn new(lengths: &[usize], b: usize, t: usize) -> Self {
            let len = |r: usize| lengths.get(r).copied().unwrap_or(t);
            let mut order: Vec<usize> = (0..b).collect();
            order.sort_by_key(|&r| std::cmp::Reverse(len(r)));
            let sorted = order.iter().map(|&r| len(r)).collect();
            Self { order, sorted }
        }

        /// How many rows run step `s`.
        fn at(&self, s: usize) -> usize {
            self.sorted.partition_point(|&l| l > s)
        }

        /// The row tasks for `threads` threads: contiguous ranges of the running order, cut
        /// where their steps (`Σ lengths`, each step costing `step_work` multiply-adds a row)
        /// balance, each of at least `min_rows` rows and about [`TASK_WORK`] multiply-adds;
        /// one range of every row when that leaves a single task.
        fn tasks(&self, threads: usize, min_rows: usize, step_work: usize) -> Vec<Range<usize>> {
            let mut tasks = Vec::new();
            self.cut(
                0..self.sorted.len(),
                threads,
                min_rows.max(1),
                step_work,
                &mut tasks,
            );
            tasks
        }

        fn cut(
            &self,
            rows: Range<usize>,
            parts: usize,
            min_rows: usize,
            step_work: usize,
            tasks: &mut Vec<Range<usize>>,
        ) {
            let steps = &self.sorted[rows.clone()];
            let total: usize = steps.iter().sum();
            let enough = total.saturating_mul(step_work) >= 2 * TASK_WORK;
            if parts < 2 || rows.len() < 2 * min_rows || !enough {
                tasks.push(rows);
                return;
            }
            let left_parts = parts / 2;
            // The first cut whose left side holds its share of the steps, inside the bounds
            // that leave both sides `min_rows` rows.
            let target = total * left_parts / parts;
            let (mut acc, mut mid) = (0, rows.start);
            for &len in steps {
                if acc >= target {
                    break;
                }
                acc += len;
                mid += 1;
            }
            let mid = mid.clamp(rows.start + min_rows, rows.end - min_rows);
            self.cut(rows.start..mid, left_parts, min_rows, step_work, tasks);
            self.cut(
                mid..rows.end,
                parts - left_parts,
                min_rows,
                step_work,
                tasks,
            );
        }

        /// Where each step's rows start in a buffer that holds the running rows of every step,
        /// step after step (the saved gates), and the total row count as the last entry.
        fn step_starts(&self, t: usize) -> Vec<usize> {
            let mut starts = Vec::with_capacity(t + 1);
            let mut at = 0;
            for s in 0..t {
                starts.push(at);
                at += self.at(s);
            }
            starts.push(at);
            starts
        }

        /// Copies step `s`'s `width`-wide row of each example in `order` (rows of the running
        /// order) from the `[b, t, width]` buffer `src` into the first rows of `dst`.
        fn gather(order: &[usize], s: usize, t: usize, width: usize, src: &[f32], dst: &mut [f32]) {
            for (i, &r) in order.iter().enumerate() {
                let at = (r * t + s) * width;
                dst[i * width..(i + 1) * width].copy_from_slice(&src[at..at + width]);
            }
        }
    }

    /// The CPU kernel on `f32` memory, [`reference::lstm_sequence`] otherwise.
    pub(crate) fn lstm_sequence<B: Backend>(
        x: FloatTensor<B>,
        given: Option<FloatTensor<B>>,
        params: [FloatTensor<B>; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
        keep_gates: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>)
    where
        FloatTensor<B>: HostTensor,
    {
        lstm_sequence_f32(
            &x,
            given.as_ref(),
            &params,
            lengths,
            cell,
            every_c,
            keep_gates,
        )
        .unwrap_or_else(|| {
            reference::lstm_sequence::<B>(x, given, params, lengths, cell, every_c, keep_gates)
        })
    }

    /// Where the op's output keeps each state, as element offsets into its memory.
    struct OutLayout {
        rows: SequenceLayout,
        h: usize,
    }

    impl OutLayout {
        /// The output's shape, `[rows, H]`.
        fn shape(&self) -> [usize; 2] {
            [self.rows.rows(), self.h]
        }

        /// Where `h` of example `e` at step `s` starts.
        fn h_at(&self, e: usize, s: usize) -> usize {
            self.rows.h_row(e, s) * self.h
        }

        /// Where `c` of example `e` at step `s` starts, with `every_c`.
        fn c_at(&self, e: usize, s: usize) -> Option<usize> {
            self.rows.c_row(e, s).map(|row| row * self.h)
        }

        /// Where example `e`'s final `c` starts, without `every_c`.
        fn c_last_at(&self, e: usize) -> Option<usize> {
            self.rows.c_last_row(e).map(|row| row * self.h)
        }

        /// Where example `e`'s distance at step `s` is, for the ordered cells (`r > 0`).
        fn d_at(&self, e: usize, s: usize) -> Option<usize> {
            let rows = &self.rows;
            (rows.r > 0).then(|| (rows.d_start() + e * rows.r) * self.h + s)
        }
    }

    /// One step's row kernel for `cell` over the first rows: [`cpu::lstm_step`] or
    /// [`cpu::ordered_step`] (`dist` holds one value per row; unused for the LSTM).
    #[allow(clippy::too_many_arguments)]
    fn step_rows(
        cell: SequenceCell,
        pre: &[f32],
        c_prev: &[f32],
        h: usize,
        act: &mut [f32],
        h_out: &mut [f32],
        c_out: &mut [f32],
        dist: &mut [f32],
    ) {
        match cell {
            SequenceCell::Lstm => cpu::lstm_step(pre, c_prev, h, act, h_out, c_out),
            SequenceCell::OnLstm { chunks }
            | SequenceCell::FastTrees { chunks }
            | SequenceCell::ConvFastTrees { chunks } => {
                cpu::ordered_step(pre, c_prev, chunks, h, act, h_out, c_out, dist)
            }
        }
    }

    /// Fewest rows a row task of [`lstm_sequence_f32`] gets: with fewer, the products' strips
    /// of six rows are mostly empty, and splitting each product's columns serves better.
    const TASK_ROWS: usize = 24;

    /// The layer over a sequence ([`crate::lstm_sequence`], [`crate::on_lstm_sequence`],
    /// [`crate::fast_trees_sequence`]): per step the running rows' `b + x_t·W + h_{t−1}·U`
    /// (`W` and `U` packed once for the sequence, the bias the start of `x_t·W`'s
    /// accumulators; `U` adds to the last [`SequenceCell::u_width`] columns) into one buffer,
    /// then the cell's fused update. `x_t`'s rows are read where they are when the task's rows
    /// are consecutive examples (all of a batch of equal lengths), else gathered.
    /// Returns the output in its [`OutLayout`] and, with `keep_gates`, the activated gates and
    /// `c` of the running rows only, step after step in the running order (`[Σ lengths,
    /// P + h]`: an ended example's steps take no memory), which only
    /// [`lstm_sequence_backward_f32`] reads.
    ///
    /// # Threads
    /// A row's recurrence reads no other row, so with enough rows ([`Running::tasks`]) each
    /// thread runs the whole sequence for its own range of rows, products and updates serially:
    /// one parallel region per sequence. Split by steps instead, each step was three (the two
    /// products by columns, then the update by rows), each ending in a wait for the slower
    /// thread. With few rows, one task runs every step, splitting each product and update.
    /// The LSTM splits its hidden units instead ([`Units`], [`unit_parts`]). All give the same
    /// bits: a value does not depend on which task computes it.
    fn lstm_sequence_f32<T: HostTensor>(
        x: &T,
        given_pre: Option<&T>,
        [w, bias, u, h0, c0]: &[T; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
        keep_gates: bool,
    ) -> Option<(T, Option<T>)> {
        let (xx, ww, bb, uu) = (x.host()?, w.host()?, bias.host()?, u.host()?);
        let (hh0, cc0) = (h0.host()?, c0.host()?);
        let gg = match given_pre {
            Some(g) => Some(g.host()?),
            None => None,
        };
        let (b, t, d) = dims3(x);
        let h = u.shape()[0];
        let (wd, uw, given) = (cell.width(h), cell.u_width(h), cell.given());
        assert_eq!(
            gg.as_ref().map(|g| g.len()),
            (given > 0).then_some(b * t * given),
            "{cell:?}: the given pre-activations must be [{b}, {t}, {given}]"
        );
        let running = Running::new(lengths, b, t);
        let layout = OutLayout {
            rows: SequenceLayout::new(b, t, h, cell, every_c),
            h,
        };
        let shape = layout.shape();
        let mut out = vec![0f32; shape.iter().product()];
        let starts = running.step_starts(t);
        // Per running row and step: the activated gates, then `c`.
        let sw = wd + h;
        let mut saved = if keep_gates {
            vec![0f32; starts[t] * sw]
        } else {
            Vec::new()
        };
        let threads = if par::parallel() {
            rayon::current_num_threads()
        } else {
            1
        };
        let seq = Sequence {
            xx: &xx,
            hh0: &hh0,
            cc0: &cc0,
            running: &running,
            starts: &starts,
            layout: &layout,
            dims: (t, d, h),
            keep_gates,
        };
        let parts = unit_parts(cell, threads, starts[t], d, h);
        if parts > 1 {
            let mut cut: Vec<Part> = (0..parts)
                .map(|k| Part::new(k * h / parts..(k + 1) * h / parts, &bb, d, h))
                .collect();
            // The weights are read cold (6 MiB for the in256 LSTM): packing them took 5% of
            // its evaluation on one thread, so the parts pack in parallel.
            par::items(
                &mut cut,
                &|part: &Part| (d + h) * 4 * part.units.len(),
                &|parts: &mut [Part]| parts.iter_mut().for_each(|part| part.pack(&ww, &uu, h)),
            );
            let units = Units {
                seq,
                parts: cut,
                progress: (0..t).map(|_| Progress::default()).collect(),
                failed: AtomicBool::new(false),
                in_place: Sequence::consecutive(&running.order),
                h0_zero: all_zero(&hh0),
            };
            // Every part's state and scratch allocated here, on the calling thread (as for
            // the row tasks, below).
            let mut work = vec![0f32; parts * units.part_work(b)];
            // `h` of the step before and of the step being computed, alternately: a part
            // writes its units of `h_t` while another still reads all of `h_{t−1}`.
            let mut h_state = vec![0f32; 2 * b * h];
            for (i, &r) in running.order.iter().enumerate() {
                h_state[i * h..(i + 1) * h].copy_from_slice(&hh0[r * h..(r + 1) * h]);
            }
            {
                let bufs = UnitBuffers {
                    work: Disjoint::new(&mut work),
                    h_state: Disjoint::new(&mut h_state),
                    out: Disjoint::new(&mut out),
                    saved: Disjoint::new(&mut saved),
                };
                let workers: Vec<usize> = (0..threads.min(parts)).collect();
                par::each(&workers, &|_| units.work(&bufs));
            }
            let saved = keep_gates.then(|| T::from_f32(saved, Shape::new([starts[t], sw])));
            return Some((T::from_f32(out, Shape::new(shape)), saved));
        }
        let task = Forward {
            seq,
            gg: gg.as_deref(),
            bb: &bb,
            // `W` writes `pre`'s columns after the given ones.
            w_packed: PackedRhs::new(&ww, d, wd - given, (wd - given, 1)),
            u_packed: PackedRhs::new(&uu, h, uw, (uw, 1)),
            cell,
        };
        let tasks = running.tasks(threads, TASK_ROWS, (d + h) * wd);
        let split_steps = tasks.len() == 1 && par::parallel();
        // Every task's state and scratch, allocated here on the calling thread: glibc gives
        // each thread its own arena, and the tuned allocator trims none (`arbor_train::alloc`),
        // so buffers allocated on rayon's worker stay in its arena's resident pages; allocated
        // there, the in128 LSTM's training peak was 4.5 MB higher.
        let mut work = vec![0f32; b * Forward::row_work(d, h, wd)];
        let (out_rows, saved_rows) = (Disjoint::new(&mut out), Disjoint::new(&mut saved));
        let work_rows = Disjoint::new(&mut work);
        par::each(&tasks, &|rows| {
            task.run(rows, split_steps, &work_rows, &out_rows, &saved_rows)
        });
        let saved = keep_gates.then(|| T::from_f32(saved, Shape::new([starts[t], sw])));
        Some((T::from_f32(out, Shape::new(shape)), saved))
    }

    /// What both ways of running the layer ([`Forward`]'s row tasks, [`Units`]' parts) read:
    /// the input, the initial state, the running order and where the outputs go.
    struct Sequence<'a> {
        xx: &'a [f32],
        hh0: &'a [f32],
        cc0: &'a [f32],
        running: &'a Running,
        /// [`Running::step_starts`]: each step's first saved row.
        starts: &'a [usize],
        layout: &'a OutLayout,
        /// `(t, d, h)`: steps, input width, hidden width.
        dims: (usize, usize, usize),
        keep_gates: bool,
    }

    impl Sequence<'_> {
        /// Whether the examples `order` are consecutive, so that their rows of `x` at one step
        /// are a constant stride apart and [`Sequence::inputs`] reads them in place.
        fn consecutive(order: &[usize]) -> bool {
            order.windows(2).all(|w| w[1] == w[0] + 1)
        }

        /// Step `s`'s input rows of the first `n` examples of `order` and their strides: read
        /// in place when the examples are `consecutive`, else gathered into `xs`.
        fn inputs<'b>(
            &'b self,
            order: &[usize],
            consecutive: bool,
            s: usize,
            n: usize,
            xs: &'b mut [f32],
        ) -> (&'b [f32], (usize, usize)) {
            let (t, d, _) = self.dims;
            match order.first() {
                Some(&first) if consecutive => (&self.xx[(first * t + s) * d..], (t * d, 1)),
                _ => {
                    Running::gather(&order[..n], s, t, d, self.xx, xs);
                    (xs, (d, 1))
                }
            }
        }
    }

    /// What every row task of [`lstm_sequence_f32`] reads.
    struct Forward<'a> {
        seq: Sequence<'a>,
        gg: Option<&'a [f32]>,
        bb: &'a [f32],
        w_packed: PackedRhs,
        u_packed: PackedRhs,
        cell: SequenceCell,
    }

    impl Forward<'_> {
        /// Scratch values a row needs: `h`, `c`, the distance, `x_t` and the pre-activations.
        fn row_work(d: usize, h: usize, wd: usize) -> usize {
            2 * h + 1 + d + wd
        }

        /// The whole sequence for the rows `rows` of the running order: their output into
        /// `out`, and with `keep_gates` their gates and `c` into `saved`, with their share of
        /// `work` ([`Forward::row_work`] values a row) as state and scratch. With `split_steps`
        /// each step's products and update run on rayon's pool, else on this thread.
        fn run(
            &self,
            rows: Range<usize>,
            split_steps: bool,
            work: &Disjoint,
            out: &Disjoint,
            saved: &Disjoint,
        ) {
            let (t, d, h) = self.seq.dims;
            let (cell, keep_gates, layout) = (self.cell, self.seq.keep_gates, self.seq.layout);
            let (wd, uw, given) = (cell.width(h), cell.u_width(h), cell.given());
            let sw = wd + h;
            let order = &self.seq.running.order[rows.clone()];
            let m = order.len();
            // This task's rows running step `s`: a prefix of its range, as the running rows
            // are a prefix of the order.
            let running_at =
                |s: usize| self.seq.running.at(s).clamp(rows.start, rows.end) - rows.start;
            let per_row = Self::row_work(d, h, wd);
            // SAFETY: this task's rows' share of `work`, which no other task's range reaches.
            let work = unsafe { work.slice(rows.start * per_row, m * per_row) };
            let (hs, work) = work.split_at_mut(m * h);
            let (cs, work) = work.split_at_mut(m * h);
            let (dist, work) = work.split_at_mut(m);
            let (xs, pre) = work.split_at_mut(m * d);
            // The state in the running order.
            for (i, &r) in order.iter().enumerate() {
                hs[i * h..(i + 1) * h].copy_from_slice(&self.seq.hh0[r * h..(r + 1) * h]);
                cs[i * h..(i + 1) * h].copy_from_slice(&self.seq.cc0[r * h..(r + 1) * h]);
            }
            // Row `i`'s given pre-activations (`ConvFastTrees`' master gates) before the
            // products of step `s`, which write the columns after them.
            let prefill = |row: &mut [f32], i: usize, s: usize| {
                if let Some(gg) = self.gg {
                    let at = (order[i] * t + s) * given;
                    row[..given].copy_from_slice(&gg[at..at + given]);
                }
            };
            // The task's examples are consecutive (`x`'s rows of one step a constant stride
            // apart), so the input product reads them in place instead of gathering them.
            let in_place = Sequence::consecutive(order);
            for (i, row) in pre[..running_at(0) * wd].chunks_exact_mut(wd).enumerate() {
                prefill(row, i, 0);
            }
            for s in 0..t {
                let n = running_at(s);
                let n_next = if s + 1 < t { running_at(s + 1) } else { 0 };
                let (x_rows, x_strides) = self.seq.inputs(order, in_place, s, n, xs);
                let w_pre = &mut pre[given..];
                let bias = Start::Row(self.bb);
                self.w_packed
                    .product_from(split_steps, n, w_pre, wd, bias, x_rows, x_strides);
                let u_pre = &mut pre[wd - uw..];
                self.u_packed
                    .product_on(split_steps, n, u_pre, wd, true, hs, (h, 1));
                // The running rows: the cell's update from `pre` and the state, into the state
                // itself (`hs` was read by the product above; each row's `c` is read before it
                // is overwritten), the gates and `c` into the saved rows, and the given
                // pre-activations of the next step written into `pre`'s row.
                let (acts, aw): (&mut [f32], usize) = if keep_gates && n > 0 {
                    // SAFETY: step `s`'s saved rows of this task's running rows, which no
                    // other task's range reaches.
                    let at = (self.seq.starts[s] + rows.start) * sw;
                    (unsafe { saved.slice(at, n * sw) }, sw)
                } else {
                    (&mut [], 0)
                };
                let update = |range: Range<usize>, o: &mut [&mut [f32]]| {
                    let [pre, hs, cs, dist, acts] = o else {
                        unreachable!("five outputs")
                    };
                    let mut c_prev = vec![0f32; h];
                    let mut scratch = if keep_gates {
                        Vec::new()
                    } else {
                        vec![0f32; wd]
                    };
                    for (k, i) in range.enumerate() {
                        let row = k * h..(k + 1) * h;
                        let pre_row = &mut pre[k * wd..(k + 1) * wd];
                        let act_row = if keep_gates {
                            &mut acts[k * aw..(k + 1) * aw]
                        } else {
                            &mut scratch[..]
                        };
                        c_prev.copy_from_slice(&cs[row.clone()]);
                        let (act, c_saved) = act_row.split_at_mut(wd);
                        step_rows(
                            cell,
                            pre_row,
                            &c_prev,
                            h,
                            act,
                            &mut hs[row.clone()],
                            &mut cs[row.clone()],
                            &mut dist[k..k + 1],
                        );
                        if keep_gates {
                            c_saved.copy_from_slice(&cs[row]);
                        }
                        if i < n_next {
                            prefill(pre_row, i, s + 1);
                        }
                    }
                };
                let outs: [&mut [f32]; 5] = [
                    &mut pre[..n * wd],
                    &mut hs[..n * h],
                    &mut cs[..n * h],
                    &mut dist[..n],
                    acts,
                ];
                if split_steps {
                    let widths = [wd, h, h, 1, aw];
                    par::rows(n, 12 * h, outs.into_iter().zip(widths).collect(), &update);
                } else {
                    update(0..n, &mut { outs });
                }
                // Every row of the task, ended ones included (they keep their last state).
                for (i, &r) in order.iter().enumerate() {
                    // SAFETY: example `r`'s places in the output, which belong to this task.
                    unsafe { out.slice(layout.h_at(r, s), h) }
                        .copy_from_slice(&hs[i * h..(i + 1) * h]);
                    if let Some(at) = layout.d_at(r, s).filter(|_| i < n) {
                        // An ended example's distance stays 0.
                        let slot = unsafe { out.slice(at, 1) };
                        slot[0] = dist[i];
                    }
                    if let Some(at) = layout.c_at(r, s) {
                        unsafe { out.slice(at, h) }.copy_from_slice(&cs[i * h..(i + 1) * h]);
                    }
                }
            }
            for (i, &r) in order.iter().enumerate() {
                if let Some(at) = layout.c_last_at(r) {
                    // SAFETY: as above.
                    unsafe { out.slice(at, h) }.copy_from_slice(&cs[i * h..(i + 1) * h]);
                }
            }
        }
    }

    /// Whether an initial state is all zeros: then the first step's products by it are zeros,
    /// which the forward's parts ([`Units::step`]) and the backward's `dU` leave out.
    fn all_zero(state: &[f32]) -> bool {
        state.iter().all(|&v| v == 0.0)
    }

    /// Fewest hidden units a part of [`Units`] gets.
    const PART_UNITS: usize = 16;

    /// How many parts of its hidden units [`lstm_sequence_f32`] cuts `cell`'s layer into
    /// ([`Units`]) for `threads` threads, `steps` row-steps in all (`Σ lengths`); 1 for the
    /// row tasks ([`Forward`]) instead.
    fn unit_parts(cell: SequenceCell, threads: usize, steps: usize, d: usize, h: usize) -> usize {
        match cell {
            SequenceCell::Lstm => {
                let work = steps.saturating_mul((d + h) * 4 * h);
                if threads > 1 && work >= 2 * TASK_WORK {
                    threads.min(h / PART_UNITS).max(1)
                } else {
                    1
                }
            }
            // Their master gates are cumulative softmaxes over the chunks of the whole row:
            // a part of the units would need every master-gate column, so they keep the row
            // tasks.
            SequenceCell::OnLstm { .. }
            | SequenceCell::FastTrees { .. }
            | SequenceCell::ConvFastTrees { .. } => 1,
        }
    }

    /// One part of the LSTM's hidden units for [`Units`]: its columns of `W`, `U` and `b`,
    /// gate after gate (`[i, f, g, o]` of its units only), so that its pre-activations are
    /// all its units' update reads.
    struct Part {
        units: Range<usize>,
        /// `[d, 4·units]`.
        w: PackedRhs,
        /// `[h, 4·units]`.
        u: PackedRhs,
        /// `4·units` values.
        bias: Vec<f32>,
        /// The layer's columns the part computes: its units of each gate, gate after gate.
        columns: Vec<usize>,
        /// Whether the part's `U` is finite (set by [`Part::pack`]): then `0·U` is zero, and
        /// a zero initial state's product is left out ([`Units::step`]).
        u_finite: bool,
    }

    impl Part {
        /// The part of `units` of the layer with `b` `[4h]`, its weights allocated (zeros)
        /// for [`Part::pack`]: on the calling thread, like the op's other buffers.
        fn new(units: Range<usize>, bias: &[f32], d: usize, h: usize) -> Self {
            let columns: Vec<usize> = (0..4)
                .flat_map(|gate| gate * h + units.start..gate * h + units.end)
                .collect();
            Self {
                w: PackedRhs::zeros(d, columns.len()),
                u: PackedRhs::zeros(h, columns.len()),
                bias: columns.iter().map(|&col| bias[col]).collect(),
                columns,
                units,
                u_finite: false,
            }
        }

        /// Packs the part's columns of `W` `[d, 4h]` and `U` `[h, 4h]`.
        fn pack(&mut self, w: &[f32], u: &[f32], h: usize) {
            self.w.pack_columns(w, 4 * h, &self.columns);
            self.u.pack_columns(u, 4 * h, &self.columns);
            self.u_finite = self.u.all_finite();
        }
    }

    /// One step's progress in [`Units`]: parts handed out, parts finished.
    #[derive(Default)]
    struct Progress {
        claimed: AtomicUsize,
        done: AtomicUsize,
    }

    /// Sets its flag when dropped by a panic: a worker whose part panicked tells the others
    /// to stop waiting for it.
    struct OnUnwind<'a>(&'a AtomicBool);

    impl Drop for OnUnwind<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.store(true, Ordering::Release);
            }
        }
    }

    /// The buffers [`Units`]' workers share: the parts' state and scratch, `h` of two steps
    /// (the one read, the one written), the output and the saved gates.
    struct UnitBuffers<'a> {
        work: Disjoint<'a>,
        h_state: Disjoint<'a>,
        out: Disjoint<'a>,
        saved: Disjoint<'a>,
    }

    /// The LSTM layer over a sequence, its hidden units cut into parts ([`unit_parts`]): at
    /// every step each part computes its columns of the products for every running row and
    /// then its units' update, which reads no other part's columns. So a step is one parallel
    /// region ending in one wait (the next step's product reads all of `h_t`), and each part's
    /// weights are a fraction of the layer's: with two parts each thread streams half of `W`
    /// and `U` a step, where a row task streams all of them.
    ///
    /// Parts are claimed, not assigned: every worker claims the next unclaimed part of the
    /// step, and waits for the step's parts to finish only when none is left. A part never
    /// waits, so however few of the workers rayon starts (one, when the pool is busy), the
    /// ones that run finish every step. Same bits as the row tasks: each element's sums run in
    /// the same order.
    struct Units<'a> {
        seq: Sequence<'a>,
        parts: Vec<Part>,
        progress: Vec<Progress>,
        /// Set when a part panicked: the workers stop.
        failed: AtomicBool,
        /// [`Sequence::consecutive`] of the whole running order.
        in_place: bool,
        /// Whether the initial `h` is all zeros.
        h0_zero: bool,
    }

    impl Units<'_> {
        /// The most units a part has.
        fn part_units(&self) -> usize {
            self.parts.iter().map(|p| p.units.len()).max().unwrap_or(0)
        }

        /// Scratch values one part needs for `b` rows: each row's `c`, pre-activations and
        /// (gathered) input, and one row's activated gates and `c_{t−1}`.
        fn part_work(&self, b: usize) -> usize {
            let (_, d, _) = self.seq.dims;
            let hk = self.part_units();
            b * (5 * hk + d) + 5 * hk
        }

        /// A worker: claims parts step after step until every step is done (or a part
        /// panicked).
        fn work(&self, bufs: &UnitBuffers) {
            let (t, ..) = self.seq.dims;
            let parts = self.parts.len();
            for s in 0..t {
                if s > 0 && !self.wait(s - 1) {
                    return;
                }
                let progress = &self.progress[s];
                loop {
                    let k = progress.claimed.fetch_add(1, Ordering::Relaxed);
                    if k >= parts {
                        break;
                    }
                    let unwind = OnUnwind(&self.failed);
                    self.step(k, s, bufs);
                    drop(unwind);
                    progress.done.fetch_add(1, Ordering::Release);
                }
            }
        }

        /// Waits until every part of step `s` is done: false when a part panicked instead.
        /// Spins (a part of a step is tens of microseconds or more), then yields.
        fn wait(&self, s: usize) -> bool {
            let parts = self.parts.len();
            let mut spins = 0u32;
            while self.progress[s].done.load(Ordering::Acquire) < parts {
                if self.failed.load(Ordering::Acquire) {
                    return false;
                }
                if spins < 1 << 12 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            true
        }

        /// Part `k` of step `s`: its columns of `b + x_t·W + h_{t−1}·U` for the running rows,
        /// its units' update into `h_t`, its `c` state and the saved gates, and its units of
        /// every row's output.
        fn step(&self, k: usize, s: usize, bufs: &UnitBuffers) {
            let (t, d, h) = self.seq.dims;
            let (layout, order) = (self.seq.layout, &self.seq.running.order);
            let b = order.len();
            let part = &self.parts[k];
            let (u0, hk) = (part.units.start, part.units.len());
            let (hm, pw) = (self.part_units(), 4 * part.units.len());
            let n = self.seq.running.at(s);
            let per_part = self.part_work(b);
            // SAFETY: part `k`'s share of `work`, which only the worker running part `k` of a
            // step touches, one step after another (the waits order them).
            let work = unsafe { bufs.work.slice(k * per_part, per_part) };
            let (cs, work) = work.split_at_mut(b * hm);
            let (pre, work) = work.split_at_mut(b * 4 * hm);
            let (xs, work) = work.split_at_mut(b * d);
            let (act, c_prev) = work.split_at_mut(4 * hm);
            let (cs, act, c_prev) = (&mut cs[..b * hk], &mut act[..pw], &mut c_prev[..hk]);
            if s == 0 {
                for (i, &r) in order.iter().enumerate() {
                    cs[i * hk..(i + 1) * hk]
                        .copy_from_slice(&self.seq.cc0[r * h + u0..r * h + u0 + hk]);
                }
            }
            let (read, write) = ((s % 2) * b * h, ((s + 1) % 2) * b * h);
            if n > 0 {
                let (x_rows, x_strides) = self.seq.inputs(order, self.in_place, s, n, xs);
                let pre = &mut pre[..n * pw];
                part.w
                    .product_from(false, n, pre, pw, Start::Row(&part.bias), x_rows, x_strides);
                // A zero initial state with a finite `U` adds zeros at the first step (1/25 of
                // the in256 LSTM's products in the bench, where `h_0` is zero); a non-finite
                // `U` makes NaNs there, as the product would.
                if s > 0 || !(self.h0_zero && part.u_finite) {
                    // SAFETY: `h_{t−1}`, which no part writes during step `s`.
                    let h_prev = unsafe { bufs.h_state.read(read, n * h) };
                    part.u.product_on(false, n, pre, pw, true, h_prev, (h, 1));
                }
            }
            for i in 0..n {
                let c = &mut cs[i * hk..(i + 1) * hk];
                c_prev.copy_from_slice(c);
                // SAFETY: this part's units of row `i` of `h_t`: no other part writes them,
                // and no part reads `h_t` before every part of step `s` is done.
                let h_out = unsafe { bufs.h_state.slice(write + i * h + u0, hk) };
                cpu::lstm_step(&pre[i * pw..(i + 1) * pw], c_prev, hk, act, h_out, c);
                if self.seq.keep_gates {
                    // The saved row holds `[i, f, g, o]` of every unit, then `c`.
                    let at = (self.seq.starts[s] + i) * 5 * h;
                    for (gate, values) in act.chunks_exact(hk).enumerate() {
                        // SAFETY: this part's units of step `s`'s saved row `i`.
                        unsafe { bufs.saved.slice(at + gate * h + u0, hk) }.copy_from_slice(values);
                    }
                    unsafe { bufs.saved.slice(at + 4 * h + u0, hk) }.copy_from_slice(c);
                }
            }
            // This part's units of every row's output, ended rows included (they keep their
            // last state).
            for (i, &r) in order.iter().enumerate() {
                // SAFETY: this part's units of example `r`'s places in the output (and of
                // `h_t`, written above), which no other part touches.
                let dst = unsafe { bufs.out.slice(layout.h_at(r, s) + u0, hk) };
                let src = if i < n {
                    unsafe { bufs.h_state.read(write + i * h + u0, hk) }
                } else if s == 0 {
                    &self.seq.hh0[r * h + u0..r * h + u0 + hk]
                } else {
                    unsafe { bufs.out.read(layout.h_at(r, s - 1) + u0, hk) }
                };
                dst.copy_from_slice(src);
                let c = &cs[i * hk..(i + 1) * hk];
                if let Some(at) = layout.c_at(r, s) {
                    unsafe { bufs.out.slice(at + u0, hk) }.copy_from_slice(c);
                }
                if s + 1 == t {
                    if let Some(at) = layout.c_last_at(r) {
                        unsafe { bufs.out.slice(at + u0, hk) }.copy_from_slice(c);
                    }
                }
            }
        }
    }

    /// The CPU kernel on `f32` memory, [`reference::lstm_sequence_backward`] otherwise.
    pub(crate) fn lstm_sequence_backward<B: Backend>(
        x: FloatTensor<B>,
        params: [FloatTensor<B>; 4],
        saved: FloatTensor<B>,
        lengths: &[usize],
        cell: SequenceCell,
        grad: FloatTensor<B>,
    ) -> SequenceGrads<B>
    where
        FloatTensor<B>: HostTensor,
    {
        match lstm_sequence_backward_f32(&x, &params, &saved, lengths, cell, &grad) {
            Some((inputs, given)) => SequenceGrads { inputs, given },
            None => reference::lstm_sequence_backward::<B>(x, params, saved, lengths, cell, grad),
        }
    }

    /// The backward row kernel for `cell` ([`cpu::lstm_step_backward`],
    /// [`cpu::ordered_step_backward`]); `g_d` is the distances' gradient, one per row (unused
    /// for the LSTM); `scratch` holds `h + 4·chunks` values.
    #[allow(clippy::too_many_arguments)]
    fn step_backward_rows(
        cell: SequenceCell,
        act: &[f32],
        c: &[f32],
        c_prev: &[f32],
        (g_h, g_c, g_d): (&[f32], &[f32], &[f32]),
        h: usize,
        d_pre: &mut [f32],
        d_c_prev: &mut [f32],
        scratch: &mut [f32],
    ) {
        match cell {
            SequenceCell::Lstm => {
                cpu::lstm_step_backward(act, c, c_prev, g_h, g_c, h, d_pre, d_c_prev, scratch)
            }
            SequenceCell::OnLstm { chunks }
            | SequenceCell::FastTrees { chunks }
            | SequenceCell::ConvFastTrees { chunks } => cpu::ordered_step_backward(
                act,
                c,
                c_prev,
                (g_h, g_c, g_d),
                chunks,
                h,
                d_pre,
                d_c_prev,
                scratch,
            ),
        }
    }

    /// The gradients of [`lstm_sequence_f32`] with respect to `x`, `W`, `b`, `U`, `h0` and
    /// `c0`, from the saved gates and `c`: backpropagation through time on the rows still
    /// running at each step ([`Running`]). Each step's `h_{t−1}` (for `dU`) is recomputed as
    /// the forward computed it, `σ(o)·tanh(c)` from the saved values of the step before, so the
    /// op's output need not stay alive for this pass. Per step: the pre-activations' gradient
    /// `δ_t`, `dx_t = δ_t·Wᵀ` and `dh_{t−1} += δ_t·Uᵀ` (`Wᵀ`, `Uᵀ` packed once; `U` reads the
    /// last [`SequenceCell::u_width`] columns of `δ_t`), and `dW += x_tᵀ·δ_t`,
    /// `dU += h_{t−1}ᵀ·δ_t`, `db += Σ δ_t`.
    fn lstm_sequence_backward_f32<T: HostTensor>(
        x: &T,
        [w, u, h0, c0]: &[T; 4],
        saved: &T,
        lengths: &[usize],
        cell: SequenceCell,
        grad: &T,
    ) -> Option<([T; 6], Option<T>)> {
        let (xx, ww, uu) = (x.host()?, w.host()?, u.host()?);
        let (hh0, cc0) = (h0.host()?, c0.host()?);
        // What `lstm_sequence_f32` saves (running rows only); any other layout
        // came from the plain-op forward, whose backward reads it.
        if saved.shape().num_dims() != 2 {
            return None;
        }
        let (gg, dd) = (saved.host()?, grad.host()?);
        let (b, t, d) = dims3(x);
        let h = u.shape()[0];
        let (wd, uw, given) = (cell.width(h), cell.u_width(h), cell.given());
        // `W`'s rows and columns: the input's and `pre`'s after the given ones.
        let (dw_rows, dw_cols) = (d, wd - given);
        let layout = OutLayout {
            rows: SequenceLayout::of_output(b, t, h, cell, grad.shape()[0]),
            h,
        };
        let sw = wd + h;
        let running = Running::new(lengths, b, t);
        let order = &running.order;
        let starts = running.step_starts(t);
        let mut d_x = vec![0f32; b * t * d];
        let mut d_given = vec![0f32; b * t * given];
        let (mut d_w, mut d_u, mut d_b) = (
            vec![0f32; dw_rows * dw_cols],
            vec![0f32; h * uw],
            vec![0f32; dw_cols],
        );
        // The gradients reaching each row's state, in the running order; the final `c`'s
        // comes in as the output's last row.
        let (mut dh, mut dc) = (vec![0f32; b * h], vec![0f32; b * h]);
        for (i, &r) in order.iter().enumerate() {
            if let Some(at) = layout.c_last_at(r) {
                dc[i * h..(i + 1) * h].copy_from_slice(&dd[at..at + h]);
            }
        }
        let mut h_before = vec![0f32; b * h];
        let mut xs = vec![0f32; b * d];
        let mut dxs = vec![0f32; b * d];
        let mut d_pre = vec![0f32; b * wd];
        // `Wᵀ` and `Uᵀ` (row-major `[·, wd]` and `[·, uw]`, so their transposes have strides
        // (1, wd) and (1, uw)).
        let wt_packed = PackedRhs::new(&ww, dw_cols, dw_rows, (1, dw_cols));
        let ut_packed = PackedRhs::new(&uu, uw, h, (1, uw));
        let h0_zero = all_zero(&hh0);
        for s in (0..t).rev() {
            let n = running.at(s);
            // Ended rows: the gradients pass to the state before this step unchanged, plus
            // what the output adds at this step.
            for (i, &r) in order.iter().enumerate().skip(n) {
                let row = i * h..(i + 1) * h;
                let at = layout.h_at(r, s);
                for (acc, &v) in dh[row.clone()].iter_mut().zip(&dd[at..at + h]) {
                    *acc += v;
                }
                if let Some(at) = layout.c_at(r, s) {
                    for (acc, &v) in dc[row].iter_mut().zip(&dd[at..at + h]) {
                        *acc += v;
                    }
                }
            }
            Running::gather(&order[..n], s, t, d, &xx, &mut xs);
            // The running rows, in parallel: each reads the gradients reaching its `h` and `c`
            // from the output and `dh`, `dc`, its gates and `c` straight from the saved rows,
            // recomputes `h_{t−1}` (for `dU`), and leaves in `dc` the gradient of `c_{t−1}` and
            // in `dh` zeros, to which `δ_t·Uᵀ` is added below.
            let (gg, hh0, cc0, dd, layout) = (&gg, &hh0, &cc0, &dd, &layout);
            par::rows(
                n,
                20 * h,
                vec![
                    (&mut d_pre[..n * wd], wd),
                    (&mut dh[..n * h], h),
                    (&mut dc[..n * h], h),
                    (&mut h_before[..n * h], h),
                ],
                &|rows, o| {
                    let [dp, dh, dc, hb] = o else {
                        unreachable!("four outputs")
                    };
                    // `g_h`, `g_c`, then the step kernel's scratch.
                    let mut scratch = vec![0f32; 3 * h + 4 * cell.chunks()];
                    let (g, scratch) = scratch.split_at_mut(2 * h);
                    let (g_h, g_c) = g.split_at_mut(h);
                    for (k, i) in rows.enumerate() {
                        let r = order[i];
                        let row = k * h..(k + 1) * h;
                        let at = layout.h_at(r, s);
                        for ((gv, &o), &acc) in
                            g_h.iter_mut().zip(&dd[at..at + h]).zip(&dh[row.clone()])
                        {
                            *gv = o + acc;
                        }
                        match layout.c_at(r, s) {
                            Some(at) => {
                                for ((gv, &o), &acc) in
                                    g_c.iter_mut().zip(&dd[at..at + h]).zip(&dc[row.clone()])
                                {
                                    *gv = o + acc;
                                }
                            }
                            None => g_c.copy_from_slice(&dc[row.clone()]),
                        }
                        let g_d = layout.d_at(r, s).map_or(0.0, |at| dd[at]);
                        let here = (starts[s] + i) * sw + wd;
                        let c_before = if s > 0 {
                            // Running now, so running at `s − 1` too, in the same row.
                            let before = (starts[s - 1] + i) * sw + wd;
                            // `h_{t−1}` as the step before computed it ([`cpu::hidden`] on the
                            // same values: the same bits as its output).
                            cpu::hidden(
                                &mut hb[row.clone()],
                                &gg[before..before + h],
                                &gg[before - h..before],
                            );
                            &gg[before..before + h]
                        } else {
                            hb[row.clone()].copy_from_slice(&hh0[r * h..(r + 1) * h]);
                            &cc0[r * h..(r + 1) * h]
                        };
                        step_backward_rows(
                            cell,
                            &gg[here - wd..here],
                            &gg[here..here + h],
                            c_before,
                            (g_h, g_c, &[g_d]),
                            h,
                            &mut dp[k * wd..(k + 1) * wd],
                            &mut dc[row.clone()],
                            scratch,
                        );
                        dh[row].fill(0.0);
                    }
                },
            );
            if n == 0 {
                continue;
            }
            let dp = &d_pre[..n * wd];
            let dp_u = &dp[wd - uw..];
            // dh_{t−1} += δ_t·Uᵀ and dx_t = δ_t·Wᵀ for the running rows; the given
            // pre-activations' gradient is theirs in `δ_t`.
            ut_packed.product(n, &mut dh, h, true, dp_u, (wd, 1));
            wt_packed.product(n, &mut dxs, d, false, &dp[given..], (wd, 1));
            for (i, &r) in order[..n].iter().enumerate() {
                let at = (r * t + s) * d;
                d_x[at..at + d].copy_from_slice(&dxs[i * d..(i + 1) * d]);
                let at = (r * t + s) * given;
                d_given[at..at + given].copy_from_slice(&dp[i * wd..i * wd + given]);
            }
            // dW += x_tᵀ·δ_t, dU += h_{t−1}ᵀ·δ_t (`[·, n]·[n, ·]`), db += Σ_rows δ_t.
            gemm_slices(
                (dw_rows, dw_cols, n),
                &mut d_w,
                dw_cols,
                true,
                &xs,
                (1, d),
                &dp[given..],
                (wd, 1),
            );
            // `h_{t−1}ᵀ·δ_t` is zero at the first step from a zero initial state, unless `δ_t`
            // is not finite (then the product's NaNs are kept).
            if s > 0 || !h0_zero || !lanes::all_finite(dp_u) {
                gemm_slices(
                    (h, uw, n),
                    &mut d_u,
                    uw,
                    true,
                    &h_before,
                    (1, h),
                    dp_u,
                    (wd, 1),
                );
            }
            for row in dp.chunks_exact(wd) {
                for (acc, &v) in d_b.iter_mut().zip(&row[given..]) {
                    *acc += v;
                }
            }
        }
        // The initial state's gradients back in the examples' order.
        let (mut d_h0, mut d_c0) = (vec![0f32; b * h], vec![0f32; b * h]);
        for (i, &r) in order.iter().enumerate() {
            d_h0[r * h..(r + 1) * h].copy_from_slice(&dh[i * h..(i + 1) * h]);
            d_c0[r * h..(r + 1) * h].copy_from_slice(&dc[i * h..(i + 1) * h]);
        }
        Some((
            [
                T::from_f32(d_x, Shape::new([b, t, d])),
                T::from_f32(d_w, Shape::new([dw_rows, dw_cols])),
                T::from_f32(d_b, Shape::new([dw_cols])),
                T::from_f32(d_u, Shape::new([h, uw])),
                T::from_f32(d_h0, Shape::new([b, h])),
                T::from_f32(d_c0, Shape::new([b, h])),
            ],
            (given > 0).then(|| T::from_f32(d_given, Shape::new([b, t, given]))),
        ))
    }

    #[cfg(test)]
    mod tests {
        use super::{Running, TASK_WORK};

        /// The tasks cover the running order once, in order; each has the fewest rows asked
        /// for; the steps split near evenly between two threads, ragged lengths included; and
        /// small work, few rows or one thread give one task of every row.
        #[test]
        fn row_tasks_cover_the_rows_and_balance_their_steps() {
            let big = TASK_WORK;
            let ragged: Vec<usize> = (0..100).map(|r| (r * 37) % 41).collect();
            for (lengths, threads, want) in [
                (vec![30; 128], 2, 2),
                (vec![30; 128], 4, 4),
                (vec![30; 128], 3, 3),
                (ragged.clone(), 2, 2),
                (vec![30; 128], 1, 1),
                (vec![30; 40], 2, 1),
                (vec![0; 128], 2, 1),
                (vec![], 2, 1),
            ] {
                let t = lengths.iter().copied().max().unwrap_or(0);
                let running = Running::new(&lengths, lengths.len(), t);
                let tasks = running.tasks(threads, 24, big);
                let what = format!("{} rows, {threads} threads", lengths.len());
                assert_eq!(tasks.len(), want, "{what}: {tasks:?}");
                assert_eq!(tasks[0].start, 0, "{what}");
                assert_eq!(tasks.last().unwrap().end, lengths.len(), "{what}");
                for pair in tasks.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start, "{what}");
                }
                if want > 1 {
                    assert!(tasks.iter().all(|r| r.len() >= 24), "{what}: {tasks:?}");
                    let steps: Vec<usize> = tasks
                        .iter()
                        .map(|r| running.sorted[r.clone()].iter().sum())
                        .collect();
                    let (lo, hi) = (steps.iter().min().unwrap(), steps.iter().max().unwrap());
                    let longest = running.sorted.first().copied().unwrap_or(0);
                    assert!(hi - lo <= 2 * longest, "{what}: steps {steps:?}");
                }
            }
            // Too little work for two tasks of TASK_WORK each.
            let running = Running::new(&[2; 64], 64, 2);
            assert_eq!(running.tasks(2, 24, 1).len(), 1);
        }
    }
}

/// One autodiff node for the whole sequence.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use super::{SequenceCell, SequenceGrads};
    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// The backward step of `lstm_sequence` (parents `x`, `w`, `b`, `u`, `h0`, `c0`):
    /// backpropagation through time from the saved activated gates and `c`.
    #[derive(Debug)]
    struct LstmSequence;

    /// As [`LstmSequence`], with the given pre-activations (Conv FastTrees' master gates) as a
    /// seventh parent.
    #[derive(Debug)]
    struct LstmSequenceGiven;

    /// `x`, then `w`, `u`, `h0`, `c0`, what the forward saved (the activated gates and `c`),
    /// the lengths and the cell. Not the output: whatever reads it keeps it alive as long as
    /// it needs it, and no longer; nor the given pre-activations, whose gradient does not
    /// read them.
    type LstmSequenceState<B> = (
        FloatTensor<B>,
        [FloatTensor<B>; 4],
        FloatTensor<B>,
        Vec<usize>,
        SequenceCell,
    );

    /// The op's backward pass from its state.
    fn grads<B: ArborBackend>(
        (x, params, saved, lengths, cell): LstmSequenceState<B>,
        grad: FloatTensor<B>,
    ) -> SequenceGrads<B> {
        B::lstm_sequence_backward(x, params, saved, &lengths, cell, grad)
    }

    impl<B: ArborBackend> Backward<B, 6> for LstmSequence {
        type State = LstmSequenceState<B>;

        fn backward(self, ops: Ops<Self::State, 6>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 6, _>(ops, grads, |state, grad| {
                self::grads::<B>(state, grad).inputs
            });
        }
    }

    impl<B: ArborBackend> Backward<B, 7> for LstmSequenceGiven {
        type State = LstmSequenceState<B>;

        fn backward(self, ops: Ops<Self::State, 7>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 7, _>(ops, grads, |state, grad| {
                let SequenceGrads { inputs, given } = self::grads::<B>(state, grad);
                // The backward of a cell with given columns returns their gradient.
                inputs.into_iter().chain(given)
            });
        }
    }

    /// `lstm_sequence` as one node that keeps the activated gates (the inner backend's
    /// `lstm_sequence` without them when nothing is tracked); the given pre-activations, when
    /// the cell has them, are the node's seventh parent.
    pub(crate) fn lstm_sequence_tracked<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        given: Option<FloatTensor<Autodiff<B, C>>>,
        [w, bias, u, h0, c0]: [FloatTensor<Autodiff<B, C>>; 5],
        lengths: &[usize],
        cell: SequenceCell,
        every_c: bool,
    ) -> FloatTensor<Autodiff<B, C>> {
        let nodes = [
            x.node.clone(),
            w.node.clone(),
            bias.node.clone(),
            u.node.clone(),
            h0.node.clone(),
            c0.node.clone(),
        ];
        let x = x.primitive;
        let params = [
            w.primitive,
            bias.primitive,
            u.primitive,
            h0.primitive,
            c0.primitive,
        ];
        // The forward on the inner backend, with the state the backward reads when tracked.
        let run = |keep: bool| {
            let (out, gates) = B::lstm_sequence(
                x.clone(),
                given.as_ref().map(|g| g.primitive.clone()),
                params.clone(),
                lengths,
                cell,
                every_c,
                keep,
            );
            let state = keep.then(|| {
                let gates = gates.expect("lstm_sequence keeps the gates when asked");
                let [w, _, u, h0, c0] = params.clone();
                (x.clone(), [w, u, h0, c0], gates, lengths.to_vec(), cell)
            });
            (out, state)
        };
        match &given {
            None => match LstmSequence.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (out, state) = run(true);
                    prep.finish(state.expect("kept"), out)
                }
                OpsKind::UnTracked(prep) => prep.finish(run(false).0),
            },
            Some(g) => {
                let [n0, n1, n2, n3, n4, n5] = nodes;
                let nodes = [n0, n1, n2, n3, n4, n5, g.node.clone()];
                match LstmSequenceGiven
                    .prepare::<C>(nodes)
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => {
                        let (out, state) = run(true);
                        prep.finish(state.expect("kept"), out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(run(false).0),
                }
            }
        }
    }
}
