//! `arbor_kernels::contiguous`: the value of its input, in both passes, for permuted, narrowed
//! and broadcast views on every CPU backend.

use arbor_kernels::{contiguous, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Distribution;

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

fn same_value_and_gradient<B: AutodiffBackend + ArborBackend>() {
    let device = Default::default();
    let x = Tensor::<B, 4>::random([2, 3, 4, 5], Distribution::Default, &device).require_grad();
    let w = Tensor::<B, 3>::random([2, 12, 5], Distribution::Default, &device);
    // Permuted then reshaped, narrowed, and a broadcast of a narrowed row.
    let views: [fn(Tensor<B, 4>) -> Tensor<B, 4>; 3] = [
        |x| x.swap_dims(1, 2),
        |x| x.narrow(2, 1, 2),
        |x| x.narrow(1, 1, 1).expand([2, 4, 4, 5]),
    ];
    for (i, view) in views.into_iter().enumerate() {
        let plain = view(x.clone());
        let ours = contiguous(view(x.clone()));
        assert_eq!(
            values(ours.clone()),
            values(plain.clone()),
            "view {i}: values"
        );
        // Reshaped and weighted, so that each element's gradient differs.
        let loss = |t: Tensor<B, 4>| {
            let [a, b, c, d] = t.dims();
            let flat = t.reshape([a, b * c, d]);
            let n = flat.dims()[1];
            flat.mul(
                w.clone()
                    .narrow(1, 0, n.min(12))
                    .pad((0, 0, 0, n.saturating_sub(12)), 0.0),
            )
            .sum()
        };
        let (ga, gb) = (loss(plain).backward(), loss(ours).backward());
        let (da, db) = (x.grad(&ga).unwrap(), x.grad(&gb).unwrap());
        assert_eq!(values(da), values(db), "view {i}: gradient");
    }
}

#[test]
fn contiguous_is_the_identity_on_every_cpu_backend() {
    same_value_and_gradient::<Autodiff<Flex>>();
    same_value_and_gradient::<Autodiff<NdArray<f32>>>();
    same_value_and_gradient::<Autodiff<NdArray<f64>>>();
}
