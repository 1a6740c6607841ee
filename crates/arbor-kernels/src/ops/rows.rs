//! Row reads and writes of a `[n, w]` tensor with host-side indices: `select_rows` (Burn's
//! `select` on dimension 0, one zero gradient with the rows added in), `write_rows` (a
//! `slice_assign` written in place when no other tensor shares the memory), and `narrow` of any
//! rank (Burn's `narrow`, one zero gradient with the piece written in).

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

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

/// `x.narrow(dim, start, len)`: Burn's view in the forward pass, and one autodiff node whose
/// backward pass writes the gradient into one zero tensor of `x`'s shape. Burn's own slice
/// backward (0.21, flex) fills a zero tensor of the input's shape, copies it into an aligned
/// buffer and copies it again before writing the piece: three passes over the whole input per
/// read, which dominates where a large tensor is read in many small pieces (a per-node
/// recursion's leaves, R2D2's attention and chart).
///
/// # Shapes
/// - `x`: any shape, with `dim < D` and `start + len ≤ x.dims()[dim]`
/// - output: `x`'s shape with `len` at `dim`
///
/// # Panics
/// If `dim` or the range is out of bounds, or `len` is 0 (as Burn's `narrow`).
pub fn narrow<B: ArborBackend, const D: usize>(
    x: Tensor<B, D>,
    dim: usize,
    start: usize,
    len: usize,
) -> Tensor<B, D> {
    let dims = x.dims();
    assert!(
        dim < D && len > 0 && start + len <= dims[dim],
        "narrow: {start}..{} of dimension {dim} of {dims:?}",
        start + len
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::narrow(
        x.into_primitive().tensor(),
        dim,
        start,
        len,
    )))
}

