//! `conv1d_over_time` computes what Burn's `Conv1d` computes on the transposed input: values
//! and the gradients of the input, the weight and the bias, for the causal convolutions the
//! cells use (one product of windows) and for another convolution (Burn's own path).

mod common;

use arbor_cells::conv1d_over_time;
use burn::backend::{Autodiff, Flex};
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::PaddingConfig1d;
use common::{assert_close, tensor, to_vec};

type A = Autodiff<Flex>;

fn run(conv: &Conv1d<A>, time: usize, ours: bool) -> Vec<Vec<f64>> {
    let device = Default::default();
    let x = tensor::<A, 3>([3, time, 4], 1.0, 11, &device).require_grad();
    let y = if ours {
        conv1d_over_time(conv, x.clone())
    } else {
        conv.forward(x.clone().swap_dims(1, 2)).swap_dims(1, 2)
    };
    let [b, t, c] = y.dims();
    let w = tensor::<A, 3>([b, t, c], 1.0, 12, &device);
    let g = y.clone().mul(w).sum().backward();
    vec![
        to_vec(y),
        to_vec(x.grad(&g).unwrap()),
        to_vec(conv.weight.grad(&g).unwrap()),
        to_vec(conv.bias.as_ref().unwrap().grad(&g).unwrap()),
    ]
}

#[test]
fn conv1d_over_time_equals_burns_conv1d() {
    let configs = [
        // Causal, as Conv FastTrees and the FastTrees gate build them (the windows' product).
        Conv1dConfig::new(4, 5, 3).with_padding(PaddingConfig1d::Explicit(2, 0)),
        Conv1dConfig::new(4, 5, 1).with_padding(PaddingConfig1d::Explicit(0, 0)),
        // Not causal: Burn's path.
        Conv1dConfig::new(4, 5, 3).with_padding(PaddingConfig1d::Explicit(1, 1)),
    ];
    for config in &configs {
        let conv = config.init::<A>(&Default::default());
        // Sequences shorter than, as long as and longer than the kernel.
        for time in [1, 3, 7] {
            let (ours, burns) = (run(&conv, time, true), run(&conv, time, false));
            for (k, what) in ["output", "d x", "d weight", "d bias"].iter().enumerate() {
                assert_close(
                    &ours[k],
                    &burns[k],
                    1e-5,
                    &format!("{what}, kernel {}, time {time}", config.kernel_size),
                );
            }
        }
    }
}
