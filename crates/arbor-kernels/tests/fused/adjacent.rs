//! `adjacent_pairs`: values and gradients against the plain-op reference.

use arbor_kernels::{reference, ArborBackend};
use burn::backend::{Autodiff, Flex, NdArray};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use crate::support::{assert_close, tensor, to_vec};

fn pairs<B: AutodiffBackend + ArborBackend>(fused: bool, b: usize, m: usize) -> [Vec<f64>; 2] {
    // A strided view (the first m of m + 1 nodes), as a layer's `h` can be.
    let x = tensor::<B, 3>([b, m + 1, 5], 1.0, 81)
        .narrow(1, 0, m)
        .require_grad();
    let y = if fused {
        arbor_kernels::adjacent_pairs(x.clone())
    } else {
        Tensor::from_primitive(TensorPrimitive::Float(reference::adjacent_pairs::<B>(
            x.clone().into_primitive().tensor(),
        )))
    };
    let w = tensor::<B, 3>([b, m - 1, 10], 1.0, 82);
    let grads = y.clone().mul(w).sum().backward();
    [to_vec(y), to_vec(x.grad(&grads).unwrap())]
}

#[test]
fn adjacent_pairs_match_reference_in_values_and_gradients() {
    // The last size is split across threads by the CPU kernels.
    for (b, m) in [(2, 2), (2, 3), (2, 7), (40, 64)] {
        for (fused, want) in [
            (
                pairs::<Autodiff<Flex>>(true, b, m),
                pairs::<Autodiff<Flex>>(false, b, m),
            ),
            (
                pairs::<Autodiff<NdArray>>(true, b, m),
                pairs::<Autodiff<NdArray>>(false, b, m),
            ),
        ] {
            assert_close(&fused[0], &want[0], 0.0, &format!("pairs m = {m}"));
            assert_close(&fused[1], &want[1], 1e-6, &format!("d x m = {m}"));
        }
    }
}
