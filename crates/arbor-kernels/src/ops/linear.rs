//! The affine maps of matrices: `linear` (`x·w + b`), `linear_given` (its node with a value
//! computed elsewhere) and `linear_pair` (`x·w + h·u + b`); on the CPU backends the products
//! run through the `gemm` crate on arbor's own output buffer.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The matrix-product kernels the CPU backends run on this CPU, as `gemm` picks them at run
/// time: `"gemm AVX-512"` with the `x86-v4` feature on a CPU with AVX-512F, `"gemm AVX2/FMA"`
/// on one with AVX2 and FMA (the default build on any AVX-512 CPU too), `"gemm"` otherwise
/// (its SSE or NEON kernels). Benchmarks print it beside the machine.
pub fn cpu_product_kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::isa::avx512() {
            return "gemm AVX-512";
        }
        if crate::isa::avx2_fma() {
            return "gemm AVX2/FMA";
        }
    }
    "gemm"
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

/// The affine maps in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorPrimitive;

    use crate::reference::t2;

    /// `x·w + h·u + b` (`h·u` on the last columns when narrower): two plain products and a sum
    /// (the default of
    /// [`ArborBackend::affine_pair`](crate::ArborBackend::affine_pair)).
    pub fn linear_pair<B: Backend>(
        x: FloatTensor<B>,
        w: FloatTensor<B>,
        h: FloatTensor<B>,
        u: FloatTensor<B>,
        b: Option<FloatTensor<B>>,
    ) -> FloatTensor<B> {
        let xw = t2::<B>(linear::<B>(x, w, b));
        let hu = t2::<B>(linear::<B>(h, u, None));
        let ([m, n], nh) = (xw.dims(), hu.dims()[1]);
        let hu = if nh < n {
            let zeros = Tensor::<B, 2>::zeros([m, n - nh], &hu.device());
            Tensor::cat(vec![zeros, hu], 1)
        } else {
            hu
        };
        xw.add(hu).into_primitive().tensor()
    }

    /// `x·w + b` as Burn's `linear` computes it.
    pub fn linear<B: Backend>(
        x: FloatTensor<B>,
        w: FloatTensor<B>,
        b: Option<FloatTensor<B>>,
    ) -> FloatTensor<B> {
        let t2 = |t: FloatTensor<B>| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
        let b = b.map(|b| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(b)));
        burn::tensor::module::linear(t2(x), t2(w), b)
            .into_primitive()
            .tensor()
    }
}

