//! The fused ops on CPU backends: the [`HostTensor`] view of a backend's float primitive
//! (`f32` memory, borrowed when it is contiguous, copied once by runs when it is a strided view)
//! and the `host_backend` macro that wires every trait method to its op's `host` entry point
//! (`src/ops/*.rs`); other float types take the plain-op defaults.

use std::ops::Deref;

use burn::tensor::{Shape, TensorMetadata};

/// `f32` data in row-major order.
pub(crate) enum HostBuf<'a> {
    /// The tensor's own memory.
    Borrowed(&'a [f32]),
    /// A contiguous copy.
    Owned(Vec<f32>),
}

impl Deref for HostBuf<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            HostBuf::Borrowed(s) => s,
            HostBuf::Owned(v) => v,
        }
    }
}

/// A tensor's rows read where they are: row `r` (its leading dimensions flattened) is
/// `data[offset + r·stride..][..width]`. The `h` or `c` half of a `[b, n, 2D]` tensor is such
/// a view, which [`HostTensor::host`] would copy whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows<'a> {
    data: &'a [f32],
    offset: usize,
    stride: usize,
    width: usize,
}

impl<'a> Rows<'a> {
    /// Rows of `width` values one after another.
    pub(crate) fn contiguous(data: &'a [f32], width: usize) -> Self {
        Self {
            data,
            offset: 0,
            stride: width,
            width,
        }
    }

    /// Rows of `width` values, row `r` at `offset + r·stride` of `data`.
    pub(crate) fn strided(data: &'a [f32], offset: usize, stride: usize, width: usize) -> Self {
        Self {
            data,
            offset,
            stride,
            width,
        }
    }

    /// Row `r`.
    pub(crate) fn row(&self, r: usize) -> &'a [f32] {
        let at = self.offset + r * self.stride;
        &self.data[at..at + self.width]
    }

    /// The memory from row `first`'s column `col` on, and the row stride: rows `first..` as a
    /// matrix with strides `(stride, 1)` from `col`, for a product that reads them in place.
    pub(crate) fn matrix(&self, first: usize, col: usize) -> (&'a [f32], usize) {
        (
            &self.data[self.offset + first * self.stride + col..],
            self.stride,
        )
    }

    /// Rows `first..first + count`, appended to `dst`.
    pub(crate) fn extend(&self, first: usize, count: usize, dst: &mut Vec<f32>) {
        for r in first..first + count {
            dst.extend_from_slice(self.row(r));
        }
    }
}

/// `t`'s rows in place where the backend exposes them ([`HostTensor::rows`]), else in a
/// contiguous copy kept in `copy`.
pub(crate) fn rows_of<'a, T: HostTensor>(
    t: &'a T,
    copy: &'a mut Option<HostBuf<'a>>,
) -> Option<Rows<'a>> {
    let shape = t.shape();
    let width = *shape.as_slice().last()?;
    if let Some(rows) = t.rows() {
        return Some(rows);
    }
    let buf = copy.insert(t.host()?);
    Some(Rows::contiguous(&buf[..], width))
}

/// The elements of a strided view, in row-major order: `shape`, `strides` (in elements) and
/// the first element's `offset` into `src`. `None` for a negative stride (the caller falls
/// back to its backend's own copy).
///
/// Hand-written because both CPU backends copy such views one element at a time (Flex 0.21
/// walks any view that does not collapse to two dimensions with its scalar strided iterator,
/// and its two-dimensional path tiles even when the rows are contiguous; `ndarray`'s `iter()`
/// is element-wise too). Here dimensions of size 1 are dropped, dimensions that are one run in
/// memory are merged, and the innermost run is one `copy_from_slice` (stride 1) or one `fill`
/// (stride 0, a broadcast).
pub(crate) fn strided_to_vec(
    src: &[f32],
    shape: &[usize],
    strides: &[isize],
    offset: usize,
) -> Option<Vec<f32>> {
    if strides.iter().any(|&s| s < 0) {
        return None;
    }
    let n: usize = shape.iter().product();
    // (size, stride) from the outermost dimension in, merged where contiguous.
    let mut dims: Vec<(usize, usize)> = Vec::with_capacity(shape.len());
    for (&size, &stride) in shape.iter().zip(strides) {
        if size == 1 {
            continue;
        }
        let stride = stride as usize;
        match dims.last_mut() {
            Some(last) if last.1 == stride * size => *last = (last.0 * size, stride),
            _ => dims.push((size, stride)),
        }
    }
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return Some(out);
    }
    let (run, run_stride) = dims.pop().unwrap_or((1, 1));
    let outer: usize = dims.iter().map(|d| d.0).product();
    // Index of the current outer position, odometer-style.
    let mut index = vec![0usize; dims.len()];
    let mut base = offset;
    for _ in 0..outer {
        match run_stride {
            1 => out.extend_from_slice(&src[base..base + run]),
            0 => out.extend(std::iter::repeat_n(src[base], run)),
            s => out.extend((0..run).map(|i| src[base + i * s])),
        }
        for d in (0..dims.len()).rev() {
            index[d] += 1;
            base += dims[d].1;
            if index[d] < dims[d].0 {
                break;
            }
            base -= dims[d].1 * dims[d].0;
            index[d] = 0;
        }
    }
    Some(out)
}

