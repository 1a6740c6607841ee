//! [`ThinStack`]: SPINN's thin stack (Bowman et al. 2016, §3.1) as an array of rows that is
//! written block by block and read by row indices, with gradients that cost the rows read and
//! written, not the whole array per step.
//!
//! On most backends the stack is one `[n, w]` tensor threaded through [`write_rows`] and read
//! with [`select_rows`]. Under autodiff that is quadratic: every read's backward is a zero
//! tensor of the whole stack with the read rows added in, and Burn sums it with the gradient
//! arriving from the next write, another pass over the whole stack, at every step
//! (`spinn/thin-stack` training on the Zen 1 VM: 45% of its time in those zeroings and sums).
//! On the CPU backends under autodiff ([`ArborBackend::HOST_MEMORY`], `f32`) the rows live in
//! host memory beside the graph instead, and the graph holds only a one-element *token* per
//! version of the stack: a write is a node with the token and the rows as parents, a read a
//! node with the token as parent. A read's backward adds its rows' gradient into one
//! stack-sized gradient buffer (the rows' own memory, taken over by the first read's backward,
//! as the backward pass reads no row values); a write's backward takes its block's rows of
//! that buffer. The tokens chain every write after the one before and every read after the
//! write it follows, so Burn's backward pass (by decreasing depth) runs every read before the
//! writes of the rows it read, and each block's gradient is complete when its write takes it.
//! The rows' values are freed when the `ThinStack` itself is dropped (nothing can read them any
//! more), so they are not held beside the activations as the backward pass begins; the first
//! read's backward then allocates the gradient buffer.
//!
//! [`ThinStack::from_rows`] makes a stack of rows already written: a source read many times
//! by row indices (SPINN's buffer), with one gradient buffer for all of its reads and one
//! node that hands it to the rows' producer.
//!
//! [`write_rows`]: crate::write_rows
//! [`select_rows`]: crate::select_rows

use std::sync::{Arc, Mutex, MutexGuard};

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The host side of a [`ThinStack`] under autodiff on a CPU backend: the rows (`[n, w]`,
/// row-major `f32`) and, once a backward pass reaches a read, their gradient, in the rows' own
/// memory or in a buffer allocated then if the stack was dropped first (the backward pass reads
/// no row values, so the stack costs one buffer, not two).
#[derive(Clone, Debug)]
pub struct StackSide(Arc<Mutex<SideData>>);

#[derive(Debug)]
struct SideData {
    width: usize,
    /// `rows · width`.
    len: usize,
    /// The rows (empty once the [`ThinStack`] that reads them is gone), then (once `released`)
    /// their gradient.
    data: Vec<f32>,
    /// Whether a backward pass has turned `data` into the gradient.
    released: bool,
}

impl StackSide {
    /// `n` zero rows of width `w`.
    pub(crate) fn zeros(n: usize, w: usize) -> Self {
        Self::from_rows(vec![0.0; n * w], w)
    }

    /// The rows `data` (row-major, width `w`).
    pub(crate) fn from_rows(data: Vec<f32>, w: usize) -> Self {
        Self(Arc::new(Mutex::new(SideData {
            width: w,
            len: data.len(),
            data,
            released: false,
        })))
    }

    /// Frees the rows' values once nothing can read them (the forward pass is over), so that
    /// they are not held beside the activations while the backward pass begins; the gradient
    /// buffer is allocated by the first read's backward then.
    fn drop_values(&self) {
        let mut s = self.lock();
        if !s.released {
            s.data = Vec::new();
        }
    }

    /// The gradient buffer, zeroed by the first read's backward (which takes over the rows'
    /// memory, or allocates it when the rows were freed).
    fn gradient(&self) -> MutexGuard<'_, SideData> {
        let mut s = self.lock();
        if !s.released {
            if s.data.len() == s.len {
                s.data.fill(0.0);
            } else {
                s.data = vec![0.0; s.len];
            }
            s.released = true;
        }
        s
    }

    /// The gradient of rows `start..start + r` (zeros where no read's backward reached them),
    /// and the width. A block that is the whole stack takes the buffer itself, as no other
    /// block's write is left to read it.
    fn block_gradient(&self, start: usize, r: usize) -> (Vec<f32>, usize) {
        let mut s = self.lock();
        let w = s.width;
        // No read's backward has run (`data` holds the rows, or nothing once the stack was
        // dropped): no gradient reached these rows.
        let d_rows = if !s.released {
            vec![0f32; r * w]
        } else if start == 0 && r * w == s.len {
            std::mem::take(&mut s.data)
        } else {
            s.data[start * w..(start + r) * w].to_vec()
        };
        (d_rows, w)
    }

    fn lock(&self) -> MutexGuard<'_, SideData> {
        // A panic while the lock was held leaves whole rows: the data stays usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The side for a forward read or write.
    ///
    /// # Panics
    /// Once a backward pass through the stack has begun (its rows are its gradient then).
    fn forward(&self) -> MutexGuard<'_, SideData> {
        let s = self.lock();
        assert!(
            !s.released,
            "ThinStack: read or written after a backward pass through it began"
        );
        s
    }
}

