//! `Autodiff<B>`: each fused op is one graph node whose backward pass is `B`'s fused backward
//! kernel (Burn's custom-backward API).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{TensorMetadata, TensorPrimitive};

use crate::{reference, Activation, ArborBackend, GateLayout};

/// The backward step of `gated_cell` with `N − 1` children.
#[derive(Debug)]
struct GatedCell<const N: usize>;

impl<B: ArborBackend, const N: usize> Backward<B, N> for GatedCell<N> {
    type State = (FloatTensor<B>, Vec<FloatTensor<B>>, GateLayout);

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, N, _>(ops, grads, |(gates, children, layout), grad| {
            let (d_gates, d_children) = B::gated_cell_backward(gates, children, grad, &layout);
            std::iter::once(d_gates).chain(d_children)
        });
    }
}

/// The backward step of `lstm_sequence` (parents `xp`, `u`, `h0`, `c0`): backpropagation
/// through time from the saved output and activated gates.
#[derive(Debug)]
struct LstmSequence;

/// `u`, `h0`, `c0`, the output, the activated gates and the lengths.
type LstmSequenceState<B> = (
    [FloatTensor<B>; 3],
    FloatTensor<B>,
    FloatTensor<B>,
    Vec<usize>,
);

impl<B: ArborBackend> Backward<B, 4> for LstmSequence {
    type State = LstmSequenceState<B>;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 4, _>(ops, grads, |([u, h0, c0], out, gates, lengths), grad| {
            B::lstm_sequence_backward(u, h0, c0, out, gates, &lengths, grad)
        });
    }
}

/// The backward step of `linear` (`N = 3` with a bias, 2 without): `dx = g·wᵀ`,
/// `dw = xᵀ·g`, `db = Σ_rows g`, each computed only for an input that needs it.
#[derive(Debug)]
struct Linear;

impl<B: ArborBackend, const N: usize> Backward<B, N> for Linear {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, w) = ops.state;
        let mut parents = ops.parents.into_iter().map(|p| p.map(|n| n.id));
        product_grads::<B>(&mut parents, grads, x, w, &grad);
        bias_grad::<B>(&mut parents, grads, grad);
    }
}

/// The gradients of a product `input·weight` with output gradient `grad`, for the next two
/// parents (`input`, then `weight`), each only when it is tracked: `grad·weightᵀ` and
/// `inputᵀ·grad`.
fn product_grads<B: ArborBackend>(
    parents: &mut impl Iterator<Item = Option<NodeId>>,
    grads: &mut Gradients,
    input: FloatTensor<B>,
    weight: FloatTensor<B>,
    grad: &FloatTensor<B>,
) {
    if let Some(id) = parents.next().flatten() {
        let d = B::affine(grad.clone(), B::float_swap_dims(weight, 0, 1), None);
        grads.register::<B>(id, d);
    }
    if let Some(id) = parents.next().flatten() {
        let d = B::affine(B::float_swap_dims(input, 0, 1), grad.clone(), None);
        grads.register::<B>(id, d);
    }
}

/// The gradient of a bias added to every row, `Σ_rows grad`, for the next parent when there is
/// one and it is tracked.
fn bias_grad<B: ArborBackend>(
    parents: &mut impl Iterator<Item = Option<NodeId>>,
    grads: &mut Gradients,
    grad: FloatTensor<B>,
) {
    if let Some(id) = parents.next().flatten() {
        let n = grad.shape()[1];
        let db = B::float_reshape(B::float_sum_dim(grad, 0), Shape::new([n]));
        grads.register::<B>(id, db);
    }
}

/// The backward step of `linear_pair` (`N = 5` with a bias, 4 without): `dx = g·wᵀ`,
/// `dw = xᵀ·g`, `dh = g·uᵀ`, `du = hᵀ·g`, `db = Σ_rows g`, each only for an input that
/// needs it.
#[derive(Debug)]
struct LinearPair;

impl<B: ArborBackend, const N: usize> Backward<B, N> for LinearPair {
    type State = [FloatTensor<B>; 4];

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [x, w, h, u] = ops.state;
        // `h·u` covers the last `n_h` columns of the output.
        let (n, nh) = (grad.shape()[1], u.shape()[1]);
        let grad_h = if nh < n {
            Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(grad.clone()))
                .narrow(1, n - nh, nh)
                .into_primitive()
                .tensor()
        } else {
            grad.clone()
        };
        let mut parents = ops.parents.into_iter().map(|p| p.map(|n| n.id));
        product_grads::<B>(&mut parents, grads, x, w, &grad);
        product_grads::<B>(&mut parents, grads, h, u, &grad_h);
        bias_grad::<B>(&mut parents, grads, grad);
    }
}

/// The backward step of `layer_norm` (`N = 3` with `γ` and `β`, 1 without): the input is
/// kept and the statistics recomputed.
#[derive(Debug)]
struct LayerNorm;