/// The CPU backends' products: `gemm` on arbor's own buffers.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::reference;
    use crate::host::HostTensor;
    use crate::par;

    /// Products at least this large (`m·n·k`) run on rayon's pool, as Flex's own do.
    const PARALLEL_PRODUCT: usize = 192 * 192 * 192;

    /// How `gemm` runs a product of `work` multiply-adds: on rayon's threads from
    /// [`PARALLEL_PRODUCT`] on, on the calling thread below it. Also with a one-thread pool,
    /// unlike the kernels (`par::parallel`): `gemm`'s `Parallelism::None` blocks the columns in
    /// 128-panel pieces where `Rayon` takes them whole, which measured 1.5× slower on the
    /// Transformer's one-thread evaluation (docs/bench.md, "The main thread in rayon's pool").
    fn product_parallelism(work: usize) -> gemm::Parallelism {
        if work >= PARALLEL_PRODUCT {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        }
    }

    /// [`reference::linear`] through [`matmul`] on `f32` matrices; the reference otherwise.
    pub(crate) fn affine<B: Backend>(
        x: FloatTensor<B>,
        w: FloatTensor<B>,
        b: Option<FloatTensor<B>>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        matmul(&x, &w, b.as_ref()).unwrap_or_else(|| reference::linear::<B>(x, w, b))
    }

    /// [`reference::linear_pair`] through [`matmul_sum`] on `f32` matrices; the reference
    /// otherwise.
    pub(crate) fn affine_pair<B: Backend>(
        x: FloatTensor<B>,
        w: FloatTensor<B>,
        h: FloatTensor<B>,
        u: FloatTensor<B>,
        b: Option<FloatTensor<B>>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        matmul_sum(&[(&x, &w), (&h, &u)], b.as_ref())
            .unwrap_or_else(|| reference::linear_pair::<B>(x, w, h, u, b))
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
            // The bias rows on the pool's threads, as the product after them: written on the
            // calling thread alone, this pass left the other threads idle (6% of a Transformer
            // layer's evaluation).
            fill_rows(&mut out, bias, m);
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

    /// Appends `m` copies of `row` to the empty `out` (capacity at least `m·row.len()`), cut into
    /// ranges of rows on rayon's pool when that pays ([`par::parallel`], [`par::GRAIN`]). Written
    /// through `spare_capacity_mut` so that no thread zeroes the buffer first: `par::rows` takes
    /// initialised slices.
    fn fill_rows(out: &mut Vec<f32>, row: &[f32], m: usize) {
        use rayon::prelude::*;
        let n = row.len();
        let total = m * n;
        debug_assert!(out.is_empty() && out.capacity() >= total);
        let spare = &mut out.spare_capacity_mut()[..total];
        let fill = |chunk: &mut [std::mem::MaybeUninit<f32>]| {
            for dst in chunk.chunks_exact_mut(n.max(1)) {
                for (d, &v) in dst.iter_mut().zip(row) {
                    d.write(v);
                }
            }
        };
        if n > 0 && total >= 2 * par::GRAIN && par::parallel() {
            let rows_per = par::GRAIN.div_ceil(n);
            spare.par_chunks_mut(rows_per * n).for_each(fill);
        } else {
            fill(spare);
        }
        // SAFETY: every one of the first `total` elements was written above (each chunk is a
        // whole number of `n`-element rows, and together they cover `spare`).
        unsafe { out.set_len(total) };
    }

    /// The index of the last element of a `rows × cols` matrix with strides `(rs, cs)` (both
    /// counts at least 1): a slice holds the matrix when it is longer than this.
    pub(crate) fn last_index(rows: usize, rs: usize, cols: usize, cs: usize) -> usize {
        (rows - 1) * rs + (cols - 1) * cs
    }

    /// What every `dst (+)= lhs·rhs` on slices does first ([`gemm_slices`], the packed
    /// products): panics (naming `op`) when `dst` cannot hold `m` rows of `n` at row stride
    /// `dst_rs`, and carries out an empty product itself: nothing for no rows or columns, and
    /// for `k = 0` zeros (or, with `accumulate`, `dst` as it is). `true` when the product has
    /// multiply-adds left for the caller.
    pub(crate) fn product_has_work(
        op: &str,
        (m, n, k): (usize, usize, usize),
        dst: &mut [f32],
        dst_rs: usize,
        accumulate: bool,
    ) -> bool {
        if m == 0 || n == 0 {
            return false;
        }
        assert!(
            dst.len() > last_index(m, dst_rs, n, 1),
            "{op}: dst too short"
        );
        if k == 0 {
            if !accumulate {
                for r in 0..m {
                    dst[r * dst_rs..r * dst_rs + n].fill(0.0);
                }
            }
            return false;
        }
        true
    }

    /// `dst (+)= lhs·rhs` on slices: `dst` is `m × n` with row stride `dst_rs` (columns
    /// contiguous), `lhs` is `m × k` and `rhs` is `k × n` with the given (row, column) strides, all
    /// in elements. With `accumulate` the product is added to `dst`, else it overwrites it.
    ///
    /// # Panics
    /// When a stride or length would let the product read or write outside a slice.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm_slices(
        (m, n, k): (usize, usize, usize),
        dst: &mut [f32],
        dst_rs: usize,
        accumulate: bool,
        lhs: &[f32],
        (l_rs, l_cs): (usize, usize),
        rhs: &[f32],
        (r_rs, r_cs): (usize, usize),
    ) {
        if !product_has_work("gemm_slices", (m, n, k), dst, dst_rs, accumulate) {
            return;
        }
        assert!(
            lhs.len() > last_index(m, l_rs, k, l_cs),
            "gemm_slices: lhs too short"
        );
        assert!(
            rhs.len() > last_index(k, r_rs, n, r_cs),
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
}

/// One autodiff node per affine map.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::{Autodiff, NodeId};
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{TensorMetadata, TensorPrimitive};

    use crate::ArborBackend;

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

    /// `affine` as one node that keeps `x` and `w`.
    pub(crate) fn affine<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        w: FloatTensor<Autodiff<B, C>>,
        b: Option<FloatTensor<Autodiff<B, C>>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        let out = B::affine(
            x.primitive.clone(),
            w.primitive.clone(),
            b.as_ref().map(|b| b.primitive.clone()),
        );
        linear_node::<B, C>(x, w, b, out)
    }

    /// `affine`'s node with the given value: `known`'s own node is not a parent.
    pub(crate) fn affine_given<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        w: FloatTensor<Autodiff<B, C>>,
        b: Option<FloatTensor<Autodiff<B, C>>>,
        known: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        linear_node::<B, C>(x, w, b, known.primitive)
    }

    /// `affine_pair` as one node that keeps `x`, `w`, `h` and `u`.
    pub(crate) fn affine_pair<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
        w: FloatTensor<Autodiff<B, C>>,
        h: FloatTensor<Autodiff<B, C>>,
        u: FloatTensor<Autodiff<B, C>>,
        b: Option<FloatTensor<Autodiff<B, C>>>,
    ) -> FloatTensor<Autodiff<B, C>> {
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
