//! A `Linear` over inputs of any rank whose backward pass stays one matmul, and a `Conv1d`
//! over the time axis of `[batch, time, channels]` sequences.

use crate::ArborBackend;
use burn::nn::conv::Conv1d;
use burn::nn::{Linear, PaddingConfig1d};
use burn::prelude::*;

/// `conv` over the time axis of `x` laid out `[batch, time, channels]` (Burn's `Conv1d` reads
/// `[batch, channels, time]`): the values of `conv.forward(x.swap_dims(1, 2)).swap_dims(1, 2)`.
///
/// A causal convolution (stride, dilation and groups 1, left padding `K − 1`, none on the
/// right: Conv FastTrees' master gates and the FastTrees gate's convolution) runs as one
/// product of each step's window of `K` steps ([`arbor_kernels::causal_windows`],
/// `[batch·time, K·c_in]`) with the weight laid out `[K·c_in, c_out]` (a small copy): every
/// row of the batch in one product, and no transposed view of the input or output. Burn's
/// `Conv1d` (0.21, Flex) ran many small products over a transposed copy and walked transposed
/// views element by element in its backward pass. Any other convolution runs through Burn's,
/// with the transposed views copied into memory of their own by [`arbor_kernels::contiguous`]
/// in both passes.
///
/// # Shapes
/// - `x`: `[batch, time, c_in]`
/// - output: `[batch, time', c_out]` (`time'` as the convolution's padding gives it)
pub fn conv1d_over_time<B: ArborBackend>(conv: &Conv1d<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let [batch, time, c_in] = x.dims();
    let [c_out, _, k] = conv.weight.dims();
    let causal = conv.stride == 1
        && conv.dilation == 1
        && conv.groups == 1
        && matches!(conv.padding, PaddingConfig1d::Explicit(left, 0) if left + 1 == k);
    if causal && batch * time > 0 {
        let weight = conv
            .weight
            .val()
            .permute([2, 1, 0])
            .reshape([k * c_in, c_out]);
        let windows = arbor_kernels::causal_windows(x, k).reshape([batch * time, k * c_in]);
        let bias = conv.bias.as_ref().map(|b| b.val());
        return arbor_kernels::linear(windows, weight, bias).reshape([batch, time, c_out]);
    }
    // Each transpose sits between two `contiguous`: the outer one copies the forward value,
    // the inner one (a no-op in the forward pass) the transposed gradient.
    let transposed =
        |t: Tensor<B, 3>| arbor_kernels::contiguous(arbor_kernels::contiguous(t).swap_dims(1, 2));
    transposed(conv.forward(transposed(x)))
}

/// `linear.forward(x)` with every leading dimension of `x` folded into one row dimension, as
/// one fused op ([`arbor_kernels::linear`]: the bias added inside the product).
///
/// Same values as `linear.forward(x)`. The difference is the backward pass: Burn 0.21's
/// default weight gradient of a rank-`D > 2` input is a batched matmul that materialises a
/// `[leading…, d_in, d_out]` tensor and then sums it over the leading dimensions (for a
/// `[160, 4, 128]` input into a `128 → 512` layer: 10 M floats where 64 K are needed). On
/// `[rows, d_in]` the weight gradient is one `d_in × rows · rows × d_out` matmul. Every
/// rank-3 `Linear` in arbor goes through here.
///
/// # Shapes
/// - `x`: `[..., d_in]`
/// - output: `[..., d_out]`
pub fn linear_rows<B: ArborBackend, const D: usize>(
    linear: &Linear<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    if D < 2 {
        return linear.forward(x);
    }
    let dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let y = arbor_kernels::linear(
        x.reshape([rows, d_in]),
        linear.weight.val(),
        linear.bias.as_ref().map(|b| b.val()),
    );
    let d_out = y.dims()[1];
    let mut out = dims;
    out[D - 1] = d_out;
    y.reshape(out)
}

/// Columns `start..start + len` of `linear.forward(x)`, computed from the same columns of the
/// weight and bias: `x·W[:, start..start + len] + b[start..start + len]`.
///
/// Same values as `linear.forward(x).narrow(1, start, len)`, but the output is a contiguous
/// tensor of its own instead of a strided view of a wider one, so the elementwise kernels that
/// read it do not copy it first (the CPU backends' products read the weight's columns in place).
/// Used where one fused `Linear` feeds parts that are consumed separately.
///
/// # Shapes
/// - `x`: `[rows, d_in]`
/// - output: `[rows, len]`
pub fn linear_columns<B: ArborBackend>(
    linear: &Linear<B>,
    x: Tensor<B, 2>,
    start: usize,
    len: usize,
) -> Tensor<B, 2> {
    arbor_kernels::linear(
        x,
        linear.weight.val().narrow(1, start, len),
        linear.bias.as_ref().map(|b| b.val().narrow(0, start, len)),
    )
}

