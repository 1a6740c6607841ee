//! A `Linear` over inputs of any rank whose backward pass stays one matmul.

use crate::ArborBackend;
use burn::nn::Linear;
use burn::prelude::*;

/// `linear.forward(x)` with every leading dimension of `x` folded into one row dimension.
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
    if D <= 2 {
        return linear.forward(x);
    }
    let dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let y = linear.forward(x.reshape([rows, d_in]));
    let d_out = y.dims()[1];
    let mut out = dims;
    out[D - 1] = d_out;
    y.reshape(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;

    type Ad = Autodiff<Flex>;

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
}