/// A CPU backend's float tensor primitive.
pub(crate) trait HostTensor: TensorMetadata + Sized {
    /// The data as row-major `f32`, or `None` when the tensor holds another dtype.
    fn host(&self) -> Option<HostBuf<'_>>;
    /// A new contiguous `f32` tensor.
    fn from_f32(data: Vec<f32>, shape: Shape) -> Self;
    /// A rank-2 `f32` tensor's memory, strided views included: the buffer, the offset of
    /// element `[0, 0]`, the row stride and the column stride (non-negative). `None` for other
    /// tensors, or where the backend does not expose its strides.
    fn matrix(&self) -> Option<(&[f32], usize, isize, isize)> {
        None
    }
    /// An `f32` tensor's rows (its last dimension) in its own memory when they are evenly
    /// spaced with unit stride inside each, strided views included; `None` otherwise, or where
    /// the backend does not expose its strides.
    fn rows(&self) -> Option<Rows<'_>> {
        None
    }
    /// The tensor's own `f32` memory, row-major, when it is contiguous and no other tensor
    /// shares it (so writing to it changes no other value); `None` otherwise.
    fn host_mut(&mut self) -> Option<&mut [f32]> {
        None
    }
}

/// `[b, m, d]` of a rank-3 tensor.
pub(crate) fn dims3<T: TensorMetadata>(a: &T) -> (usize, usize, usize) {
    let shape = a.shape();
    (shape[0], shape[1], shape[2])
}