/// A recurrent step's pre-activations `x_t·W_in + h·W_hh + b` from two `Linear`s, as one
/// fused op ([`arbor_kernels::linear_pair`]): the same values as `input.forward(x)` with
/// `hidden.forward(h)` added to its last columns (all of them when both have one width).
///
/// `hidden`'s bias, when it has one, is added to those columns too.
///
/// # Shapes
/// - `x`: `[rows, d_in]`, `h`: `[rows, d_h]`
/// - output: `[rows, n]`, the width of `input`'s output (`hidden`'s is at most that)
pub fn linear_pair_rows<B: ArborBackend>(
    input: &Linear<B>,
    x: Tensor<B, 2>,
    hidden: &Linear<B>,
    h: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let mut b = input.bias.as_ref().map(|b| b.val());
    if let Some(bh) = &hidden.bias {
        let (n, nh) = (input.weight.dims()[1], bh.dims()[0]);
        let bh = if nh < n {
            Tensor::cat(vec![Tensor::zeros([n - nh], &bh.device()), bh.val()], 0)
        } else {
            bh.val()
        };
        b = Some(match b {
            Some(b) => b.add(bh),
            None => bh,
        });
    }
    arbor_kernels::linear_pair(x, input.weight.val(), h, hidden.weight.val(), b)
}

/// A recurrent layer's parameters for the whole-sequence ops ([`arbor_kernels::LstmParams`]):
/// the input weight `W`, its bias (zeros when the input `Linear` has none) and the recurrent
/// weight `U` (the hidden `Linear`, which has no bias).
pub(crate) fn sequence_params<B: ArborBackend>(
    input: &Linear<B>,
    hidden: &Linear<B>,
) -> arbor_kernels::LstmParams<B> {
    let weight = input.weight.val();
    let bias = match &input.bias {
        Some(b) => b.val(),
        None => Tensor::zeros([weight.dims()[1]], &weight.device()),
    };
    (weight, bias, hidden.weight.val())
}

/// `norm.forward(x)` as one fused op ([`arbor_kernels::layer_norm`]), with `norm`'s own `γ`,
/// `β` and `ε`. A `LayerNorm` without `β`, or whose `ε` cannot be read, takes Burn's own
/// forward pass.
///
/// # Shapes
/// - `x`, output: `[..., d]`
pub fn layer_norm<B: ArborBackend, const D: usize>(
    norm: &burn::nn::LayerNorm<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    match (&norm.beta, layer_norm_epsilon(norm)) {
        (Some(beta), Some(epsilon)) => {
            arbor_kernels::layer_norm(x, Some((norm.gamma.val(), beta.val())), epsilon)
        }
        _ => norm.forward(x),
    }
}

/// `act.forward(x)`, through a fused kernel where arbor has one: ReLU
/// ([`arbor_kernels::relu`]: on the CPU backends its loop runs on rayon's pool, where Flex's runs
/// on the calling thread alone), the exact GELU ([`arbor_kernels::gelu`], whose gradient is the
/// exact derivative; Burn 0.21 differentiates the tanh approximation), sigmoid and tanh. Every
/// other activation, and the tanh-approximate GELU, takes Burn's own forward pass.
///
/// # Shapes
/// - `x`, output: any shape
pub fn activation<B: ArborBackend, const D: usize>(
    act: &burn::nn::activation::Activation<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    use burn::nn::activation::Activation;
    match act {
        Activation::Relu(_) => arbor_kernels::relu(x),
        Activation::Gelu(g) if !g.approximate => arbor_kernels::gelu(x),
        Activation::Sigmoid(_) => arbor_kernels::sigmoid(x),
        Activation::Tanh(_) => arbor_kernels::tanh(x),
        // Burn's own enum of activations (not a kind of arbor's): the rest keep Burn's forward.
        other => other.forward(x),
    }
}

