//! Transformer encoders with and without the FastTrees gate.

use arbor_blocks::{TransformerEncoder, TransformerEncoderConfig};
use arbor_cells::ArborBackend;
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use serde_json::json;

use super::{backward_through, read, uniform};
use crate::harness::{Mode, Workload};
use crate::report::RatioSpec;

/// `(d_model, heads, d_ff, layers, batch, length)`.
pub const CONFIG: (usize, usize, usize, usize, usize, usize) = (256, 4, 1024, 2, 64, 32);

fn workload<B: ArborBackend>(device: &B::Device, fasttrees: bool) -> Workload {
    let device = device.clone();
    let (d, heads, d_ff, layers, batch, len) = CONFIG;
    let name = if fasttrees { "fasttrees" } else { "plain" };
    let params = json!({
        "d_model": d, "n_heads": heads, "d_ff": d_ff, "n_layers": layers, "fasttrees_gate": fasttrees,
        "chunk_size": 8, "batch": batch, "length": len, "dropout": 0.0, "loss": "sum of all outputs",
    });
    Workload::new(
        "transformer",
        name,
        params,
        batch * len,
        "tokens",
        move || {
            B::seed(&device, 0);
            let model: TransformerEncoder<Autodiff<B>> = TransformerEncoderConfig::new(d, d)
                .with_n_heads(heads)
                .with_d_ff(d_ff)
                .with_n_layers(layers)
                .with_dropout(0.0)
                .with_fasttrees(fasttrees)
                .with_chunk_size(8)
                .init(&device);
            let eval = model.valid();
            let x = uniform::<B, 3>([batch, len, d], 1, &device);
            let lengths = vec![len; batch];
            Box::new(move |mode| match mode {
                Mode::Forward => read(eval.forward(x.clone(), &lengths).outputs.sum()),
                Mode::ForwardBackward => {
                    backward_through(&x, |xa| model.forward(xa, &lengths).outputs)
                }
            })
        },
    )
}

/// A 2-layer encoder with and without gates.
pub fn workloads<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    vec![workload::<B>(device, false), workload::<B>(device, true)]
}

/// The gate's cost.
pub fn ratios() -> Vec<RatioSpec> {
    vec![RatioSpec {
        label: "Transformer+FastTrees / plain Transformer time (the gate's cost)",
        numerator: "transformer/fasttrees",
        denominator: "transformer/plain",
    }]
}
