//! `arbor_kernels::layer_norm` against Burn's own layer normalisation (`ModuleOps::layer_norm`,
//! the plain-op decomposition `LayerNorm::forward` runs): values and the gradients of the input,
//! `γ` and `β`, with and without the affine map, for rank 2 and rank 3 inputs, on sizes below
//! and above the kernels' parallel split, on every CPU backend; and the fused backward pass
//! against central differences in f64.

use arbor_kernels::{layer_norm, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

mod common;
use common::{close, own_dtype, seeded, values};

/// Burn's layer normalisation (the op `LayerNorm::forward` calls), or the plain
/// standardisation when there is no affine map.
fn burns<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    affine: Option<(Tensor<B, 1>, Tensor<B, 1>)>,
    eps: f64,
) -> Tensor<B, D> {
    let d = x.dims()[D - 1];
    let (g, b) = match affine {
        Some((g, b)) => (g, Some(b)),
        None => (Tensor::ones([d], (&x.device(), x.dtype())), None),
    };
    Tensor::from_primitive(TensorPrimitive::Float(B::layer_norm(
        x.into_primitive().tensor(),
        g.into_primitive().tensor(),
        b.map(|b| b.into_primitive().tensor()),
        eps,
    )))
}

fn matches_burn<B: AutodiffBackend + ArborBackend>(tol: f64) {
    let mut case = 0u64;
    for (rows, d) in [(3, 5), (1, 1), (7, 16), (600, 96)] {
        for with_affine in [true, false] {
            for eps in [1e-5, 0.3] {
                case += 1;
                let what = format!("{rows}×{d}, affine {with_affine}, ε {eps}");
                let x = seeded::<B, 3>([rows, 1, d], 4 * case, 1.5, 5.5).require_grad();
                let affine = with_affine.then(|| {
                    (
                        seeded::<B, 1>([d], 4 * case + 1, 0.5, 1.5).require_grad(),
                        seeded::<B, 1>([d], 4 * case + 2, 0.0, 1.0).require_grad(),
                    )
                });
                let ours = layer_norm(x.clone(), affine.clone(), eps);
                let theirs = burns(x.clone(), affine.clone(), eps);
                assert_eq!(ours.dims(), [rows, 1, d], "{what}");
                close(
                    &values(ours.clone()),
                    &values(theirs.clone()),
                    tol,
                    &format!("{what}: y"),
                );
                let w = seeded::<B, 3>([rows, 1, d], 4 * case + 3, 0.0, 1.0);
                let ga = ours.mul(w.clone()).sum().backward();
                let gb = theirs.mul(w).sum().backward();
                close(
                    &values(x.grad(&ga).expect("dx")),
                    &values(x.grad(&gb).expect("dx")),
                    tol,
                    &format!("{what}: dx"),
                );
                if let Some((g, b)) = &affine {
                    for (t, name) in [(g, "dγ"), (b, "dβ")] {
                        close(
                            &values(t.grad(&ga).expect(name)),
                            &values(t.grad(&gb).expect(name)),
                            tol,
                            &format!("{what}: {name}"),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn layer_norm_matches_burn_on_flex() {
    matches_burn::<Autodiff<Flex>>(2e-5);
}

#[test]
fn layer_norm_matches_burn_on_ndarray() {
    matches_burn::<Autodiff<NdArray<f32>>>(2e-5);
    matches_burn::<Autodiff<NdArray<f64>>>(1e-10);
}

/// The fused backward pass of the CPU kernels (f32 on Flex) against central differences of
/// the plain-op forward pass in f64.
#[test]
fn layer_norm_gradients_match_finite_differences() {
    type F = NdArray<f64>;
    let device = Default::default();
    let (rows, d, eps) = (4, 7, 1e-5);
    let xs: Vec<f64> = (0..rows * d)
        .map(|i| ((i * 37 % 11) as f64 - 5.0) * 0.4)
        .collect();
    let gs: Vec<f64> = (0..d).map(|j| 0.6 + 0.1 * j as f64).collect();
    let bs: Vec<f64> = (0..d).map(|j| 0.05 * j as f64 - 0.1).collect();
    let ws: Vec<f64> = (0..rows * d)
        .map(|i| ((i * 13 % 7) as f64 - 3.0) * 0.3)
        .collect();
    let loss = |x: &[f64], g: &[f64], b: &[f64]| -> f64 {
        let t = |v: &[f64], shape: Vec<usize>| {
            Tensor::<F, 2>::from_data(
                TensorData::new(v.to_vec(), shape),
                (&device, own_dtype::<F>()),
            )
        };
        let y = burns(
            t(x, vec![rows, d]),
            Some((
                Tensor::<F, 1>::from_data(
                    TensorData::new(g.to_vec(), [d]),
                    (&device, own_dtype::<F>()),
                ),
                Tensor::<F, 1>::from_data(
                    TensorData::new(b.to_vec(), [d]),
                    (&device, own_dtype::<F>()),
                ),
            )),
            eps,
        );
        y.mul(t(&ws, vec![rows, d])).sum().into_scalar()
    };
    // The fused op on Flex (f32).
    type A = Autodiff<Flex>;
    let flex = Default::default();
    let f32s = |v: &[f64], shape: Vec<usize>| {
        let v: Vec<f32> = v.iter().map(|&a| a as f32).collect();
        Tensor::<A, 2>::from_data(TensorData::new(v, shape), &flex)
    };
    let x = f32s(&xs, vec![rows, d]).require_grad();
    let g = f32s(&gs, vec![1, d]).reshape([d]).require_grad();
    let b = f32s(&bs, vec![1, d]).reshape([d]).require_grad();
    let grads = layer_norm(x.clone(), Some((g.clone(), b.clone())), eps)
        .mul(f32s(&ws, vec![rows, d]))
        .sum()
        .backward();
    let fused = [
        values(x.grad(&grads).unwrap()),
        values(g.grad(&grads).unwrap()),
        values(b.grad(&grads).unwrap()),
    ];
    let h = 1e-6;
    let mut inputs = [xs.clone(), gs.clone(), bs.clone()];
    for which in 0..3 {
        for i in 0..inputs[which].len() {
            let orig = inputs[which][i];
            inputs[which][i] = orig + h;
            let up = loss(&inputs[0], &inputs[1], &inputs[2]);
            inputs[which][i] = orig - h;
            let down = loss(&inputs[0], &inputs[1], &inputs[2]);
            inputs[which][i] = orig;
            let numeric = (up - down) / (2.0 * h);
            let analytic = fused[which][i];
            assert!(
                (numeric - analytic).abs() <= 2e-4 * (1.0 + numeric.abs()),
                "input {which}, entry {i}: fused {analytic} vs numeric {numeric}"
            );
        }
    }
}
