//! `grouped_attention`: multi-head scaled dot-product self-attention inside groups of
//! positions as one op and one autodiff node; on the CPU backends one loop per group, the
//! groups in parallel.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The heads and the softmax of a [`grouped_attention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionSpec {
    /// Heads, side by side in the last dimension: head `h` is columns `h·D_k..(h + 1)·D_k`,
    /// `D_k = D / heads`.
    pub heads: usize,
    /// Burn's `quiet_softmax` (`e^{x_i − m} / (e^{−m} + Σ_j e^{x_j − m})`, `m` the row's
    /// largest score) instead of the softmax.
    pub quiet: bool,
}

/// Multi-head scaled dot-product self-attention inside each of `n` groups of `l` positions:
/// per group and head, `softmax(Q·Kᵀ / √D_k + bias)·V`, the heads written side by side.
///
/// This is Burn's `MultiHeadAttention` after its three input projections and before its
/// output projection, as one op and one autodiff node: the plain-op composition is a dozen
/// tensors (heads split and merged by copies, a batched product per head and group, the
/// softmax's passes) and, on the CPU backends, a dozen passes on one thread. Here the CPU
/// backends compute each group's heads in one loop (scores, softmax, weighted sum), the groups
/// in parallel, and keep the softmax weights `[n, heads, l, l]` for the backward pass, which is
/// one loop per group too. Other backends run the plain-op composition
/// ([`reference::grouped_attention`](crate::reference::grouped_attention)).
///
/// `bias` is added to the scores before the softmax, broadcast over its dimensions of size 1:
/// `[n, 1, l]` masks keys per group (a large negative value at a padded key, as Burn's
/// `mask_pad`), `[1, l, l]` is one pattern for every group (R2D2's role mask). It is an input
/// like the others: its gradient (the scores' summed over heads and broadcast dimensions) flows
/// back when it is tracked.
///
/// # Shapes
/// - `q`, `k`, `v`: `[n, l, D]`, `D` a multiple of `spec.heads`
/// - `bias`: `[1 or n, 1 or l, l]`
/// - output: `[n, l, D]`
///
/// # Panics
/// If the shapes disagree, `spec.heads` is 0 or does not divide `D`.
pub fn grouped_attention<B: ArborBackend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    bias: Option<Tensor<B, 3>>,
    spec: AttentionSpec,
) -> Tensor<B, 3> {
    let [n, l, d] = q.dims();
    assert!(
        k.dims() == [n, l, d] && v.dims() == [n, l, d],
        "grouped_attention: q {:?}, k {:?} and v {:?} must have one shape",
        q.dims(),
        k.dims(),
        v.dims()
    );
    assert!(
        spec.heads > 0 && d % spec.heads == 0,
        "grouped_attention: {} heads for width {d}",
        spec.heads
    );
    if let Some(b) = &bias {
        let [nb, lb, lk] = b.dims();
        assert!(
            (nb == 1 || nb == n) && (lb == 1 || lb == l) && lk == l,
            "grouped_attention: bias {:?} for [{n}, {l}, {l}] scores",
            b.dims()
        );
    }
    let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_attention_tracked(
        prim(q),
        prim(k),
        prim(v),
        bias.map(prim),
        spec,
    )))
}

