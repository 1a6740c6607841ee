//! The ON-LSTM update with master gates (Shen et al. 2019, eqs. 9–14) shared by the FastTrees
//! family: `ordered_cell` (`c = f̂ ⊙ c_prev + î ⊙ tanh(g)`) and `ordered_gates`
//! (`[f̂ | î ⊙ tanh(g)]` without the cell update), whose backward passes share one loop.

use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use crate::ArborBackend;

/// The ON-LSTM cell update `c = f̂ ⊙ c_prev + î ⊙ tanh(g)` with master gates, one op (and one
/// autodiff node).
///
/// # Shapes
/// - `gates`: `[n, 4H]`, pre-activations `i, f, g, o`
/// - `master_forget`, `master_input`: `[n, C]`, activations (after cumax), `C` dividing `H`
/// - `c_prev`: `[n, H]`
/// - output `c`: `[n, H]`
pub fn ordered_cell<B: ArborBackend>(
    gates: Tensor<B, 2>,
    master_forget: Tensor<B, 2>,
    master_input: Tensor<B, 2>,
    c_prev: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [n, h] = c_prev.dims();
    let [_, c] = master_forget.dims();
    assert_eq!(gates.dims(), [n, 4 * h], "gates must be [n, 4H]");
    assert!(
        c > 0 && h % c == 0 && master_input.dims() == [n, c] && master_forget.dims()[0] == n,
        "master gates must be [n, C] with C dividing H = {h}"
    );
    let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::ordered_cell(
        p(gates),
        p(master_forget),
        p(master_input),
        p(c_prev),
    )))
}

/// The ON-LSTM gate activations without the cell update, `[f̂ | î ⊙ tanh(g)]`, one op (and one
/// autodiff node): what a cell whose gates all come from the input (Faster FastTrees) computes
/// for every step before its scan `c_t = f̂_t ⊙ c_{t−1} + (î ⊙ tanh(g))_t`; see [`ordered_cell`]
/// for `f̂` and `î`.
///
/// # Shapes
/// - `gates`: `[n, 4H]`, pre-activations `i, f, g, o` (`o` is not read)
/// - `master_forget`, `master_input`: `[n, C]`, `C` dividing `H`
/// - output: `[n, 2H]`
pub fn ordered_gates<B: ArborBackend>(
    gates: Tensor<B, 2>,
    master_forget: Tensor<B, 2>,
    master_input: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [n, g4] = gates.dims();
    let [_, c] = master_forget.dims();
    let h = g4 / 4;
    assert!(
        g4 % 4 == 0 && c > 0 && h % c == 0,
        "ordered_gates: gates [n, 4H] and master gates [n, C] with C dividing H"
    );
    assert!(
        master_forget.dims()[0] == n && master_input.dims() == [n, c],
        "ordered_gates: master gates must be [n, C]"
    );
    let p = |t: Tensor<B, 2>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::ordered_gates(
        p(gates),
        p(master_forget),
        p(master_input),
    )))
}