/// The body of an `impl ArborBackend for …` header (the macro's input) for a CPU backend whose
/// float primitive implements [`HostTensor`]: each method hands its tensors to its op's `host`
/// entry point (`src/ops/*.rs`), which runs the fused kernel for `f32` and the plain-op default
/// otherwise. The caller's scope names `FloatTensor`, `GateLayout`, `Activation`, `Shape` and
/// `Device`.
macro_rules! host_backend {
    ($($header:tt)*) => {
        $($header)* {
            const HOST_MEMORY: bool = true;

            $crate::delegate! {
                fn gated_cell(
                    gates: FloatTensor<Self>,
                    children: Vec<FloatTensor<Self>>,
                    layout: &GateLayout,
                ) -> FloatTensor<Self>
                    => $crate::ops::gated_cell::host::gated_cell::<Self>;
                fn gated_cell_backward(
                    gates: FloatTensor<Self>,
                    children: Vec<FloatTensor<Self>>,
                    grad: FloatTensor<Self>,
                    layout: &GateLayout,
                ) -> (FloatTensor<Self>, Vec<FloatTensor<Self>>)
                    => $crate::ops::gated_cell::host::gated_cell_backward::<Self>;
                fn gated_output(
                    gates: FloatTensor<Self>,
                    c: FloatTensor<Self>,
                    layout: &GateLayout,
                ) -> FloatTensor<Self>
                    => $crate::ops::gated_cell::host::gated_output::<Self>;
                fn gated_output_backward(
                    gates: FloatTensor<Self>,
                    c: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                    layout: &GateLayout,
                ) -> (FloatTensor<Self>, FloatTensor<Self>)
                    => $crate::ops::gated_cell::host::gated_output_backward::<Self>;
                fn lstm_sequence(
                    x: FloatTensor<Self>,
                    given: Option<FloatTensor<Self>>,
                    params: [FloatTensor<Self>; 5],
                    lengths: &[usize],
                    cell: $crate::SequenceCell,
                    every_c: bool,
                    keep_gates: bool,
                ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>)
                    => $crate::ops::lstm::host::lstm_sequence::<Self>;
                fn lstm_sequence_backward(
                    x: FloatTensor<Self>,
                    params: [FloatTensor<Self>; 4],
                    saved: FloatTensor<Self>,
                    lengths: &[usize],
                    cell: $crate::SequenceCell,
                    grad: FloatTensor<Self>,
                ) -> $crate::SequenceGrads<Self>
                    => $crate::ops::lstm::host::lstm_sequence_backward::<Self>;
                fn ordered_cell(
                    gates: FloatTensor<Self>,
                    mf: FloatTensor<Self>,
                    mi: FloatTensor<Self>,
                    cp: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::ordered_cell::host::ordered_cell::<Self>;
                fn ordered_cell_backward(
                    gates: FloatTensor<Self>,
                    mf: FloatTensor<Self>,
                    mi: FloatTensor<Self>,
                    cp: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                ) -> [FloatTensor<Self>; 4]
                    => $crate::ops::ordered_cell::host::ordered_cell_backward::<Self>;
                fn ordered_gates(
                    gates: FloatTensor<Self>,
                    mf: FloatTensor<Self>,
                    mi: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::ordered_cell::host::ordered_gates::<Self>;
                fn ordered_gates_backward(
                    gates: FloatTensor<Self>,
                    mf: FloatTensor<Self>,
                    mi: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                ) -> [FloatTensor<Self>; 3]
                    => $crate::ops::ordered_cell::host::ordered_gates_backward::<Self>;
                fn select_mix(
                    s: FloatTensor<Self>,
                    parent: FloatTensor<Self>,
                    left: FloatTensor<Self>,
                    right: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::select_mix::host::select_mix::<Self>;
                fn select_mix_backward(
                    s: FloatTensor<Self>,
                    parent: FloatTensor<Self>,
                    left: FloatTensor<Self>,
                    right: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                ) -> [FloatTensor<Self>; 4]
                    => $crate::ops::select_mix::host::select_mix_backward::<Self>;
                fn select_mix_adjacent(
                    s: FloatTensor<Self>,
                    parent: FloatTensor<Self>,
                    x: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::select_mix::host::select_mix_adjacent::<Self>;
                fn select_mix_adjacent_backward(
                    s: FloatTensor<Self>,
                    parent: FloatTensor<Self>,
                    x: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                ) -> [FloatTensor<Self>; 3]
                    => $crate::ops::select_mix::host::select_mix_adjacent_backward::<Self>;
                fn merge_place(
                    old: FloatTensor<Self>,
                    new: FloatTensor<Self>,
                    s: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::select_mix::host::merge_place::<Self>;
                fn adjacent_pairs(x: FloatTensor<Self>) -> FloatTensor<Self>
                    => $crate::ops::adjacent::host::adjacent_pairs::<Self>;
                #[allow(clippy::too_many_arguments)]
                fn argmax_tree(
                    leaf_h: FloatTensor<Self>,
                    leaf_c: FloatTensor<Self>,
                    weight: FloatTensor<Self>,
                    bias: Option<FloatTensor<Self>>,
                    query: FloatTensor<Self>,
                    lengths: &[usize],
                    layout: &GateLayout,
                ) -> Option<$crate::ArgmaxTreeParts<Self>>
                    => $crate::ops::argmax_tree::host::argmax_tree::<Self>;
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
                ) -> Option<$crate::StGumbelTreeParts<Self>>
                    => $crate::ops::gumbel_tree::host::st_gumbel_tree::<Self>;
                fn adjacent_pairs_backward(grad: FloatTensor<Self>) -> FloatTensor<Self>
                    => $crate::ops::adjacent::host::adjacent_pairs_backward::<Self>;
                fn causal_windows(x: FloatTensor<Self>, k: usize) -> FloatTensor<Self>
                    => $crate::ops::window::host::causal_windows::<Self>;
                fn causal_windows_backward(grad: FloatTensor<Self>, k: usize) -> FloatTensor<Self>
                    => $crate::ops::window::host::causal_windows_backward::<Self>;
                fn activation(x: FloatTensor<Self>, act: Activation) -> FloatTensor<Self>
                    => $crate::ops::activation::host::activation::<Self>;
                fn activation_backward(
                    y: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                    act: Activation,
                ) -> FloatTensor<Self>
                    => $crate::ops::activation::host::activation_backward::<Self>;
                fn narrow_backward(
                    grad: FloatTensor<Self>,
                    shape: Shape,
                    dim: usize,
                    start: usize,
                ) -> FloatTensor<Self>
                    => $crate::ops::rows::host::narrow_backward::<Self>;
                fn select_rows_backward(
                    grad: FloatTensor<Self>,
                    rows: &[usize],
                    n: usize,
                ) -> FloatTensor<Self>
                    => $crate::ops::rows::host::select_rows_backward::<Self>;
                fn write_rows(
                    t: FloatTensor<Self>,
                    start: usize,
                    rows: FloatTensor<Self>,
                ) -> FloatTensor<Self>
                    => $crate::ops::rows::host::write_rows::<Self>;
                fn contiguous(x: FloatTensor<Self>) -> FloatTensor<Self>
                    => $crate::ops::memory::host::contiguous::<Self>;
                fn zeros(shape: Shape, device: &Device<Self>) -> FloatTensor<Self>
                    => $crate::ops::memory::host::zeros::<Self>;
                fn grouped_attention(
                    q: FloatTensor<Self>,
                    k: FloatTensor<Self>,
                    v: FloatTensor<Self>,
                    bias: Option<FloatTensor<Self>>,
                    spec: $crate::AttentionSpec,
                    keep: bool,
                ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>)
                    => $crate::ops::attention::host::grouped_attention::<Self>;
                #[allow(clippy::type_complexity)]
                fn grouped_attention_backward(
                    q: FloatTensor<Self>,
                    k: FloatTensor<Self>,
                    v: FloatTensor<Self>,
                    weights: FloatTensor<Self>,
                    bias_shape: Option<Shape>,
                    spec: $crate::AttentionSpec,
                    grad: FloatTensor<Self>,
                ) -> (
                    FloatTensor<Self>,
                    FloatTensor<Self>,
                    FloatTensor<Self>,
                    Option<FloatTensor<Self>>,
                )
                    => $crate::ops::attention::host::grouped_attention_backward::<Self>;
                fn affine(
                    x: FloatTensor<Self>,
                    w: FloatTensor<Self>,
                    b: Option<FloatTensor<Self>>,
                ) -> FloatTensor<Self>
                    => $crate::ops::linear::host::affine::<Self>;
                fn affine_pair(
                    x: FloatTensor<Self>,
                    w: FloatTensor<Self>,
                    h: FloatTensor<Self>,
                    u: FloatTensor<Self>,
                    b: Option<FloatTensor<Self>>,
                ) -> FloatTensor<Self>
                    => $crate::ops::linear::host::affine_pair::<Self>;
                #[allow(clippy::type_complexity)]
                fn layer_norm_rows_backward(
                    x: FloatTensor<Self>,
                    gamma: Option<FloatTensor<Self>>,
                    epsilon: f64,
                    grad: FloatTensor<Self>,
                ) -> (FloatTensor<Self>, Option<(FloatTensor<Self>, FloatTensor<Self>)>)
                    => $crate::ops::layer_norm::host::layer_norm_backward::<Self>;
                fn linear_scan(au: FloatTensor<Self>, c0: FloatTensor<Self>) -> FloatTensor<Self>
                    => $crate::ops::linear_scan::host::linear_scan::<Self>;
                fn linear_scan_backward(
                    au: FloatTensor<Self>,
                    c0: FloatTensor<Self>,
                    grad: FloatTensor<Self>,
                ) -> [FloatTensor<Self>; 2]
                    => $crate::ops::linear_scan::host::linear_scan_backward::<Self>;
            }
        }
    };
}
pub(crate) use host_backend;

#[cfg(test)]
mod tests {
    use super::strided_to_vec;
    use proptest::prelude::*;

    /// Element `idx` of the view, by the definition of strides.
    fn naive(src: &[f32], shape: &[usize], strides: &[isize], offset: usize) -> Vec<f32> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let mut at = offset as isize;
                for d in (0..shape.len()).rev() {
                    at += (flat % shape[d]) as isize * strides[d];
                    flat /= shape[d];
                }
                src[at as usize]
            })
            .collect()
    }

    proptest! {
        /// Views of a larger buffer: any order of its dimensions (transposes), any window of
        /// each (narrows), any dimension broadcast (stride 0), sizes including 1 and 0.
        #[test]
        fn strided_copies_read_what_the_strides_say(
            full in proptest::collection::vec(1usize..6, 1..5),
            picks in proptest::collection::vec((0usize..6, 0usize..6, any::<bool>()), 4),
            order in Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
        ) {
            let rank = full.len();
            // Row-major strides of the full buffer, then a permutation of the dimensions.
            let mut strides = vec![1isize; rank];
            for d in (0..rank - 1).rev() {
                strides[d] = strides[d + 1] * full[d + 1] as isize;
            }
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.rotate_left((order % rank as u64) as usize);
            let src: Vec<f32> = (0..full.iter().product::<usize>()).map(|i| i as f32).collect();
            let mut shape = Vec::new();
            let mut st = Vec::new();
            let mut offset = 0usize;
            for (k, &d) in perm.iter().enumerate() {
                let (start, len, broadcast) = picks[k];
                let start = start % full[d];
                let len = len % (full[d] - start + 1);
                offset += start * strides[d] as usize;
                shape.push(if broadcast { len.max(1) + 1 } else { len });
                st.push(if broadcast { 0 } else { strides[d] });
            }
            let got = strided_to_vec(&src, &shape, &st, offset).unwrap();
            prop_assert_eq!(got, naive(&src, &shape, &st, offset), "shape {:?} strides {:?}", shape, st);
        }
    }

    #[test]
    fn negative_strides_are_left_to_the_backend() {
        assert!(strided_to_vec(&[1.0, 2.0], &[2], &[-1], 1).is_none());
    }
}
