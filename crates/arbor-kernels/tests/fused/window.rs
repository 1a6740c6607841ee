//! `causal_windows`: values against the plain-op reference and a hand-written case, gradients
//! against autodiff through the reference, and a causal convolution written as a product of
//! the windows against Burn's `Conv1d`.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::nn::conv::Conv1dConfig;
use burn::nn::PaddingConfig1d;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{TensorData, TensorPrimitive};

use crate::support::{assert_close, tensor, to_vec};

fn windows<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    k: usize,
) -> [Vec<f64>; 2] {
    // A strided view (the first t of t + 1 steps), as a layer's output can be.
    let d = 5;
    let x = tensor::<B, 3>([b, t + 1, d], 1.0, 91)
        .narrow(1, 0, t)
        .require_grad();
    let y = if fused {
        arbor_kernels::causal_windows(x.clone(), k)
    } else {
        Tensor::from_primitive(TensorPrimitive::Float(reference::causal_windows::<B>(
            x.clone().into_primitive().tensor(),
            k,
        )))
    };
    let w = tensor::<B, 3>([b, t, k * d], 1.0, 92);
    let grads = y.clone().mul(w).sum().backward();
    [to_vec(y), to_vec(x.grad(&grads).unwrap())]
}

#[test]
fn causal_windows_match_reference_in_values_and_gradients() {
    // Windows wider than the sequence, of one step, and a size the CPU kernels split across
    // threads.
    for (b, t, k) in [
        (2, 1, 3),
        (2, 2, 3),
        (3, 7, 3),
        (2, 4, 1),
        (2, 3, 5),
        (40, 64, 3),
    ] {
        for (fused, want) in [
            (
                windows::<Autodiff<Flex>>(true, b, t, k),
                windows::<Autodiff<Flex>>(false, b, t, k),
            ),
            (
                windows::<Autodiff<NdArray>>(true, b, t, k),
                windows::<Autodiff<NdArray>>(false, b, t, k),
            ),
        ] {
            let what = format!("[{b}, {t}] k = {k}");
            assert_close(&fused[0], &want[0], 0.0, &format!("windows {what}"));
            assert_close(&fused[1], &want[1], 1e-6, &format!("d x {what}"));
        }
    }
}

/// One example of three steps of two values, windows of two: `[x_{s−1}; x_s]`, zeros before
/// the first step; the gradient of the sum of the windows counts each step once per window
/// that holds it (twice, except the last step's once).
#[test]
fn causal_windows_by_hand() {
    fn check<B: ArborBackend + AutodiffBackend>() {
        let device = Default::default();
        let x = Tensor::<B, 3>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [1, 3, 2]),
            &device,
        )
        .require_grad();
        let y = arbor_kernels::causal_windows(x.clone(), 2);
        let want = [0.0, 0.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 6.0];
        assert_close(&to_vec(y.clone()), &want, 0.0, "windows");
        let g = y.sum().backward();
        assert_close(
            &to_vec(x.grad(&g).unwrap()),
            &[2.0, 2.0, 2.0, 2.0, 1.0, 1.0],
            0.0,
            "d x",
        );
        let empty = arbor_kernels::causal_windows(Tensor::<B, 3>::zeros([2, 0, 3], &device), 3);
        assert_eq!(empty.dims(), [2, 0, 9], "no steps");
    }
    check::<Autodiff<Flex>>();
    check::<Autodiff<NdArray>>();
}

/// A causal convolution (kernel `k`, left padding `k − 1`) is the windows times the weight laid
/// out `[k·d_in, d_out]` (block `j` = tap `j`): the same values as Burn's `Conv1d`.
#[test]
fn a_product_of_windows_is_a_causal_convolution() {
    type B = Flex;
    let device = Default::default();
    let (b, t, d_in, d_out, k) = (3, 6, 4, 5, 3);
    let conv = Conv1dConfig::new(d_in, d_out, k)
        .with_padding(PaddingConfig1d::Explicit(k - 1, 0))
        .init::<B>(&device);
    let x = tensor::<B, 3>([b, t, d_in], 1.0, 93);
    let want = conv.forward(x.clone().swap_dims(1, 2)).swap_dims(1, 2);
    let w = conv
        .weight
        .val()
        .permute([2, 1, 0])
        .reshape([k * d_in, d_out]);
    let got = arbor_kernels::causal_windows(x, k)
        .reshape([b * t, k * d_in])
        .matmul(w)
        .add(conv.bias.as_ref().unwrap().val().unsqueeze_dim(0))
        .reshape([b, t, d_out]);
    assert_close(&to_vec(got), &to_vec(want), 1e-5, "convolution");
}
