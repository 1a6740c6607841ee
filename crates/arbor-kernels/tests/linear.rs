//! `arbor_kernels::linear` against Burn's `linear`: values and the gradients of the input, the
//! weight and the bias, for contiguous and strided operands, with and without a bias, at sizes
//! on both sides of the parallel threshold, on every CPU backend. `linear_pair` likewise
//! against the sum of two of Burn's `linear`s.

use arbor_kernels::{linear, linear_pair, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Distribution;

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

fn close(a: Vec<f64>, b: Vec<f64>, tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// `ours` equals `burns` in value, and, under a loss weighting every output differently, in
/// the gradient of every named leaf (present, of the leaf's size) and of the bias.
fn same_as_burn<B: AutodiffBackend>(
    ours: Tensor<B, 2>,
    burns: Tensor<B, 2>,
    leaves: &[(&Tensor<B, 2>, &str)],
    bias: Option<&Tensor<B, 1>>,
    tol: f64,
    what: &str,
) {
    close(
        values(ours.clone()),
        values(burns.clone()),
        tol,
        &format!("{what}: y"),
    );
    let g = Tensor::<B, 2>::random(ours.dims(), Distribution::Default, &ours.device());
    let (ga, gb) = (
        ours.mul(g.clone()).sum().backward(),
        burns.mul(g).sum().backward(),
    );
    let grad = |t: &Tensor<B, 2>, gr: &B::Gradients| t.grad(gr).map(values).unwrap_or_default();
    for (t, name) in leaves {
        let (a, e) = (grad(t, &ga), grad(t, &gb));
        assert_eq!(
            a.len(),
            t.shape().num_elements(),
            "{what}: {name} is missing"
        );
        close(a, e, tol, &format!("{what}: {name}"));
    }
    if let Some(b) = bias {
        close(
            values(b.grad(&ga).unwrap()),
            values(b.grad(&gb).unwrap()),
            tol,
            &format!("{what}: db"),
        );
    }
}

fn matches_burn<B: AutodiffBackend + ArborBackend>(tol: f64) {
    let device = Default::default();
    let r = |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Default, &device);
    // (m, k, n): small, and large enough for the parallel product (m·n·k ≥ 192³).
    for (m, k, n) in [(3, 4, 5), (1, 7, 1), (160, 240, 200)] {
        for (with_bias, strided) in [(true, false), (false, false), (true, true), (false, true)] {
            let what = format!("{m}×{k}×{n}, bias {with_bias}, strided {strided}");
            // Strided: x a transposed view, the weight a column window of a wider matrix.
            let x = if strided {
                r([k, m]).swap_dims(0, 1)
            } else {
                r([m, k])
            }
            .require_grad();
            let wide = r([k, if strided { n + 3 } else { n }]).require_grad();
            // The weight's window is rebuilt for each pass: a backward pass consumes the graph
            // steps it goes through.
            let w = || {
                if strided {
                    wide.clone().narrow(1, 2, n)
                } else {
                    wide.clone()
                }
            };
            let b = with_bias.then(|| {
                Tensor::<B, 1>::random([n], Distribution::Default, &device).require_grad()
            });
            let ours = linear(x.clone(), w(), b.clone());
            let burns = burn::tensor::module::linear(x.clone(), w(), b.clone());
            assert_eq!(ours.dims(), [m, n], "{what}");
            same_as_burn(
                ours,
                burns,
                &[(&x, "dx"), (&wide, "dw")],
                b.as_ref(),
                tol,
                &what,
            );
        }
    }
}

#[test]
fn linear_matches_burn_on_flex() {
    matches_burn::<Autodiff<Flex>>(1e-5);
}

#[test]
fn linear_matches_burn_on_ndarray() {
    matches_burn::<Autodiff<NdArray<f32>>>(1e-5);
    matches_burn::<Autodiff<NdArray<f64>>>(1e-12);
}

#[test]
fn empty_products_are_the_bias_or_zeros() {
    let device = Default::default();
    let x = Tensor::<Flex, 2>::zeros([4, 0], &device);
    let w = Tensor::<Flex, 2>::zeros([0, 3], &device);
    let b = Tensor::<Flex, 1>::from_floats([1.0, 2.0, 3.0], &device);
    assert_eq!(values(linear(x.clone(), w.clone(), None)), vec![0.0; 12]);
    assert_eq!(values(linear(x, w, Some(b))), [1.0, 2.0, 3.0].repeat(4));
    let none = linear(
        Tensor::<Flex, 2>::zeros([0, 5], &device),
        Tensor::zeros([5, 2], &device),
        None,
    );
    assert_eq!(none.dims(), [0, 2]);
}

/// `linear_pair(x, w, h, u, b)` against `linear(x, w, b) + linear(h, u)` in Burn's ops (`h·u`
/// padded with zeros in front when it is narrower): values and all five gradients, contiguous
/// and strided operands (a transposed `x`, column windows of wider weights), with and without a
/// bias, on both sides of the parallel threshold.
///
/// `empty`: also a product with an empty inner dimension (NdArray's own matmul, which its
/// plain-op path runs, divides by zero there).
fn pair_matches_burn<B: AutodiffBackend + ArborBackend>(tol: f64, empty: bool) {
    let device = Default::default();
    let r = |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Default, &device);
    let mut shapes: Vec<(usize, usize, usize, usize)> =
        vec![(3, 4, 2, 5), (1, 7, 3, 1), (160, 240, 200, 200)];
    if empty {
        shapes.push((5, 0, 3, 4));
    }
    // `h·u` as wide as `x·w`, and narrower (added to the last columns, as FastTrees uses it).
    let cases = shapes
        .into_iter()
        .flat_map(|(m, k, j, n)| [(m, k, j, n, n), (m, k, j, n, n.saturating_sub(2).max(1))]);
    for (m, k, j, n, nh) in cases {
        for (with_bias, strided) in [(true, false), (false, false), (true, true), (false, true)] {
            let what = format!("{m}×({k}, {j})×({n}, {nh}), bias {with_bias}, strided {strided}");
            let x = if strided {
                r([k, m]).swap_dims(0, 1)
            } else {
                r([m, k])
            }
            .require_grad();
            let h = r([m, j]).require_grad();
            let extra = if strided { 3 } else { 0 };
            let wide_w = r([k, n + extra]).require_grad();
            let wide_u = r([j, nh + extra]).require_grad();
            let window = |t: &Tensor<B, 2>| {
                let width = t.dims()[1] - extra;
                if strided {
                    t.clone().narrow(1, 1, width)
                } else {
                    t.clone()
                }
            };
            let b = with_bias.then(|| {
                Tensor::<B, 1>::random([n], Distribution::Default, &device).require_grad()
            });
            let ours = linear_pair(
                x.clone(),
                window(&wide_w),
                h.clone(),
                window(&wide_u),
                b.clone(),
            );
            let hu = burn::tensor::module::linear(h.clone(), window(&wide_u), None);
            let hu = if nh < n {
                Tensor::cat(vec![Tensor::zeros([m, n - nh], &device), hu], 1)
            } else {
                hu
            };
            let burns = burn::tensor::module::linear(x.clone(), window(&wide_w), b.clone()).add(hu);
            assert_eq!(ours.dims(), [m, n], "{what}");
            let leaves = [(&x, "dx"), (&h, "dh"), (&wide_w, "dw"), (&wide_u, "du")];
            same_as_burn(ours, burns, &leaves, b.as_ref(), tol, &what);
        }
    }
}

#[test]
fn linear_pair_matches_burn_on_flex() {
    pair_matches_burn::<Autodiff<Flex>>(1e-5, true);
}

#[test]
fn linear_pair_matches_burn_on_ndarray() {
    pair_matches_burn::<Autodiff<NdArray<f32>>>(1e-5, false);
    pair_matches_burn::<Autodiff<NdArray<f64>>>(1e-12, false);
}

#[test]
fn linear_pair_of_empty_products_is_the_bias_or_zeros() {
    let device = Default::default();
    let z = |shape: [usize; 2]| Tensor::<Flex, 2>::zeros(shape, &device);
    let b = Tensor::<Flex, 1>::from_floats([1.0, 2.0, 3.0], &device);
    assert_eq!(
        values(linear_pair(
            z([4, 0]),
            z([0, 3]),
            z([4, 0]),
            z([0, 3]),
            None
        )),
        vec![0.0; 12]
    );
    assert_eq!(
        values(linear_pair(
            z([4, 0]),
            z([0, 3]),
            z([4, 0]),
            z([0, 3]),
            Some(b)
        )),
        [1.0, 2.0, 3.0].repeat(4)
    );
}
