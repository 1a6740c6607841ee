//! `linear_scan`: values against the plain-op reference and the recurrence written out on the
//! host, gradients, and finite differences in f64.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// `linear_scan` inputs: `a` in (0.1, 1.1) as forget gates are, `u`, `c0`; `a` and `u` are
/// strided views of one `[b, t, 2h]` tensor (as a cell's precomputed gates are).
fn scan_inputs<B: Backend>(b: usize, t: usize, h: usize) -> [Tensor<B, 3>; 3] {
    let both = tensor::<B, 3>([b, t, 2 * h], 1.0, 31);
    let a = both.clone().narrow(2, 0, h).mul_scalar(0.5).add_scalar(0.6);
    let u = both.narrow(2, h, h);
    let c0 = tensor::<B, 2>([b, h], 1.0, 32).unsqueeze_dim::<3>(1);
    [a, u, c0]
}

fn scan<B: ArborBackend>(xs: [Tensor<B, 3>; 3], fused: bool) -> Tensor<B, 3> {
    let [a, u, c0] = xs;
    let [b, _, h] = a.dims();
    let c0 = c0.reshape([b, h]);
    if fused {
        arbor_kernels::linear_scan(a, u, c0)
    } else {
        let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(reference::linear_scan::<B>(
            p(a),
            p(u),
            c0.into_primitive().tensor(),
        )))
    }
}

#[test]
fn linear_scan_forward_matches_reference() {
    fn check<B: ArborBackend>() {
        for (b, t, h) in [(3, 5, 7), (2, 1, 16), (1, 9, 3), (24, 12, 64)] {
            let xs = scan_inputs::<B>(b, t, h);
            let fused = to_vec(scan(xs.clone(), true));
            let want = to_vec(scan(xs.clone(), false));
            assert_close(&fused, &want, 1e-6, &format!("scan [{b}, {t}, {h}]"));
            // And the recurrence itself, written out on the host.
            let [a, u, c0] = xs.map(to_vec);
            let mut c = c0.clone();
            for s in 0..t {
                for bi in 0..b {
                    for j in 0..h {
                        let o = (bi * t + s) * h + j;
                        c[bi * h + j] = a[o] * c[bi * h + j] + u[o];
                        assert!((fused[o] - c[bi * h + j]).abs() < 1e-5, "scan step {s}");
                    }
                }
            }
        }
    }
    check::<Flex>();
    check::<NdArray>();
}

fn scan_grads<B: AutodiffBackend + ArborBackend>(
    fused: bool,
    b: usize,
    t: usize,
    h: usize,
) -> Vec<Vec<f64>> {
    let xs = scan_inputs::<B>(b, t, h).map(|x| x.require_grad());
    let w = tensor::<B, 3>([b, t, h], 1.0, 33);
    let g = scan(xs.clone(), fused).mul(w).sum().backward();
    xs.iter().map(|x| to_vec(x.grad(&g).unwrap())).collect()
}

#[test]
fn linear_scan_gradients_match_reference() {
    for (b, t, h) in [(3, 5, 7), (2, 1, 9), (16, 10, 48)] {
        assert_fused_agrees!(
            scan_grads(b, t, h),
            ["d a", "d u", "d c0"],
            1e-5,
            format!("[{b}, {t}, {h}]")
        );
    }
}

#[test]
fn linear_scan_finite_differences_f64() {
    type Inner = NdArray<f64>;
    let (b, t, h) = (2, 4, 3);
    let ad = scan_grads::<Autodiff<Inner>>(true, b, t, h);
    let inputs = scan_inputs::<Inner>(b, t, h);
    let w = tensor::<Inner, 3>([b, t, h], 1.0, 33);
    let f =
        |xs: [Tensor<Inner, 3>; 3]| -> f64 { scan(xs, true).mul(w.clone()).sum().into_scalar() };
    let fd = central_differences(&inputs, 1e-4, f);
    for i in 0..3 {
        assert_close(&ad[i], &fd[i], 1e-6, &format!("fd scan input {i}"));
    }
}
