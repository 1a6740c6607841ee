//! The Gumbel Tree-LSTM's layer update (Choi et al. 2018, eq. 7): `select_mix`,
//! `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` with `cum = cumsum(s)` along the nodes.

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The Gumbel Tree-LSTM's layer update `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r`, with
/// `cum = cumsum(s)` over the `K` nodes, one op (and one autodiff node).
///
/// # Shapes
/// - `s`: `[batch, K]`, the selection (one-hot forward, soft gradient when straight-through)
/// - `parent`, `left`, `right`: `[batch, K, D]`
/// - output: `[batch, K, D]`
pub fn select_mix<B: ArborBackend>(
    s: Tensor<B, 2>,
    parent: Tensor<B, 3>,
    left: Tensor<B, 3>,
    right: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let [b, k, _] = parent.dims();
    assert_eq!(s.dims(), [b, k], "selection shape");
    assert!(
        left.dims() == parent.dims() && right.dims() == parent.dims(),
        "parent, left and right must have one shape"
    );
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::select_mix(
        s.into_primitive().tensor(),
        p(parent),
        p(left),
        p(right),
    )))
}

/// [`select_mix`] of a layer's adjacent nodes: `left = x[:, ..K]`, `right = x[:, 1..]`, one op
/// (and one autodiff node) that reads both from `x` and, in the backward pass, writes one
/// gradient for `x` (`d_left` and `d_right` added where they overlap) instead of two views'
/// full-size zero-padded gradients. The same values and gradients as `select_mix` on the two
/// views, to the bit on the CPU backends.
///
/// # Shapes
/// - `s`: `[batch, K]`
/// - `parent`: `[batch, K, D]`
/// - `x`: `[batch, K + 1, D]`
/// - output: `[batch, K, D]`
pub fn select_mix_adjacent<B: ArborBackend>(
    s: Tensor<B, 2>,
    parent: Tensor<B, 3>,
    x: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let [b, k, d] = parent.dims();
    assert_eq!(s.dims(), [b, k], "selection shape");
    assert_eq!(x.dims(), [b, k + 1, d], "nodes' shape");
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::select_mix_adjacent(
        s.into_primitive().tensor(),
        p(parent),
        p(x),
    )))
}

/// `(x[:, ..K], x[:, 1..])` of a `[batch, K + 1, D]` primitive, as views.
fn adjacent_views<B: Backend>(x: FloatTensor<B>) -> (FloatTensor<B>, FloatTensor<B>) {
    let x = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(x));
    let k = x.dims()[1] - 1;
    (
        x.clone().narrow(1, 0, k).into_primitive().tensor(),
        x.narrow(1, 1, k).into_primitive().tensor(),
    )
}

/// [`select_mix_adjacent`] as [`ArborBackend::select_mix`] on the two views: the default of
/// [`ArborBackend::select_mix_adjacent`].
pub(crate) fn select_mix_adjacent_by_views<B: ArborBackend>(
    s: FloatTensor<B>,
    parent: FloatTensor<B>,
    x: FloatTensor<B>,
) -> FloatTensor<B> {
    let (l, r) = adjacent_views::<B>(x);
    B::select_mix(s, parent, l, r)
}

/// The gradients of [`select_mix_adjacent`] from [`ArborBackend::select_mix_backward`] on the
/// two views, `d_x = [d_left; 0] + [0; d_right]`: the default of
/// [`ArborBackend::select_mix_adjacent_backward`].
pub(crate) fn select_mix_adjacent_backward_by_views<B: ArborBackend>(
    s: FloatTensor<B>,
    parent: FloatTensor<B>,
    x: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 3] {
    let (l, r) = adjacent_views::<B>(x);
    let [d_s, d_p, d_l, d_r] = B::select_mix_backward(s, parent, l, r, grad);
    let t3 = |t: FloatTensor<B>| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t));
    let (d_l, d_r) = (t3(d_l), t3(d_r));
    // One zero node row in the gradients' own dtype (`Tensor::zeros` takes the device's
    // default, which need not be theirs).
    let zero = d_l.clone().narrow(1, 0, 1).zeros_like();
    let d_x = Tensor::cat(vec![d_l, zero.clone()], 1).add(Tensor::cat(vec![zero, d_r], 1));
    [d_s, d_p, d_x.into_primitive().tensor()]
}