impl<B: ArborBackend, const N: usize> Backward<B, N> for LayerNorm {
    type State = (FloatTensor<B>, Option<FloatTensor<B>>, f64);

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, epsilon) = ops.state;
        let (dx, affine) = B::layer_norm_rows_backward(x, gamma, epsilon, grad);
        let mut parents = ops.parents.into_iter();
        if let Some(node) = parents.next().flatten() {
            grads.register::<B>(node.id, dx);
        }
        if let Some((d_gamma, d_beta)) = affine {
            if let Some(node) = parents.next().flatten() {
                grads.register::<B>(node.id, d_gamma);
            }
            if let Some(node) = parents.next().flatten() {
                grads.register::<B>(node.id, d_beta);
            }
        }
    }
}

/// A tensor with no inputs (`zeros`): nothing to propagate.
#[derive(Debug)]
struct Constant;

impl<B: Backend> Backward<B, 0> for Constant {
    type State = ();

    fn backward(self, _: Ops<Self::State, 0>, _: &mut Gradients, _: &mut Checkpointer) {}
}

/// The backward step of `gated_output`.
#[derive(Debug)]
struct GatedOutput;

impl<B: ArborBackend> Backward<B, 2> for GatedOutput {
    type State = (FloatTensor<B>, FloatTensor<B>, GateLayout);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 2, _>(ops, grads, |(gates, c, layout), grad| {
            let (d_gates, d_c) = B::gated_output_backward(gates, c, grad, &layout);
            [d_gates, d_c]
        });
    }
}

/// The backward step of a fused op with four tensor inputs.
#[derive(Debug)]
enum Four {
    /// `select_mix(s, p, l, r)`.
    SelectMix,
    /// `ordered_cell(gates, master_forget, master_input, c_prev)`.
    OrderedCell,
}

impl<B: ArborBackend> Backward<B, 4> for Four {
    type State = [FloatTensor<B>; 4];

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 4, _>(ops, grads, |[a, b, c, d], grad| match self {
            Four::SelectMix => B::select_mix_backward(a, b, c, d, grad),
            Four::OrderedCell => B::ordered_cell_backward(a, b, c, d, grad),
        });
    }
}