/// The [`ThinStack`]'s own reference to its side: when the stack goes, nothing can read its rows
/// any more, and their values are freed (the graph's nodes keep the side for the gradient).
#[derive(Debug)]
struct Values(StackSide);

impl Drop for Values {
    fn drop(&mut self) {
        self.0.drop_values();
    }
}

/// SPINN's thin stack: `n` rows of width `w`, zeros until written, written in blocks of
/// consecutive rows and read by row indices, with gradients flowing from the reads to the
/// written rows (see the module documentation for how the CPU backends keep that linear in
/// the rows touched). Each row is written at most once, as a thin stack's rows never change
/// (the host side's gradient of a row is everything read from it).
#[derive(Debug)]
pub struct ThinStack<B: ArborBackend> {
    token: Tensor<B, 2>,
    side: Option<Values>,
    width: usize,
    /// Which rows have been written (one entry per row).
    written: Vec<bool>,
}

impl<B: ArborBackend> ThinStack<B> {
    /// `rows` zero rows of width `width` on `device`, in the default float type.
    pub fn zeros(rows: usize, width: usize, device: &B::Device) -> Self {
        let (token, side) = B::thin_stack_new(rows, width, device);
        Self {
            token: Tensor::from_primitive(TensorPrimitive::Float(token)),
            side: side.map(Values),
            width,
            written: vec![false; rows],
        }
    }

    /// A stack whose rows are `rows`, all written: a source read many times by row indices
    /// (SPINN's buffer), whose gradient is one buffer of its size whatever the number of reads
    /// (where [`select_rows`](crate::select_rows) gives each read a gradient of that size).
    ///
    /// # Shapes
    /// - `rows`: `[n, w]`
    pub fn from_rows(rows: Tensor<B, 2>) -> Self {
        let [n, width] = rows.dims();
        let (token, side) = B::thin_stack_from_rows(rows.into_primitive().tensor());
        Self {
            token: Tensor::from_primitive(TensorPrimitive::Float(token)),
            side: side.map(Values),
            width,
            written: vec![true; n],
        }
    }

    /// The stack with rows `start..start + r` replaced by `rows`.
    ///
    /// # Shapes
    /// - `rows`: `[r, w]`, with `start + r ≤ n`
    ///
    /// # Panics
    /// If the rows do not fit, or one of them was written before.
    pub fn write(mut self, start: usize, rows: Tensor<B, 2>) -> Self {
        let [r, w] = rows.dims();
        assert!(
            w == self.width && start + r <= self.written.len(),
            "ThinStack::write: rows [{r}, {w}] at {start} do not fit in [{}, {}]",
            self.written.len(),
            self.width
        );
        if let Some(again) = (start..start + r).find(|&i| self.written[i]) {
            panic!("ThinStack::write: row {again} was written before");
        }
        self.written[start..start + r].fill(true);
        let token = B::thin_stack_write(
            self.token.into_primitive().tensor(),
            self.side.as_ref().map(|v| &v.0),
            start,
            rows.into_primitive().tensor(),
        );
        Self {
            token: Tensor::from_primitive(TensorPrimitive::Float(token)),
            ..self
        }
    }

    /// Rows `rows` of the stack.
    ///
    /// # Shapes
    /// - output: `[rows.len(), w]`
    ///
    /// # Panics
    /// If a row index is out of range.
    pub fn read(&self, rows: &[usize]) -> Tensor<B, 2> {
        let n = self.written.len();
        if let Some(&bad) = rows.iter().find(|&&r| r >= n) {
            panic!("ThinStack::read: row {bad} of a {n}-row stack");
        }
        Tensor::from_primitive(TensorPrimitive::Float(B::thin_stack_read(
            self.token.clone().into_primitive().tensor(),
            self.side.as_ref().map(|v| &v.0),
            rows,
        )))
    }
}

/// The host rows of `t` as `f32` (one copy).
fn host_rows<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("data converted to f32 reads as f32")
}