/// The next layer's values of a per-candidate quantity in the Gumbel Tree-LSTM, carried from
/// this layer's (`old`) and the two new candidates around the merge (`new`): with
/// `a = s[:, ..K − 1]` and `t = s[:, 1..]`,
/// `m = select_mix(a, new₁, old[:, ..K − 1], old[:, 1..])`, then `select_mix(t, new₀, m, m)`, each
/// `new_p` broadcast over the candidates. With a one-hot `s` selecting `i`: `old_j` for
/// `j < i − 1`, `new₀` at `i − 1`, `new₁` at `i`, `old_{j+1}` for `j > i`; a zero row of `s`
/// keeps `old[:, ..K − 1]`.
///
/// One op on the CPU backends where no input is tracked by autodiff (the carried gate
/// pre-activations in training, the carried candidates in evaluation): it reads `old` in place
/// and writes the output once, with the same arithmetic as the two [`select_mix`] calls, which
/// every other case runs (tracked inputs get their gradients through them).
///
/// # Shapes
/// - `old`: `[batch, K, w]`, `K ≥ 2`
/// - `new`: `[2, batch, w]`
/// - `s`: `[batch, K]`
/// - output: `[batch, K − 1, w]`
pub fn merge_place<B: ArborBackend>(
    old: Tensor<B, 3>,
    new: Tensor<B, 3>,
    s: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let [b, k, w] = old.dims();
    assert!(k >= 2, "merge_place needs at least two candidates");
    assert_eq!(new.dims(), [2, b, w], "new candidates' shape");
    assert_eq!(s.dims(), [b, k], "selection shape");
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::merge_place(
        p(old),
        p(new),
        s.into_primitive().tensor(),
    )))
}

/// [`merge_place`] as two [`ArborBackend::select_mix`] calls on views: the default of
/// [`ArborBackend::merge_place`], and its autodiff path for tracked inputs.
pub(crate) fn merge_place_by_select_mix<B: ArborBackend>(
    old: FloatTensor<B>,
    new: FloatTensor<B>,
    s: FloatTensor<B>,
) -> FloatTensor<B> {
    let old = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(old));
    let new = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(new));
    let s = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(s));
    let [batch, k, w] = old.dims();
    let kept = k - 1;
    let new_at = |p: usize| {
        new.clone()
            .narrow(0, p, 1)
            .reshape([batch, 1, w])
            .expand([batch, kept, w])
    };
    let shifted = select_mix(
        s.clone().narrow(1, 0, kept),
        new_at(1),
        old.clone().narrow(1, 0, kept),
        old.narrow(1, 1, kept),
    );
    select_mix(s.narrow(1, 1, kept), new_at(0), shifted.clone(), shifted)
        .into_primitive()
        .tensor()
}

/// The mix in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorPrimitive;

    use crate::reference::t3;

    fn mix_weights<B: Backend>(s: FloatTensor<B>) -> [Tensor<B, 3>; 3] {
        let s = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(s)).unsqueeze_dim::<3>(2);
        let cum = s.clone().cumsum(1);
        let keep_left = cum.clone().neg().add_scalar(1.0);
        let take_right = cum.sub(s.clone());
        [s, keep_left, take_right]
    }

    /// `s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` in plain ops.
    pub fn select_mix<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let [s, keep_left, take_right] = mix_weights::<B>(s);
        s.mul(t3(parent))
            .add(keep_left.mul(t3(left)))
            .add(take_right.mul(t3(right)))
            .into_primitive()
            .tensor()
    }

    /// The gradients of [`select_mix`] in plain ops: `∂/∂s_j = Σ_D g_j (p_j − r_j) +
    /// Σ_{k ≥ j} Σ_D g_k (r_k − l_k)`.
    pub fn select_mix_backward<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let [sw, keep_left, take_right] = mix_weights::<B>(s);
        let (p, l, r, g) = (
            t3::<B>(parent),
            t3::<B>(left),
            t3::<B>(right),
            t3::<B>(grad),
        );
        let [b, k, _] = p.dims();
        let own = g.clone().mul(p.sub(r.clone())).sum_dim(2).reshape([b, k]);
        let shift = g.clone().mul(r.sub(l)).sum_dim(2).reshape([b, k]);
        // Σ_{k ≥ j}: a reversed cumulative sum.
        let tail = shift.flip([1]).cumsum(1).flip([1]);
        let d_s = own.add(tail);
        let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
        [
            d_s.into_primitive().tensor(),
            prim(g.clone().mul(sw)),
            prim(g.clone().mul(keep_left)),
            prim(g.mul(take_right)),
        ]
    }
}

