//! The fused ops written in plain Burn tensor ops: the trait's defaults, and the reference the
//! fused kernels are tested against.

use burn::prelude::*;
use burn::tensor::activation::{gelu, sigmoid, tanh};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata, TensorPrimitive};

use crate::{Activation, GateLayout};

/// `√2`, and `1/√(2π)` (the standard normal density at 0).
const SQRT_2: f64 = std::f64::consts::SQRT_2;
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// A primitive of any rank as a `[rows, last]` tensor.
pub(crate) fn rows<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    let shape = t.shape();
    let last = shape.as_slice().last().copied().unwrap_or(1);
    let n = shape.num_elements();
    let rows = n.checked_div(last).unwrap_or(0);
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(
        t,
        Shape::new([rows, last]),
    )))
}

/// A `[rows, last]` tensor back in `shape`.
pub(crate) fn unrows<B: Backend>(t: Tensor<B, 2>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(t.into_primitive().tensor(), shape)
}

fn block<B: Backend>(gates: &Tensor<B, 2>, b: usize, h: usize) -> Tensor<B, 2> {
    gates.clone().narrow(1, b * h, h)
}

/// `c = σ(i) ⊙ tanh(g) + Σ_k σ(f_k) ⊙ c_k` in plain ops.
pub fn gated_cell<B: Backend>(
    gates: FloatTensor<B>,
    children: Vec<FloatTensor<B>>,
    layout: &GateLayout,
) -> FloatTensor<B> {
    let gates = rows::<B>(gates);
    let h = gates.dims()[1] / layout.blocks;
    let shape = children[0].shape();
    let mut c =
        sigmoid(block(&gates, layout.input, h)).mul(tanh(block(&gates, layout.candidate, h)));
    for (child, &f) in children.into_iter().zip(&layout.forgets) {
        c = c.add(sigmoid(block(&gates, f, h)).mul(rows::<B>(child)));
    }
    unrows(c, shape)
}

/// Places `parts` (block index, `[rows, H]` tensor) into a zero `[rows, blocks·H]` tensor.
fn assemble<B: Backend>(
    parts: Vec<(usize, Tensor<B, 2>)>,
    rows: usize,
    h: usize,
    blocks: usize,
    like: &Tensor<B, 2>,
) -> Tensor<B, 2> {
    let (device, dtype) = (like.device(), like.dtype());
    let mut slots: Vec<Option<Tensor<B, 2>>> = (0..blocks).map(|_| None).collect();
    for (b, t) in parts {
        slots[b] = Some(match slots[b].take() {
            Some(prev) => prev.add(t),
            None => t,
        });
    }
    let blocks: Vec<Tensor<B, 2>> = slots
        .into_iter()
        .map(|s| s.unwrap_or_else(|| Tensor::zeros([rows, h], (&device, dtype))))
        .collect();
    Tensor::cat(blocks, 1)
}

/// The gradients of [`gated_cell`] in plain ops.
pub fn gated_cell_backward<B: Backend>(
    gates: FloatTensor<B>,
    children: Vec<FloatTensor<B>>,
    grad: FloatTensor<B>,
    layout: &GateLayout,
) -> (FloatTensor<B>, Vec<FloatTensor<B>>) {
    let gate_shape = gates.shape();
    let child_shape = grad.shape();
    let gates = rows::<B>(gates);
    let grad = rows::<B>(grad);
    let [n, w] = gates.dims();
    let h = w / layout.blocks;
    let si = sigmoid(block(&gates, layout.input, h));
    let tg = tanh(block(&gates, layout.candidate, h));
    // dσ(x)/dx = σ(1 − σ); dtanh(x)/dx = 1 − tanh².
    let d_i = grad
        .clone()
        .mul(tg.clone())
        .mul(si.clone().mul(si.clone().neg().add_scalar(1.0)));
    let d_g = grad
        .clone()
        .mul(si)
        .mul(tg.clone().mul(tg).neg().add_scalar(1.0));
    let mut parts = vec![(layout.input, d_i), (layout.candidate, d_g)];
    let mut d_children = Vec::with_capacity(children.len());
    for (child, &f) in children.into_iter().zip(&layout.forgets) {
        let sf = sigmoid(block(&gates, f, h));
        let d_f = grad
            .clone()
            .mul(rows::<B>(child))
            .mul(sf.clone().mul(sf.clone().neg().add_scalar(1.0)));
        parts.push((f, d_f));
        d_children.push(unrows(grad.clone().mul(sf), child_shape.clone()));
    }
    let d_gates = assemble(parts, n, h, layout.blocks, &gates);
    (unrows(d_gates, gate_shape), d_children)
}

/// `h = σ(o) ⊙ tanh(c)` in plain ops.
pub fn gated_output<B: Backend>(
    gates: FloatTensor<B>,
    c: FloatTensor<B>,
    layout: &GateLayout,
) -> FloatTensor<B> {
    let shape = c.shape();
    let gates = rows::<B>(gates);
    let h = gates.dims()[1] / layout.blocks;
    let out = sigmoid(block(&gates, layout.output, h)).mul(tanh(rows::<B>(c)));
    unrows(out, shape)
}

