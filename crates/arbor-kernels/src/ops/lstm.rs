//! `lstm_sequence`: the LSTM recurrence over a whole sequence as one op and one autodiff node
//! (the step loop inside the op, backpropagation through time in one backward pass).

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The LSTM recurrence over a whole sequence as one op and one autodiff node: with the input
/// projections `xp_t = W x_t + b` precomputed for every step (one large product, by the
/// caller), each step is `[i, f, g, o] = xp_t + U h_{t−1}` (gate order `i, f, g, o`, as
/// [`GateLayout::lstm`]), `c_t = σ(f) c_{t−1} + σ(i) tanh(g)`, `h_t = σ(o) tanh(c_t)`.
///
/// On the CPU backends the step loop runs inside the op: one product per step accumulated into
/// the step's rows of `xp` (no per-step graph node, no per-step gradient of `U`), the fused
/// update of every row in parallel. The backward pass is backpropagation through time in one
/// node: one product `δ_t·Uᵀ` per step and `dU = Σ_t h_{t−1}ᵀ δ_t` as one product at the end
/// (where the step loop of separate nodes computes one `dU` product per step and sums them).
///
/// `lengths` (one entry per example, each `≤ time`, or empty for all `time` steps): an
/// example's state is frozen after its last real step, so its output rows there repeat its last
/// state and its final state is the one after its own last step.
///
/// # Shapes
/// - `xp`: `[batch, time, 4H]`
/// - `u`: `[H, 4H]` (the recurrent weight, `h_{t−1}·u`)
/// - `h0`, `c0`: `[batch, H]`
/// - output: `[batch, time, 2H]`, `h_t` in columns `0..H` and `c_t` in `H..2H`
///
/// # Panics
/// If the shapes disagree or `lengths` has another count than `batch` or an entry over `time`.
pub fn lstm_sequence<B: ArborBackend>(
    xp: Tensor<B, 3>,
    u: Tensor<B, 2>,
    h0: Tensor<B, 2>,
    c0: Tensor<B, 2>,
    lengths: &[usize],
) -> Tensor<B, 3> {
    let [b, t, w] = xp.dims();
    let h = w / 4;
    assert_eq!(w, 4 * h, "lstm_sequence: xp's width {w} is not 4H");
    assert_eq!(u.dims(), [h, w], "lstm_sequence: u must be [{h}, {w}]");
    assert_eq!(h0.dims(), [b, h], "lstm_sequence: h0 must be [{b}, {h}]");
    assert_eq!(c0.dims(), [b, h], "lstm_sequence: c0 must be [{b}, {h}]");
    assert!(
        lengths.is_empty() || (lengths.len() == b && lengths.iter().all(|&l| l <= t)),
        "lstm_sequence: {} lengths for {b} rows of {t} steps",
        lengths.len()
    );
    let p2 = |x: Tensor<B, 2>| x.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::lstm_sequence_tracked(
        xp.into_primitive().tensor(),
        p2(u),
        p2(h0),
        p2(c0),
        lengths,
    )))
}

