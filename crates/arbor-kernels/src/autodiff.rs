//! `Autodiff<B>`: each fused op is one graph node whose backward pass is `B`'s fused backward
//! kernel (Burn's custom-backward API). Each op's backward step and the function that records
//! its node live in its module under `src/ops/`; here are the trait's wiring and the helpers
//! they share.

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

use crate::{ops, Activation, ArborBackend, GateLayout};

impl<B: ArborBackend, C: CheckpointStrategy> ArborBackend for Autodiff<B, C> {
    const HOST_MEMORY: bool = B::HOST_MEMORY;

    crate::delegate! {
        fn gated_cell(
            gates: FloatTensor<Self>,
            children: Vec<FloatTensor<Self>>,
            layout: &GateLayout,
        ) -> FloatTensor<Self>
            => ops::gated_cell::autodiff::gated_cell::<B, C>;
        fn gated_output(
            gates: FloatTensor<Self>,
            c: FloatTensor<Self>,
            layout: &GateLayout,
        ) -> FloatTensor<Self>
            => ops::gated_cell::autodiff::gated_output::<B, C>;
        fn ordered_cell(
            gates: FloatTensor<Self>,
            master_forget: FloatTensor<Self>,
            master_input: FloatTensor<Self>,
            c_prev: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::ordered_cell::autodiff::ordered_cell::<B, C>;
        fn ordered_gates(
            gates: FloatTensor<Self>,
            master_forget: FloatTensor<Self>,
            master_input: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::ordered_cell::autodiff::ordered_gates::<B, C>;
        fn select_mix(
            s: FloatTensor<Self>,
            parent: FloatTensor<Self>,
            left: FloatTensor<Self>,
            right: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::select_mix::autodiff::select_mix::<B, C>;
        fn select_mix_adjacent(
            s: FloatTensor<Self>,
            parent: FloatTensor<Self>,
            x: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::select_mix::autodiff::select_mix_adjacent::<B, C>;
        fn merge_place(
            old: FloatTensor<Self>,
            new: FloatTensor<Self>,
            s: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::select_mix::autodiff::merge_place::<B, C>;
        fn narrow(x: FloatTensor<Self>, dim: usize, start: usize, len: usize) -> FloatTensor<Self>
            => ops::rows::autodiff::narrow::<B, C>;
        fn select_rows(t: FloatTensor<Self>, rows: &[usize]) -> FloatTensor<Self>
            => ops::rows::autodiff::select_rows::<B, C>;
        fn write_rows(
            t: FloatTensor<Self>,
            start: usize,
            rows: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::rows::autodiff::write_rows::<B, C>;
        fn thin_stack_new(
            rows: usize,
            width: usize,
            device: &Device<Self>,
        ) -> (FloatTensor<Self>, Option<crate::StackSide>)
            => ops::thin_stack::autodiff::thin_stack_new::<B, C>;
        fn thin_stack_from_rows(
            rows: FloatTensor<Self>,
        ) -> (FloatTensor<Self>, Option<crate::StackSide>)
            => ops::thin_stack::autodiff::thin_stack_from_rows::<B, C>;
        fn thin_stack_write(
            stack: FloatTensor<Self>,
            side: Option<&crate::StackSide>,
            start: usize,
            rows: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::thin_stack::autodiff::thin_stack_write::<B, C>;
        fn thin_stack_read(
            stack: FloatTensor<Self>,
            side: Option<&crate::StackSide>,
            rows: &[usize],
        ) -> FloatTensor<Self>
            => ops::thin_stack::autodiff::thin_stack_read::<B, C>;
        fn adjacent_pairs(x: FloatTensor<Self>) -> FloatTensor<Self>
            => ops::adjacent::autodiff::adjacent_pairs::<B, C>;
        fn causal_windows(x: FloatTensor<Self>, k: usize) -> FloatTensor<Self>
            => ops::window::autodiff::causal_windows::<B, C>;
        fn activation(x: FloatTensor<Self>, act: Activation) -> FloatTensor<Self>
            => ops::activation::autodiff::activation::<B, C>;
        fn grouped_attention_tracked(
            q: FloatTensor<Self>,
            k: FloatTensor<Self>,
            v: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            spec: crate::AttentionSpec,
        ) -> FloatTensor<Self>
            => ops::attention::autodiff::grouped_attention_tracked::<B, C>;
        fn affine(
            x: FloatTensor<Self>,
            w: FloatTensor<Self>,
            b: Option<FloatTensor<Self>>,
        ) -> FloatTensor<Self>
            => ops::linear::autodiff::affine::<B, C>;
        fn affine_given(
            x: FloatTensor<Self>,
            w: FloatTensor<Self>,
            b: Option<FloatTensor<Self>>,
            known: FloatTensor<Self>,
        ) -> FloatTensor<Self>
            => ops::linear::autodiff::affine_given::<B, C>;
        fn affine_pair(
            x: FloatTensor<Self>,
            w: FloatTensor<Self>,
            h: FloatTensor<Self>,
            u: FloatTensor<Self>,
            b: Option<FloatTensor<Self>>,
        ) -> FloatTensor<Self>
            => ops::linear::autodiff::affine_pair::<B, C>;
        fn layer_norm_rows(
            x: FloatTensor<Self>,
            affine: Option<(FloatTensor<Self>, FloatTensor<Self>)>,
            epsilon: f64,
        ) -> FloatTensor<Self>
            => ops::layer_norm::autodiff::layer_norm_rows::<B, C>;
        fn lstm_sequence_tracked(
            x: FloatTensor<Self>,
            given: Option<FloatTensor<Self>>,
            params: [FloatTensor<Self>; 5],
            lengths: &[usize],
            cell: crate::SequenceCell,
            every_c: bool,
        ) -> FloatTensor<Self>
            => ops::lstm::autodiff::lstm_sequence_tracked::<B, C>;
        fn linear_scan(au: FloatTensor<Self>, c0: FloatTensor<Self>) -> FloatTensor<Self>
            => ops::linear_scan::autodiff::linear_scan::<B, C>;
        fn contiguous(x: FloatTensor<Self>) -> FloatTensor<Self>
            => ops::memory::autodiff::contiguous::<B, C>;
        fn zeros(shape: Shape, device: &Device<Self>) -> FloatTensor<Self>
            => ops::memory::autodiff::zeros::<B, C>;
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
        ) -> Option<crate::StGumbelTreeParts<Self>>
            => ops::gumbel_tree::autodiff::st_gumbel_tree::<B, C>;
    }
}

/// Consumes the node's gradient, runs `backward` on the saved state and that gradient, and
/// registers each result with its parent, in order (parents that are not tracked get none).
pub(crate) fn backward_with<B, S, const N: usize, I>(
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

/// Runs a stateless one-input op on `B` and records it as one node with backward step `op`.
pub(crate) fn unary<B, C, Op>(
    op: Op,
    x: FloatTensor<Autodiff<B, C>>,
    forward: impl FnOnce(FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>>
where
    B: ArborBackend,
    C: CheckpointStrategy,
    Op: Backward<B, 1, State = ()>,
{
    let out = forward(x.primitive);
    match op.prepare::<C>([x.node]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((), out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// Runs a fused op on `B` (`forward` of the inner inputs) and records it as one node whose
/// backward step `op` keeps the inputs as its state.
pub(crate) fn record<B, C, Op, const N: usize>(
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
