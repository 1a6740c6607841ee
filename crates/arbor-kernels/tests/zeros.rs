//! `arbor_kernels::zeros`: the CPU backends' own allocation gives the same tensor as Burn's
//! `Tensor::zeros`, in shape, dtype and values, and under autodiff a constant.

use arbor_kernels::{zeros, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;

fn same_as_burn<B: ArborBackend>() {
    let device = Default::default();
    for shape in [[3, 5], [0, 4], [1, 1], [257, 33]] {
        let ours = zeros::<B, 2>(shape, &device);
        let burns = Tensor::<B, 2>::zeros(shape, &device);
        assert_eq!(ours.dims(), shape);
        assert_eq!(ours.dtype(), burns.dtype(), "{shape:?}");
        let values: Vec<f64> = ours.into_data().convert::<f64>().to_vec().unwrap();
        assert_eq!(values.len(), shape[0] * shape[1]);
        assert!(values.iter().all(|&v| v == 0.0), "{shape:?}");
    }
}

#[test]
fn zeros_match_burns_zeros_on_every_cpu_backend() {
    same_as_burn::<Flex>();
    same_as_burn::<NdArray<f32>>();
    same_as_burn::<NdArray<f64>>();
    same_as_burn::<Autodiff<Flex>>();
}

#[test]
fn zeros_are_a_constant_under_autodiff() {
    type Ad = Autodiff<Flex>;
    let device = Default::default();
    let z = zeros::<Ad, 2>([2, 3], &device);
    assert!(!z.is_require_grad());
    // Written into and differentiated through, it passes the gradient to what was written.
    let x = Tensor::<Ad, 2>::ones([1, 3], &device).require_grad();
    let y = arbor_kernels::write_rows(z, 1, x.clone().mul_scalar(2.0));
    let g = y.sum().backward();
    let dx: Vec<f32> = x.grad(&g).unwrap().into_data().to_vec().unwrap();
    assert_eq!(dx, vec![2.0; 3]);
}