/// The ordered ops in plain Burn ops.
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::activation::{sigmoid, tanh};
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::TensorMetadata;

    use crate::reference::{assemble, block, t2};

    /// A `[n, C]` master gate broadcast to `[n, H]` (each chunk value repeated `H / C` times).
    fn spread<B: Backend>(m: Tensor<B, 2>, h: usize) -> Tensor<B, 2> {
        let [n, c] = m.dims();
        m.unsqueeze_dim::<3>(2)
            .expand([n, c, h / c])
            .reshape([n, h])
    }

    /// `c = f̂ ⊙ c_prev + î ⊙ tanh(g)` with master gates, in plain ops.
    pub fn ordered_cell<B: Backend>(
        gates: FloatTensor<B>,
        master_forget: FloatTensor<B>,
        master_input: FloatTensor<B>,
        c_prev: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let cp = t2::<B>(c_prev);
        let p = OrderedParts::<B>::new(gates, master_forget, master_input);
        let update = p.update();
        p.f_hat.mul(cp).add(update).into_primitive().tensor()
    }

    /// The gradients of [`ordered_cell`] in plain ops.
    pub fn ordered_cell_backward<B: Backend>(
        gates: FloatTensor<B>,
        master_forget: FloatTensor<B>,
        master_input: FloatTensor<B>,
        c_prev: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let (cp, gc) = (t2::<B>(c_prev), t2::<B>(grad));
        let d_fhat = gc.clone().mul(cp);
        let (d_gates, d_mf, d_mi, f_hat) =
            ordered_backward(gates, master_forget, master_input, d_fhat, gc.clone());
        [d_gates, d_mf, d_mi, gc.mul(f_hat).into_primitive().tensor()]
    }

    /// The ON-LSTM gate activations shared by [`ordered_cell`] and [`ordered_gates`], and the
    /// gradients of the gates and master gates given `d_fhat` (the gradient reaching `f̂`) and `gu`
    /// (the gradient reaching `î ⊙ tanh(g)`); also returns `f̂`.
    fn ordered_backward<B: Backend>(
        gates: FloatTensor<B>,
        master_forget: FloatTensor<B>,
        master_input: FloatTensor<B>,
        d_fhat: Tensor<B, 2>,
        gu: Tensor<B, 2>,
    ) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, Tensor<B, 2>) {
        let c = master_forget.shape()[1];
        let g = t2::<B>(gates.clone());
        let p = OrderedParts::<B>::new(gates, master_forget, master_input);
        let [n, h] = gu.dims();
        let d_ihat = gu.clone().mul(p.tu.clone());
        let d_f = d_fhat
            .clone()
            .mul(p.omega.clone())
            .mul(p.sf.clone().mul(p.sf.clone().neg().add_scalar(1.0)));
        let d_i = d_ihat
            .clone()
            .mul(p.omega)
            .mul(p.si.clone().mul(p.si.clone().neg().add_scalar(1.0)));
        let d_u = gu
            .mul(p.i_hat)
            .mul(p.tu.clone().mul(p.tu).neg().add_scalar(1.0));
        let d_omega = d_fhat
            .clone()
            .mul(p.sf.sub_scalar(1.0))
            .add(d_ihat.clone().mul(p.si.sub_scalar(1.0)));
        let chunk_sum = |t: Tensor<B, 2>| t.reshape([n, c, h / c]).sum_dim(2).reshape([n, c]);
        let d_mf = chunk_sum(d_fhat.add(d_omega.clone().mul(p.mi)));
        let d_mi = chunk_sum(d_ihat.add(d_omega.mul(p.mf)));
        let d_gates = assemble(vec![(0, d_i), (1, d_f), (2, d_u)], n, h, 4, &g);
        (
            d_gates.into_primitive().tensor(),
            d_mf.into_primitive().tensor(),
            d_mi.into_primitive().tensor(),
            p.f_hat,
        )
    }

    /// `[f̂ | î ⊙ tanh(g)]` from gates `i, f, g, o` and master gates, in plain ops.
    pub fn ordered_gates<B: Backend>(
        gates: FloatTensor<B>,
        master_forget: FloatTensor<B>,
        master_input: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let p = OrderedParts::<B>::new(gates, master_forget, master_input);
        let update = p.update();
        Tensor::cat(vec![p.f_hat, update], 1)
            .into_primitive()
            .tensor()
    }

    /// The quantities of the ON-LSTM update (Shen et al. 2019, eqs. 9–14), each `[n, H]`: the
    /// master gates spread over their chunks, `ω = f̃ ⊙ ĩ`, `σ(f)`, `σ(i)`, `tanh(g)`, `f̂`, `î`.
    struct OrderedParts<B: Backend> {
        mf: Tensor<B, 2>,
        mi: Tensor<B, 2>,
        omega: Tensor<B, 2>,
        sf: Tensor<B, 2>,
        si: Tensor<B, 2>,
        tu: Tensor<B, 2>,
        f_hat: Tensor<B, 2>,
        i_hat: Tensor<B, 2>,
    }

    impl<B: Backend> OrderedParts<B> {
        fn new(
            gates: FloatTensor<B>,
            master_forget: FloatTensor<B>,
            master_input: FloatTensor<B>,
        ) -> Self {
            let g = t2::<B>(gates);
            let h = g.dims()[1] / 4;
            let (mf, mi) = (
                spread(t2::<B>(master_forget), h),
                spread(t2::<B>(master_input), h),
            );
            let omega = mf.clone().mul(mi.clone());
            let (sf, si, tu) = (
                sigmoid(block(&g, 1, h)),
                sigmoid(block(&g, 0, h)),
                tanh(block(&g, 2, h)),
            );
            let f_hat = sf
                .clone()
                .mul(omega.clone())
                .add(mf.clone().sub(omega.clone()));
            let i_hat = si
                .clone()
                .mul(omega.clone())
                .add(mi.clone().sub(omega.clone()));
            OrderedParts {
                mf,
                mi,
                omega,
                sf,
                si,
                tu,
                f_hat,
                i_hat,
            }
        }

        /// `î ⊙ tanh(g)`.
        fn update(&self) -> Tensor<B, 2> {
            self.i_hat.clone().mul(self.tu.clone())
        }
    }

    /// The gradients of [`ordered_gates`] with respect to the gates (zero in the output block) and
    /// both master gates.
    pub fn ordered_gates_backward<B: Backend>(
        gates: FloatTensor<B>,
        master_forget: FloatTensor<B>,
        master_input: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let g = t2::<B>(grad);
        let h = g.dims()[1] / 2;
        let (d_fhat, gu) = (g.clone().narrow(1, 0, h), g.narrow(1, h, h));
        let (d_gates, d_mf, d_mi, _) =
            ordered_backward(gates, master_forget, master_input, d_fhat, gu);
        [d_gates, d_mf, d_mi]
    }
}