/// The recurrence in plain Burn ops, one step per time step.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;

    use crate::reference::{t2, t3};

    /// Row `b`'s state is frozen at step `s` (past its length), as a `[b, 1]` mask; `None` when no
    /// row is.
    fn frozen_rows<B: Backend>(
        lengths: &[usize],
        b: usize,
        s: usize,
        device: &B::Device,
    ) -> Option<Tensor<B, 2, burn::tensor::Bool>> {
        let rows: Vec<bool> = (0..b)
            .map(|r| lengths.get(r).is_some_and(|&len| s >= len))
            .collect();
        rows.iter().any(|&f| f).then(|| {
            Tensor::<B, 2, burn::tensor::Bool>::from_data(
                burn::tensor::TensorData::new(rows, [b, 1]),
                device,
            )
        })
    }

    /// The LSTM recurrence over a sequence in plain ops, one step per time step; see
    /// [`crate::lstm_sequence`].
    pub fn lstm_sequence<B: Backend>(
        xp: FloatTensor<B>,
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        lengths: &[usize],
        keep_gates: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        let (xp, u, mut h, mut c) = (t3::<B>(xp), t2::<B>(u), t2::<B>(h0), t2::<B>(c0));
        let [b, t, w] = xp.dims();
        let hd = w / 4;
        let device = xp.device();
        let mut outs = Vec::with_capacity(t);
        let mut gates = Vec::with_capacity(t);
        for s in 0..t {
            let pre = xp.clone().narrow(1, s, 1).reshape([b, w]) + h.clone().matmul(u.clone());
            let block = |k: usize| pre.clone().narrow(1, k * hd, hd);
            // `1 / (1 + e^(−x))` in the float type itself: Burn 0.21's `sigmoid` computes in
            // `f32` whatever the type, which would make this reference too coarse for f64 checks.
            let sig = |x: Tensor<B, 2>| x.neg().exp().add_scalar(1.0).recip();
            let (i, f, g, o) = (sig(block(0)), sig(block(1)), block(2).tanh(), sig(block(3)));
            let c_new = f.clone().mul(c.clone()) + i.clone().mul(g.clone());
            let h_new = o.clone().mul(c_new.clone().tanh());
            match frozen_rows::<B>(lengths, b, s, &device) {
                Some(frozen) => {
                    let frozen = frozen.expand([b, hd]);
                    h = h_new.mask_where(frozen.clone(), h);
                    c = c_new.mask_where(frozen, c);
                }
                None => {
                    h = h_new;
                    c = c_new;
                }
            }
            outs.push(Tensor::cat(vec![h.clone(), c.clone()], 1).unsqueeze_dim::<3>(1));
            if keep_gates {
                gates.push(Tensor::cat(vec![i, f, g, o], 1).unsqueeze_dim::<3>(1));
            }
        }
        let out = if t == 0 {
            Tensor::<B, 3>::zeros([b, 0, 2 * hd], &device)
        } else {
            Tensor::cat(outs, 1)
        };
        let gates = keep_gates.then(|| {
            if t == 0 {
                Tensor::<B, 3>::zeros([b, 0, w], &device)
            } else {
                Tensor::cat(gates, 1)
            }
            .into_primitive()
            .tensor()
        });
        (out.into_primitive().tensor(), gates)
    }

    /// The gradients of [`lstm_sequence`] with respect to `xp`, `u`, `h0` and `c0` in plain ops
    /// (backpropagation through time); see [`crate::lstm_sequence`].
    pub fn lstm_sequence_backward<B: Backend>(
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        out: FloatTensor<B>,
        gates: FloatTensor<B>,
        lengths: &[usize],
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let (u, h0, c0) = (t2::<B>(u), t2::<B>(h0), t2::<B>(c0));
        let (out, gates, grad) = (t3::<B>(out), t3::<B>(gates), t3::<B>(grad));
        let [b, t, w] = gates.dims();
        let hd = w / 4;
        let device = gates.device();
        let at = |x: &Tensor<B, 3>, s: usize, k: usize, width: usize| {
            x.clone()
                .narrow(1, s, 1)
                .narrow(2, k, width)
                .reshape([b, width])
        };
        let (mut dh, mut dc) = (h0.zeros_like(), c0.zeros_like());
        let mut d_pre = vec![None; t];
        let mut d_u = u.zeros_like();
        for s in (0..t).rev() {
            let g_h = at(&grad, s, 0, hd) + dh.clone();
            let g_c = at(&grad, s, hd, hd) + dc.clone();
            let c = at(&out, s, hd, hd);
            let (c_prev, h_prev) = if s > 0 {
                (at(&out, s - 1, hd, hd), at(&out, s - 1, 0, hd))
            } else {
                (c0.clone(), h0.clone())
            };
            let (i, f, g, o) = (
                at(&gates, s, 0, hd),
                at(&gates, s, hd, hd),
                at(&gates, s, 2 * hd, hd),
                at(&gates, s, 3 * hd, hd),
            );
            let tc = c.tanh();
            let one = |x: &Tensor<B, 2>| x.ones_like();
            let d_c = g_c.clone()
                + g_h
                    .clone()
                    .mul(o.clone())
                    .mul(one(&tc) - tc.clone().powi_scalar(2));
            let d_o = g_h.clone().mul(tc).mul(o.clone()).mul(one(&o) - o);
            let d_i = d_c
                .clone()
                .mul(g.clone())
                .mul(i.clone())
                .mul(one(&i) - i.clone());
            let d_g = d_c.clone().mul(i).mul(one(&g) - g.powi_scalar(2));
            let d_f = d_c
                .clone()
                .mul(c_prev)
                .mul(f.clone())
                .mul(one(&f) - f.clone());
            let mut dp = Tensor::cat(vec![d_i, d_f, d_g, d_o], 1);
            let frozen = frozen_rows::<B>(lengths, b, s, &device);
            if let Some(frozen) = &frozen {
                dp = dp.mask_fill(frozen.clone().expand([b, w]), 0.0);
            }
            let through = dp.clone().matmul(u.clone().transpose());
            match frozen {
                Some(frozen) => {
                    let frozen = frozen.expand([b, hd]);
                    dh = through.mask_where(frozen.clone(), g_h);
                    dc = d_c.mul(f).mask_where(frozen, g_c);
                }
                None => {
                    dh = through;
                    dc = d_c.mul(f);
                }
            }
            d_u = d_u + h_prev.transpose().matmul(dp.clone());
            d_pre[s] = Some(dp.unsqueeze_dim::<3>(1));
        }
        let d_xp = if t == 0 {
            Tensor::<B, 3>::zeros([b, 0, w], &device)
        } else {
            Tensor::cat(d_pre.into_iter().flatten().collect(), 1)
        };
        [
            d_xp.into_primitive().tensor(),
            d_u.into_primitive().tensor(),
            dh.into_primitive().tensor(),
            dc.into_primitive().tensor(),
        ]
    }
}