/// Attention in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::activation::{quiet_softmax, softmax};
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{Shape, TensorPrimitive};

    use super::AttentionSpec;
    use crate::reference::t3;

    /// `[n, l, D]` as `[n, heads, l, D_k]` (a view).
    fn split<B: Backend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
        let [n, l, d] = x.dims();
        x.reshape([n, l, heads, d / heads]).swap_dims(1, 2)
    }

    /// `[n, heads, l, D_k]` back as `[n, l, D]`.
    fn merge<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
        let [n, h, l, dk] = x.dims();
        x.swap_dims(1, 2).reshape([n, l, h * dk])
    }

    fn t4<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 4> {
        Tensor::from_primitive(TensorPrimitive::Float(t))
    }

    /// The output, and with `keep` the softmax weights `[n, heads, l, l]`.
    pub fn grouped_attention<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
        spec: AttentionSpec,
        keep: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        let (q, k, v) = (
            split(t3::<B>(q), spec.heads),
            split(t3::<B>(k), spec.heads),
            split(t3::<B>(v), spec.heads),
        );
        let dk = q.dims()[3];
        let mut scores = q.matmul(k.swap_dims(2, 3)).div_scalar((dk as f64).sqrt());
        if let Some(b) = bias {
            let b = t3::<B>(b);
            let [nb, lb, l] = b.dims();
            scores = scores.add(b.reshape([nb, 1, lb, l]));
        }
        let weights = if spec.quiet {
            quiet_softmax(scores, 3)
        } else {
            softmax(scores, 3)
        };
        let out = merge(weights.clone().matmul(v));
        (
            out.into_primitive().tensor(),
            keep.then(|| weights.into_primitive().tensor()),
        )
    }

    /// The gradients of [`grouped_attention`] with respect to `q`, `k`, `v` and (given its shape)
    /// `bias`, from the weights it kept: with `P` the weights and `G` the output's gradient per
    /// head, `dV = Pᵀ·G`, `dP = G·Vᵀ`, `dS = P ⊙ (dP − Σ_s P ⊙ dP)` (the softmax's and the quiet
    /// softmax's backward alike), `dQ = dS·K / √D_k`, `dK = dSᵀ·Q / √D_k`, and the bias's the
    /// sum of `dS` over the heads and its broadcast dimensions.
    #[allow(clippy::type_complexity)]
    pub fn grouped_attention_backward<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        weights: FloatTensor<B>,
        bias_shape: Option<Shape>,
        spec: AttentionSpec,
        grad: FloatTensor<B>,
    ) -> (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
    ) {
        let h = spec.heads;
        let (q, k, v) = (
            split(t3::<B>(q), h),
            split(t3::<B>(k), h),
            split(t3::<B>(v), h),
        );
        let [n, _, l, dk] = q.dims();
        let scale = (dk as f64).sqrt();
        let p = t4::<B>(weights);
        let g = split(t3::<B>(grad), h);
        let dv = p.clone().swap_dims(2, 3).matmul(g.clone());
        let dp = g.matmul(v.swap_dims(2, 3));
        let ds = p.clone().mul(dp.clone().sub(p.mul(dp).sum_dim(3)));
        let dq = ds.clone().matmul(k).div_scalar(scale);
        let dkk = ds.clone().swap_dims(2, 3).matmul(q).div_scalar(scale);
        let db = bias_shape.map(|shape| {
            let (nb, lb) = (shape[0], shape[1]);
            let mut s: Tensor<B, 3> = ds.sum_dim(1).reshape([n, l, l]);
            if nb == 1 {
                s = s.sum_dim(0);
            }
            if lb == 1 {
                s = s.sum_dim(1);
            }
            s.reshape([nb, lb, l]).into_primitive().tensor()
        });
        (
            merge(dq).into_primitive().tensor(),
            merge(dkk).into_primitive().tensor(),
            merge(dv).into_primitive().tensor(),
            db,
        )
    }
}