/// The loops over contiguous `f32` rows.
pub(crate) mod cpu {
    use crate::ops::activation::cpu::{sigmoid, tanh};
    use crate::ops::gated_cell::cpu::Scratch;

    /// The ON-LSTM update `out = f̂ ⊙ c_prev + î ⊙ tanh(g)` over `[n, 4h]` gates (`i, f, g, o`),
    /// `[n, c]` master gates and `[n, h]` states.
    pub fn ordered_cell(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        cp: &[f32],
        c: usize,
        h: usize,
        out: &mut [f32],
    ) {
        ordered_rows(gates, mf, mi, c, h, |r, j, u| {
            let i = r * h + j;
            out[i] = u.f_hat() * cp[i] + u.i_hat() * u.tu;
        });
    }

    /// One unit of the ON-LSTM update: the index `k` of its chunk's master gates `f̃`, `ĩ`,
    /// `ω = f̃ ĩ`, and its `σ(f)`, `σ(i)`, `tanh(g)`.
    struct Unit {
        k: usize,
        ft: f32,
        it: f32,
        w: f32,
        sf: f32,
        si: f32,
        tu: f32,
    }

    impl Unit {
        /// `f̂ = σ(f) ω + f̃ − ω`.
        fn f_hat(&self) -> f32 {
            self.sf * self.w + self.ft - self.w
        }

        /// `î = σ(i) ω + ĩ − ω`.
        fn i_hat(&self) -> f32 {
            self.si * self.w + self.it - self.w
        }
    }

    /// Calls `visit(r, j, unit)` for every unit `j` of every row `r` of `[n, 4h]` gates (`i, f,
    /// g, o`) and `[n, c]` master gates, row after row and unit after unit (chunk by chunk, so
    /// no index is divided per unit: integer division is slow, and it was a fifth of Faster
    /// FastTrees' evaluation).
    fn ordered_rows(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        c: usize,
        h: usize,
        mut visit: impl FnMut(usize, usize, &Unit),
    ) {
        let s_len = h / c;
        let rows = mf.len() / c.max(1);
        let mut s = Scratch::new(h);
        for r in 0..rows {
            let g = &gates[r * 4 * h..(r + 1) * 4 * h];
            sigmoid(&mut s.a, &g[..h]);
            sigmoid(&mut s.f, &g[h..2 * h]);
            tanh(&mut s.b, &g[2 * h..3 * h]);
            for (chunk, k) in (r * c..(r + 1) * c).enumerate() {
                let (ft, it) = (mf[k], mi[k]);
                let w = ft * it;
                for j in chunk * s_len..(chunk + 1) * s_len {
                    let unit = Unit {
                        k,
                        ft,
                        it,
                        w,
                        sf: s.f[j],
                        si: s.a[j],
                        tu: s.b[j],
                    };
                    visit(r, j, &unit);
                }
            }
        }
    }

