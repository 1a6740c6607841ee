//! Sigmoid, tanh, GELU and ReLU: values and gradients against Burn's own activations, and
//! GELU's exact derivative.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{TensorData, TensorPrimitive};

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// Sigmoid, tanh, GELU, ReLU and the input's gradient, fused or with Burn's own activations, on
/// a strided view (60 of 62 columns) of values up to ±12; large enough that the CPU kernels
/// split the work across threads.
fn activations<B: AutodiffBackend + ArborBackend>(fused: bool) -> [Vec<f64>; 5] {
    use burn::tensor::activation;
    let x = tensor::<B, 3>([24, 40, 62], 12.0, 41)
        .narrow(2, 1, 60)
        .require_grad();
    let w = tensor::<B, 3>([24, 40, 60], 1.0, 42);
    let (ys, yt, yg, yr) = if fused {
        (
            arbor_kernels::sigmoid(x.clone()),
            arbor_kernels::tanh(x.clone()),
            arbor_kernels::gelu(x.clone()),
            arbor_kernels::relu(x.clone()),
        )
    } else {
        (
            activation::sigmoid(x.clone()),
            activation::tanh(x.clone()),
            activation::gelu(x.clone()),
            activation::relu(x.clone()),
        )
    };
    // GELU's gradient is checked on its own below: Burn 0.21 differentiates the tanh
    // approximation of GELU, not the exact GELU it computes.
    let loss = ys
        .clone()
        .mul(w.clone())
        .add(yt.clone().mul(w.clone().flip([2])))
        .add(yr.clone().mul(w.flip([0])));
    let grads = loss.sum().backward();
    [
        to_vec(ys),
        to_vec(yt),
        to_vec(yg),
        to_vec(yr),
        to_vec(x.grad(&grads).unwrap()),
    ]
}

/// GELU's gradient is the exact derivative `Φ(x) + x·φ(x)`: the fused kernel (f32, split
/// across threads) against the plain-op formula, and that formula against central differences
/// of the forward pass in f64.
#[test]
fn gelu_gradient_is_the_exact_derivative() {
    fn grad<B: AutodiffBackend + ArborBackend>(x: Tensor<B, 2>, w: Tensor<B, 2>) -> Vec<f64> {
        let x = x.require_grad();
        let g = arbor_kernels::gelu(x.clone()).mul(w).sum().backward();
        to_vec(x.grad(&g).unwrap())
    }
    let x = tensor::<Flex, 2>([300, 130], 6.0, 43);
    let w = tensor::<Flex, 2>([300, 130], 1.0, 44);
    let fused =
        grad::<Autodiff<Flex>>(Tensor::from_inner(x.clone()), Tensor::from_inner(w.clone()));
    let want = to_vec(Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(
        reference::activation_backward::<Flex>(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            arbor_kernels::Activation::Gelu,
        ),
    )));
    assert_close(&fused, &want, 2e-6, "fused GELU gradient");

    let x = tensor::<NdArray<f64>, 2>([3, 7], 4.0, 45);
    let w = tensor::<NdArray<f64>, 2>([3, 7], 1.0, 46);
    let ad = grad::<Autodiff<NdArray<f64>>>(
        Tensor::from_inner(x.clone()),
        Tensor::from_inner(w.clone()),
    );
    let fd = central_differences(&[x], 1e-4, |[x]| {
        arbor_kernels::gelu(x).mul(w.clone()).sum().into_scalar()
    });
    assert_close(&ad, &fd[0], 1e-6, "GELU gradient vs finite differences");
}

#[test]
fn activations_match_burn_in_values_and_gradients() {
    assert_fused_agrees!(
        activations(),
        ["sigmoid", "tanh", "gelu", "relu", "d x"],
        1e-5,
        ""
    );
}

/// ReLU over a contiguous tensor nothing else holds is written in place on the CPU backends;
/// over a tensor that another handle still reads it must leave that tensor as it was. Both give
/// Burn's values, and NaN where the input is NaN (as PyTorch and Burn's generic `relu`; Flex's
/// own maps it to 0).
#[test]
fn relu_in_place_and_shared_match_burn() {
    fn check<B: ArborBackend>() {
        let x = tensor::<B, 2>([70, 300], 3.0, 47);
        let mut values = to_vec(x.clone());
        values[5] = f64::NAN;
        let x = Tensor::<B, 2>::from_data(
            TensorData::new(
                values.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                [70, 300],
            ),
            &x.device(),
        );
        let want = to_vec(burn::tensor::activation::relu(x.clone()));
        // Shared: `x` is still held here.
        let shared = to_vec(arbor_kernels::relu(x.clone()));
        assert_eq!(to_vec(x.clone()).len(), values.len());
        for (i, (&a, &b)) in to_vec(x.clone()).iter().zip(&values).enumerate() {
            assert!(
                a == b || (a.is_nan() && b.is_nan()),
                "x[{i}] changed: {b} -> {a}"
            );
        }
        // Its own: the last handle goes in.
        let owned = to_vec(arbor_kernels::relu(x));
        for (name, got) in [("shared", &shared), ("owned", &owned)] {
            for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                if i == 5 {
                    assert!(a.is_nan(), "{name}: NaN stays NaN, got {a}");
                } else {
                    assert_eq!(a, b, "{name} relu[{i}]");
                }
            }
        }
    }
    check::<Flex>();
    check::<NdArray>();
}