/// One step of every row, over contiguous `f32` memory.
// The loops index several equal-length rows at once; indices keep them readable and LLVM
// vectorises them.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use crate::ops::activation::cpu::{sigmoid, tanh};

    /// One LSTM step for `pre.len() / 4h` rows: from pre-activations `[i, f, g, o]` (each `h`
    /// wide) and `c_prev`, writes the activated gates `σ(i), σ(f), tanh(g), σ(o)` into `act`,
    /// `c = σ(f) c_prev + σ(i) tanh(g)` into `c` and `h = σ(o) tanh(c)` into `h_out`.
    pub fn lstm_step(
        pre: &[f32],
        c_prev: &[f32],
        h: usize,
        act: &mut [f32],
        h_out: &mut [f32],
        c: &mut [f32],
    ) {
        let w = 4 * h;
        for ((pre, act), (cp, (ho, cn))) in pre.chunks_exact(w).zip(act.chunks_exact_mut(w)).zip(
            c_prev
                .chunks_exact(h)
                .zip(h_out.chunks_exact_mut(h).zip(c.chunks_exact_mut(h))),
        ) {
            sigmoid(&mut act[..2 * h], &pre[..2 * h]);
            tanh(&mut act[2 * h..3 * h], &pre[2 * h..3 * h]);
            sigmoid(&mut act[3 * h..], &pre[3 * h..]);
            let (i, rest) = act.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            for j in 0..h {
                cn[j] = f[j] * cp[j] + i[j] * g[j];
            }
            tanh(ho, cn);
            for (hv, ov) in ho.iter_mut().zip(o) {
                *hv *= ov;
            }
        }
    }

    /// The backward pass of [`lstm_step`] for `act.len() / 4h` rows, given the gradients `g_h`,
    /// `g_c` reaching the step's `h` and `c`: writes the pre-activations' gradient into `d_pre`
    /// and `c_prev`'s into `d_c_prev`. `scratch` holds `h` values.
    #[allow(clippy::too_many_arguments)]
    pub fn lstm_step_backward(
        act: &[f32],
        c: &[f32],
        c_prev: &[f32],
        g_h: &[f32],
        g_c: &[f32],
        h: usize,
        d_pre: &mut [f32],
        d_c_prev: &mut [f32],
        scratch: &mut [f32],
    ) {
        let w = 4 * h;
        let tc = &mut scratch[..h];
        for (row, (act, d_pre)) in act
            .chunks_exact(w)
            .zip(d_pre.chunks_exact_mut(w))
            .enumerate()
        {
            let span = row * h..(row + 1) * h;
            let (c, cp, gh, gc) = (
                &c[span.clone()],
                &c_prev[span.clone()],
                &g_h[span.clone()],
                &g_c[span.clone()],
            );
            let dcp = &mut d_c_prev[span];
            tanh(tc, c);
            let (i, rest) = act.split_at(h);
            let (f, rest) = rest.split_at(h);
            let (g, o) = rest.split_at(h);
            let (di, rest) = d_pre.split_at_mut(h);
            let (df, rest) = rest.split_at_mut(h);
            let (dg, d_o) = rest.split_at_mut(h);
            for j in 0..h {
                let t = tc[j];
                let dc = gc[j] + gh[j] * o[j] * (1.0 - t * t);
                d_o[j] = gh[j] * t * o[j] * (1.0 - o[j]);
                di[j] = dc * g[j] * i[j] * (1.0 - i[j]);
                dg[j] = dc * i[j] * (1.0 - g[j] * g[j]);
                df[j] = dc * cp[j] * f[j] * (1.0 - f[j]);
                dcp[j] = dc * f[j];
            }
        }
    }
}