    /// The gradients of [`ordered_cell`]: `d_gates` `[n, 4h]` (zero in the output block),
    /// `d_mf`, `d_mi` `[n, c]`, `d_cp` `[n, h]`.
    #[allow(clippy::too_many_arguments)]
    pub fn ordered_cell_backward(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        cp: &[f32],
        grad: &[f32],
        c: usize,
        h: usize,
        d_gates: &mut [f32],
        d_mf: &mut [f32],
        d_mi: &mut [f32],
        d_cp: &mut [f32],
    ) {
        ordered_backward(gates, mf, mi, c, h, d_gates, d_mf, d_mi, |r, j, f_hat| {
            let i = r * h + j;
            d_cp[i] = grad[i] * f_hat;
            (grad[i] * cp[i], grad[i])
        });
    }

    /// `out = [f̂ | î ⊙ tanh(g)]` `[n, 2h]` from gates `[n, 4h]` (`i, f, g, o`) and master gates
    /// `[n, c]`: the ON-LSTM gate activations without the cell update.
    pub fn ordered_gates(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        c: usize,
        h: usize,
        out: &mut [f32],
    ) {
        ordered_rows(gates, mf, mi, c, h, |r, j, u| {
            out[r * 2 * h + j] = u.f_hat();
            out[r * 2 * h + h + j] = u.i_hat() * u.tu;
        });
    }

    /// The gradients of [`ordered_gates`] given `grad` `[n, 2h]`: `d_gates` `[n, 4h]` (zero in the
    /// output block), `d_mf`, `d_mi` `[n, c]`.
    #[allow(clippy::too_many_arguments)]
    pub fn ordered_gates_backward(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        grad: &[f32],
        c: usize,
        h: usize,
        d_gates: &mut [f32],
        d_mf: &mut [f32],
        d_mi: &mut [f32],
    ) {
        ordered_backward(gates, mf, mi, c, h, d_gates, d_mf, d_mi, |r, j, _| {
            (grad[r * 2 * h + j], grad[r * 2 * h + h + j])
        });
    }

