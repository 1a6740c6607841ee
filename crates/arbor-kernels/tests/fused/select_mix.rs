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

/// `merge_place` written out as the two `select_mix` calls it stands for.
fn place_by_two_mixes<B: ArborBackend>(
    old: Tensor<B, 3>,
    new: Tensor<B, 3>,
    s: Tensor<B, 2>,
) -> Tensor<B, 3> {
    let [b, k, w] = old.dims();
    let kept = k - 1;
    let new_at = |p: usize| {
        new.clone()
            .narrow(0, p, 1)
            .reshape([b, 1, w])
            .expand([b, kept, w])
    };
    let shifted = arbor_kernels::select_mix(
        s.clone().narrow(1, 0, kept),
        new_at(1),
        old.clone().narrow(1, 0, kept),
        old.narrow(1, 1, kept),
    );
    arbor_kernels::select_mix(s.narrow(1, 1, kept), new_at(0), shifted.clone(), shifted)
}

/// Inputs of `merge_place`: soft selections (every term exercised), a zero row (a complete
/// example) and a one-hot row.
fn place_inputs<B: Backend>(b: usize, k: usize, w: usize) -> [Tensor<B, 3>; 3] {
    let mut s = to_vec(tensor::<B, 2>([b, k], 1.0, 21));
    s[..k].fill(0.0);
    if b > 1 {
        s[k..2 * k].fill(0.0);
        s[k + k / 2] = 1.0;
    }
    [
        Tensor::<B, 1>::from_floats(
            s.iter().map(|&v| v as f32).collect::<Vec<_>>().as_slice(),
            &Default::default(),
        )
        .reshape([b, k, 1]),
        tensor::<B, 3>([b, k, w], 1.0, 22),
        tensor::<B, 3>([2, b, w], 1.0, 23),
    ]
}

fn place_matches_two_mixes<B: ArborBackend>() {
    for (b, k, w) in [(1, 2, 5), (3, 2, 8), (4, 3, 1), (5, 7, 33), (16, 12, 80)] {
        let [s, old, new] = place_inputs::<B>(b, k, w);
        let s = s.reshape([b, k]);
        let got = to_vec(arbor_kernels::merge_place(
            old.clone(),
            new.clone(),
            s.clone(),
        ));
        let want = to_vec(place_by_two_mixes(old.clone(), new.clone(), s));
        // The same arithmetic in the same order: equal to the bit.
        assert_eq!(got, want, "merge_place [{b}, {k}, {w}]");
        // Row 0 is complete (zero selection): it keeps old[.., ..K − 1].
        let old = to_vec(old);
        assert_eq!(&got[..(k - 1) * w], &old[..(k - 1) * w], "complete row");
        if b > 1 {
            // Row 1 merges pair i = K / 2: old_j before i − 1, new₀ at i − 1, new₁ at i,
            // old_{j+1} after i.
            let (i, new) = (k / 2, to_vec(new));
            for j in 0..k - 1 {
                let row = &got[((k - 1) + j) * w..((k - 1) + j + 1) * w];
                let want: &[f64] = if j + 1 == i {
                    &new[w..2 * w]
                } else if j == i {
                    &new[(b + 1) * w..(b + 2) * w]
                } else if j < i {
                    &old[(k + j) * w..(k + j + 1) * w]
                } else {
                    &old[(k + j + 1) * w..(k + j + 2) * w]
                };
                assert_close(row, want, 1e-6, &format!("one-hot row, candidate {j}"));
            }
        }
    }
}

#[test]
fn merge_place_matches_its_two_mixes() {
    place_matches_two_mixes::<Flex>();
    place_matches_two_mixes::<NdArray>();
    place_matches_two_mixes::<Autodiff<Flex>>();
}

/// With a tracked input the op runs as the two recorded `select_mix` nodes: every input gets
/// the gradients the two calls give.
#[test]
fn merge_place_tracked_inputs_get_their_gradients() {
    type B = Autodiff<Flex>;
    let (b, k, w) = (3, 5, 7);
    let grads = |fused: bool| {
        let [s, old, new] = place_inputs::<B>(b, k, w);
        let (s, old, new) = (
            s.reshape([b, k]).require_grad(),
            old.require_grad(),
            new.require_grad(),
        );
        let out = if fused {
            arbor_kernels::merge_place(old.clone(), new.clone(), s.clone())
        } else {
            place_by_two_mixes(old.clone(), new.clone(), s.clone())
        };
        let g = out
            .mul(tensor::<B, 3>([b, k - 1, w], 1.0, 24))
            .sum()
            .backward();
        [
            to_vec(s.grad(&g).expect("s is tracked")),
            to_vec(old.grad(&g).expect("old is tracked")),
            to_vec(new.grad(&g).expect("new is tracked")),
        ]
    };
    let (got, want) = (grads(true), grads(false));
    for (i, name) in ["d s", "d old", "d new"].iter().enumerate() {
        assert_eq!(got[i], want[i], "{name}");
        assert!(got[i].iter().any(|&v| v != 0.0), "{name} is not all zero");
    }
}

/// `select_mix_adjacent(s, p, x)` against `select_mix` on the views `x[:, ..K]`, `x[:, 1..]`:
/// values (to the bit on f32) and gradients of every input, on every CPU backend, f64 included
/// (which runs the trait's default).
fn adjacent_matches_views<B: AutodiffBackend + ArborBackend>(tol: f64) {
    for (b, k, d) in [(1, 1, 3), (3, 5, 11), (2, 7, 1), (16, 12, 40)] {
        let run = |fused: bool| {
            let [s, p, x] = mix_inputs::<B>(b, k, d);
            let (s, p, x) = (
                s.reshape([b, k]).require_grad(),
                p.require_grad(),
                x.require_grad(),
            );
            let out = if fused {
                arbor_kernels::select_mix_adjacent(s.clone(), p.clone(), x.clone())
            } else {
                let (l, r) = (x.clone().narrow(1, 0, k), x.clone().narrow(1, 1, k));
                arbor_kernels::select_mix(s.clone(), p.clone(), l, r)
            };
            let values = to_vec(out.clone().inner());
            let g = out.mul(tensor::<B, 3>([b, k, d], 1.0, 14)).sum().backward();
            [
                values,
                to_vec(s.grad(&g).expect("d s")),
                to_vec(p.grad(&g).expect("d parent")),
                to_vec(x.grad(&g).expect("d x")),
            ]
        };
        let (got, want) = (run(true), run(false));
        assert_eq!(got[0], want[0], "values [{b}, {k}, {d}]");
        for (i, name) in ["d s", "d parent", "d x"].iter().enumerate() {
            assert_close(
                &got[i + 1],
                &want[i + 1],
                tol,
                &format!("{name} [{b}, {k}, {d}]"),
            );
        }
    }
}

#[test]
fn select_mix_adjacent_matches_select_mix_on_the_views() {
    adjacent_matches_views::<Autodiff<Flex>>(1e-6);
    adjacent_matches_views::<Autodiff<NdArray>>(1e-6);
    adjacent_matches_views::<Autodiff<NdArray<f64>>>(1e-12);
}
