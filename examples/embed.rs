//! Using arbor as a library inside another Burn project.
//!
//! `MyModel` is an ordinary Burn module of *your* project. One of its layers is an arbor
//! sentence encoder, chosen by configuration (`--encoder gumbel|lstm`); the rest (embedding,
//! head, loss, optimizer loop) is yours. It trains for a few steps on a toy task — "does the
//! sentence contain token 2?" — and prints the loss falling and a tree the encoder built.
//!
//! ```text
//! cargo run --release --example embed -- --encoder gumbel
//! ```

use arbor::cells::ArborBackend;
use arbor::cells::GumbelSampler;
use arbor::encoders::{
    Decisions, Encoder, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder,
};
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::TensorData;
use clap::Parser;

/// Your model: embedding → arbor encoder → your own head.
#[derive(Module, Debug)]
struct MyModel<B: Backend> {
    embedding: Embedding<B>,
    encoder: Encoder<B>,
    head: Linear<B>,
}

impl<B: ArborBackend> MyModel<B> {
    fn new(kind: EncoderKind, device: &B::Device) -> Self {
        let encoder = EncoderConfig::of_kind(kind, 16, 32).init(device);
        Self {
            embedding: EmbeddingConfig::new(8, 16).init(device),
            head: LinearConfig::new(encoder.d_output(), 2).init(device),
            encoder,
        }
    }

    /// # Shapes
    /// - `ids`: `[batch, time]`; output logits `[batch, 2]`
    fn forward(
        &self,
        ids: Tensor<B, 2, Int>,
        lengths: Vec<usize>,
        d: Decisions<'_>,
    ) -> Tensor<B, 2> {
        let x = self.embedding.forward(ids);
        let out = self.encoder.encode(EncoderInput::new(x, lengths), d);
        self.head.forward(out.sentence)
    }
}

#[derive(Parser)]
struct Args {
    /// Which arbor encoder to embed.
    #[arg(long, default_value = "gumbel")]
    encoder: EncoderKind,
    /// Training steps.
    #[arg(long, default_value_t = 60)]
    steps: usize,
}

/// A batch of random sentences over tokens 2..8, padded with 0; label 1 iff token 2 occurs.
fn batch<B: ArborBackend>(
    step: u64,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Vec<usize>, Tensor<B, 1, Int>) {
    let mut s = step.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |m: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % m
    };
    let (n, t) = (32, 8);
    let (mut ids, mut lengths, mut labels) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let len = 2 + next(7) as usize;
        let row: Vec<i64> = (0..t)
            .map(|k| if k < len { 2 + next(6) as i64 } else { 0 })
            .collect();
        labels.push(i64::from(row[..len].contains(&2)));
        ids.extend(row);
        lengths.push(len);
    }
    (
        Tensor::from_data(TensorData::new(ids, [n, t]), device),
        lengths,
        Tensor::from_data(TensorData::new(labels, [n]), device),
    )
}

fn main() {
    type B = Autodiff<Flex>;
    let args = Args::parse();
    let device = Default::default();
    B::seed(&device, 0);
    let mut model = MyModel::<B>::new(args.encoder, &device);
    let mut optim = AdamConfig::new().init();
    let mut sampler = GumbelSampler::seeded(0);
    for step in 0..args.steps {
        let (ids, lengths, labels) = batch::<B>(step as u64, &device);
        let logits = model.forward(ids, lengths, Decisions::Sample(&mut sampler));
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(logits, labels);
        if step % 10 == 0 || step + 1 == args.steps {
            println!("step {step:>3} loss {:.4}", loss.clone().into_scalar());
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(5e-3, model, grads);
    }
    // Evaluation without autodiff, argmax decisions.
    let eval = model.valid();
    let (ids, lengths, _) = batch::<Flex>(10_000, &device);
    let n = lengths[0];
    let x = eval.embedding.forward(ids.slice([0..1, 0..n]));
    let out = eval
        .encoder
        .encode(EncoderInput::new(x, vec![n]), Decisions::Argmax);
    match out.trees {
        Some(trees) => println!(
            "tree of the first evaluation sentence: {}",
            trees[0].to_bracketed_positions()
        ),
        None => println!("the {} encoder builds no tree", args.encoder),
    }
}