    /// The backward pass shared by [`ordered_cell_backward`] and [`ordered_gates_backward`]: for
    /// row `r`, unit `j` and its `f̂`, `upstream` gives the gradients reaching `f̂`
    /// and `î ⊙ tanh(g)`.
    #[allow(clippy::too_many_arguments)]
    fn ordered_backward(
        gates: &[f32],
        mf: &[f32],
        mi: &[f32],
        c: usize,
        h: usize,
        d_gates: &mut [f32],
        d_mf: &mut [f32],
        d_mi: &mut [f32],
        mut upstream: impl FnMut(usize, usize, f32) -> (f32, f32),
    ) {
        d_gates.fill(0.0);
        d_mf.fill(0.0);
        d_mi.fill(0.0);
        ordered_rows(gates, mf, mi, c, h, |r, j, u| {
            let (d_fhat, gu) = upstream(r, j, u.f_hat());
            let d_ihat = gu * u.tu;
            let dg = &mut d_gates[r * 4 * h..(r + 1) * 4 * h];
            dg[j] = d_ihat * u.w * u.si * (1.0 - u.si);
            dg[h + j] = d_fhat * u.w * u.sf * (1.0 - u.sf);
            dg[2 * h + j] = gu * u.i_hat() * (1.0 - u.tu * u.tu);
            let d_w = d_fhat * (u.sf - 1.0) + d_ihat * (u.si - 1.0);
            d_mf[u.k] += d_fhat + d_w * u.it;
            d_mi[u.k] += d_ihat + d_w * u.ft;
        });
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

    /// The CPU kernel on `f32` memory, [`reference::ordered_cell`] otherwise.
    pub(crate) fn ordered_cell<B: Backend>(
        gates: FloatTensor<B>,
        mf: FloatTensor<B>,
        mi: FloatTensor<B>,
        cp: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        ordered_cell_f32(&gates, &mf, &mi, &cp)
            .unwrap_or_else(|| reference::ordered_cell::<B>(gates, mf, mi, cp))
    }

    fn ordered_cell_f32<T: HostTensor>(gates: &T, mf: &T, mi: &T, cp: &T) -> Option<T> {
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

    /// The CPU kernel on `f32` memory, [`reference::ordered_cell_backward`] otherwise.
    pub(crate) fn ordered_cell_backward<B: Backend>(
        gates: FloatTensor<B>,
        mf: FloatTensor<B>,
        mi: FloatTensor<B>,
        cp: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4]
    where
        FloatTensor<B>: HostTensor,
    {
        ordered_cell_backward_f32(&gates, &mf, &mi, &cp, &grad)
            .unwrap_or_else(|| reference::ordered_cell_backward::<B>(gates, mf, mi, cp, grad))
    }

    fn ordered_cell_backward_f32<T: HostTensor>(
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

    /// The CPU kernel on `f32` memory, [`reference::ordered_gates`] otherwise.
    pub(crate) fn ordered_gates<B: Backend>(
        gates: FloatTensor<B>,
        mf: FloatTensor<B>,
        mi: FloatTensor<B>,
    ) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        ordered_gates_f32(&gates, &mf, &mi)
            .unwrap_or_else(|| reference::ordered_gates::<B>(gates, mf, mi))
    }

    fn ordered_gates_f32<T: HostTensor>(gates: &T, mf: &T, mi: &T) -> Option<T> {
        let (g, f, i) = (gates.host()?, mf.host()?, mi.host()?);
        let (n, h, chunks) = (gates.shape()[0], gates.shape()[1] / 4, mf.shape()[1]);
        let mut out = vec![0f32; n * 2 * h];
        par::rows(n, 6 * h, vec![(&mut out, 2 * h)], &|r, o| {
            let (g, f, i) = ordered_rows(&g, &f, &i, &r, h, chunks);
            cpu::ordered_gates(g, f, i, chunks, h, o[0]);
        });
        Some(T::from_f32(out, Shape::new([n, 2 * h])))
    }

    /// The CPU kernel on `f32` memory, [`reference::ordered_gates_backward`] otherwise.
    pub(crate) fn ordered_gates_backward<B: Backend>(
        gates: FloatTensor<B>,
        mf: FloatTensor<B>,
        mi: FloatTensor<B>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3]
    where
        FloatTensor<B>: HostTensor,
    {
        ordered_gates_backward_f32(&gates, &mf, &mi, &grad)
            .unwrap_or_else(|| reference::ordered_gates_backward::<B>(gates, mf, mi, grad))
    }

    fn ordered_gates_backward_f32<T: HostTensor>(
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
}

/// One autodiff node per ordered op.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::ops::FloatTensor;

    use crate::autodiff::{backward_with, record};
    use crate::ArborBackend;

    /// The backward step of `ordered_cell(gates, master_forget, master_input, c_prev)`.
    #[derive(Debug)]
    pub(crate) struct OrderedCell;

    impl<B: ArborBackend> Backward<B, 4> for OrderedCell {
        type State = [FloatTensor<B>; 4];

        fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 4, _>(ops, grads, |[a, b, c, d], grad| {
                B::ordered_cell_backward(a, b, c, d, grad)
            });
        }
    }

    /// The backward step of `ordered_gates(gates, master_forget, master_input)`.
    #[derive(Debug)]
    pub(crate) struct OrderedGates;

    impl<B: ArborBackend> Backward<B, 3> for OrderedGates {
        type State = [FloatTensor<B>; 3];

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 3, _>(ops, grads, |[a, b, c], grad| {
                B::ordered_gates_backward(a, b, c, grad)
            });
        }
    }

    /// `ordered_cell` as one node that keeps its inputs.
    pub(crate) fn ordered_cell<B: ArborBackend, C: CheckpointStrategy>(
        gates: FloatTensor<Autodiff<B, C>>,
        master_forget: FloatTensor<Autodiff<B, C>>,
        master_input: FloatTensor<Autodiff<B, C>>,
        c_prev: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(
            OrderedCell,
            [gates, master_forget, master_input, c_prev],
            |[g, f, i, c]| B::ordered_cell(g, f, i, c),
        )
    }

    /// `ordered_gates` as one node that keeps its inputs.
    pub(crate) fn ordered_gates<B: ArborBackend, C: CheckpointStrategy>(
        gates: FloatTensor<Autodiff<B, C>>,
        master_forget: FloatTensor<Autodiff<B, C>>,
        master_input: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        record::<B, C, _, _>(
            OrderedGates,
            [gates, master_forget, master_input],
            |[g, f, i]| B::ordered_gates(g, f, i),
        )
    }
}
