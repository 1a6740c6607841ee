//! SPINN's thin stack against a per-sentence recursive Tree-LSTM and a same-width LSTM (the
//! paper: ≈25× faster than recursion at batch 512, ≈4× slower than an LSTM).

use arbor_cells::ArborBackend;
use arbor_cells::{CellKind, GumbelSampler, RecurrentStack, RecurrentStackConfig};
use arbor_data::tree::{BinaryTree, Transition};
use arbor_encoders::{Decisions, EncoderInput, Spinn, SpinnConfig, SpinnVariant};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use super::{backward_through, read, uniform, uniform_lengths};
use crate::harness::{Mode, Workload};
use crate::report::RatioSpec;

/// Width `D` of embeddings, nodes and the LSTM.
pub const D: usize = 300;
/// Sentences per batch.
pub const BATCH: usize = 512;
/// Longest sentence; lengths are uniform in `2..=MAX_LEN`.
pub const MAX_LEN: usize = 30;

struct Data {
    lengths: Vec<usize>,
    trees: Vec<BinaryTree>,
    transitions: Vec<Vec<Transition>>,
}

fn data() -> Data {
    let lengths = uniform_lengths(BATCH, 2, MAX_LEN, 0);
    let mut rng = StdRng::seed_from_u64(0);
    let trees: Vec<BinaryTree> = lengths
        .iter()
        .map(|&n| BinaryTree::random(n, &mut rng).expect("n ≥ 1"))
        .collect();
    let transitions = trees.iter().map(BinaryTree::to_transitions).collect();
    Data {
        lengths,
        trees,
        transitions,
    }
}

/// The exact lengths and trees (as `S`/`R` transition strings) for the PyTorch twin.
fn twin_inputs() -> serde_json::Value {
    let data = data();
    let transitions: Vec<String> = data
        .transitions
        .iter()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| match t {
                    Transition::Shift => Some('S'),
                    Transition::Reduce => Some('R'),
                    Transition::Skip => None,
                })
                .collect()
        })
        .collect();
    json!({ "lengths": data.lengths, "transitions": transitions, "max_len": MAX_LEN })
}

fn params(kind: &str) -> serde_json::Value {
    json!({
        "encoder": kind, "d": D, "batch": BATCH, "lengths": format!("uniform 2..={MAX_LEN}, seed 0"),
        "trees": "uniformly random binary trees, seed 0", "loss": "sum of the sentence vectors",
    })
}

/// The sentence vectors of SPINN-PI-NT (`recursive`: of the per-node reference) on `x`.
fn encode<E: ArborBackend>(
    model: &Spinn<E>,
    x: Tensor<E, 3>,
    data: &Data,
    recursive: bool,
    decisions: Decisions<'_>,
) -> Tensor<E, 2> {
    if recursive {
        model
            .encode_recursive(x, &data.lengths, &data.trees)
            .expect("valid trees")
            .h
    } else {
        let input =
            EncoderInput::new(x, data.lengths.clone()).with_transitions(data.transitions.clone());
        model
            .forward(input, decisions)
            .expect("valid transitions")
            .root
            .h
    }
}

fn spinn<B: ArborBackend>(device: &B::Device, recursive: bool) -> Workload {
    let device = device.clone();
    let name = if recursive { "recursive" } else { "thin-stack" };
    let kind = if recursive {
        "recursive Tree-LSTM (one composition call per node, SPINN-PI-NT's weights)"
    } else {
        "SPINN-PI-NT thin stack"
    };
    Workload::new("spinn", name, params(kind), BATCH, "sentences", move || {
        B::seed(&device, 0);
        let model: Spinn<Autodiff<B>> = SpinnConfig::new(D, D)
            .with_variant(SpinnVariant::PiNt)
            .init(&device);
        let eval = model.valid();
        let data = data();
        let x = uniform::<B, 3>([BATCH, MAX_LEN, D], 1, &device);
        Box::new(move |mode| match mode {
            Mode::Forward => {
                read(encode(&eval, x.clone(), &data, recursive, Decisions::Argmax).sum())
            }
            Mode::ForwardBackward => {
                let mut sampler = GumbelSampler::seeded(0);
                backward_through(&x, |xa| {
                    encode(
                        &model,
                        xa,
                        &data,
                        recursive,
                        Decisions::Sample(&mut sampler),
                    )
                })
            }
        })
    })
    .with_twin_inputs(twin_inputs())
}

fn lstm<B: ArborBackend>(device: &B::Device) -> Workload {
    let device = device.clone();
    Workload::new(
        "spinn",
        "lstm",
        params("LSTM (one layer)"),
        BATCH,
        "sentences",
        move || {
            B::seed(&device, 0);
            let stack: RecurrentStack<Autodiff<B>> =
                RecurrentStackConfig::new(CellKind::Lstm, D, D).init(&device);
            let eval = stack.valid();
            let lengths = data().lengths;
            let x = uniform::<B, 3>([BATCH, MAX_LEN, D], 1, &device);
            Box::new(move |mode| match mode {
                Mode::Forward => {
                    let out = eval.forward(x.clone(), Some(&lengths), None);
                    read(out.last[0].h.clone().sum())
                }
                Mode::ForwardBackward => backward_through(&x, |xa| {
                    stack.forward(xa, Some(&lengths), None).last[0].h.clone()
                }),
            })
        },
    )
    .with_twin_inputs(twin_inputs())
}

/// Thin stack, recursive reference and LSTM at D 300, batch 512, lengths ≤ 30.
pub fn workloads<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    vec![
        spinn::<B>(device, false),
        spinn::<B>(device, true),
        lstm::<B>(device),
    ]
}

/// The paper's two claims.
pub fn ratios() -> Vec<RatioSpec> {
    vec![
        RatioSpec {
            label: "recursive / thin-stack time (thin-stack speed-up; paper ≈25×)",
            numerator: "spinn/recursive",
            denominator: "spinn/thin-stack",
        },
        RatioSpec {
            label: "thin-stack / LSTM time (paper ≈4×)",
            numerator: "spinn/thin-stack",
            denominator: "spinn/lstm",
        },
    ]
}