fn gated_cell_node<B: ArborBackend, C: CheckpointStrategy, const N: usize>(
    gates: FloatTensor<Autodiff<B, C>>,
    children: Vec<FloatTensor<Autodiff<B, C>>>,
    layout: &GateLayout,
) -> FloatTensor<Autodiff<B, C>> {
    let nodes = std::array::from_fn(|k| match k {
        0 => gates.node.clone(),
        k => children[k - 1].node.clone(),
    });
    let inner: Vec<FloatTensor<B>> = children.iter().map(|c| c.primitive.clone()).collect();
    let out = B::gated_cell(gates.primitive.clone(), inner.clone(), layout);
    match GatedCell::<N>
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((gates.primitive, inner, layout.clone()), out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

impl<B: ArborBackend, C: CheckpointStrategy> ArborBackend for Autodiff<B, C> {
    fn gated_cell(
        gates: FloatTensor<Self>,
        children: Vec<FloatTensor<Self>>,
        layout: &GateLayout,
    ) -> FloatTensor<Self> {
        match children.len() {
            1 => gated_cell_node::<B, C, 2>(gates, children, layout),
            2 => gated_cell_node::<B, C, 3>(gates, children, layout),
            3 => gated_cell_node::<B, C, 4>(gates, children, layout),
            _ => reference::gated_cell::<Self>(gates, children, layout),
        }
    }

    fn gated_output(
        gates: FloatTensor<Self>,
        c: FloatTensor<Self>,
        layout: &GateLayout,
    ) -> FloatTensor<Self> {
        let out = B::gated_output(gates.primitive.clone(), c.primitive.clone(), layout);
        match GatedOutput
            .prepare::<C>([gates.node.clone(), c.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                prep.finish((gates.primitive, c.primitive, layout.clone()), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn ordered_cell(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
        c_prev: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        record::<B, C, _, _>(
            Four::OrderedCell,
            [gates, master_forget, master_input, c_prev],
            |[g, f, i, c]| B::ordered_cell(g, f, i, c),
        )
    }

    fn select_mix(
        s: FloatTensor<Self>,
        parent: FloatTensor<Self>,
        left: FloatTensor<Self>,
        right: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        record::<B, C, _, _>(Four::SelectMix, [s, parent, left, right], |[s, p, l, r]| {
            B::select_mix(s, p, l, r)
        })
    }

    fn select_rows(t: FloatTensor<Self>, rows: &[usize]) -> FloatTensor<Self> {
        let n = t.primitive.shape()[0];
        let out = B::select_rows(t.primitive, rows);
        match SelectRows.prepare::<C>([t.node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((rows.to_vec(), n), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn adjacent_pairs(x: FloatTensor<Self>) -> FloatTensor<Self> {
        unary::<B, C>(Unary::AdjacentPairs, x, B::adjacent_pairs)
    }

    fn activation(x: FloatTensor<Self>, act: Activation) -> FloatTensor<Self> {
        let input = act.backward_from_input().then(|| x.primitive.clone());
        let out = B::activation(x.primitive, act);
        match Activate(act)
            .prepare::<C>([x.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(input.unwrap_or_else(|| out.clone()), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn affine(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let out = B::affine(
            x.primitive.clone(),
            w.primitive.clone(),
            b.as_ref().map(|b| b.primitive.clone()),
        );
        linear_node::<B, C>(x, w, b, out)
    }

    fn affine_given(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
        known: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        // `affine`'s node with the given value: `known`'s own node is not a parent.
        linear_node::<B, C>(x, w, b, known.primitive)
    }

    fn lstm_sequence_tracked(
        xp: FloatTensor<Self>,
        u: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        lengths: &[usize],
    ) -> FloatTensor<Self> {
        let nodes = [
            xp.node.clone(),
            u.node.clone(),
            h0.node.clone(),
            c0.node.clone(),
        ];
        let (xp, u, h0, c0) = (xp.primitive, u.primitive, h0.primitive, c0.primitive);
        match LstmSequence.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, gates) =
                    B::lstm_sequence(xp, u.clone(), h0.clone(), c0.clone(), lengths, true);
                let gates = gates.expect("lstm_sequence keeps the gates when asked");
                let state = ([u, h0, c0], out.clone(), gates, lengths.to_vec());
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lstm_sequence(xp, u, h0, c0, lengths, false).0)
            }
        }
    }

    fn layer_norm_rows(
        x: FloatTensor<Self>,
        affine: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let out = B::layer_norm_rows(
            x.primitive.clone(),
            affine
                .as_ref()
                .map(|(g, b)| (g.primitive.clone(), b.primitive.clone())),
            epsilon,
        );
        match affine {
            Some((g, b)) => match LayerNorm
                .prepare::<C>([x.node, g.node, b.node])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => {
                    prep.finish((x.primitive, Some(g.primitive), epsilon), out)
                }
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
            None => match LayerNorm.prepare::<C>([x.node]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish((x.primitive, None, epsilon), out),
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
        }
    }

    fn affine_pair(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        h: FloatTensor<Self>,
        u: FloatTensor<Self>,
        b: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let out = B::affine_pair(
            x.primitive.clone(),
            w.primitive.clone(),
            h.primitive.clone(),
            u.primitive.clone(),
            b.as_ref().map(|b| b.primitive.clone()),
        );
        let state = [x.primitive, w.primitive, h.primitive, u.primitive];
        match b {
            Some(b) => match LinearPair
                .prepare::<C>([x.node, w.node, h.node, u.node, b.node])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(state, out),
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
            None => match LinearPair
                .prepare::<C>([x.node, w.node, h.node, u.node])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(state, out),
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
        }
    }

    fn contiguous(x: FloatTensor<Self>) -> FloatTensor<Self> {
        unary::<B, C>(Unary::Contiguous, x, B::contiguous)
    }

    fn zeros(shape: Shape, device: &Device<Self>) -> FloatTensor<Self> {
        // A constant: a node with no parents, never tracked.
        Constant
            .prepare::<C>([])
            .compute_bound()
            .stateless(B::zeros(shape, device))
    }

    fn write_rows(
        t: FloatTensor<Self>,
        start: usize,
        rows: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let r = rows.primitive.shape()[0];
        let nodes = [t.node.clone(), rows.node.clone()];
        let out = B::write_rows(t.primitive, start, rows.primitive);
        match WriteRows.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((start, r), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn linear_scan(
        a: FloatTensor<Self>,
        u: FloatTensor<Self>,
        c0: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        record::<B, C, _, _>(Three::LinearScan, [a, u, c0], |[a, u, c0]| {
            B::linear_scan(a, u, c0)
        })
    }

    fn ordered_gates(
        gates: FloatTensor<Self>,
        master_forget: FloatTensor<Self>,
        master_input: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        record::<B, C, _, _>(
            Three::OrderedGates,
            [gates, master_forget, master_input],
            |[g, f, i]| B::ordered_gates(g, f, i),
        )
    }
}

/// The backward step of a one-input op that needs no state.
#[derive(Debug)]
enum Unary {
    /// `adjacent_pairs`: its fused backward kernel.
    AdjacentPairs,
    /// `contiguous`: the gradient, made contiguous too.
    Contiguous,
}

impl<B: ArborBackend> Backward<B, 1> for Unary {
    type State = ();

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 1, _>(ops, grads, |(), grad| {
            [match self {
                Unary::AdjacentPairs => B::adjacent_pairs_backward(grad),
                Unary::Contiguous => B::contiguous(grad),
            }]
        });
    }
}

/// The backward step of `select_rows` (the rows read and the input's row count).
#[derive(Debug)]
struct SelectRows;

impl<B: ArborBackend> Backward<B, 1> for SelectRows {
    type State = (Vec<usize>, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 1, _>(ops, grads, |(rows, n), grad| {
            [B::select_rows_backward(grad, &rows, n)]
        });
    }
}

/// The backward step of `sigmoid`/`tanh` (from the output) and `gelu` (from the input).
#[derive(Debug)]
struct Activate(Activation);

impl<B: ArborBackend> Backward<B, 1> for Activate {
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 1, _>(ops, grads, |y, grad| {
            [B::activation_backward(y, grad, self.0)]
        });
    }
}

/// The backward step of `write_rows(t, start, rows)`: the gradient of `t` is the output's with
/// the written rows zeroed, that of `rows` those rows of it.
#[derive(Debug)]
struct WriteRows;

impl<B: ArborBackend> Backward<B, 2> for WriteRows {
    type State = (usize, usize);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 2, _>(ops, grads, |(start, r), grad| {
            let grad = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(grad));
            let w = grad.dims()[1];
            // The written rows' gradient as a tensor of its own (a slice may be a view sharing
            // the gradient's memory, which would make the zeroing below copy all of it).
            let view = grad.clone().slice([start..start + r, 0..w]);
            let zeros = view.zeros_like();
            let d_rows = B::write_rows(
                zeros.clone().into_primitive().tensor(),
                0,
                view.into_primitive().tensor(),
            );
            let zeros = zeros.into_primitive().tensor();
            let d_t = B::write_rows(grad.into_primitive().tensor(), start, zeros);
            [d_t, d_rows]
        });
    }
}

/// The backward step of a fused op with three tensor inputs.
#[derive(Debug)]
enum Three {
    /// `linear_scan(a, u, c0)`.
    LinearScan,
    /// `ordered_gates(gates, master_forget, master_input)`.
    OrderedGates,
}

impl<B: ArborBackend> Backward<B, 3> for Three {
    type State = [FloatTensor<B>; 3];

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward_with::<B, _, 3, _>(ops, grads, |[a, b, c], grad| match self {
            Three::LinearScan => B::linear_scan_backward(a, b, c, grad),
            Three::OrderedGates => B::ordered_gates_backward(a, b, c, grad),
        });
    }
}

/// Consumes the node's gradient, runs `backward` on the saved state and that gradient, and
/// registers each result with its parent, in order (parents that are not tracked get none).
fn backward_with<B, S, const N: usize, I>(
    ops: Ops<S, N>,
    grads: &mut Gradients,
    backward: impl FnOnce(S, FloatTensor<B>) -> I,
) where
    B: ArborBackend,
    I: IntoIterator<Item = FloatTensor<B>>,
{
    let grad = grads.consume::<B>(&ops.node);
    for (parent, d) in ops.parents.into_iter().zip(backward(ops.state, grad)) {
        if let Some(node) = parent {
            grads.register::<B>(node.id, d);
        }
    }
}

/// Records `out` as the value of `x·w (+ b)`: one `Linear` node whose backward pass is the
/// product's (`affine`, and `affine_given` whose value was computed elsewhere).
fn linear_node<B: ArborBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    w: FloatTensor<Autodiff<B, C>>,
    b: Option<FloatTensor<Autodiff<B, C>>>,
    out: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    let state = (x.primitive, w.primitive);
    match b {
        Some(b) => match Linear
            .prepare::<C>([x.node, w.node, b.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        },
        None => match Linear
            .prepare::<C>([x.node, w.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        },
    }
}

/// Runs a stateless one-input op on `B` and records it as one node with backward step `op`.
fn unary<B: ArborBackend, C: CheckpointStrategy>(
    op: Unary,
    x: FloatTensor<Autodiff<B, C>>,
    forward: impl FnOnce(FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    let out = forward(x.primitive);
    match op.prepare::<C>([x.node]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((), out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// Runs a fused op on `B` (`forward` of the inner inputs) and records it as one node whose
/// backward step `op` keeps the inputs as its state.
fn record<B, C, Op, const N: usize>(
    op: Op,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    forward: impl FnOnce([FloatTensor<B>; N]) -> FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>>
where
    B: ArborBackend,
    C: CheckpointStrategy,
    Op: Backward<B, N, State = [FloatTensor<B>; N]>,
{
    let inner = inputs.clone().map(|t| t.primitive);
    let out = forward(inner.clone());
    let nodes = inputs.map(|t| t.node);
    match op.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(inner, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}
