//! `self_attention` with attention dropout active, in a test binary of its own: the check
//! seeds the backend's generator, which is global, so no other test may draw from it meanwhile.

use arbor_blocks::{padding_mask, self_attention};
use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::Distribution;

type F = Flex;

fn max_abs_diff<B: Backend, const N: usize>(a: Tensor<B, N>, b: Tensor<B, N>) -> f64 {
    let (a, b) = (
        a.into_data().convert::<f64>(),
        b.into_data().convert::<f64>(),
    );
    a.to_vec::<f64>()
        .unwrap()
        .iter()
        .zip(b.to_vec::<f64>().unwrap())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// With attention dropout active (training, rate above 0) `self_attention` takes its plain-op
/// path, which draws the same dropout mask as Burn's `MultiHeadAttention` (one Bernoulli tensor
/// over the scores): under the same seed the two give the same outputs, and another seed gives
/// others.
#[test]
fn with_attention_dropout_self_attention_draws_as_burns_multi_head_attention() {
    use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
    type A = Autodiff<F>;
    let device = Default::default();
    let (batch, time, d, heads) = (3, 5, 8, 2);
    let mha = MultiHeadAttentionConfig::new(d, heads)
        .with_dropout(0.5)
        .init::<A>(&device);
    let x = Tensor::<A, 3>::random([batch, time, d], Distribution::Normal(0.0, 1.0), &device);
    let mask = padding_mask::<A>(&[5, 3, 1], time, &device);
    let ours = |seed: u64| {
        A::seed(&device, seed);
        self_attention(&mha, x.clone(), Some(mask.clone()))
    };
    let burns = |seed: u64| {
        A::seed(&device, seed);
        mha.forward(MhaInput::self_attn(x.clone()).mask_pad(mask.clone()))
            .context
    };
    // The parameters are initialised lazily, from the same generator, at their first use.
    burns(0);
    let burns = burns(7);
    let diff = max_abs_diff(ours(7), burns);
    assert!(diff < 1e-5, "same seed: {diff}");
    let other = max_abs_diff(ours(7), ours(8));
    assert!(other > 1e-3, "another seed, another mask: {other}");
}
