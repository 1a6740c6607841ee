//! Gumbel Tree-LSTM: two model sizes and a length-scaling sweep.

use arbor_cells::ArborBackend;
use arbor_cells::GumbelSampler;
use arbor_encoders::{
    Decisions, EncoderInput, GumbelTreeLstm, GumbelTreeLstmConfig, LeafKind, SentenceEncoder,
};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use serde_json::json;

use super::{backward_through, read, uniform, uniform_lengths};
use crate::harness::{Mode, Workload};
use crate::report::RatioSpec;

/// Sentences per batch in the two model-size workloads.
pub const BATCH: usize = 128;
/// Sentences per batch in the length sweep.
pub const SWEEP_BATCH: usize = 16;
/// Lengths of the sweep.
pub const SWEEP_LENGTHS: [usize; 5] = [8, 16, 32, 64, 128];

fn workload<B: ArborBackend>(
    device: &B::Device,
    name: String,
    d: usize,
    leaf: LeafKind,
    lengths: Vec<usize>,
) -> Workload {
    let device = device.clone();
    let batch = lengths.len();
    let max_len = lengths.iter().copied().max().unwrap_or(1);
    let twin = json!({ "lengths": lengths });
    let params = json!({
        "d_input": d, "d_hidden": d, "leaf": leaf.to_string(), "batch": batch,
        "lengths": if lengths.iter().all(|&n| n == max_len) { json!(max_len) } else { json!(lengths) },
        "tau": 1.0, "seed": 0, "loss": "sum of the root vectors",
        "decisions": "forward: argmax; forward+backward: ST Gumbel, seeded noise",
    });
    Workload::new("gumbel", name, params, batch, "sentences", move || {
        B::seed(&device, 0);
        let model: GumbelTreeLstm<Autodiff<B>> = GumbelTreeLstmConfig::new(d, d)
            .with_leaf(leaf)
            .init(&device);
        let eval = model.valid();
        let x = uniform::<B, 3>([batch, max_len, d], 1, &device);
        Box::new(move |mode| match mode {
            Mode::Forward => {
                let out = eval.encode(
                    EncoderInput::new(x.clone(), lengths.clone()),
                    Decisions::Argmax,
                );
                read(out.sentence.sum())
            }
            Mode::ForwardBackward => {
                let mut sampler = GumbelSampler::seeded(0);
                backward_through(&x, |xa| {
                    model
                        .encode(
                            EncoderInput::new(xa, lengths.clone()),
                            Decisions::Sample(&mut sampler),
                        )
                        .sentence
                })
            }
        })
    })
    .with_twin_inputs(twin)
}

/// The paper's two sizes (batch 128, lengths uniform in 5..=25, seed 0), and a sweep over
/// sentence length at d 100 with affine leaves.
pub fn workloads<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    let lengths = uniform_lengths(BATCH, 5, 25, 0);
    let mut out = vec![
        workload::<B>(
            device,
            "d100-affine".into(),
            100,
            LeafKind::Affine,
            lengths.clone(),
        ),
        workload::<B>(device, "d300-lstm".into(), 300, LeafKind::Lstm, lengths),
    ];
    for n in SWEEP_LENGTHS {
        out.push(
            workload::<B>(
                device,
                format!("length/d100-affine-n{n}"),
                100,
                LeafKind::Affine,
                vec![n; SWEEP_BATCH],
            )
            .in_sweep(
                "gumbel-length",
                "Gumbel Tree-LSTM d100",
                n as f64,
                "sentence length (tokens)",
            ),
        );
    }
    out
}

/// The sweep's end points.
pub fn ratios() -> Vec<RatioSpec> {
    vec![RatioSpec {
        label: "Gumbel Tree-LSTM time(n=128) / time(n=16)",
        numerator: "gumbel/length/d100-affine-n128",
        denominator: "gumbel/length/d100-affine-n16",
    }]
}