/// The CPU backends' entry points: the step loop around `gemm` and the row kernels.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, reference};
    use crate::host::{dims3, HostTensor};
    use crate::ops::linear::host::gemm_slices;
    use crate::par;

    /// Whether row `b` is frozen at step `s` (past its length; no lengths: never).
    fn frozen(lengths: &[usize], b: usize, s: usize) -> bool {
        lengths.get(b).is_some_and(|&len| s >= len)
    }

    /// The CPU kernel on `f32` memory, [`reference::lstm_sequence`] otherwise.
    pub(crate) fn lstm_sequence<B: Backend>(
        xp: FloatTensor<B>,
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        lengths: &[usize],
        keep_gates: bool,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>)
    where
        FloatTensor<B>: HostTensor,
    {
        lstm_sequence_f32(&xp, &u, &h0, &c0, lengths, keep_gates)
            .unwrap_or_else(|| reference::lstm_sequence::<B>(xp, u, h0, c0, lengths, keep_gates))
    }

    /// The LSTM recurrence over a sequence ([`crate::lstm_sequence`]): per step one product
    /// `h_{t−1}·U` accumulated into the step's rows of `xp`, then the fused update of every row.
    /// Returns `[b, t, 2h]` (`h`, then `c`, per step) and, with `keep_gates`, the activated gates
    /// `[b, t, 4h]`.
    fn lstm_sequence_f32<T: HostTensor>(
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

    #[allow(clippy::too_many_arguments)]
    /// The CPU kernel on `f32` memory, [`reference::lstm_sequence_backward`] otherwise.
    pub(crate) fn lstm_sequence_backward<B: Backend>(
        u: FloatTensor<B>,
        h0: FloatTensor<B>,
        c0: FloatTensor<B>,
        out: FloatTensor<B>,
        gates: FloatTensor<B>,
        lengths: &[usize],
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4]
    where
        FloatTensor<B>: HostTensor,
    {
        lstm_sequence_backward_f32(&u, &h0, &c0, &out, &gates, lengths, &grad).unwrap_or_else(
            || reference::lstm_sequence_backward::<B>(u, h0, c0, out, gates, lengths, grad),
        )
    }

    /// The gradients of [`lstm_sequence_f32`] with respect to `xp`, `u`, `h0` and `c0`, from the
    /// saved output and activated gates: backpropagation through time, one product `δ_t·Uᵀ` per
    /// step, and `dU = Σ_t h_{t−1}ᵀ·δ_t` as one product at the end.
    #[allow(clippy::too_many_arguments)]
    fn lstm_sequence_backward_f32<T: HostTensor>(
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
}

/// One autodiff node for the whole sequence.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use crate::autodiff::backward_with;
    use crate::ArborBackend;

    /// The backward step of `lstm_sequence` (parents `xp`, `u`, `h0`, `c0`): backpropagation
    /// through time from the saved output and activated gates.
    #[derive(Debug)]
    struct LstmSequence;

    /// `u`, `h0`, `c0`, the output, the activated gates and the lengths.
    type LstmSequenceState<B> = (
        [FloatTensor<B>; 3],
        FloatTensor<B>,
        FloatTensor<B>,
        Vec<usize>,
    );

    impl<B: ArborBackend> Backward<B, 4> for LstmSequence {
        type State = LstmSequenceState<B>;

        fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 4, _>(ops, grads, |([u, h0, c0], out, gates, lengths), grad| {
                B::lstm_sequence_backward(u, h0, c0, out, gates, &lengths, grad)
            });
        }
    }

    /// `lstm_sequence` as one node that keeps the activated gates (the inner backend's
    /// `lstm_sequence` without them when nothing is tracked).
    pub(crate) fn lstm_sequence_tracked<B: ArborBackend, C: CheckpointStrategy>(
        xp: FloatTensor<Autodiff<B, C>>,
        u: FloatTensor<Autodiff<B, C>>,
        h0: FloatTensor<Autodiff<B, C>>,
        c0: FloatTensor<Autodiff<B, C>>,
        lengths: &[usize],
    ) -> FloatTensor<Autodiff<B, C>> {
        let nodes = [
            xp.node.clone(),
            u.node.clone(),
            h0.node.clone(),
            c0.node.clone(),
        ];
        let (xp, u, h0, c0) = (xp.primitive, u.primitive, h0.primitive, c0.primitive);
        match LstmSequence.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, gates) =
                    B::lstm_sequence(xp, u.clone(), h0.clone(), c0.clone(), lengths, true);
                let gates = gates.expect("lstm_sequence keeps the gates when asked");
                let state = ([u, h0, c0], out.clone(), gates, lengths.to_vec());
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::lstm_sequence(xp, u, h0, c0, lengths, false).0)
            }
        }
    }
}
