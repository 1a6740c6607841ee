//! `select_mix`: values and gradients against the plain-op reference, with strided left/right
//! views, and finite differences in f64.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// `select_mix` inputs: a soft selection (any values, so every gradient term is exercised) and
/// parent/left/right states, where left and right are the Gumbel encoder's strided views.
fn mix_inputs<B: Backend>(b: usize, k: usize, d: usize) -> [Tensor<B, 3>; 3] {
    [
        tensor::<B, 3>([b, k, 1], 1.0, 11),
        tensor::<B, 3>([b, k, d], 1.0, 12),
        tensor::<B, 3>([b, k + 1, d], 1.0, 13),
    ]
}

fn mix<B: ArborBackend>(
    s: Tensor<B, 3>,
    p: Tensor<B, 3>,
    base: Tensor<B, 3>,
    fused: bool,
) -> Tensor<B, 3> {
    let [b, k, _] = s.dims();
    let s = s.reshape([b, k]);
    let (l, r) = (base.clone().narrow(1, 0, k), base.narrow(1, 1, k));
    if fused {
        arbor_kernels::select_mix(s, p, l, r)
    } else {
        let prim = |t: Tensor<B, 3>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::select_mix::<B>(
            s.into_primitive().tensor(),
            prim(p),
            prim(l),
            prim(r),
        )))
    }
}

fn mix_forward_matches<B: ArborBackend>() {
    for (b, k, d) in [(3, 5, 11), (1, 1, 8), (2, 7, 3), (16, 12, 64)] {
        let [s, p, base] = mix_inputs::<B>(b, k, d);
        let fused = mix(s.clone(), p.clone(), base.clone(), true);
        let want = mix(s, p, base, false);
        assert_close(
            &to_vec(fused),
            &to_vec(want),
            1e-6,
            &format!("mix [{b}, {k}, {d}]"),
        );
    }
}

#[test]
fn select_mix_forward_matches_reference() {
    mix_forward_matches::<Flex>();
    mix_forward_matches::<NdArray>();
}

fn mix_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    k: usize,
    d: usize,
) -> Vec<Vec<f64>> {
    let [s, p, base] = mix_inputs::<B>(b, k, d);
    let (s, p, base) = (s.require_grad(), p.require_grad(), base.require_grad());
    let out = mix(s.clone(), p.clone(), base.clone(), fused);
    let w = tensor::<B, 3>([b, k, d], 1.0, 14);
    let g = out.mul(w).sum().backward();
    vec![
        to_vec(s.grad(&g).unwrap()),
        to_vec(p.grad(&g).unwrap()),
        to_vec(base.grad(&g).unwrap()),
    ]
}

#[test]
fn select_mix_gradients_match_reference() {
    for (b, k, d) in [(2, 4, 9), (1, 6, 16), (16, 8, 48)] {
        assert_fused_agrees!(
            mix_grads(b, k, d),
            ["d s", "d parent", "d left/right"],
            1e-5,
            format!("[{b}, {k}, {d}]")
        );
    }
}

/// The mix is linear in each input, so central differences are exact up to rounding.
#[test]
fn select_mix_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (b, k, d) = (2, 4, 3);
    let ad = mix_grads::<Autodiff<Inner>>(true, b, k, d);
    let [s, p, base] = mix_inputs::<Inner>(b, k, d);
    let w = tensor::<Inner, 3>([b, k, d], 1.0, 14);
    let f = |xs: [Tensor<Inner, 3>; 3]| -> f64 {
        let [s, p, base] = xs;
        mix(s, p, base, true).mul(w.clone()).sum().into_scalar()
    };
    let fd = central_differences(&[s, p, base], 1e-3, f);
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 1e-6, &format!("fd input {i}"));
    }
}