/// The loops over contiguous `f32` rows.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {

    /// Rows of a `[batch, ·, d]` buffer: the buffer and the distance (in elements) from one
    /// example's first row to the next's; row `j` of example `b` starts at `b·stride + j·d`.
    type Rows<'a> = (&'a [f32], usize);

    /// The mix over `[batch, k]` selections, with `l` and `r` read from their own rows.
    fn mix(
        s: &[f32],
        p: &[f32],
        (l, ls): Rows,
        (r, rs): Rows,
        k: usize,
        d: usize,
        out: &mut [f32],
    ) {
        for (b, sel) in s.chunks_exact(k).enumerate() {
            let mut cum = 0f32;
            for (j, &sj) in sel.iter().enumerate() {
                cum += sj;
                let (a, bl, c) = (sj, 1.0 - cum, cum - sj);
                let at = (b * k + j) * d;
                let (la, ra) = (b * ls + j * d, b * rs + j * d);
                let (p, l, r) = (&p[at..at + d], &l[la..la + d], &r[ra..ra + d]);
                let o = &mut out[at..at + d];
                for e in 0..d {
                    o[e] = a * p[e] + bl * l[e] + c * r[e];
                }
            }
        }
    }

    /// Where [`mix_backward`] writes the gradients of `l` and `r`: each in a buffer of its own
    /// (`[batch, k, d]`), or both into the one `[batch, k + 1, d]` they were read from. Either
    /// way the left term is added to what the buffer holds (zero on entry; in the shared buffer,
    /// node `j`'s right term from pair `j − 1`) and the right term is written.
    enum Sides<'a> {
        Apart(&'a mut [f32], &'a mut [f32]),
        Adjacent(&'a mut [f32]),
    }

    /// The gradients of [`mix`] into `d_s`, `d_p` and `sides`.
    #[allow(clippy::too_many_arguments)]
    fn mix_backward(
        s: &[f32],
        p: &[f32],
        (l, ls): Rows,
        (r, rs): Rows,
        grad: &[f32],
        k: usize,
        d: usize,
        d_s: &mut [f32],
        d_p: &mut [f32],
        mut sides: Sides,
    ) {
        let mut shift = vec![0f32; k];
        for (b, sel) in s.chunks_exact(k).enumerate() {
            let mut cum = 0f32;
            let ds = &mut d_s[b * k..(b + 1) * k];
            for (j, &sj) in sel.iter().enumerate() {
                cum += sj;
                let at = (b * k + j) * d;
                let (la, ra) = (b * ls + j * d, b * rs + j * d);
                let (pp, ll, rr) = (&p[at..at + d], &l[la..la + d], &r[ra..ra + d]);
                let g = &grad[at..at + d];
                let (dl, dr) = match &mut sides {
                    Sides::Apart(d_l, d_r) => (&mut d_l[at..at + d], &mut d_r[at..at + d]),
                    Sides::Adjacent(d_x) => d_x[la..la + 2 * d].split_at_mut(d),
                };
                let (wl, wr) = (1.0 - cum, cum - sj);
                let (mut own, mut sh) = (0f32, 0f32);
                for e in 0..d {
                    own += g[e] * (pp[e] - rr[e]);
                    sh += g[e] * (rr[e] - ll[e]);
                    d_p[at + e] = g[e] * sj;
                    dl[e] += g[e] * wl;
                    dr[e] = g[e] * wr;
                }
                ds[j] = own;
                shift[j] = sh;
            }
            // ∂/∂s_j also gets Σ_{k ≥ j} shift_k: s_j enters every later `cum`.
            let mut tail = 0f32;
            for j in (0..k).rev() {
                tail += shift[j];
                ds[j] += tail;
            }
        }
    }

    /// `out = s ⊙ p + (1 − cum) ⊙ l + (cum − s) ⊙ r` for `[batch, k]` selections and
    /// `[batch, k, d]` states.
    pub fn select_mix(
        s: &[f32],
        p: &[f32],
        l: &[f32],
        r: &[f32],
        k: usize,
        d: usize,
        out: &mut [f32],
    ) {
        mix(s, p, (l, k * d), (r, k * d), k, d, out);
    }

    /// [`select_mix`] with `l = x[:, ..k]`, `r = x[:, 1..]` read from `x` `[batch, k + 1, d]`.
    pub fn select_mix_adjacent(
        s: &[f32],
        p: &[f32],
        x: &[f32],
        k: usize,
        d: usize,
        out: &mut [f32],
    ) {
        let xs = (k + 1) * d;
        // `x[d..]`: the right neighbours (empty for an empty batch, which has no rows).
        mix(s, p, (x, xs), (x.get(d..).unwrap_or(&[]), xs), k, d, out);
    }

    /// The gradients of [`select_mix_adjacent`]: `d_s` `[batch, k]`, `d_p` `[batch, k, d]` and
    /// `d_x` `[batch, k + 1, d]`, which must be zero on entry (the left and right terms of each
    /// node are added into it: `d_l[j] + d_r[j − 1]`, in that order).
    #[allow(clippy::too_many_arguments)]
    pub fn select_mix_adjacent_backward(
        s: &[f32],
        p: &[f32],
        x: &[f32],
        grad: &[f32],
        k: usize,
        d: usize,
        d_s: &mut [f32],
        d_p: &mut [f32],
        d_x: &mut [f32],
    ) {
        let xs = (k + 1) * d;
        let right = (x.get(d..).unwrap_or(&[]), xs);
        // Node j's sum is `d_l[j] + d_r[j − 1]`: its right term (from pair j − 1) is written
        // first, its left term added to it.
        let sides = Sides::Adjacent(d_x);
        mix_backward(s, p, (x, xs), right, grad, k, d, d_s, d_p, sides);
    }

    /// [`merge_place`](super::merge_place) for `[batch, k]` selections, `[batch, k, w]` old
    /// values and the new ones `new0`, `new1` (`[batch, w]` each), into `out` `[batch, k − 1, w]`:
    /// both mixes of each output row in one pass, with [`select_mix`]'s arithmetic (so the same
    /// values to the bit as the two calls).
    pub fn merge_place(
        s: &[f32],
        old: &[f32],
        new0: &[f32],
        new1: &[f32],
        k: usize,
        w: usize,
        out: &mut [f32],
    ) {
        let kept = k - 1;
        for (b, sel) in s.chunks_exact(k).enumerate() {
            let (n0, n1) = (&new0[b * w..(b + 1) * w], &new1[b * w..(b + 1) * w]);
            let (mut cum_a, mut cum_t) = (0f32, 0f32);
            for j in 0..kept {
                let (a, t) = (sel[j], sel[j + 1]);
                cum_a += a;
                cum_t += t;
                let (a1, a2) = (1.0 - cum_a, cum_a - a);
                let (t1, t2) = (1.0 - cum_t, cum_t - t);
                let at = (b * k + j) * w;
                let (l, r) = (&old[at..at + w], &old[at + w..at + 2 * w]);
                let o = &mut out[(b * kept + j) * w..(b * kept + j + 1) * w];
                for e in 0..w {
                    let m = a * n1[e] + a1 * l[e] + a2 * r[e];
                    o[e] = t * n0[e] + t1 * m + t2 * m;
                }
            }
        }
    }

    /// The gradients of [`select_mix`], written into `d_s` `[batch, k]` and `d_p`, `d_l`, `d_r`
    /// `[batch, k, d]` (`d_l` zero on entry: the left term is added into it).
    #[allow(clippy::too_many_arguments)]
    pub fn select_mix_backward(
        s: &[f32],
        p: &[f32],
        l: &[f32],
        r: &[f32],
        grad: &[f32],
        k: usize,
        d: usize,
        d_s: &mut [f32],
        d_p: &mut [f32],
        d_l: &mut [f32],
        d_r: &mut [f32],
    ) {
        let kd = k * d;
        let sides = Sides::Apart(d_l, d_r);
        mix_backward(s, p, (l, kd), (r, kd), grad, k, d, d_s, d_p, sides);
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, reference};
    use crate::host::HostTensor;
    use crate::par;
    use crate::ArborBackend;

    /// The CPU kernel on `f32` memory, [`reference::select_mix`] otherwise.
    pub(crate) fn select_mix<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_f32(&s, &parent, &left, &right)
            .unwrap_or_else(|| reference::select_mix::<B>(s, parent, left, right))
    }

    fn select_mix_f32<T: HostTensor>(s: &T, p: &T, l: &T, r: &T) -> Option<T> {
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

    /// The CPU kernel on `f32` memory, [`ArborBackend::select_mix`] on the views otherwise.
    pub(crate) fn select_mix_adjacent<B: ArborBackend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        x: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_adjacent_f32(&s, &parent, &x)
            .unwrap_or_else(|| super::select_mix_adjacent_by_views::<B>(s, parent, x))
    }

    fn select_mix_adjacent_f32<T: HostTensor>(s: &T, p: &T, x: &T) -> Option<T> {
        let (ss, pp, xx) = (s.host()?, p.host()?, x.host()?);
        let shape = p.shape();
        let (b, k, d) = (shape[0], shape[1], shape[2]);
        let mut out = vec![0f32; shape.num_elements()];
        par::rows(b, 4 * k * d, vec![(&mut out, k * d)], &|rg, o| {
            cpu::select_mix_adjacent(
                par::at(&ss, &rg, k),
                par::at(&pp, &rg, k * d),
                par::at(&xx, &rg, (k + 1) * d),
                k,
                d,
                o[0],
            );
        });
        Some(T::from_f32(out, shape))
    }

    /// The CPU kernel on `f32` memory, [`ArborBackend::select_mix_backward`] on the views
    /// otherwise.
    pub(crate) fn select_mix_adjacent_backward<B: ArborBackend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        x: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3]
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_adjacent_backward_f32(&s, &parent, &x, &grad).unwrap_or_else(|| {
            super::select_mix_adjacent_backward_by_views::<B>(s, parent, x, grad)
        })
    }

    fn select_mix_adjacent_backward_f32<T: HostTensor>(
        s: &T,
        p: &T,
        x: &T,
        grad: &T,
    ) -> Option<[T; 3]> {
        let (ss, pp, xx, g) = (s.host()?, p.host()?, x.host()?, grad.host()?);
        let (s_shape, shape, x_shape) = (s.shape(), p.shape(), x.shape());
        let (b, k, d) = (shape[0], shape[1], shape[2]);
        let (kd, xd) = (k * d, (k + 1) * d);
        let mut d_s = vec![0f32; s_shape.num_elements()];
        let mut d_p = vec![0f32; shape.num_elements()];
        let mut d_x = vec![0f32; x_shape.num_elements()];
        let outs = vec![(&mut d_s[..], k), (&mut d_p[..], kd), (&mut d_x[..], xd)];
        par::rows(b, 6 * kd, outs, &|rg, o| {
            let [d_s, d_p, d_x] = o else {
                unreachable!("three outputs")
            };
            cpu::select_mix_adjacent_backward(
                par::at(&ss, &rg, k),
                par::at(&pp, &rg, kd),
                par::at(&xx, &rg, xd),
                par::at(&g, &rg, kd),
                k,
                d,
                d_s,
                d_p,
                d_x,
            );
        });
        Some([
            T::from_f32(d_s, s_shape),
            T::from_f32(d_p, shape),
            T::from_f32(d_x, x_shape),
        ])
    }

    /// The CPU kernel on `f32` memory, two [`ArborBackend::select_mix`] calls otherwise.
    pub(crate) fn merge_place<B: ArborBackend>(
        old: FloatTensor<B>,
        new: FloatTensor<B>,
        s: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        merge_place_f32(&old, &new, &s)
            .unwrap_or_else(|| super::merge_place_by_select_mix::<B>(old, new, s))
    }

    fn merge_place_f32<T: HostTensor>(old: &T, new: &T, s: &T) -> Option<T> {
        let (oo, nn, ss) = (old.host()?, new.host()?, s.host()?);
        let (b, k, w) = crate::host::dims3(old);
        let kept = k - 1;
        let (new0, new1) = nn.split_at(b * w);
        let mut out = vec![0f32; b * kept * w];
        par::rows(b, 2 * kept * w, vec![(&mut out, kept * w)], &|rg, o| {
            cpu::merge_place(
                par::at(&ss, &rg, k),
                par::at(&oo, &rg, k * w),
                par::at(new0, &rg, w),
                par::at(new1, &rg, w),
                k,
                w,
                o[0],
            );
        });
        Some(T::from_f32(out, Shape::new([b, kept, w])))
    }

    /// The CPU kernel on `f32` memory, [`reference::select_mix_backward`] otherwise.
    pub(crate) fn select_mix_backward<B: Backend>(
        s: FloatTensor<B>,
        parent: FloatTensor<B>,
        left: FloatTensor<B>,
        right: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4]
    where
        FloatTensor<B>: HostTensor,
    {
        select_mix_backward_f32(&s, &parent, &left, &right, &grad)
            .unwrap_or_else(|| reference::select_mix_backward::<B>(s, parent, left, right, grad))
    }

    fn select_mix_backward_f32<T: HostTensor>(
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
}

