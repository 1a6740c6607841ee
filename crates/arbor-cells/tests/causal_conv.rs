//! `causal_conv` (Conv FastTrees' convolution as windows and one product) against Burn's
//! `Conv1d` with the cell's left padding: values and every gradient.

mod common;

use arbor_cells::{causal_conv, ArborBackend};
use burn::backend::flex::Flex;
use burn::backend::Autodiff;
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::PaddingConfig1d;
use burn::prelude::*;
use common::*;

fn flat<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} against {y}"
        );
    }
}

/// Values and the gradients of the input, the kernel and the bias, for kernels of width 1–4
/// and a sequence shorter than the kernel.
fn matches_conv1d<B: ArborBackend>(tol: f64)
where
    B: burn::tensor::backend::AutodiffBackend,
    B::InnerBackend: ArborBackend,
{
    let device = Default::default();
    for (k, t, bias) in [(1, 5, true), (2, 5, false), (3, 6, true), (4, 2, true)] {
        let (batch, d_in, d_out) = (3, 4, 5);
        let conv: Conv1d<B> = seeded(40 + k as u64, || {
            Conv1dConfig::new(d_in, d_out, k)
                .with_padding(PaddingConfig1d::Explicit(k - 1, 0))
                .with_bias(bias)
                .init(&device)
        });
        let x = tensor::<B, 3>([batch, t, d_in], 1.0, 50 + k as u64, &device).require_grad();
        let up = tensor::<B, 3>([batch, t, d_out], 1.0, 60 + k as u64, &device);
        let run = |ours: bool| {
            let x = x.clone();
            let y = if ours {
                causal_conv(&conv, x.clone())
            } else {
                conv.forward(x.clone().swap_dims(1, 2)).swap_dims(1, 2)
            };
            let grads = (y.clone() * up.clone()).sum().backward();
            let gw = conv.weight.grad(&grads).unwrap();
            let gb = conv.bias.as_ref().map(|b| flat(b.grad(&grads).unwrap()));
            (flat(y.inner()), flat(x.grad(&grads).unwrap()), flat(gw), gb)
        };
        let (ours, burn) = (run(true), run(false));
        let what = format!("kernel {k}, length {t}");
        assert_close(&ours.0, &burn.0, tol, &format!("{what}: values"));
        assert_close(&ours.1, &burn.1, tol, &format!("{what}: d x"));
        assert_close(&ours.2, &burn.2, tol, &format!("{what}: d kernel"));
        match (ours.3, burn.3) {
            (Some(a), Some(b)) => assert_close(&a, &b, tol, &format!("{what}: d bias")),
            (None, None) => {}
            _ => panic!("{what}: a bias on one side only"),
        }
    }
}

#[test]
fn causal_conv_matches_conv1d_on_flex() {
    matches_conv1d::<Autodiff<Flex>>(1e-5);
}

#[test]
fn causal_conv_matches_conv1d_in_f64() {
    matches_conv1d::<Ad64>(1e-12);
}
