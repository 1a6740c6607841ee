//! `linear_scan`: values against the plain-op reference and the recurrence written out on the
//! host, gradients, and finite differences in f64.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, assert_fused_agrees, central_differences, tensor, to_vec};

/// `linear_scan` inputs: `au` `[b, t, 2h]`, whose first half `a` is in (0.1, 1.1) as forget
/// gates are and whose second is `u`, and `c0`.
fn scan_inputs<B: Backend>(b: usize, t: usize, h: usize) -> [Tensor<B, 3>; 2] {
    let au = tensor::<B, 3>([b, t, 2 * h], 1.0, 31)
        .mul_scalar(0.5)
        .add_scalar(0.6);
    let c0 = tensor::<B, 2>([b, h], 1.0, 32).unsqueeze_dim::<3>(1);
    [au, c0]
}

fn scan<B: ArborBackend>(xs: [Tensor<B, 3>; 2], fused: bool) -> Tensor<B, 3> {
    let [au, c0] = xs;
    let [b, _, w] = au.dims();
    let c0 = c0.reshape([b, w / 2]);
    if fused {
        arbor_kernels::linear_scan(au, c0)
    } else {
        Tensor::from_primitive(TensorPrimitive::Float(reference::linear_scan::<B>(
            au.into_primitive().tensor(),
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
            let [au, c0] = xs.map(to_vec);
            let mut c = c0.clone();
            for s in 0..t {
                for bi in 0..b {
                    for j in 0..h {
                        let o = (bi * t + s) * h + j;
                        let (a, u) = (au[2 * o - j], au[2 * o - j + h]);
                        c[bi * h + j] = a * c[bi * h + j] + u;
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
            ["d au", "d c0"],
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
        |xs: [Tensor<Inner, 3>; 2]| -> f64 { scan(xs, true).mul(w.clone()).sum().into_scalar() };
    let fd = central_differences(&inputs, 1e-4, f);
    for i in 0..2 {
        assert_close(&ad[i], &fd[i], 1e-6, &format!("fd scan input {i}"));
    }
}

/// `au` as a strided view (the last `2h` columns of a wider tensor), which the CPU kernels read
/// in place: the same values and gradients as its contiguous copy.
#[test]
fn linear_scan_reads_a_strided_input_as_its_copy() {
    fn check<B: AutodiffBackend + ArborBackend>() {
        let (b, t, h) = (5, 7, 6);
        let wide = tensor::<B, 3>([b, t, 2 * h + 3], 1.0, 41)
            .mul_scalar(0.5)
            .add_scalar(0.6);
        let c0 = tensor::<B, 2>([b, h], 1.0, 42);
        let w = tensor::<B, 3>([b, t, h], 1.0, 43);
        let run = |strided: bool| {
            let wide = wide.clone().require_grad();
            let view = wide.clone().narrow(2, 3, 2 * h);
            let au = if strided {
                view
            } else {
                Tensor::from_data(view.into_data(), &wide.device()).require_grad()
            };
            let out = arbor_kernels::linear_scan(au.clone(), c0.clone());
            let g = out.clone().mul(w.clone()).sum().backward();
            let d_au = if strided {
                wide.grad(&g).unwrap().narrow(2, 3, 2 * h)
            } else {
                au.grad(&g).unwrap()
            };
            (to_vec(out), to_vec(d_au))
        };
        let (strided, copy) = (run(true), run(false));
        assert_close(&strided.0, &copy.0, 0.0, "values");
        assert_close(&strided.1, &copy.1, 0.0, "d au");
    }
    check::<Autodiff<Flex>>();
    check::<Autodiff<NdArray>>();
}
