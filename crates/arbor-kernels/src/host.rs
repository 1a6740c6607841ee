//! The fused ops on CPU backends: `f32` tensors run the [`cpu`](crate::cpu) kernels on their
//! memory (borrowed when it is contiguous, copied once when it is a strided view); other float
//! types return `None` so the caller falls back to the plain-op defaults.

use std::ops::Deref;

use burn::tensor::{Shape, TensorMetadata};

use crate::{cpu, par, Activation, GateLayout};

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

/// Products at least this large (`m·n·k`) run on rayon's pool, as Flex's own do.
const PARALLEL_PRODUCT: usize = 192 * 192 * 192;

/// How `gemm` runs a product of `work` multiply-adds: on rayon's threads from
/// [`PARALLEL_PRODUCT`] on, on the calling thread below it.
fn product_parallelism(work: usize) -> gemm::Parallelism {
    if work >= PARALLEL_PRODUCT {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    }
}

/// `x·w (+ b)` on a new row-major buffer: prefilled with `b`'s rows and accumulated into, or
/// written by the product alone. `None` when an input is not an `f32` matrix the backend
/// exposes.
pub(crate) fn matmul<T: HostTensor>(x: &T, w: &T, b: Option<&T>) -> Option<T> {
    matmul_sum(&[(x, w)], b)
}