/// The gradients of [`gated_output`] in plain ops.
pub fn gated_output_backward<B: Backend>(
    gates: FloatTensor<B>,
    c: FloatTensor<B>,
    grad: FloatTensor<B>,
    layout: &GateLayout,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let gate_shape = gates.shape();
    let c_shape = c.shape();
    let gates = rows::<B>(gates);
    let grad = rows::<B>(grad);
    let [n, w] = gates.dims();
    let h = w / layout.blocks;
    let so = sigmoid(block(&gates, layout.output, h));
    let tc = tanh(rows::<B>(c));
    let d_o = grad
        .clone()
        .mul(tc.clone())
        .mul(so.clone().mul(so.clone().neg().add_scalar(1.0)));
    let d_c = grad.mul(so).mul(tc.clone().mul(tc).neg().add_scalar(1.0));
    let d_gates = assemble(vec![(layout.output, d_o)], n, h, layout.blocks, &gates);
    (unrows(d_gates, gate_shape), unrows(d_c, c_shape))
}

fn mix_weights<B: Backend>(s: FloatTensor<B>) -> [Tensor<B, 3>; 3] {
    let s = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(s)).unsqueeze_dim::<3>(2);
    let cum = s.clone().cumsum(1);
    let keep_left = cum.clone().neg().add_scalar(1.0);
    let take_right = cum.sub(s.clone());
    [s, keep_left, take_right]
}

fn t3<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 3> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
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

fn t2<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

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
    let (d_gates, d_mf, d_mi, _) = ordered_backward(gates, master_forget, master_input, d_fhat, gu);
    [d_gates, d_mf, d_mi]
}

/// `c_t = a_t ⊙ c_{t−1} + u_t` along dimension 1 (`c_{−1} = c0`) in plain ops: one step per
/// time step.
pub fn linear_scan<B: Backend>(
    a: FloatTensor<B>,
    u: FloatTensor<B>,
    c0: FloatTensor<B>,
) -> FloatTensor<B> {
    let (a, u, mut c) = (t3::<B>(a), t3::<B>(u), t2::<B>(c0));
    let [b, t, h] = a.dims();
    if t == 0 {
        return u.into_primitive().tensor();
    }
    let step = |x: &Tensor<B, 3>, s: usize| x.clone().narrow(1, s, 1).reshape([b, h]);
    let mut out = Vec::with_capacity(t);
    for s in 0..t {
        c = step(&a, s).mul(c).add(step(&u, s));
        out.push(c.clone().unsqueeze_dim::<3>(1));
    }
    Tensor::cat(out, 1).into_primitive().tensor()
}

/// The gradients of [`linear_scan`] with respect to `a`, `u` and `c0`, given the gradient
/// `grad` of its output: with `δ_t = grad_t + a_{t+1} ⊙ δ_{t+1}`, `∂a_t = δ_t ⊙ c_{t−1}`,
/// `∂u_t = δ_t`, `∂c0 = a_0 ⊙ δ_0`.
pub fn linear_scan_backward<B: Backend>(
    a: FloatTensor<B>,
    u: FloatTensor<B>,
    c0: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 3] {
    let c = t3::<B>(linear_scan::<B>(a.clone(), u, c0.clone()));
    let (a, c0, g) = (t3::<B>(a), t2::<B>(c0), t3::<B>(grad));
    let [b, t, h] = a.dims();
    if t == 0 {
        return [
            a.into_primitive().tensor(),
            g.into_primitive().tensor(),
            c0.zeros_like().into_primitive().tensor(),
        ];
    }
    let step = |x: &Tensor<B, 3>, s: usize| x.clone().narrow(1, s, 1).reshape([b, h]);
    let mut carry = c0.zeros_like();
    let mut deltas = vec![None; t];
    for s in (0..t).rev() {
        let delta = step(&g, s).add(carry);
        carry = step(&a, s).mul(delta.clone());
        deltas[s] = Some(delta.unsqueeze_dim::<3>(1));
    }
    let du = Tensor::cat(deltas.into_iter().flatten().collect(), 1);
    let first = c0.unsqueeze_dim::<3>(1);
    let prev = if t == 1 {
        first
    } else {
        Tensor::cat(vec![first, c.narrow(1, 0, t - 1)], 1)
    };
    [
        du.clone().mul(prev).into_primitive().tensor(),
        du.into_primitive().tensor(),
        carry.into_primitive().tensor(),
    ]
}

/// `σ(x)` or `tanh(x)` with Burn's own activations.
pub fn activation<B: Backend>(x: FloatTensor<B>, act: Activation) -> FloatTensor<B> {
    let shape = x.shape();
    let x = rows::<B>(x);
    let y = match act {
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => tanh(x),
        Activation::Gelu => gelu(x),
    };
    unrows::<B>(y, shape)
}

