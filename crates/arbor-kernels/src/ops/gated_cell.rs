//! The gated cell update `c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k` (`gated_cell`) and the
//! gated output `h = σ(o) ⊙ tanh(c)` (`gated_output`) of the LSTM and Tree-LSTM family, with
//! the [`GateLayout`] that says where each gate sits.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

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

/// The gated ops in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::activation::{sigmoid, tanh};
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorMetadata;

    use super::GateLayout;
    use crate::reference::{assemble, block, rows, unrows};

    /// `c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k` in plain ops.
    pub fn gated_cell<B: Backend>(
        gates: FloatTensor<B>,
        children: Vec<FloatTensor<B>>,
        layout: &GateLayout,
    ) -> FloatTensor<B> {
        let gates = rows::<B>(gates);
        let h = gates.dims()[1] / layout.blocks;
        let shape = children[0].shape();
        let mut c =
            sigmoid(block(&gates, layout.input, h)).mul(tanh(block(&gates, layout.candidate, h)));
        for (child, &f) in children.into_iter().zip(&layout.forgets) {
            c = c.add(sigmoid(block(&gates, f, h)).mul(rows::<B>(child)));
        }
        unrows(c, shape)
    }

    /// The gradients of [`gated_cell`] in plain ops.
    pub fn gated_cell_backward<B: Backend>(
        gates: FloatTensor<B>,
        children: Vec<FloatTensor<B>>,
        grad: FloatTensor<B>,
        layout: &GateLayout,
    ) -> (FloatTensor<B>, Vec<FloatTensor<B>>) {
        let gate_shape = gates.shape();
        let child_shape = grad.shape();
        let gates = rows::<B>(gates);
        let grad = rows::<B>(grad);
        let [n, w] = gates.dims();
        let h = w / layout.blocks;
        let si = sigmoid(block(&gates, layout.input, h));
        let tg = tanh(block(&gates, layout.candidate, h));
        // dσ(x)/dx = σ(1 − σ); dtanh(x)/dx = 1 − tanh².
        let d_i = grad
            .clone()
            .mul(tg.clone())
            .mul(si.clone().mul(si.clone().neg().add_scalar(1.0)));
        let d_g = grad
            .clone()
            .mul(si)
            .mul(tg.clone().mul(tg).neg().add_scalar(1.0));
        let mut parts = vec![(layout.input, d_i), (layout.candidate, d_g)];
        let mut d_children = Vec::with_capacity(children.len());
        for (child, &f) in children.into_iter().zip(&layout.forgets) {
            let sf = sigmoid(block(&gates, f, h));
            let d_f = grad
                .clone()
                .mul(rows::<B>(child))
                .mul(sf.clone().mul(sf.clone().neg().add_scalar(1.0)));
            parts.push((f, d_f));
            d_children.push(unrows(grad.clone().mul(sf), child_shape.clone()));
        }
        let d_gates = assemble(parts, n, h, layout.blocks, &gates);
        (unrows(d_gates, gate_shape), d_children)
    }

    /// `h = σ(o) ⊙ tanh(c)` in plain ops.
    pub fn gated_output<B: Backend>(
        gates: FloatTensor<B>,
        c: FloatTensor<B>,
        layout: &GateLayout,
    ) -> FloatTensor<B> {
        let shape = c.shape();
        let gates = rows::<B>(gates);
        let h = gates.dims()[1] / layout.blocks;
        let out = sigmoid(block(&gates, layout.output, h)).mul(tanh(rows::<B>(c)));
        unrows(out, shape)
    }

    /// The gradients of [`gated_output`] in plain ops.
    pub fn gated_output_backward<B: Backend>(
        gates: FloatTensor<B>,
        c: FloatTensor<B>,
        grad: FloatTensor<B>,
        layout: &GateLayout,
    ) -> (FloatTensor<B>, FloatTensor<B>) {
        let gate_shape = gates.shape();
        let c_shape = c.shape();
        let gates = rows::<B>(gates);
        let grad = rows::<B>(grad);
        let [n, w] = gates.dims();
        let h = w / layout.blocks;
        let so = sigmoid(block(&gates, layout.output, h));
        let tc = tanh(rows::<B>(c));
        let d_o = grad
            .clone()
            .mul(tc.clone())
            .mul(so.clone().mul(so.clone().neg().add_scalar(1.0)));
        let d_c = grad.mul(so).mul(tc.clone().mul(tc).neg().add_scalar(1.0));
        let d_gates = assemble(vec![(layout.output, d_o)], n, h, layout.blocks, &gates);
        (unrows(d_gates, gate_shape), unrows(d_c, c_shape))
    }
}