/// The CPU backends under autodiff.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{DType, Element, Shape, TensorData, TensorMetadata};

    use super::{host_rows, StackSide};
    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// A one-element token on `device`.
    fn token<B: Backend>(device: &B::Device) -> FloatTensor<B> {
        B::float_from_data(TensorData::new(vec![0f32], [1, 1]), device)
    }

    /// Whether the stack keeps its rows on the host: the inner backend keeps its floats,
    /// `f32`, in host memory.
    fn on_host<B: ArborBackend>() -> bool {
        B::HOST_MEMORY && <B::FloatElem as Element>::dtype() == DType::F32
    }

    /// The stack's token and host rows where the inner backend keeps its floats, `f32`, in
    /// host memory; a zero tensor of the whole stack (the default) otherwise.
    pub(crate) fn thin_stack_new<B: ArborBackend, C: CheckpointStrategy>(
        rows: usize,
        width: usize,
        device: &B::Device,
    ) -> (FloatTensor<Autodiff<B, C>>, Option<StackSide>) {
        if on_host::<B>() {
            (
                token::<Autodiff<B, C>>(device),
                Some(StackSide::zeros(rows, width)),
            )
        } else {
            (
                <Autodiff<B, C> as ArborBackend>::zeros(Shape::new([rows, width]), device),
                None,
            )
        }
    }

    /// The backward step of a write: the written rows' gradient from the side's buffer (zeros
    /// where no read reached them), and a zero for the token.
    #[derive(Debug)]
    struct StackWrite;

    impl<B: ArborBackend> Backward<B, 2> for StackWrite {
        type State = (StackSide, usize, usize, B::Device);

        fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 2, _>(ops, grads, |(side, start, r, device), _| {
                let (d_rows, w) = side.block_gradient(start, r);
                [
                    token::<B>(&device),
                    B::float_from_data(TensorData::new(d_rows, [r, w]), &device),
                ]
            });
        }
    }

    /// The backward step of [`thin_stack_from_rows`]: the rows' gradient, the side's whole
    /// buffer.
    #[derive(Debug)]
    struct StackFromRows;

    impl<B: ArborBackend> Backward<B, 1> for StackFromRows {
        type State = (StackSide, usize, B::Device);

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |(side, n, device), _| {
                let (d_rows, w) = side.block_gradient(0, n);
                [B::float_from_data(TensorData::new(d_rows, [n, w]), &device)]
            });
        }
    }

    /// A stack made of `rows`: the rows moved to the side (no copy when no other tensor shares
    /// them) behind a token whose node has `rows` as parent, where the inner backend keeps `f32`
    /// in host memory; `rows` itself as the stack tensor otherwise.
    pub(crate) fn thin_stack_from_rows<B: ArborBackend, C: CheckpointStrategy>(
        rows: FloatTensor<Autodiff<B, C>>,
    ) -> (FloatTensor<Autodiff<B, C>>, Option<StackSide>) {
        if !on_host::<B>() {
            return (rows, None);
        }
        let shape = rows.primitive.shape();
        let (n, w) = (shape[0], shape[1]);
        let device = B::float_device(&rows.primitive);
        let side = StackSide::from_rows(host_rows::<B>(rows.primitive), w);
        let out = token::<B>(&device);
        let token = match StackFromRows
            .prepare::<C>([rows.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((side.clone(), n, device), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        };
        (token, Some(side))
    }

    /// The backward step of a read: the read rows' gradient added into the side's buffer, and
    /// a zero for the token.
    #[derive(Debug)]
    struct StackRead;

    impl<B: ArborBackend> Backward<B, 1> for StackRead {
        type State = (StackSide, Vec<usize>, B::Device);

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |(side, rows, device), grad| {
                let g = host_rows::<B>(grad);
                let mut s = side.gradient();
                let w = s.width;
                crate::ops::rows::host::add_rows(&mut s.data, w, &g, &rows);
                [token::<B>(&device)]
            });
        }
    }

    /// A write: into the side's rows when there is one, [`ArborBackend::write_rows`] otherwise.
    pub(crate) fn thin_stack_write<B: ArborBackend, C: CheckpointStrategy>(
        stack: FloatTensor<Autodiff<B, C>>,
        side: Option<&StackSide>,
        start: usize,
        rows: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        let Some(side) = side else {
            return <Autodiff<B, C> as ArborBackend>::write_rows(stack, start, rows);
        };
        let r = rows.primitive.shape()[0];
        let device = B::float_device(&rows.primitive);
        // The rows' values are needed only here (the node keeps their graph node): moved, so
        // that `into_data` takes their memory instead of copying it when nothing shares it.
        let values = host_rows::<B>(rows.primitive);
        {
            let mut s = side.forward();
            let w = s.width;
            s.data[start * w..start * w + values.len()].copy_from_slice(&values);
        }
        let out = token::<B>(&device);
        let nodes = [stack.node, rows.node];
        match StackWrite.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((side.clone(), start, r, device), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    /// A read: from the side's rows when there is one, [`ArborBackend::select_rows`]
    /// otherwise.
    pub(crate) fn thin_stack_read<B: ArborBackend, C: CheckpointStrategy>(
        stack: FloatTensor<Autodiff<B, C>>,
        side: Option<&StackSide>,
        rows: &[usize],
    ) -> FloatTensor<Autodiff<B, C>> {
        let Some(side) = side else {
            return <Autodiff<B, C> as ArborBackend>::select_rows(stack, rows);
        };
        let device = B::float_device(&stack.primitive);
        let (values, w) = {
            let s = side.forward();
            let w = s.width;
            let mut out = Vec::with_capacity(rows.len() * w);
            for &r in rows {
                out.extend_from_slice(&s.data[r * w..(r + 1) * w]);
            }
            (out, w)
        };
        let out = B::float_from_data(TensorData::new(values, [rows.len(), w]), &device);
        match StackRead
            .prepare::<C>([stack.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((side.clone(), rows.to_vec(), device), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