/// The loops of one group (its `l` rows of `q`, `k`, `v`, every head), on `f32` rows (AVX2 +
/// FMA at run time).
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use super::AttentionSpec;
    use crate::host::Rows;
    use crate::lanes::{dot8, sum8};
    use crate::packed::PackedRhs;

    /// Whether a head's products split across rayon's pool: no, the groups already run in
    /// parallel ([`PackedRhs::product_on`]).
    const SPLIT: bool = false;

    /// One call's sizes: `l` positions per group, width `d`, `heads` heads, and the softmax.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Dims {
        pub(crate) l: usize,
        pub(crate) d: usize,
        pub(crate) heads: usize,
        pub(crate) quiet: bool,
    }

    impl Dims {
        /// Groups of `l` positions of width `d`, with `spec`'s heads and softmax.
        pub(crate) fn new(l: usize, d: usize, spec: AttentionSpec) -> Self {
            Self {
                l,
                d,
                heads: spec.heads,
                quiet: spec.quiet,
            }
        }
    }

    /// Where the row of a `[nb, lb, l]` bias that query `t` of group `g` reads starts (`l`
    /// values): a size-1 dimension is broadcast. The backward pass sums the scores' gradient
    /// into the same rows.
    pub(crate) fn bias_row(nb: usize, lb: usize, g: usize, t: usize, l: usize) -> usize {
        let g = if nb == 1 { 0 } else { g };
        let t = if lb == 1 { 0 } else { t };
        (g * lb + t) * l
    }

    /// The bias `[nb, lb, l]` (contiguous) and its two leading sizes.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Bias<'a> {
        pub(crate) data: &'a [f32],
        pub(crate) nb: usize,
        pub(crate) lb: usize,
    }

    impl Bias<'_> {
        /// Where the bias row of query `t` in group `g` starts ([`bias_row`]).
        pub(crate) fn at(&self, g: usize, t: usize, l: usize) -> usize {
            bias_row(self.nb, self.lb, g, t, l)
        }
    }

    /// A row of scores to its softmax weights in place (`exp` for arguments `≤ 0`). A row with
    /// a NaN or no finite largest score gives NaN weights, as the plain ops do.
    #[inline(always)]
    fn softmax_row(row: &mut [f32], quiet: bool, exp: impl Fn(f32) -> f32) {
        let mut m = f32::NEG_INFINITY;
        let mut nan = false;
        for &x in row.iter() {
            nan |= x.is_nan();
            m = m.max(x);
        }
        if nan || !m.is_finite() {
            row.fill(f32::NAN);
            return;
        }
        for x in row.iter_mut() {
            *x = exp(*x - m);
        }
        let mut sum = sum8(row);
        if quiet {
            // `e^{−m}` may exceed 1: the general `exp`, once per row.
            sum += (-m).exp();
        }
        for x in row.iter_mut() {
            *x /= sum;
        }
    }

    /// Group `g`'s output rows (`out`, `[l, D]`) and softmax weights (`weights`,
    /// `[heads, l, l]`). Per head, `Q·Kᵀ` and `weights·V` are products against a right-hand
    /// side packed for the head (`Kᵀ`, `V`: `D_k·l` values) that read `Q` and the weights in
    /// place ([`PackedRhs::product_on`] without a split: the groups already run in parallel).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn forward_body(
        [q, k, v]: [Rows<'_>; 3],
        bias: Option<Bias<'_>>,
        g: usize,
        dims: Dims,
        out: &mut [f32],
        weights: &mut [f32],
        exp: impl Fn(f32) -> f32 + Copy,
    ) {
        let Dims { l, d, heads, quiet } = dims;
        let dk = d / heads;
        let scale = (dk as f32).sqrt();
        for h in 0..heads {
            let w = &mut weights[h * l * l..(h + 1) * l * l];
            let ((qm, q_rs), (km, k_rs), (vm, v_rs)) = (
                q.matrix(g * l, h * dk),
                k.matrix(g * l, h * dk),
                v.matrix(g * l, h * dk),
            );
            // `Kᵀ`: `D_k × l`, element `(j, s)` at `km[s·k_rs + j]`.
            PackedRhs::new(km, dk, l, (1, k_rs)).product_on(SPLIT, l, w, l, false, qm, (q_rs, 1));
            for t in 0..l {
                let row = &mut w[t * l..(t + 1) * l];
                for x in row.iter_mut() {
                    *x /= scale;
                }
                if let Some(b) = &bias {
                    let at = b.at(g, t, l);
                    for (x, &bv) in row.iter_mut().zip(&b.data[at..at + l]) {
                        *x += bv;
                    }
                }
                softmax_row(row, quiet, exp);
            }
            PackedRhs::new(vm, l, dk, (v_rs, 1)).product_on(
                SPLIT,
                l,
                &mut out[h * dk..],
                d,
                false,
                w,
                (l, 1),
            );
        }
    }

    /// Group `g`'s gradients `dq`, `dk`, `dv` (`[l, D]` each) from its weights `p`
    /// (`[heads, l, l]`) and the output's gradient rows `grad`; with `ds_sum` (`[l, l]`,
    /// zeroed), the scores' gradient summed over the heads. `ds` (`l·l`) is scratch. Each of
    /// the five products per head as in [`forward_body`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn backward_body(
        [q, k, v]: [Rows<'_>; 3],
        p: &[f32],
        grad: Rows<'_>,
        g: usize,
        dims: Dims,
        [dq, dk, dv]: [&mut [f32]; 3],
        mut ds_sum: Option<&mut [f32]>,
        ds: &mut [f32],
    ) {
        let Dims { l, d, heads, .. } = dims;
        let width = d / heads;
        let scale = (width as f32).sqrt();
        for h in 0..heads {
            let col = h * width;
            let pw = &p[h * l * l..(h + 1) * l * l];
            let ((qm, q_rs), (km, k_rs), (vm, v_rs), (gm, g_rs)) = (
                q.matrix(g * l, col),
                k.matrix(g * l, col),
                v.matrix(g * l, col),
                grad.matrix(g * l, col),
            );
            // The weights' gradient `dO·Vᵀ`, then each row through the softmax.
            PackedRhs::new(vm, width, l, (1, v_rs)).product_on(
                SPLIT,
                l,
                ds,
                l,
                false,
                gm,
                (g_rs, 1),
            );
            for t in 0..l {
                let row = &mut ds[t * l..(t + 1) * l];
                let prow = &pw[t * l..(t + 1) * l];
                let c = dot8(prow, row);
                for s in 0..l {
                    row[s] = prow[s] * (row[s] - c);
                }
            }
            // `dV = Pᵀ·dO` (`Pᵀ` read in place, strides `(1, l)`).
            let d_out = PackedRhs::new(gm, l, width, (g_rs, 1));
            d_out.product_on(SPLIT, l, &mut dv[col..], d, false, pw, (1, l));
            if let Some(acc) = ds_sum.as_deref_mut() {
                for (a, &x) in acc.iter_mut().zip(ds.iter()) {
                    *a += x;
                }
            }
            // The scores were `Q·Kᵀ / √D_k`: their gradient divided once, for `dQ` and `dK`.
            for x in ds.iter_mut() {
                *x /= scale;
            }
            // `dQ = dS·K`, `dK = dSᵀ·Q`.
            let k_rows = PackedRhs::new(km, l, width, (k_rs, 1));
            k_rows.product_on(SPLIT, l, &mut dq[col..], d, false, ds, (l, 1));
            let q_rows = PackedRhs::new(qm, l, width, (q_rs, 1));
            q_rows.product_on(SPLIT, l, &mut dk[col..], d, false, ds, (1, l));
        }
    }

    /// The generic `exp` (other CPUs).
    #[inline(always)]
    fn exp(x: f32) -> f32 {
        x.exp()
    }

    /// [`forward_body`] for the rows of groups `groups`, compiled for the widest vector set in use
    /// ([`crate::isa::widest`]). `weights` receives those groups' softmax weights, or is empty
    /// when nobody keeps them.
    pub(crate) fn forward(
        qkv: [Rows<'_>; 3],
        bias: Option<Bias<'_>>,
        groups: std::ops::Range<usize>,
        dims: Dims,
        out: &mut [f32],
        weights: &mut [f32],
    ) {
        let (o, w) = (dims.l * dims.d, dims.heads * dims.l * dims.l);
        // No `weights` to fill: one group's scratch, every element written before it is read.
        let mut scratch = if weights.is_empty() {
            vec![0f32; w]
        } else {
            Vec::new()
        };
        for (i, g) in groups.enumerate() {
            let out = &mut out[i * o..(i + 1) * o];
            let weights = if scratch.is_empty() {
                &mut weights[i * w..(i + 1) * w]
            } else {
                &mut scratch[..]
            };
            crate::isa::widest!(
                attention_copies,
                forward(qkv, bias, g, dims, out, weights)
                    else forward_body(qkv, bias, g, dims, out, weights, exp)
            );
        }
    }

    /// [`backward_body`] for the rows of groups `groups` (`weights` and the outputs hold those
    /// groups only), compiled for the widest vector set in use.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        qkv: [Rows<'_>; 3],
        weights: &[f32],
        grad: Rows<'_>,
        groups: std::ops::Range<usize>,
        dims: Dims,
        [dq, dk, dv]: [&mut [f32]; 3],
        mut ds_sum: Option<&mut [f32]>,
    ) {
        let (o, w, ll) = (
            dims.l * dims.d,
            dims.heads * dims.l * dims.l,
            dims.l * dims.l,
        );
        let mut ds = vec![0f32; ll];
        for (i, g) in groups.enumerate() {
            let outs = [
                &mut dq[i * o..(i + 1) * o],
                &mut dk[i * o..(i + 1) * o],
                &mut dv[i * o..(i + 1) * o],
            ];
            let sum = ds_sum.as_deref_mut().map(|s| &mut s[i * ll..(i + 1) * ll]);
            let p = &weights[i * w..(i + 1) * w];
            crate::isa::widest!(
                attention_copies,
                backward(qkv, p, grad, g, dims, outs, sum, &mut ds)
                    else backward_body(qkv, p, grad, g, dims, outs, sum, &mut ds)
            );
        }
    }

    /// The two bodies, one copy per instruction set ([`crate::isa::simd_copies`]), with the
    /// activations' vectorisable `exp`.
    #[cfg(target_arch = "x86_64")]
    mod attention_copies {
        use super::{backward_body, forward_body, Bias, Dims};
        use crate::host::Rows;
        use crate::ops::activation::cpu::scalar::exp_nonpositive;

        crate::isa::simd_copies! {
            fn forward(
                qkv: [Rows<'_>; 3],
                bias: Option<Bias<'_>>,
                g: usize,
                dims: Dims,
                out: &mut [f32],
                weights: &mut [f32],
            ) {
                forward_body(qkv, bias, g, dims, out, weights, exp_nonpositive)
            }

            fn backward(
                qkv: [Rows<'_>; 3],
                p: &[f32],
                grad: Rows<'_>,
                g: usize,
                dims: Dims,
                outs: [&mut [f32]; 3],
                ds_sum: Option<&mut [f32]>,
                ds: &mut [f32],
            ) {
                backward_body(qkv, p, grad, g, dims, outs, ds_sum, ds)
            }
        }
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::cpu::{self, Bias, Dims};
    use super::{reference, AttentionSpec};
    use crate::host::{dims3, rows_of, HostBuf, HostTensor};
    use crate::par;

    /// Multiply-adds per group (scores and weighted sum), the cost [`par::rows`] splits by.
    fn group_cost(dims: Dims) -> usize {
        2 * dims.l * dims.l * dims.d + 4 * dims.heads * dims.l * dims.l
    }

    /// The CPU kernel on `f32` memory, [`reference::grouped_attention`] otherwise.
    pub(crate) fn grouped_attention<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
        spec: AttentionSpec,
        keep: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>)
    where
        FloatTensor<B>: HostTensor,
    {
        match attention_f32(&q, &k, &v, bias.as_ref(), spec, keep) {
            Some(r) => r,
            None => reference::grouped_attention::<B>(q, k, v, bias, spec, keep),
        }
    }

    /// The bias's memory and leading sizes.
    fn bias_of<'a, T: HostTensor>(b: &'a T, buf: &'a mut Option<HostBuf<'a>>) -> Option<Bias<'a>> {
        let shape = b.shape();
        let data = buf.insert(b.host()?);
        Some(Bias {
            data,
            nb: shape[0],
            lb: shape[1],
        })
    }

    #[allow(clippy::type_complexity)]
    fn attention_f32<T: HostTensor>(
        q: &T,
        k: &T,
        v: &T,
        bias: Option<&T>,
        spec: AttentionSpec,
        keep: bool,
    ) -> Option<(T, Option<T>)> {
        let (n, l, d) = dims3(q);
        let dims = Dims::new(l, d, spec);
        let (mut cq, mut ck, mut cv, mut cb) = (None, None, None, None);
        let qkv = [
            rows_of(q, &mut cq)?,
            rows_of(k, &mut ck)?,
            rows_of(v, &mut cv)?,
        ];
        let bias = match bias {
            Some(b) => Some(bias_of(b, &mut cb)?),
            None => None,
        };
        let (o, w) = (l * d, spec.heads * l * l);
        let mut out = vec![0f32; n * o];
        // Every group's softmax weights only where the backward pass keeps them; otherwise each
        // parallel range reuses one group's worth of its own (no `[n, heads, l, l]` buffer zeroed
        // on the calling thread).
        let mut weights = if keep { vec![0f32; n * w] } else { Vec::new() };
        let kept = if keep { w } else { 0 };
        par::rows(
            n,
            group_cost(dims),
            vec![(&mut out, o), (&mut weights, kept)],
            &|r, outs| {
                let [out, weights] = outs else {
                    unreachable!("two outputs")
                };
                cpu::forward(qkv, bias, r, dims, out, weights);
            },
        );
        let weights = keep.then(|| T::from_f32(weights, Shape::new([n, spec.heads, l, l])));
        Some((T::from_f32(out, Shape::new([n, l, d])), weights))
    }

    /// The CPU kernel on `f32` memory, [`reference::grouped_attention_backward`] otherwise.
    #[allow(clippy::type_complexity)]
    pub(crate) fn grouped_attention_backward<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        weights: FloatTensor<B>,
        bias_shape: Option<Shape>,
        spec: AttentionSpec,
        grad: FloatTensor<B>,
    ) -> (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
    )
    where
        FloatTensor<B>: HostTensor,
    {
        match attention_backward_f32(&q, &k, &v, &weights, bias_shape.as_ref(), spec, &grad) {
            Some(r) => r,
            None => {
                reference::grouped_attention_backward::<B>(q, k, v, weights, bias_shape, spec, grad)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn attention_backward_f32<T: HostTensor>(
        q: &T,
        k: &T,
        v: &T,
        weights: &T,
        bias_shape: Option<&Shape>,
        spec: AttentionSpec,
        grad: &T,
    ) -> Option<(T, T, T, Option<T>)> {
        let (n, l, d) = dims3(q);
        let dims = Dims::new(l, d, spec);
        let (mut cq, mut ck, mut cv, mut cg) = (None, None, None, None);
        let qkv = [
            rows_of(q, &mut cq)?,
            rows_of(k, &mut ck)?,
            rows_of(v, &mut cv)?,
        ];
        let grad = rows_of(grad, &mut cg)?;
        let p = weights.host()?;
        let (o, w, ll) = (l * d, spec.heads * l * l, l * l);
        let (mut dq, mut dk, mut dv) = (vec![0f32; n * o], vec![0f32; n * o], vec![0f32; n * o]);
        // The scores' gradient per group, summed over the heads: only for a bias.
        let ds_width = if bias_shape.is_some() { ll } else { 0 };
        let mut ds_sum = vec![0f32; n * ds_width];
        let p = &p[..];
        par::rows(
            n,
            2 * group_cost(dims),
            vec![
                (&mut dq, o),
                (&mut dk, o),
                (&mut dv, o),
                (&mut ds_sum, ds_width),
            ],
            &|r, outs| {
                let [dq, dk, dv, ds] = outs else {
                    unreachable!("four outputs")
                };
                let sum = (ds_width > 0).then_some(&mut **ds);
                cpu::backward(
                    qkv,
                    &p[r.start * w..r.end * w],
                    grad,
                    r,
                    dims,
                    [dq, dk, dv],
                    sum,
                );
            },
        );
        let db = bias_shape.map(|shape| {
            let (nb, lb) = (shape[0], shape[1]);
            let mut db = vec![0f32; nb * lb * l];
            for g in 0..n {
                for t in 0..l {
                    let at = cpu::bias_row(nb, lb, g, t, l);
                    let dst = &mut db[at..at + l];
                    let src = &ds_sum[(g * l + t) * l..(g * l + t + 1) * l];
                    for (a, &x) in dst.iter_mut().zip(src) {
                        *a += x;
                    }
                }
            }
            T::from_f32(db, shape.clone())
        });
        let shape = Shape::new([n, l, d]);
        Some((
            T::from_f32(dq, shape.clone()),
            T::from_f32(dk, shape.clone()),
            T::from_f32(dv, shape),
            db,
        ))
    }
}

/// One autodiff node.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{Shape, TensorMetadata};

    use super::AttentionSpec;
    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// The backward step of `grouped_attention` (parents `q`, `k`, `v`, and the bias when there
    /// is one: `N = 4`, else 3).
    #[derive(Debug)]
    struct Attention;

    /// `q`, `k`, `v`, the softmax weights, the bias's shape and the spec.
    type AttentionState<B> = (
        [FloatTensor<B>; 3],
        FloatTensor<B>,
        Option<Shape>,
        AttentionSpec,
    );

    impl<B: ArborBackend, const N: usize> Backward<B, N> for Attention {
        type State = AttentionState<B>;

        fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, N, _>(ops, grads, |([q, k, v], weights, bias, spec), grad| {
                let (dq, dk, dv, db) =
                    B::grouped_attention_backward(q, k, v, weights, bias, spec, grad);
                [Some(dq), Some(dk), Some(dv), db].into_iter().flatten()
            });
        }
    }

    /// `grouped_attention` as one node that keeps the softmax weights (the inner backend's op
    /// without them when nothing is tracked).
    pub(crate) fn grouped_attention_tracked<B: ArborBackend, C: CheckpointStrategy>(
        q: FloatTensor<Autodiff<B, C>>,
        k: FloatTensor<Autodiff<B, C>>,
        v: FloatTensor<Autodiff<B, C>>,
        bias: Option<FloatTensor<Autodiff<B, C>>>,
        spec: AttentionSpec,
    ) -> FloatTensor<Autodiff<B, C>> {
        let inner = [q.primitive, k.primitive, v.primitive];
        let bias_inner = bias.as_ref().map(|b| b.primitive.clone());
        let bias_shape = bias_inner.as_ref().map(|b| b.shape());
        // The same for three parents and for four.
        macro_rules! node {
            ($nodes:expr) => {
                match Attention.prepare::<C>($nodes).compute_bound().stateful() {
                    OpsKind::Tracked(prep) => {
                        let [q, k, v] = inner.clone();
                        let (out, weights) = B::grouped_attention(q, k, v, bias_inner, spec, true);
                        let weights = weights.expect("attention keeps the weights when asked");
                        prep.finish((inner, weights, bias_shape, spec), out)
                    }
                    OpsKind::UnTracked(prep) => {
                        let [q, k, v] = inner;
                        prep.finish(B::grouped_attention(q, k, v, bias_inner, spec, false).0)
                    }
                }
            };
        }
        match bias {
            Some(b) => node!([q.node, k.node, v.node, b.node]),
            None => node!([q.node, k.node, v.node]),
        }
    }
}