/// A built `LayerNorm`'s `ε`, read from its display (`LayerNorm {d_model: 6, epsilon:
/// 0.00001, …}`; Rust prints an `f64` so that it parses back to the same value): Burn 0.21
/// keeps the field private and has no getter. `None` if the display has no such entry.
pub fn layer_norm_epsilon<B: Backend>(norm: &burn::nn::LayerNorm<B>) -> Option<f64> {
    let shown = format!("{norm}");
    let rest = shown.split("epsilon: ").nth(1)?;
    rest.split([',', '}']).next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;

    type Ad = Autodiff<Flex>;

    #[test]
    fn the_layer_norm_epsilon_is_read_exactly() {
        use burn::nn::LayerNormConfig;
        let device = Default::default();
        for eps in [1e-5, 1e-12, 0.1, 3.0e-7] {
            let norm = LayerNormConfig::new(4)
                .with_epsilon(eps)
                .init::<Flex>(&device);
            assert_eq!(layer_norm_epsilon(&norm), Some(eps));
        }
    }

    #[test]
    fn layer_norm_is_burns_in_values_and_gradients() {
        use burn::nn::LayerNormConfig;
        let device = Default::default();
        for eps in [1e-5, 0.5] {
            let mut norm = LayerNormConfig::new(6)
                .with_epsilon(eps)
                .init::<Ad>(&device);
            // γ and β away from their initial 1 and 0.
            norm.gamma = burn::module::Param::from_tensor(Tensor::random(
                [6],
                Distribution::Uniform(0.5, 1.5),
                &device,
            ));
            norm.beta = Some(burn::module::Param::from_tensor(Tensor::random(
                [6],
                Distribution::Default,
                &device,
            )));
            let x = Tensor::<Ad, 3>::random([3, 2, 6], Distribution::Default, &device)
                .mul_scalar(3.0)
                .require_grad();
            let w = Tensor::<Ad, 3>::random([3, 2, 6], Distribution::Default, &device);
            let a = norm.forward(x.clone());
            let b = layer_norm(&norm, x.clone());
            a.clone()
                .into_data()
                .assert_approx_eq::<f32>(&b.clone().into_data(), Default::default());
            let ga = a.mul(w.clone()).sum().backward();
            let gb = b.mul(w).sum().backward();
            let close = |p: Option<Tensor<Flex, 1>>, q: Option<Tensor<Flex, 1>>| {
                p.unwrap()
                    .into_data()
                    .assert_approx_eq::<f32>(&q.unwrap().into_data(), Default::default())
            };
            close(norm.gamma.grad(&ga), norm.gamma.grad(&gb));
            let beta = norm.beta.as_ref().unwrap();
            close(beta.grad(&ga), beta.grad(&gb));
            x.grad(&ga)
                .unwrap()
                .into_data()
                .assert_approx_eq::<f32>(&x.grad(&gb).unwrap().into_data(), Default::default());
        }
    }

    #[test]
    fn same_values_and_gradients_as_linear() {
        let device = Default::default();
        let linear = LinearConfig::new(3, 5).init::<Ad>(&device);
        let x = Tensor::<Ad, 3>::random([4, 2, 3], Distribution::Default, &device).require_grad();
        let a = linear.forward(x.clone());
        let b = linear_rows(&linear, x.clone());
        assert_eq!(b.dims(), [4, 2, 5]);
        a.clone()
            .into_data()
            .assert_approx_eq::<f32>(&b.clone().into_data(), Default::default());
        let ga = a.sum().backward();
        let gb = b.sum().backward();
        let w = |g: &<Ad as burn::tensor::backend::AutodiffBackend>::Gradients| {
            linear.weight.grad(g).unwrap().into_data()
        };
        w(&ga).assert_approx_eq::<f32>(&w(&gb), Default::default());
        x.grad(&ga)
            .unwrap()
            .into_data()
            .assert_approx_eq::<f32>(&x.grad(&gb).unwrap().into_data(), Default::default());
    }

    #[test]
    fn columns_are_the_narrowed_output_in_values_and_gradients() {
        let device = Default::default();
        for bias in [true, false] {
            let linear = LinearConfig::new(3, 7).with_bias(bias).init::<Ad>(&device);
            let x = Tensor::<Ad, 2>::random([4, 3], Distribution::Default, &device).require_grad();
            let w = Tensor::<Ad, 2>::random([4, 4], Distribution::Default, &device);
            let a = linear.forward(x.clone()).narrow(1, 2, 4);
            let b = linear_columns(&linear, x.clone(), 2, 4);
            let close = |p: Tensor<Ad, 2>, q: Tensor<Ad, 2>| {
                p.into_data()
                    .assert_approx_eq::<f32>(&q.into_data(), Default::default())
            };
            close(a.clone(), b.clone());
            let ga = a.mul(w.clone()).sum().backward();
            let gb = b.mul(w).sum().backward();
            let wg = |g| Tensor::<Ad, 2>::from_inner(linear.weight.grad(g).unwrap());
            close(wg(&ga), wg(&gb));
            let xg = |g| Tensor::<Ad, 2>::from_inner(x.grad(g).unwrap());
            close(xg(&ga), xg(&gb));
            if let Some(bias) = &linear.bias {
                let bg = |g| Tensor::<Ad, 1>::from_inner(bias.grad(g).unwrap());
                bg(&ga)
                    .into_data()
                    .assert_approx_eq::<f32>(&bg(&gb).into_data(), Default::default());
            }
        }
    }
}