/// The gradient of [`activation`] from its output `y` (sigmoid, tanh) or its input (GELU:
/// `Φ(x) + x·φ(x)`).
pub fn activation_backward<B: Backend>(
    y: FloatTensor<B>,
    grad: FloatTensor<B>,
    act: Activation,
) -> FloatTensor<B> {
    let shape = y.shape();
    let (y, g) = (rows::<B>(y), rows::<B>(grad));
    let slope = match act {
        Activation::Sigmoid => y.clone().mul(y.neg().add_scalar(1.0)),
        Activation::Tanh => y.clone().mul(y).neg().add_scalar(1.0),
        Activation::Gelu => {
            let x = y;
            let cdf = x
                .clone()
                .div_scalar(SQRT_2)
                .erf()
                .add_scalar(1.0)
                .mul_scalar(0.5);
            let pdf = x
                .clone()
                .powi_scalar(2)
                .mul_scalar(-0.5)
                .exp()
                .mul_scalar(FRAC_1_SQRT_2PI);
            cdf.add(x.mul(pdf))
        }
    };
    unrows::<B>(g.mul(slope), shape)
}

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

/// `[x[:, k] ; x[:, k + 1]]` for every adjacent pair, in plain ops.
pub fn adjacent_pairs<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let x = t3::<B>(x);
    let m = x.dims()[1];
    Tensor::cat(
        vec![x.clone().narrow(1, 0, m - 1), x.narrow(1, 1, m - 1)],
        2,
    )
    .into_primitive()
    .tensor()
}

/// The gradient of [`adjacent_pairs`] in plain ops: each node gets the left half of its own
/// pair's gradient and the right half of its left neighbour's.
pub fn adjacent_pairs_backward<B: Backend>(grad: FloatTensor<B>) -> FloatTensor<B> {
    let g = t3::<B>(grad);
    let [b, _, d2] = g.dims();
    let d = d2 / 2;
    let zero = Tensor::<B, 3>::zeros([b, 1, d], &g.device()).cast(g.dtype());
    let as_left = Tensor::cat(vec![g.clone().narrow(2, 0, d), zero.clone()], 1);
    let as_right = Tensor::cat(vec![zero, g.narrow(2, d, d)], 1);
    as_left.add(as_right).into_primitive().tensor()
}

/// A tensor of zeros of the backend's default float type.
pub fn zeros<B: Backend>(shape: Shape, device: &B::Device) -> FloatTensor<B> {
    let n = shape.num_elements();
    let flat = Tensor::<B, 1>::zeros([n], device).into_primitive().tensor();
    B::float_reshape(flat, shape)
}

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

/// Layer normalisation of `[rows, d]`: the backend's own `layer_norm` module op (Flex and
/// CubeCL run it as one kernel), with `γ = 1` and no `β` when there is no affine map.
pub fn layer_norm<B: Backend>(
    x: FloatTensor<B>,
    affine: Option<(FloatTensor<B>, FloatTensor<B>)>,
    epsilon: f64,
) -> FloatTensor<B> {
    let (gamma, beta) = match affine {
        Some((g, b)) => (g, Some(b)),
        None => {
            let d = x.shape()[1];
            let ones = Tensor::<B, 1>::ones([d], &B::float_device(&x));
            (ones.into_primitive().tensor(), None)
        }
    };
    B::layer_norm(x, gamma, beta, epsilon)
}

/// `x̂ = (x − mean) / σ` and `1 / σ` (`[rows, 1]`) of `[rows, d]`.
fn normalized<B: Backend>(x: Tensor<B, 2>, epsilon: f64) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let centered = x.clone().sub(x.mean_dim(1));
    let var = centered.clone().mul(centered.clone()).mean_dim(1);
    let rstd = var.add_scalar(epsilon).sqrt().recip();
    (centered.mul(rstd.clone()), rstd)
}

/// The gradients of [`layer_norm`] in plain ops.
#[allow(clippy::type_complexity)]
pub fn layer_norm_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
    epsilon: f64,
    grad: FloatTensor<B>,
) -> (FloatTensor<B>, Option<(FloatTensor<B>, FloatTensor<B>)>) {
    let (xhat, rstd) = normalized::<B>(t2::<B>(x), epsilon);
    let g = t2::<B>(grad);
    let d = xhat.dims()[1];
    let (gh, affine) = match gamma {
        Some(gamma) => {
            let gamma = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(gamma));
            let d_gamma = g.clone().mul(xhat.clone()).sum_dim(0).reshape([d]);
            let d_beta = g.clone().sum_dim(0).reshape([d]);
            (
                g.mul(gamma.reshape([1, d])),
                Some((
                    d_gamma.into_primitive().tensor(),
                    d_beta.into_primitive().tensor(),
                )),
            )
        }
        None => (g, None),
    };
    let dx = gh
        .clone()
        .sub(gh.clone().mean_dim(1))
        .sub(xhat.clone().mul(gh.mul(xhat).mean_dim(1)))
        .mul(rstd);
    (dx.into_primitive().tensor(), affine)
}

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