/// `Σ_i x_i·w_i (+ b)` on one new row-major buffer: prefilled with `b`'s rows (or written by
/// the first product), every other product accumulated into it by `gemm`'s `read_dst`, so a
/// sum of products costs no elementwise pass and no buffer beyond the output. The first
/// product sets the width `n`; a narrower product adds into the last columns. `None` when an
/// input is not an `f32` matrix the backend exposes.
pub(crate) fn matmul_sum<T: HostTensor>(terms: &[(&T, &T)], b: Option<&T>) -> Option<T> {
    let m = terms.first()?.0.shape()[0];
    let n = terms.first()?.1.shape()[1];
    let mut operands = Vec::with_capacity(terms.len());
    for (x, w) in terms {
        let width = w.shape()[1];
        if width > n {
            return None;
        }
        operands.push((x.matrix()?, w.matrix()?, x.shape()[1], width));
    }
    let bias = match b {
        Some(b) => Some(b.host()?),
        None => None,
    };
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let mut filled = false;
    if let Some(bias) = &bias {
        for _ in 0..m {
            out.extend_from_slice(bias);
        }
        filled = true;
    }
    for ((xs, xo, x_rs, x_cs), (ws, wo, w_rs, w_cs), k, width) in operands {
        if m * width == 0 || k == 0 {
            continue;
        }
        if !filled && width < n {
            // A product on the last columns only: the others start at zero.
            out.resize(m * n, 0.0);
            filled = true;
        }
        let parallelism = product_parallelism(m * width * k);
        // SAFETY: the strides and offsets are the tensors' own, so every element the product
        // reads lies inside its buffer; `out` has room for `m·n` values; the product writes
        // columns `n − width..n` of each row (`width ≤ n`), and either all `m·n` values are
        // already set (bias rows, zeros or an earlier product, read and accumulated into) or
        // this is a full-width product (`width = n`, `read_dst` false, `k > 0`) that writes
        // them all before the length is set.
        unsafe {
            gemm::gemm(
                m,
                width,
                k,
                out.as_mut_ptr().add(n - width),
                1,
                n as isize,
                filled,
                xs.as_ptr().add(xo),
                x_cs,
                x_rs,
                ws.as_ptr().add(wo),
                w_cs,
                w_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
            out.set_len(m * n);
        }
        filled = true;
    }
    if !filled {
        // An empty sum: zeros.
        out.resize(m * n, 0.0);
    }
    Some(T::from_f32(out, Shape::new([m, n])))
}

/// The gradients of layer normalisation: `dx` (rows in parallel) and, with `gamma`, `(dγ, dβ)`.
#[allow(clippy::type_complexity)]
pub(crate) fn layer_norm_backward<T: HostTensor>(
    x: &T,
    gamma: Option<&T>,
    epsilon: f64,
    grad: &T,
) -> Option<(T, Option<(T, T)>)> {
    let shape = x.shape();
    let d = *shape.as_slice().last()?;
    let (xx, g) = (x.host()?, grad.host()?);
    let gamma = match gamma {
        Some(gm) => Some(gm.host()?),
        None => None,
    };
    let rows = xx.len().checked_div(d).unwrap_or(0);
    let mut dx = vec![0f32; xx.len()];
    // Each row's (mean, 1/σ), computed once for both passes.
    let mut stats = vec![0f32; 2 * rows];
    par::rows(rows, 2 * d, vec![(&mut dx, d), (&mut stats, 2)], &|r, o| {
        let [dx, stats] = o else {
            unreachable!("two outputs")
        };
        cpu::layer_norm_backward(
            dx,
            stats,
            par::at(&xx, &r, d),
            par::at(&g, &r, d),
            d,
            gamma.as_deref(),
            epsilon,
        );
    });
    let affine = gamma.map(|_| {
        let (mut dg, mut db) = (vec![0f32; d], vec![0f32; d]);
        cpu::layer_norm_affine_backward(&mut dg, &mut db, &stats, &xx, &g, d);
        (
            T::from_f32(dg, Shape::new([d])),
            T::from_f32(db, Shape::new([d])),
        )
    });
    Some((T::from_f32(dx, shape), affine))
}

/// `t` in memory of its own, row-major: itself when it already is (or is not `f32`), a copy
/// by contiguous runs otherwise.
pub(crate) fn contiguous<T: HostTensor>(t: T) -> T {
    let copy = match t.host() {
        Some(HostBuf::Owned(v)) => v,
        _ => return t,
    };
    T::from_f32(copy, t.shape())
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
    /// The tensor's own `f32` memory, row-major, when it is contiguous and no other tensor
    /// shares it (so writing to it changes no other value); `None` otherwise.
    fn host_mut(&mut self) -> Option<&mut [f32]> {
        None
    }
}

/// Writes `rows` over rows `start..` of `t` in place when `t`'s memory is its own; gives `t`
/// back unchanged otherwise.
pub(crate) fn write_rows<T: HostTensor>(mut t: T, start: usize, rows: &T) -> Result<T, T> {
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

/// The gradient of `select_rows`: one zero `[n, w]` buffer with `grad`'s rows added in.
pub(crate) fn select_rows_backward<T: HostTensor>(grad: &T, rows: &[usize], n: usize) -> Option<T> {
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

fn width<T: TensorMetadata>(gates: &T, layout: &GateLayout) -> usize {
    gates.shape().as_slice().last().copied().unwrap_or(0) / layout.blocks
}

fn all<'a, T: HostTensor>(ts: &'a [T]) -> Option<Vec<HostBuf<'a>>> {
    ts.iter().map(HostTensor::host).collect()
}

pub(crate) fn gated_cell<T: HostTensor>(
    gates: &T,
    children: &[T],
    layout: &GateLayout,
) -> Option<T> {
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

pub(crate) fn gated_cell_backward<T: HostTensor>(
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

pub(crate) fn gated_output<T: HostTensor>(gates: &T, c: &T, layout: &GateLayout) -> Option<T> {
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

pub(crate) fn gated_output_backward<T: HostTensor>(
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

pub(crate) fn select_mix<T: HostTensor>(s: &T, p: &T, l: &T, r: &T) -> Option<T> {
    let (ss, pp, ll, rr) = (s.host()?, p.host()?, l.host()?, r.host()?);
    let shape = p.shape();
    let (b, k, d) = (shape[0], shape[1], shape[2]);
    let mut out = vec![0f32; shape.num_elements()];
    par::rows(b, 4 * k * d, vec![(&mut out, k * d)], &|rg, o| {
        let (p, l, r) = (
            par::at(&pp, &rg, k * d),
            par::at(&ll, &rg, k * d),
            par::at(&rr, &rg, k * d),
        );
        cpu::select_mix(par::at(&ss, &rg, k), p, l, r, k, d, o[0]);
    });
    Some(T::from_f32(out, shape))
}

pub(crate) fn select_mix_backward<T: HostTensor>(
    s: &T,
    p: &T,
    l: &T,
    r: &T,
    grad: &T,
) -> Option<[T; 4]> {
    let (ss, pp, ll, rr, g) = (s.host()?, p.host()?, l.host()?, r.host()?, grad.host()?);
    let (s_shape, shape) = (s.shape(), p.shape());
    let (b, k, d) = (shape[0], shape[1], shape[2]);
    let n = shape.num_elements();
    let mut d_s = vec![0f32; s_shape.num_elements()];
    let (mut d_p, mut d_l, mut d_r) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let kd = k * d;
    let outs = vec![
        (&mut d_s[..], k),
        (&mut d_p[..], kd),
        (&mut d_l[..], kd),
        (&mut d_r[..], kd),
    ];
    par::rows(b, 7 * kd, outs, &|rg, o| {
        let [d_s, d_p, d_l, d_r] = o else {
            unreachable!("four outputs")
        };
        let (p, l, r, g) = (
            par::at(&pp, &rg, kd),
            par::at(&ll, &rg, kd),
            par::at(&rr, &rg, kd),
            par::at(&g, &rg, kd),
        );
        cpu::select_mix_backward(par::at(&ss, &rg, k), p, l, r, g, k, d, d_s, d_p, d_l, d_r);
    });
    Some([
        T::from_f32(d_s, s_shape),
        T::from_f32(d_p, shape.clone()),
        T::from_f32(d_l, shape.clone()),
        T::from_f32(d_r, shape),
    ])
}

/// Rows `r` of the ordered ops' inputs: gates `[n, 4h]`, master forget and input `[n, C]`.
fn ordered_rows<'a>(
    gates: &'a [f32],
    master_forget: &'a [f32],
    master_input: &'a [f32],
    r: &std::ops::Range<usize>,
    h: usize,
    chunks: usize,
) -> (&'a [f32], &'a [f32], &'a [f32]) {
    (
        par::at(gates, r, 4 * h),
        par::at(master_forget, r, chunks),
        par::at(master_input, r, chunks),
    )
}

pub(crate) fn ordered_cell<T: HostTensor>(gates: &T, mf: &T, mi: &T, cp: &T) -> Option<T> {
    let (g, f, i, c) = (gates.host()?, mf.host()?, mi.host()?, cp.host()?);
    let (shape, chunks) = (cp.shape(), mf.shape()[1]);
    let (rows, h) = (shape[0], shape[1]);
    let mut out = vec![0f32; shape.num_elements()];
    par::rows(rows, 6 * h, vec![(&mut out, h)], &|r, o| {
        let (g, f, i) = ordered_rows(&g, &f, &i, &r, h, chunks);
        cpu::ordered_cell(g, f, i, par::at(&c, &r, h), chunks, h, o[0]);
    });
    Some(T::from_f32(out, shape))
}

pub(crate) fn ordered_cell_backward<T: HostTensor>(
    gates: &T,
    mf: &T,
    mi: &T,
    cp: &T,
    grad: &T,
) -> Option<[T; 4]> {
    let (g, f, i, c, gr) = (
        gates.host()?,
        mf.host()?,
        mi.host()?,
        cp.host()?,
        grad.host()?,
    );
    let (g_shape, m_shape, shape) = (gates.shape(), mf.shape(), cp.shape());
    let (rows, chunks, h) = (shape[0], m_shape[1], shape[1]);
    let mut d_g = vec![0f32; g_shape.num_elements()];
    let (mut d_f, mut d_i) = (
        vec![0f32; m_shape.num_elements()],
        vec![0f32; m_shape.num_elements()],
    );
    let mut d_c = vec![0f32; shape.num_elements()];
    let outs = vec![
        (&mut d_g[..], 4 * h),
        (&mut d_f[..], chunks),
        (&mut d_i[..], chunks),
        (&mut d_c[..], h),
    ];
    par::rows(rows, 11 * h, outs, &|r, o| {
        let [d_g, d_f, d_i, d_c] = o else {
            unreachable!("four outputs")
        };
        let (g, f, i) = ordered_rows(&g, &f, &i, &r, h, chunks);
        let (c, gr) = (par::at(&c, &r, h), par::at(&gr, &r, h));
        cpu::ordered_cell_backward(g, f, i, c, gr, chunks, h, d_g, d_f, d_i, d_c);
    });
    Some([
        T::from_f32(d_g, g_shape),
        T::from_f32(d_f, m_shape.clone()),
        T::from_f32(d_i, m_shape),
        T::from_f32(d_c, shape),
    ])
}

pub(crate) fn ordered_gates<T: HostTensor>(gates: &T, mf: &T, mi: &T) -> Option<T> {
    let (g, f, i) = (gates.host()?, mf.host()?, mi.host()?);
    let (n, h, chunks) = (gates.shape()[0], gates.shape()[1] / 4, mf.shape()[1]);
    let mut out = vec![0f32; n * 2 * h];
    par::rows(n, 6 * h, vec![(&mut out, 2 * h)], &|r, o| {
        let (g, f, i) = ordered_rows(&g, &f, &i, &r, h, chunks);
        cpu::ordered_gates(g, f, i, chunks, h, o[0]);
    });
    Some(T::from_f32(out, Shape::new([n, 2 * h])))
}

pub(crate) fn ordered_gates_backward<T: HostTensor>(
    gates: &T,
    mf: &T,
    mi: &T,
    grad: &T,
) -> Option<[T; 3]> {
    let (g, f, i, gr) = (gates.host()?, mf.host()?, mi.host()?, grad.host()?);
    let (g_shape, m_shape) = (gates.shape(), mf.shape());
    let mut d_g = vec![0f32; g_shape.num_elements()];
    let (mut d_f, mut d_i) = (
        vec![0f32; m_shape.num_elements()],
        vec![0f32; m_shape.num_elements()],
    );
    let (rows, chunks, h) = (g_shape[0], m_shape[1], g_shape[1] / 4);
    let outs = vec![
        (&mut d_g[..], 4 * h),
        (&mut d_f[..], chunks),
        (&mut d_i[..], chunks),
    ];
    par::rows(rows, 10 * h, outs, &|r, o| {
        let [d_g, d_f, d_i] = o else {
            unreachable!("three outputs")
        };
        let (g, f, i) = ordered_rows(&g, &f, &i, &r, h, chunks);
        cpu::ordered_gates_backward(g, f, i, par::at(&gr, &r, 2 * h), chunks, h, d_g, d_f, d_i);
    });
    Some([
        T::from_f32(d_g, g_shape),
        T::from_f32(d_f, m_shape.clone()),
        T::from_f32(d_i, m_shape),
    ])
}

pub(crate) fn adjacent_pairs<T: HostTensor>(x: &T) -> Option<T> {
    let xx = x.host()?;
    let (b, m, d) = dims3(x);
    if m < 2 {
        return None;
    }
    let mut out = vec![0f32; b * (m - 1) * 2 * d];
    par::rows(b, 3 * m * d, vec![(&mut out, (m - 1) * 2 * d)], &|r, o| {
        cpu::adjacent_pairs(par::at(&xx, &r, m * d), (r.len(), m, d), o[0]);
    });
    Some(T::from_f32(out, Shape::new([b, m - 1, 2 * d])))
}

pub(crate) fn adjacent_pairs_backward<T: HostTensor>(grad: &T) -> Option<T> {
    let g = grad.host()?;
    let (b, m1, d2) = dims3(grad);
    let (m, d) = (m1 + 1, d2 / 2);
    let mut dx = vec![0f32; b * m * d];
    par::rows(b, 3 * m * d, vec![(&mut dx, m * d)], &|r, o| {
        cpu::adjacent_pairs_backward(par::at(&g, &r, m1 * d2), (r.len(), m, d), o[0]);
    });
    Some(T::from_f32(dx, Shape::new([b, m, d])))
}

pub(crate) fn activation<T: HostTensor>(x: &T, act: Activation) -> Option<T> {
    let xx = x.host()?;
    let shape = x.shape();
    let mut out = vec![0f32; shape.num_elements()];
    par::rows(out.len(), 4, vec![(&mut out, 1)], &|r, o| {
        let src = par::at(&xx, &r, 1);
        match act {
            Activation::Sigmoid => cpu::sigmoid(o[0], src),
            Activation::Tanh => cpu::tanh(o[0], src),
            Activation::Gelu => cpu::gelu(o[0], src),
        }
    });
    Some(T::from_f32(out, shape))
}

pub(crate) fn activation_backward<T: HostTensor>(y: &T, grad: &T, act: Activation) -> Option<T> {
    let (yy, g) = (y.host()?, grad.host()?);
    let shape = y.shape();
    let mut out = vec![0f32; shape.num_elements()];
    par::rows(out.len(), 2, vec![(&mut out, 1)], &|r, o| {
        let (y, g) = (par::at(&yy, &r, 1), par::at(&g, &r, 1));
        match act {
            Activation::Sigmoid => {
                for ((o, y), g) in o[0].iter_mut().zip(y).zip(g) {
                    *o = g * y * (1.0 - y);
                }
            }
            Activation::Tanh => {
                for ((o, y), g) in o[0].iter_mut().zip(y).zip(g) {
                    *o = g * (1.0 - y * y);
                }
            }
            // `y` is the input here (Activation::backward_from_input).
            Activation::Gelu => cpu::gelu_backward(o[0], y, g),
        }
    });
    Some(T::from_f32(out, shape))
}

fn dims3<T: TensorMetadata>(a: &T) -> (usize, usize, usize) {
    let shape = a.shape();
    (shape[0], shape[1], shape[2])
}

pub(crate) fn linear_scan<T: HostTensor>(a: &T, u: &T, c0: &T) -> Option<T> {
    let (aa, uu, cc) = (a.host()?, u.host()?, c0.host()?);
    let shape = a.shape();
    let (b, t, h) = dims3(a);
    let mut out = vec![0f32; shape.num_elements()];
    par::rows(b, 3 * t * h, vec![(&mut out, t * h)], &|r, o| {
        let (a, u) = (par::at(&aa, &r, t * h), par::at(&uu, &r, t * h));
        cpu::linear_scan(a, u, par::at(&cc, &r, h), (r.len(), t, h), o[0]);
    });
    Some(T::from_f32(out, shape))
}

pub(crate) fn linear_scan_backward<T: HostTensor>(
    a: &T,
    u: &T,
    c0: &T,
    grad: &T,
) -> Option<[T; 3]> {
    let (aa, uu, cc, g) = (a.host()?, u.host()?, c0.host()?, grad.host()?);
    let (shape, c_shape) = (a.shape(), c0.shape());
    let (b, t, h) = dims3(a);
    let n = shape.num_elements();
    let (mut d_a, mut d_u) = (vec![0f32; n], vec![0f32; n]);
    let mut d_c0 = vec![0f32; c_shape.num_elements()];
    let outs = vec![
        (&mut d_a[..], t * h),
        (&mut d_u[..], t * h),
        (&mut d_c0[..], h),
    ];
    par::rows(b, 7 * t * h, outs, &|r, o| {
        let [d_a, d_u, d_c0] = o else {
            unreachable!("three outputs")
        };
        let (a, u, g) = (
            par::at(&aa, &r, t * h),
            par::at(&uu, &r, t * h),
            par::at(&g, &r, t * h),
        );
        cpu::linear_scan_backward(
            a,
            u,
            par::at(&cc, &r, h),
            g,
            (r.len(), t, h),
            d_a,
            d_u,
            d_c0,
        );
    });
    Some([
        T::from_f32(d_a, shape.clone()),
        T::from_f32(d_u, shape),
        T::from_f32(d_c0, c_shape),
    ])
}

/// `dst (+)= lhs·rhs` on slices: `dst` is `m × n` with row stride `dst_rs` (columns
/// contiguous), `lhs` is `m × k` and `rhs` is `k × n` with the given (row, column) strides, all
/// in elements. With `accumulate` the product is added to `dst`, else it overwrites it.
///
/// # Panics
/// When a stride or length would let the product read or write outside a slice.
#[allow(clippy::too_many_arguments)]
fn gemm_slices(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: &[f32],
    (l_rs, l_cs): (usize, usize),
    rhs: &[f32],
    (r_rs, r_cs): (usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        dst.len() > last(m, dst_rs, n, 1),
        "gemm_slices: dst too short"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        lhs.len() > last(m, l_rs, k, l_cs),
        "gemm_slices: lhs too short"
    );
    assert!(
        rhs.len() > last(k, r_rs, n, r_cs),
        "gemm_slices: rhs too short"
    );
    let parallelism = product_parallelism(m * n * k);
    // SAFETY: the asserts above keep every element the product reads (lhs, rhs) or reads and
    // writes (dst) inside its slice; `dst` is borrowed mutably and does not alias the inputs.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            lhs.as_ptr(),
            l_cs as isize,
            l_rs as isize,
            rhs.as_ptr(),
            r_cs as isize,
            r_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Whether row `b` is frozen at step `s` (past its length; no lengths: never).
fn frozen(lengths: &[usize], b: usize, s: usize) -> bool {
    lengths.get(b).is_some_and(|&len| s >= len)
}

/// The LSTM recurrence over a sequence ([`crate::lstm_sequence`]): per step one product
/// `h_{t−1}·U` accumulated into the step's rows of `xp`, then the fused update of every row.
/// Returns `[b, t, 2h]` (`h`, then `c`, per step) and, with `keep_gates`, the activated gates
/// `[b, t, 4h]`.
pub(crate) fn lstm_sequence<T: HostTensor>(
    xp: &T,
    u: &T,
    h0: &T,
    c0: &T,
    lengths: &[usize],
    keep_gates: bool,
) -> Option<(T, Option<T>)> {
    let (xx, uu, hh0, cc0) = (xp.host()?, u.host()?, h0.host()?, c0.host()?);
    let (b, t, w) = dims3(xp);
    let h = w / 4;
    let mut hs = hh0.to_vec();
    let mut cs = cc0.to_vec();
    let (mut h_new, mut c_new) = (vec![0f32; b * h], vec![0f32; b * h]);
    let mut pre = vec![0f32; b * w];
    let mut act = vec![0f32; b * w];
    let mut out = vec![0f32; b * t * 2 * h];
    let mut gates = if keep_gates {
        vec![0f32; b * t * w]
    } else {
        Vec::new()
    };
    for s in 0..t {
        for r in 0..b {
            let at = (r * t + s) * w;
            pre[r * w..(r + 1) * w].copy_from_slice(&xx[at..at + w]);
        }
        gemm_slices((b, w, h), &mut pre, w, true, &hs, (h, 1), &uu, (w, 1));
        let (pre_ref, cs_ref) = (&pre, &cs);
        par::rows(
            b,
            12 * h,
            vec![(&mut act, w), (&mut h_new, h), (&mut c_new, h)],
            &|r, o| {
                let [act, ho, cn] = o else {
                    unreachable!("three outputs")
                };
                cpu::lstm_step(
                    par::at(pre_ref, &r, w),
                    par::at(cs_ref, &r, h),
                    h,
                    act,
                    ho,
                    cn,
                );
            },
        );
        for r in 0..b {
            let row = r * h..(r + 1) * h;
            if !frozen(lengths, r, s) {
                hs[row.clone()].copy_from_slice(&h_new[row.clone()]);
                cs[row.clone()].copy_from_slice(&c_new[row.clone()]);
            }
            let at = (r * t + s) * 2 * h;
            out[at..at + h].copy_from_slice(&hs[row.clone()]);
            out[at + h..at + 2 * h].copy_from_slice(&cs[row]);
            if keep_gates && !frozen(lengths, r, s) {
                let at = (r * t + s) * w;
                gates[at..at + w].copy_from_slice(&act[r * w..(r + 1) * w]);
            }
        }
    }
    let gates = keep_gates.then(|| T::from_f32(gates, Shape::new([b, t, w])));
    Some((T::from_f32(out, Shape::new([b, t, 2 * h])), gates))
}

/// The gradients of [`lstm_sequence`] with respect to `xp`, `u`, `h0` and `c0`, from the
/// saved output and activated gates: backpropagation through time, one product `δ_t·Uᵀ` per
/// step, and `dU = Σ_t h_{t−1}ᵀ·δ_t` as one product at the end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lstm_sequence_backward<T: HostTensor>(
    u: &T,
    h0: &T,
    c0: &T,
    out: &T,
    gates: &T,
    lengths: &[usize],
    grad: &T,
) -> Option<[T; 4]> {
    let (uu, hh0, cc0) = (u.host()?, h0.host()?, c0.host()?);
    let (oo, gg, dd) = (out.host()?, gates.host()?, grad.host()?);
    let (b, t, w) = dims3(gates);
    let h = w / 4;
    let mut d_xp = vec![0f32; b * t * w];
    let mut h_prev = vec![0f32; b * t * h];
    let (mut dh, mut dc) = (vec![0f32; b * h], vec![0f32; b * h]);
    let (mut g_h, mut g_c) = (vec![0f32; b * h], vec![0f32; b * h]);
    let (mut c_here, mut c_before) = (vec![0f32; b * h], vec![0f32; b * h]);
    let mut act = vec![0f32; b * w];
    let mut d_pre = vec![0f32; b * w];
    let mut d_c_prev = vec![0f32; b * h];
    for s in (0..t).rev() {
        for r in 0..b {
            let row = r * h..(r + 1) * h;
            let at = (r * t + s) * 2 * h;
            for (j, k) in row.clone().enumerate() {
                g_h[k] = dd[at + j] + dh[k];
                g_c[k] = dd[at + h + j] + dc[k];
            }
            c_here[row.clone()].copy_from_slice(&oo[at + h..at + 2 * h]);
            if s > 0 {
                let before = (r * t + s - 1) * 2 * h;
                c_before[row.clone()].copy_from_slice(&oo[before + h..before + 2 * h]);
                h_prev[(r * t + s) * h..(r * t + s + 1) * h]
                    .copy_from_slice(&oo[before..before + h]);
            } else {
                c_before[row.clone()].copy_from_slice(&cc0[row.clone()]);
                h_prev[(r * t) * h..(r * t + 1) * h].copy_from_slice(&hh0[row.clone()]);
            }
            let at = (r * t + s) * w;
            act[r * w..(r + 1) * w].copy_from_slice(&gg[at..at + w]);
        }
        let (act_ref, c_ref, cb_ref, gh_ref, gc_ref) = (&act, &c_here, &c_before, &g_h, &g_c);
        par::rows(
            b,
            20 * h,
            vec![(&mut d_pre, w), (&mut d_c_prev, h)],
            &|r, o| {
                let [dp, dcp] = o else {
                    unreachable!("two outputs")
                };
                let mut scratch = vec![0f32; h];
                cpu::lstm_step_backward(
                    par::at(act_ref, &r, w),
                    par::at(c_ref, &r, h),
                    par::at(cb_ref, &r, h),
                    par::at(gh_ref, &r, h),
                    par::at(gc_ref, &r, h),
                    h,
                    dp,
                    dcp,
                    &mut scratch,
                );
            },
        );
        // Frozen rows pass their gradients to the state before them unchanged.
        for r in 0..b {
            let row = r * h..(r + 1) * h;
            if frozen(lengths, r, s) {
                d_pre[r * w..(r + 1) * w].fill(0.0);
                dh[row.clone()].copy_from_slice(&g_h[row.clone()]);
                dc[row.clone()].copy_from_slice(&g_c[row]);
            } else {
                dh[row.clone()].fill(0.0);
                dc[row.clone()].copy_from_slice(&d_c_prev[row]);
            }
            let at = (r * t + s) * w;
            d_xp[at..at + w].copy_from_slice(&d_pre[r * w..(r + 1) * w]);
        }
        // dh_{t−1} += δ_t·Uᵀ (`U` is `[h, w]` row-major, so `Uᵀ` has strides (1, w)).
        gemm_slices((b, h, w), &mut dh, h, true, &d_pre, (w, 1), &uu, (1, w));
    }
    // dU = Σ_t h_{t−1}ᵀ·δ_t: `[h, b·t]·[b·t, w]`.
    let mut d_u = vec![0f32; h * w];
    gemm_slices(
        (h, w, b * t),
        &mut d_u,
        w,
        false,
        &h_prev,
        (1, h),
        &d_xp,
        (w, 1),
    );
    Some([
        T::from_f32(d_xp, Shape::new([b, t, w])),
        T::from_f32(d_u, Shape::new([h, w])),
        T::from_f32(dh, Shape::new([b, h])),
        T::from_f32(dc, Shape::new([b, h])),
    ])
}

/// The body of an `impl ArborBackend for …` header (the macro's input) for a CPU backend whose
/// float primitive implements [`HostTensor`]: the fused kernels for `f32`, the plain-op defaults otherwise.
macro_rules! host_backend {
    ($($header:tt)*) => {
        $($header)* {
            fn gated_cell(
                gates: FloatTensor<Self>,
                children: Vec<FloatTensor<Self>>,
                layout: &GateLayout,
            ) -> FloatTensor<Self> {
                match host::gated_cell(&gates, &children, layout) {
                    Some(out) => out,
                    None => reference::gated_cell::<Self>(gates, children, layout),
                }
            }

            fn gated_cell_backward(
                gates: FloatTensor<Self>,
                children: Vec<FloatTensor<Self>>,
                grad: FloatTensor<Self>,
                layout: &GateLayout,
            ) -> (FloatTensor<Self>, Vec<FloatTensor<Self>>) {
                match host::gated_cell_backward(&gates, &children, &grad, layout) {
                    Some(out) => out,
                    None => reference::gated_cell_backward::<Self>(gates, children, grad, layout),
                }
            }

            fn lstm_sequence(
                xp: FloatTensor<Self>,
                u: FloatTensor<Self>,
                h0: FloatTensor<Self>,
                c0: FloatTensor<Self>,
                lengths: &[usize],
                keep_gates: bool,
            ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
                match host::lstm_sequence(&xp, &u, &h0, &c0, lengths, keep_gates) {
                    Some(out) => out,
                    None => reference::lstm_sequence::<Self>(xp, u, h0, c0, lengths, keep_gates),
                }
            }

            fn lstm_sequence_backward(
                u: FloatTensor<Self>,
                h0: FloatTensor<Self>,
                c0: FloatTensor<Self>,
                out: FloatTensor<Self>,
                gates: FloatTensor<Self>,
                lengths: &[usize],
                grad: FloatTensor<Self>,
            ) -> [FloatTensor<Self>; 4] {
                match host::lstm_sequence_backward(&u, &h0, &c0, &out, &gates, lengths, &grad) {
                    Some(out) => out,
                    None => reference::lstm_sequence_backward::<Self>(
                        u, h0, c0, out, gates, lengths, grad,
                    ),
                }
            }

            fn gated_output(
                gates: FloatTensor<Self>,
                c: FloatTensor<Self>,
                layout: &GateLayout,
            ) -> FloatTensor<Self> {
                match host::gated_output(&gates, &c, layout) {
                    Some(out) => out,
                    None => reference::gated_output::<Self>(gates, c, layout),
                }
            }

            fn gated_output_backward(
                gates: FloatTensor<Self>,
                c: FloatTensor<Self>,
                grad: FloatTensor<Self>,
                layout: &GateLayout,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                match host::gated_output_backward(&gates, &c, &grad, layout) {
                    Some(out) => out,
                    None => reference::gated_output_backward::<Self>(gates, c, grad, layout),
                }
            }

            fn ordered_cell(
                gates: FloatTensor<Self>,
                mf: FloatTensor<Self>,
                mi: FloatTensor<Self>,
                cp: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                match host::ordered_cell(&gates, &mf, &mi, &cp) {
                    Some(out) => out,
                    None => reference::ordered_cell::<Self>(gates, mf, mi, cp),
                }
            }

            fn ordered_cell_backward(
                gates: FloatTensor<Self>,
                mf: FloatTensor<Self>,
                mi: FloatTensor<Self>,
                cp: FloatTensor<Self>,
                grad: FloatTensor<Self>,
            ) -> [FloatTensor<Self>; 4] {
                match host::ordered_cell_backward(&gates, &mf, &mi, &cp, &grad) {
                    Some(out) => out,
                    None => reference::ordered_cell_backward::<Self>(gates, mf, mi, cp, grad),
                }
            }

            fn select_mix(
                s: FloatTensor<Self>,
                parent: FloatTensor<Self>,
                left: FloatTensor<Self>,
                right: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                match host::select_mix(&s, &parent, &left, &right) {
                    Some(out) => out,
                    None => reference::select_mix::<Self>(s, parent, left, right),
                }
            }

            fn select_mix_backward(
                s: FloatTensor<Self>,
                parent: FloatTensor<Self>,
                left: FloatTensor<Self>,
                right: FloatTensor<Self>,
                grad: FloatTensor<Self>,
            ) -> [FloatTensor<Self>; 4] {
                match host::select_mix_backward(&s, &parent, &left, &right, &grad) {
                    Some(out) => out,
                    None => reference::select_mix_backward::<Self>(s, parent, left, right, grad),
                }
            }

            fn ordered_gates(
                gates: FloatTensor<Self>,
                mf: FloatTensor<Self>,
                mi: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                match host::ordered_gates(&gates, &mf, &mi) {
                    Some(out) => out,
                    None => reference::ordered_gates::<Self>(gates, mf, mi),
                }
            }

            fn ordered_gates_backward(
                gates: FloatTensor<Self>,
                mf: FloatTensor<Self>,
                mi: FloatTensor<Self>,
                grad: FloatTensor<Self>,
            ) -> [FloatTensor<Self>; 3] {
                match host::ordered_gates_backward(&gates, &mf, &mi, &grad) {
                    Some(out) => out,
                    None => reference::ordered_gates_backward::<Self>(gates, mf, mi, grad),
                }
            }

            fn adjacent_pairs(x: FloatTensor<Self>) -> FloatTensor<Self> {
                match host::adjacent_pairs(&x) {
                    Some(out) => out,
                    None => reference::adjacent_pairs::<Self>(x),
                }
            }

            fn adjacent_pairs_backward(grad: FloatTensor<Self>) -> FloatTensor<Self> {
                match host::adjacent_pairs_backward(&grad) {
                    Some(out) => out,
                    None => reference::adjacent_pairs_backward::<Self>(grad),
                }
            }

            fn activation(x: FloatTensor<Self>, act: Activation) -> FloatTensor<Self> {
                match host::activation(&x, act) {
                    Some(out) => out,
                    None => reference::activation::<Self>(x, act),
                }
            }

            fn activation_backward(
                y: FloatTensor<Self>,
                grad: FloatTensor<Self>,
                act: Activation,
            ) -> FloatTensor<Self> {
                match host::activation_backward(&y, &grad, act) {
                    Some(out) => out,
                    None => reference::activation_backward::<Self>(y, grad, act),
                }
            }

            fn select_rows_backward(
                grad: FloatTensor<Self>,
                rows: &[usize],
                n: usize,
            ) -> FloatTensor<Self> {
                match host::select_rows_backward(&grad, rows, n) {
                    Some(out) => out,
                    None => reference::select_rows_backward::<Self>(grad, rows, n),
                }
            }

            fn contiguous(x: FloatTensor<Self>) -> FloatTensor<Self> {
                host::contiguous(x)
            }

            fn affine(
                x: FloatTensor<Self>,
                w: FloatTensor<Self>,
                b: Option<FloatTensor<Self>>,
            ) -> FloatTensor<Self> {
                match host::matmul(&x, &w, b.as_ref()) {
                    Some(out) => out,
                    None => reference::linear::<Self>(x, w, b),
                }
            }

            #[allow(clippy::type_complexity)]
            fn layer_norm_rows_backward(
                x: FloatTensor<Self>,
                gamma: Option<FloatTensor<Self>>,
                epsilon: f64,
                grad: FloatTensor<Self>,
            ) -> (FloatTensor<Self>, Option<(FloatTensor<Self>, FloatTensor<Self>)>) {
                match host::layer_norm_backward(&x, gamma.as_ref(), epsilon, &grad) {
                    Some(out) => out,
                    None => reference::layer_norm_backward::<Self>(x, gamma, epsilon, grad),
                }
            }

            fn affine_pair(
                x: FloatTensor<Self>,
                w: FloatTensor<Self>,
                h: FloatTensor<Self>,
                u: FloatTensor<Self>,
                b: Option<FloatTensor<Self>>,
            ) -> FloatTensor<Self> {
                match host::matmul_sum(&[(&x, &w), (&h, &u)], b.as_ref()) {
                    Some(out) => out,
                    None => reference::linear_pair::<Self>(x, w, h, u, b),
                }
            }

            fn zeros(
                shape: burn::tensor::Shape,
                device: &burn::tensor::Device<Self>,
            ) -> FloatTensor<Self> {
                // The default float type, from a one-element tensor.
                let probe = burn::tensor::Tensor::<Self, 1>::zeros([1], device);
                if probe.dtype() == burn::tensor::DType::F32 {
                    let n = shape.num_elements();
                    <FloatTensor<Self> as host::HostTensor>::from_f32(vec![0.0; n], shape)
                } else {
                    reference::zeros::<Self>(shape, device)
                }
            }

            fn write_rows(
                t: FloatTensor<Self>,
                start: usize,
                rows: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                match host::write_rows(t, start, &rows) {
                    Ok(out) => out,
                    Err(t) => reference::write_rows::<Self>(t, start, rows),
                }
            }

            fn linear_scan(
                a: FloatTensor<Self>,
                u: FloatTensor<Self>,
                c0: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                match host::linear_scan(&a, &u, &c0) {
                    Some(out) => out,
                    None => reference::linear_scan::<Self>(a, u, c0),
                }
            }

            fn linear_scan_backward(
                a: FloatTensor<Self>,
                u: FloatTensor<Self>,
                c0: FloatTensor<Self>,
                grad: FloatTensor<Self>,
            ) -> [FloatTensor<Self>; 3] {
                match host::linear_scan_backward(&a, &u, &c0, &grad) {
                    Some(out) => out,
                    None => reference::linear_scan_backward::<Self>(a, u, c0, grad),
                }
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