/// The loops over contiguous `f32` rows.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use super::GateLayout;
    use crate::ops::activation::cpu::{sigmoid, tanh};

    /// Scratch rows reused across the rows of one call.
    pub(crate) struct Scratch {
        pub(crate) a: Vec<f32>,
        pub(crate) b: Vec<f32>,
        pub(crate) f: Vec<f32>,
    }

    impl Scratch {
        /// Three rows of `h` zeros.
        pub(crate) fn new(h: usize) -> Self {
            Scratch {
                a: vec![0.0; h],
                b: vec![0.0; h],
                f: vec![0.0; h],
            }
        }
    }

    /// `out = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k` over `rows` rows; `gates` is `[rows, blocks·h]`,
    /// each child and `out` `[rows, h]`.
    pub fn gated_cell(
        gates: &[f32],
        children: &[&[f32]],
        layout: &GateLayout,
        h: usize,
        out: &mut [f32],
    ) {
        let w = layout.blocks * h;
        let mut s = Scratch::new(h);
        for (r, o) in out.chunks_exact_mut(h).enumerate() {
            let g = &gates[r * w..(r + 1) * w];
            let blk = |b: usize| &g[b * h..(b + 1) * h];
            sigmoid(&mut s.a, blk(layout.input));
            tanh(&mut s.b, blk(layout.candidate));
            for j in 0..h {
                o[j] = s.a[j] * s.b[j];
            }
            for (child, &f) in children.iter().zip(&layout.forgets) {
                sigmoid(&mut s.f, blk(f));
                let c = &child[r * h..(r + 1) * h];
                for j in 0..h {
                    o[j] += s.f[j] * c[j];
                }
            }
        }
    }

    /// The gradients of [`gated_cell`]: `d_gates` `[rows, blocks·h]` and one `[rows, h]` buffer
    /// per child. Only the blocks the update reads are written: `d_gates` must be zero on entry
    /// (the host entry point allocates it zeroed, so it is not filled twice).
    pub fn gated_cell_backward(
        gates: &[f32],
        children: &[&[f32]],
        grad: &[f32],
        layout: &GateLayout,
        h: usize,
        d_gates: &mut [f32],
        d_children: &mut [&mut [f32]],
    ) {
        let w = layout.blocks * h;
        let mut s = Scratch::new(h);
        for (r, gc) in grad.chunks_exact(h).enumerate() {
            let g = &gates[r * w..(r + 1) * w];
            let blk = |b: usize| &g[b * h..(b + 1) * h];
            let dg = &mut d_gates[r * w..(r + 1) * w];
            sigmoid(&mut s.a, blk(layout.input));
            tanh(&mut s.b, blk(layout.candidate));
            {
                let di = &mut dg[layout.input * h..(layout.input + 1) * h];
                for j in 0..h {
                    di[j] = gc[j] * s.b[j] * s.a[j] * (1.0 - s.a[j]);
                }
            }
            {
                let du = &mut dg[layout.candidate * h..(layout.candidate + 1) * h];
                for j in 0..h {
                    du[j] = gc[j] * s.a[j] * (1.0 - s.b[j] * s.b[j]);
                }
            }
            for ((child, &f), dc) in children
                .iter()
                .zip(&layout.forgets)
                .zip(d_children.iter_mut())
            {
                sigmoid(&mut s.f, blk(f));
                let c = &child[r * h..(r + 1) * h];
                let dc = &mut dc[r * h..(r + 1) * h];
                let df = &mut dg[f * h..(f + 1) * h];
                for j in 0..h {
                    df[j] += gc[j] * c[j] * s.f[j] * (1.0 - s.f[j]);
                    dc[j] = gc[j] * s.f[j];
                }
            }
        }
    }

    /// `out = σ(o) ⊙ tanh(c)`.
    pub fn gated_output(gates: &[f32], c: &[f32], layout: &GateLayout, h: usize, out: &mut [f32]) {
        let w = layout.blocks * h;
        let mut s = Scratch::new(h);
        for (r, o) in out.chunks_exact_mut(h).enumerate() {
            let g = &gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
            sigmoid(&mut s.a, g);
            tanh(&mut s.b, &c[r * h..(r + 1) * h]);
            for j in 0..h {
                o[j] = s.a[j] * s.b[j];
            }
        }
    }

    /// The gradients of [`gated_output`]: `d_gates` and `d_c`. Only the output block of `d_gates`
    /// is written: it must be zero on entry (the host entry point allocates it zeroed).
    pub fn gated_output_backward(
        gates: &[f32],
        c: &[f32],
        grad: &[f32],
        layout: &GateLayout,
        h: usize,
        d_gates: &mut [f32],
        d_c: &mut [f32],
    ) {
        let w = layout.blocks * h;
        let mut s = Scratch::new(h);
        for (r, gh) in grad.chunks_exact(h).enumerate() {
            let g = &gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
            sigmoid(&mut s.a, g);
            tanh(&mut s.b, &c[r * h..(r + 1) * h]);
            let d_o = &mut d_gates[r * w + layout.output * h..r * w + (layout.output + 1) * h];
            let dc = &mut d_c[r * h..(r + 1) * h];
            for j in 0..h {
                d_o[j] = gh[j] * s.b[j] * s.a[j] * (1.0 - s.a[j]);
                dc[j] = gh[j] * s.a[j] * (1.0 - s.b[j] * s.b[j]);
            }
        }
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorMetadata;

    use super::{cpu, reference, GateLayout};
    use crate::host::{HostBuf, HostTensor};
    use crate::par;

    fn width<T: TensorMetadata>(gates: &T, layout: &GateLayout) -> usize {
        gates.shape().as_slice().last().copied().unwrap_or(0) / layout.blocks
    }

    fn all<'a, T: HostTensor>(ts: &'a [T]) -> Option<Vec<HostBuf<'a>>> {
        ts.iter().map(HostTensor::host).collect()
    }

    /// The CPU kernel on `f32` memory, [`reference::gated_cell`] otherwise.
    pub(crate) fn gated_cell<B: Backend>(
        gates: FloatTensor<B>,
        children: Vec<FloatTensor<B>>,
        layout: &GateLayout,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        gated_cell_f32(&gates, &children, layout)
            .unwrap_or_else(|| reference::gated_cell::<B>(gates, children, layout))
    }

    fn gated_cell_f32<T: HostTensor>(gates: &T, children: &[T], layout: &GateLayout) -> Option<T> {
        let (g, cs) = (gates.host()?, all(children)?);
        let shape = children[0].shape();
        let (h, w) = (
            width(gates, layout),
            gates.shape().as_slice().last().copied()?,
        );
        let rows = shape.num_elements() / h.max(1);
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(rows, w + h * cs.len(), vec![(&mut out, h)], &|r, o| {
            let refs: Vec<&[f32]> = cs.iter().map(|c| par::at(c, &r, h)).collect();
            cpu::gated_cell(par::at(&g, &r, w), &refs, layout, h, o[0]);
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`reference::gated_cell_backward`] otherwise.
    pub(crate) fn gated_cell_backward<B: Backend>(
        gates: FloatTensor<B>,
        children: Vec<FloatTensor<B>>,
        grad: FloatTensor<B>,
        layout: &GateLayout,
    ) -> (FloatTensor<B>, Vec<FloatTensor<B>>)
    where
        FloatTensor<B>: HostTensor,
    {
        gated_cell_backward_f32(&gates, &children, &grad, layout)
            .unwrap_or_else(|| reference::gated_cell_backward::<B>(gates, children, grad, layout))
    }

    fn gated_cell_backward_f32<T: HostTensor>(
        gates: &T,
        children: &[T],
        grad: &T,
        layout: &GateLayout,
    ) -> Option<(T, Vec<T>)> {
        let (g, cs, gr) = (gates.host()?, all(children)?, grad.host()?);
        let (gate_shape, child_shape) = (gates.shape(), grad.shape());
        let (h, w) = (width(gates, layout), gate_shape.as_slice().last().copied()?);
        let rows = child_shape.num_elements() / h.max(1);
        let mut d_gates = vec![0f32; gate_shape.num_elements()];
        let mut d_children = vec![vec![0f32; child_shape.num_elements()]; cs.len()];
        let mut outs: Vec<par::Out<'_>> = vec![(&mut d_gates, w)];
        outs.extend(d_children.iter_mut().map(|d| (d.as_mut_slice(), h)));
        par::rows(rows, 2 * w + h * cs.len(), outs, &|r, o| {
            let refs: Vec<&[f32]> = cs.iter().map(|c| par::at(c, &r, h)).collect();
            let (d_g, d_c) = o.split_first_mut().expect("d_gates");
            let (g, gr) = (par::at(&g, &r, w), par::at(&gr, &r, h));
            cpu::gated_cell_backward(g, &refs, gr, layout, h, d_g, d_c);
        });
        let d_children = d_children
            .into_iter()
            .map(|d| T::from_f32(d, child_shape.clone()))
            .collect();
        Some((T::from_f32(d_gates, gate_shape), d_children))
    }

    /// The CPU kernel on `f32` memory, [`reference::gated_output`] otherwise.
    pub(crate) fn gated_output<B: Backend>(
        gates: FloatTensor<B>,
        c: FloatTensor<B>,
        layout: &GateLayout,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        gated_output_f32(&gates, &c, layout)
            .unwrap_or_else(|| reference::gated_output::<B>(gates, c, layout))
    }

    fn gated_output_f32<T: HostTensor>(gates: &T, c: &T, layout: &GateLayout) -> Option<T> {
        let (g, cc) = (gates.host()?, c.host()?);
        let shape = c.shape();
        let (h, w) = (
            width(gates, layout),
            gates.shape().as_slice().last().copied()?,
        );
        let rows = shape.num_elements() / h.max(1);
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(rows, 3 * h, vec![(&mut out, h)], &|r, o| {
            let (g, c) = (par::at(&g, &r, w), par::at(&cc, &r, h));
            cpu::gated_output(g, c, layout, h, o[0]);
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`reference::gated_output_backward`] otherwise.
    pub(crate) fn gated_output_backward<B: Backend>(
        gates: FloatTensor<B>,
        c: FloatTensor<B>,
        grad: FloatTensor<B>,
        layout: &GateLayout,
    ) -> (FloatTensor<B>, FloatTensor<B>)
    where
        FloatTensor<B>: HostTensor,
    {
        gated_output_backward_f32(&gates, &c, &grad, layout)
            .unwrap_or_else(|| reference::gated_output_backward::<B>(gates, c, grad, layout))
    }

    fn gated_output_backward_f32<T: HostTensor>(
        gates: &T,
        c: &T,
        grad: &T,
        layout: &GateLayout,
    ) -> Option<(T, T)> {
        let (g, cc, gr) = (gates.host()?, c.host()?, grad.host()?);
        let (gate_shape, c_shape) = (gates.shape(), c.shape());
        let (h, w) = (width(gates, layout), gate_shape.as_slice().last().copied()?);
        let rows = c_shape.num_elements() / h.max(1);
        let mut d_gates = vec![0f32; gate_shape.num_elements()];
        let mut d_c = vec![0f32; c_shape.num_elements()];
        par::rows(
            rows,
            w + 4 * h,
            vec![(&mut d_gates, w), (&mut d_c, h)],
            &|r, o| {
                let (g, c, gr) = (par::at(&g, &r, w), par::at(&cc, &r, h), par::at(&gr, &r, h));
                let [d_g, d_c] = o else {
                    unreachable!("two outputs")
                };
                cpu::gated_output_backward(g, c, gr, layout, h, d_g, d_c);
            },
        );
        Some((T::from_f32(d_gates, gate_shape), T::from_f32(d_c, c_shape)))
    }
}

/// One autodiff node per gated op.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use super::{reference, GateLayout};
    use crate::autodiff::backward_with;
    use crate::ArborBackend;

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

    /// `gated_cell` as one node for one, two or three children (the plain ops otherwise).
    pub(crate) fn gated_cell<B: ArborBackend, C: CheckpointStrategy>(
        gates: FloatTensor<Autodiff<B, C>>,
        children: Vec<FloatTensor<Autodiff<B, C>>>,
        layout: &GateLayout,
    ) -> FloatTensor<Autodiff<B, C>> {
        match children.len() {
            1 => gated_cell_node::<B, C, 2>(gates, children, layout),
            2 => gated_cell_node::<B, C, 3>(gates, children, layout),
            3 => gated_cell_node::<B, C, 4>(gates, children, layout),
            _ => reference::gated_cell::<Autodiff<B, C>>(gates, children, layout),
        }
    }

    /// `gated_output` as one node.
    pub(crate) fn gated_output<B: ArborBackend, C: CheckpointStrategy>(
        gates: FloatTensor<Autodiff<B, C>>,
        c: FloatTensor<Autodiff<B, C>>,
        layout: &GateLayout,
    ) -> FloatTensor<Autodiff<B, C>> {
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
}
