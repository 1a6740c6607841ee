//! Row reads and writes of a `[n, w]` tensor with host-side indices: `select_rows` (Burn's
//! `select` on dimension 0, one zero gradient with the rows added in) and `write_rows` (a
//! `slice_assign` written in place when no other tensor shares the memory).

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

/// The row ops in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorPrimitive;

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

    /// The gradient of `select_rows`: one zero `[n, w]` buffer with `grad`'s rows added in.
    fn select_rows_backward_f32<T: HostTensor>(grad: &T, rows: &[usize], n: usize) -> Option<T> {
        let g = grad.host()?;
        let w = grad.shape().as_slice().last().copied().unwrap_or(0);
        let mut out = vec![0f32; n * w];
        for (src, &r) in g.chunks_exact(w.max(1)).zip(rows) {
            for (o, v) in out[r * w..(r + 1) * w].iter_mut().zip(src) {
                *o += v;
            }
        }
        Some(T::from_f32(out, Shape::new([n, w])))
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