/// The row ops in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{Shape, Slice, TensorMetadata, TensorPrimitive};

    use crate::reference::t2;

    fn row_index<B: Backend>(rows: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
        let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        Tensor::from_data(burn::tensor::TensorData::new(ids, [rows.len()]), device)
    }

    /// Rows `rows` of `t` `[n, w]` (Burn's `select`).
    pub fn select_rows<B: Backend>(t: FloatTensor<B>, rows: &[usize]) -> FloatTensor<B> {
        let t = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
        let idx = row_index::<B>(rows, &t.device());
        t.select(0, idx).into_primitive().tensor()
    }

    /// The gradient of [`select_rows`] for an `n`-row input (Burn's `select_assign` into zeros).
    pub fn select_rows_backward<B: Backend>(
        grad: FloatTensor<B>,
        rows: &[usize],
        n: usize,
    ) -> FloatTensor<B> {
        let grad = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(grad));
        let [_, w] = grad.dims();
        let device = grad.device();
        let idx = row_index::<B>(rows, &device);
        Tensor::<B, 2>::zeros([n, w], (&device, grad.dtype()))
            .select_assign(0, idx, grad, burn::tensor::IndexingUpdateOp::Add)
            .into_primitive()
            .tensor()
    }

    /// The slices of `narrow`: the whole of every dimension but `dim`.
    fn narrow_slices(rank: usize, dim: usize, start: usize, len: usize) -> Vec<Slice> {
        (0..rank)
            .map(|d| {
                if d == dim {
                    Slice::new(start as isize, Some((start + len) as isize), 1)
                } else {
                    Slice::full()
                }
            })
            .collect()
    }

    /// `x.narrow(dim, start, len)` (Burn's slice).
    pub fn narrow<B: Backend>(
        x: FloatTensor<B>,
        dim: usize,
        start: usize,
        len: usize,
    ) -> FloatTensor<B> {
        let rank = x.shape().num_dims();
        B::float_slice(x, &narrow_slices(rank, dim, start, len))
    }

    /// The gradient of [`narrow`] for an input of `shape`: `grad` written into zeros at
    /// `start..` of `dim` (Burn's `slice_assign` into zeros).
    pub fn narrow_backward<B: Backend>(
        grad: FloatTensor<B>,
        shape: Shape,
        dim: usize,
        start: usize,
    ) -> FloatTensor<B> {
        let len = grad.shape()[dim];
        let rank = shape.num_dims();
        let zeros = B::float_zeros(shape, &B::float_device(&grad), grad.dtype().into());
        B::float_slice_assign(zeros, &narrow_slices(rank, dim, start, len), grad)
    }

    /// `t` `[n, w]` with rows `start..start + r` replaced by `rows` `[r, w]` (a `slice_assign`).
    pub fn write_rows<B: Backend>(
        t: FloatTensor<B>,
        start: usize,
        rows: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let (t, rows) = (t2::<B>(t), t2::<B>(rows));
        let [r, w] = rows.dims();
        t.slice_assign([start..start + r, 0..w], rows)
            .into_primitive()
            .tensor()
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::reference;
    use crate::host::HostTensor;

    /// Writes `rows` over rows `start..` of `t` in place when `t`'s memory is its own; gives `t`
    /// back unchanged otherwise.
    fn write_rows_f32<T: HostTensor>(mut t: T, start: usize, rows: &T) -> Result<T, T> {
        let width = t.shape().as_slice().last().copied().unwrap_or(0);
        let done = match (rows.host(), t.host_mut()) {
            (Some(src), Some(dst)) => {
                let from = start * width;
                match dst.get_mut(from..from + src.len()) {
                    Some(dst) if rows.shape().as_slice().last() == Some(&width) => {
                        dst.copy_from_slice(&src);
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if done {
            Ok(t)
        } else {
            Err(t)
        }
    }

    /// [`reference::write_rows`] written into `t`'s memory when it is `f32` and its own; the
    /// reference (a copy) otherwise.
    pub(crate) fn write_rows<B: Backend>(
        t: FloatTensor<B>,
        start: usize,
        rows: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        match write_rows_f32(t, start, &rows) {
            Ok(out) => out,
            Err(t) => reference::write_rows::<B>(t, start, rows),
        }
    }

    /// The CPU kernel on `f32` memory, [`reference::select_rows_backward`] otherwise.
    pub(crate) fn select_rows_backward<B: Backend>(
        grad: FloatTensor<B>,
        rows: &[usize],
        n: usize,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        select_rows_backward_f32(&grad, rows, n)
            .unwrap_or_else(|| reference::select_rows_backward::<B>(grad, rows, n))
    }

    /// The CPU kernel on `f32` memory, [`reference::narrow_backward`] otherwise.
    pub(crate) fn narrow_backward<B: Backend>(
        grad: FloatTensor<B>,
        shape: Shape,
        dim: usize,
        start: usize,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        match narrow_backward_f32(&grad, &shape, dim, start) {
            Some(out) => out,
            None => reference::narrow_backward::<B>(grad, shape, dim, start),
        }
    }

    /// The gradient of `narrow`: one zero buffer of the input's shape with `grad`'s blocks
    /// copied in (for each index of the dimensions before `dim`, one contiguous run).
    fn narrow_backward_f32<T: HostTensor>(
        grad: &T,
        shape: &Shape,
        dim: usize,
        start: usize,
    ) -> Option<T> {
        let g = grad.host()?;
        let dims = shape.as_slice();
        let (n, len) = (dims[dim], grad.shape()[dim]);
        let inner: usize = dims[dim + 1..].iter().product();
        let mut out = vec![0f32; shape.num_elements()];
        let (run, span) = (len * inner, n * inner);
        if run > 0 {
            for (src, dst) in g.chunks_exact(run).zip(out.chunks_exact_mut(span)) {
                dst[start * inner..start * inner + run].copy_from_slice(src);
            }
        }
        Some(T::from_f32(out, shape.clone()))
    }

    /// The gradient of `select_rows`: one zero `[n, w]` buffer with `grad`'s rows added in.
    fn select_rows_backward_f32<T: HostTensor>(grad: &T, rows: &[usize], n: usize) -> Option<T> {
        let g = grad.host()?;
        let w = grad.shape().as_slice().last().copied().unwrap_or(0);
        let mut out = vec![0f32; n * w];
        add_rows(&mut out, w, &g, rows);
        Some(T::from_f32(out, Shape::new([n, w])))
    }

    /// Adds row `g` of `grad` (rows of width `w`) into row `rows[g]` of `out`; repeated rows
    /// add up.
    pub(crate) fn add_rows(out: &mut [f32], w: usize, grad: &[f32], rows: &[usize]) {
        for (src, &r) in grad.chunks_exact(w.max(1)).zip(rows) {
            for (o, v) in out[r * w..(r + 1) * w].iter_mut().zip(src) {
                *o += v;
            }
        }
    }
}

/// One autodiff node per row op.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{TensorMetadata, TensorPrimitive};

    use crate::autodiff::backward_with;
    use crate::ArborBackend;

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

    /// The backward step of `narrow` (the input's shape, the dimension and the start).
    #[derive(Debug)]
    struct Narrow;

    impl<B: ArborBackend> Backward<B, 1> for Narrow {
        type State = (burn::tensor::Shape, usize, usize);

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |(shape, dim, start), grad| {
                [B::narrow_backward(grad, shape, dim, start)]
            });
        }
    }

    /// `narrow` as one node that keeps the input's shape and where the piece was.
    pub(crate) fn narrow<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        dim: usize,
        start: usize,
        len: usize,
    ) -> FloatTensor<Autodiff<B, C>> {
        let shape = x.primitive.shape();
        let out = B::narrow(x.primitive, dim, start, len);
        match Narrow.prepare::<C>([x.node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((shape, dim, start), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    /// `select_rows` as one node that keeps the rows read and the input's row count.
    pub(crate) fn select_rows<B: ArborBackend, C: CheckpointStrategy>(
        t: FloatTensor<Autodiff<B, C>>,
        rows: &[usize],
    ) -> FloatTensor<Autodiff<B, C>> {
        let n = t.primitive.shape()[0];
        let out = B::select_rows(t.primitive, rows);
        match SelectRows.prepare::<C>([t.node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((rows.to_vec(), n), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    /// `write_rows` as one node that keeps where the rows went.
    pub(crate) fn write_rows<B: ArborBackend, C: CheckpointStrategy>(
        t: FloatTensor<Autodiff<B, C>>,
        start: usize,
        rows: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        let r = rows.primitive.shape()[0];
        let nodes = [t.node.clone(), rows.node.clone()];
        let out = B::write_rows(t.primitive, start, rows.primitive);
        match WriteRows.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((start, r), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