/// One autodiff node.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::backend::AutodiffBackend;
    use burn::tensor::ops::FloatTensor;

    use crate::autodiff::{backward_with, record};
    use crate::ArborBackend;

    /// The backward step of `select_mix(s, p, l, r)`.
    #[derive(Debug)]
    pub(crate) struct SelectMix;

    impl<B: ArborBackend> Backward<B, 4> for SelectMix {
        type State = [FloatTensor<B>; 4];

        fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 4, _>(ops, grads, |[a, b, c, d], grad| {
                B::select_mix_backward(a, b, c, d, grad)
            });
        }
    }

    /// The backward step of `select_mix_adjacent(s, p, x)`.
    #[derive(Debug)]
    pub(crate) struct SelectMixAdjacent;

    impl<B: ArborBackend> Backward<B, 3> for SelectMixAdjacent {
        type State = [FloatTensor<B>; 3];

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 3, _>(ops, grads, |[s, p, x], grad| {
                B::select_mix_adjacent_backward(s, p, x, grad)
            });
        }
    }

    /// `select_mix_adjacent` as one node that keeps its inputs.
    pub(crate) fn select_mix_adjacent<B: ArborBackend, C: CheckpointStrategy>(
        s: FloatTensor<Autodiff<B, C>>,
        parent: FloatTensor<Autodiff<B, C>>,
        x: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(SelectMixAdjacent, [s, parent, x], |[s, p, x]| {
            B::select_mix_adjacent(s, p, x)
        })
    }

    /// `merge_place`: the inner backend's op, untracked, where no input is tracked; else the
    /// two recorded `select_mix` nodes (so tracked inputs get their gradients).
    pub(crate) fn merge_place<B: ArborBackend, C: CheckpointStrategy>(
        old: FloatTensor<Autodiff<B, C>>,
        new: FloatTensor<Autodiff<B, C>>,
        s: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        if old.is_tracked() || new.is_tracked() || s.is_tracked() {
            return super::merge_place_by_select_mix::<Autodiff<B, C>>(old, new, s);
        }
        Autodiff::<B, C>::from_inner(B::merge_place(old.primitive, new.primitive, s.primitive))
    }

    /// `select_mix` as one node that keeps its inputs.
    pub(crate) fn select_mix<B: ArborBackend, C: CheckpointStrategy>(
        s: FloatTensor<Autodiff<B, C>>,
        parent: FloatTensor<Autodiff<B, C>>,
        left: FloatTensor<Autodiff<B, C>>,
        right: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(SelectMix, [s, parent, left, right], |[s, p, l, r]| {
            B::select_mix(s, p, l, r)
        })
    }
}
