//! The same computation on two backends: every fused op of `arbor-kernels` and every sentence
//! encoder, forward and backward, at a small and at a bench-sized shape, with the largest
//! absolute and relative differences of every output and gradient.
//!
//! `arbor-gpu-check` runs it with CUDA against the CPU reference (`flex`); the tests run it with
//! `ndarray` against `flex`, which checks the comparison itself on any machine.
//!
//! Inputs are seeded host values uploaded to both backends; module weights are drawn once on the
//! reference backend and loaded into both from the same bytes. A case's "loss" is
//! `Σ out ⊙ w` with a seeded `w`, so the backward pass sees a dense, non-uniform gradient.

use std::time::Instant;

use anyhow::{Context, Result};
use arbor_cells::kernels::{self as k, GateLayout};
use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use arbor_data::tree::Transition;
use arbor_encoders::{Decisions, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder};
use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorData;
use serde::{Deserialize, Serialize};

/// Which shapes a case runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    /// A few sentences, widths of tens: fast everywhere.
    Small,
    /// The benchmark's shapes (batch 64–128, widths 256–512).
    Bench,
}

impl Size {
    /// Both sizes, small first.
    pub const ALL: [Size; 2] = [Size::Small, Size::Bench];

    fn label(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Bench => "bench",
        }
    }
}

/// One fused op of `arbor-kernels`, as a parity case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `gated_cell` with an LSTM layout (one child).
    GatedCellLstm,
    /// `gated_cell` with the binary Tree-LSTM layout (two children).
    GatedCellTree,
    /// `gated_output`.
    GatedOutput,
    /// `ordered_cell` (ON-LSTM).
    OrderedCell,
    /// `ordered_gates` (Faster FastTrees).
    OrderedGates,
    /// `linear_scan`.
    LinearScan,
    /// `select_mix` (Gumbel Tree-LSTM layer update).
    SelectMix,
    /// `adjacent_pairs`.
    AdjacentPairs,
    /// `sigmoid`.
    Sigmoid,
    /// `tanh`.
    Tanh,
    /// `gelu`.
    Gelu,
    /// `select_rows`.
    SelectRows,
    /// `write_rows`.
    WriteRows,
    /// `narrow` of a middle dimension.
    Narrow,
    /// `linear` (affine map).
    Linear,
    /// `linear_pair`, with a narrower second product.
    LinearPair,
    /// `layer_norm` with `γ`, `β`.
    LayerNorm,
    /// `layer_norm` without an affine map.
    LayerNormPlain,
    /// `contiguous` of a permuted view.
    Contiguous,
    /// `zeros` (forward only).
    Zeros,
}

impl Op {
    /// Every op.
    pub const ALL: [Op; 20] = [
        Op::GatedCellLstm,
        Op::GatedCellTree,
        Op::GatedOutput,
        Op::OrderedCell,
        Op::OrderedGates,
        Op::LinearScan,
        Op::SelectMix,
        Op::AdjacentPairs,
        Op::Sigmoid,
        Op::Tanh,
        Op::Gelu,
        Op::SelectRows,
        Op::WriteRows,
        Op::Narrow,
        Op::Linear,
        Op::LinearPair,
        Op::LayerNorm,
        Op::LayerNormPlain,
        Op::Contiguous,
        Op::Zeros,
    ];

    /// The op's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::GatedCellLstm => "gated_cell (lstm)",
            Op::GatedCellTree => "gated_cell (tree)",
            Op::GatedOutput => "gated_output",
            Op::OrderedCell => "ordered_cell",
            Op::OrderedGates => "ordered_gates",
            Op::LinearScan => "linear_scan",
            Op::SelectMix => "select_mix",
            Op::AdjacentPairs => "adjacent_pairs",
            Op::Sigmoid => "sigmoid",
            Op::Tanh => "tanh",
            Op::Gelu => "gelu",
            Op::SelectRows => "select_rows",
            Op::WriteRows => "write_rows",
            Op::Narrow => "narrow",
            Op::Linear => "linear",
            Op::LinearPair => "linear_pair",
            Op::LayerNorm => "layer_norm",
            Op::LayerNormPlain => "layer_norm (no affine)",
            Op::Contiguous => "contiguous",
            Op::Zeros => "zeros",
        }
    }
}

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// A fused op.
    Op(Op),
    /// A sentence encoder built by [`EncoderConfig::of_kind`].
    Encoder(EncoderKind),
}

impl Case {
    /// Every op and every encoder.
    pub fn all() -> Vec<Case> {
        use arbor_cells::names::VariantArray;
        Op::ALL
            .into_iter()
            .map(Case::Op)
            .chain(EncoderKind::VARIANTS.iter().map(|&e| Case::Encoder(e)))
            .collect()
    }

    /// `op` or `encoder`.
    pub fn group(self) -> &'static str {
        match self {
            Case::Op(_) => "op",
            Case::Encoder(_) => "encoder",
        }
    }

    /// The case's name in reports.
    pub fn name(self) -> String {
        match self {
            Case::Op(op) => op.name().to_string(),
            Case::Encoder(kind) => kind.to_string(),
        }
    }
}

/// The largest differences of one compared tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorDiff {
    /// `output`, `grad x`, `grad <parameter path>`, ...
    pub name: String,
    /// Elements compared.
    pub len: usize,
    /// `max |device − reference|`.
    pub max_abs: f64,
    /// `max |device − reference| / (|reference| + 1e-3)`.
    pub max_rel: f64,
    /// `‖device − reference‖₂ / ‖reference‖₂` (the pass criterion, with an absolute floor:
    /// [`within_tolerance`]).
    #[serde(default)]
    pub rel_l2: f64,
}

/// One case at one size, compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityRecord {
    /// `op` or `encoder`.
    pub group: String,
    /// The op or encoder.
    pub name: String,
    /// `small` or `bench`.
    pub size: String,
    /// The shapes, in words.
    pub shape: String,
    /// Every output and gradient compared.
    pub tensors: Vec<TensorDiff>,
    /// The largest `max_abs` over `tensors`.
    pub max_abs: f64,
    /// The largest `max_rel` over `tensors`.
    pub max_rel: f64,
    /// The largest `rel_l2` over `tensors`.
    #[serde(default)]
    pub rel_l2: f64,
    /// Whether every tensor is within tolerance ([`within_tolerance`]) and nothing failed.
    pub passed: bool,
    /// Why the case could not run on one of the backends (an error or a panic message).
    pub error: Option<String>,
    /// Wall time of forward + backward on the device, including the read-back, ms.
    pub device_ms: f64,
    /// The same on the reference backend, ms.
    pub reference_ms: f64,
}

/// The tolerance on the normwise relative difference `‖device − reference‖₂ / ‖reference‖₂` of
/// every compared tensor.
///
/// Not elementwise: on GPUs with tensor cores, Burn's CUDA backend (CubeCL's matmul) multiplies
/// `f32` matrices in TF32 (10-bit mantissa), as PyTorch does with `allow_tf32`, so every product
/// differs from the CPU's by about 1e-3 of its scale, and an element that is a near-cancelling
/// sum (a weight's gradient summed over thousands of rows) can differ by much more relative to
/// itself. A wrong formula, a wrong index or a missed gradient differs by O(1) normwise.
pub const TOLERANCE: f64 = 1e-2;

/// The absolute floor: a root-mean-square difference up to this passes whatever the reference's
/// norm. Some gradients are zero in exact arithmetic (an attention key's bias: softmax ignores
/// a constant added to every score of a row), so both sides hold rounding noise (1e-8 on the
/// CPU, 3e-5 on an H100 in TF32) and their normwise ratio means nothing.
pub const ABS_FLOOR: f64 = 1e-4;

/// Whether `device` matches `reference`: the same length, nothing non-finite, and
/// `‖device − reference‖₂ ≤ TOLERANCE · ‖reference‖₂ + ABS_FLOOR · √n`.
pub fn within_tolerance(device: &[f32], reference: &[f32]) -> bool {
    if device.len() != reference.len() || !device.iter().chain(reference).all(|v| v.is_finite()) {
        return false;
    }
    let (mut diff, mut norm) = (0f64, 0f64);
    for (x, y) in device.iter().zip(reference) {
        diff += (f64::from(*x) - f64::from(*y)).powi(2);
        norm += f64::from(*y).powi(2);
    }
    diff.sqrt() <= TOLERANCE * norm.sqrt() + ABS_FLOOR * (device.len() as f64).sqrt()
}

/// `‖a − b‖₂ / max(‖b‖₂, 1e-12)` (0 for two zero tensors).
pub fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        diff += (f64::from(*x) - f64::from(*y)).powi(2);
        norm += f64::from(*y).powi(2);
    }
    if diff == 0.0 {
        0.0
    } else {
        (diff / norm.max(1e-24)).sqrt()
    }
}

/// Named flat tensors a case produces (outputs first, then gradients).
type Named = Vec<(String, Vec<f32>)>;

/// Deterministic values in `[-scale, scale]` (a small LCG: both backends get the same bytes).
fn values(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn input<B: Backend, const D: usize>(
    shape: [usize; D],
    scale: f32,
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, scale, seed), shape), device)
}

fn read<B: Backend, const D: usize>(t: Tensor<B, D>) -> Result<Vec<f32>> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("reading a tensor back: {e:?}"))
}

/// `Σ out ⊙ w` for a seeded `w` of `out`'s shape.
fn weighted_sum<B: Backend, const D: usize>(out: Tensor<B, D>, seed: u64) -> Tensor<B, 1> {
    let w = input::<B, D>(out.dims(), 1.0, seed, &out.device());
    (out * w).sum()
}

/// Runs `f` on inputs that require gradients, backpropagates the weighted sum of its output, and
/// returns the output and every input's gradient.
fn op_case<B: ArborAutodiffBackend, const D: usize, const O: usize>(
    device: &B::Device,
    shapes: &[([usize; D], f32)],
    f: impl FnOnce(Vec<Tensor<B, D>>) -> Tensor<B, O>,
) -> Result<Named> {
    let inputs: Vec<Tensor<B, D>> = shapes
        .iter()
        .enumerate()
        .map(|(i, (shape, scale))| {
            input::<B, D>(*shape, *scale, 11 + i as u64, device).require_grad()
        })
        .collect();
    let out = f(inputs.clone());
    let grads = weighted_sum(out.clone(), 99).backward();
    let mut named = vec![("output".to_string(), read(out)?)];
    for (i, x) in inputs.iter().enumerate() {
        push_grad(&mut named, &grads, &format!("input {i}"), x)?;
    }
    Ok(named)
}

/// Runs one op at `size` on backend `B`; returns its named tensors and the shape in words.
fn run_op<B: ArborAutodiffBackend>(
    op: Op,
    size: Size,
    device: &B::Device,
) -> Result<(Named, String)> {
    // Rows and widths: (n, H) for the cell ops, (batch, time, H) for the sequence ops.
    let (n, h, c, b, t) = match size {
        Size::Small => (6, 8, 4, 3, 5),
        Size::Bench => (128 * 25, 512, 64, 128, 25),
    };
    let rows_shape = format!("rows {n}, H {h}");
    let seq_shape = format!("batch {b}, time {t}, H {h}");
    let named = match op {
        Op::GatedCellLstm => {
            op_case::<B, 2, 2>(device, &[([n, 4 * h], 2.0), ([n, h], 1.0)], |x| {
                k::gated_cell(x[0].clone(), vec![x[1].clone()], &GateLayout::lstm())
            })?
        }
        Op::GatedCellTree => op_case::<B, 2, 2>(
            device,
            &[([n, 5 * h], 2.0), ([n, h], 1.0), ([n, h], 1.0)],
            |x| {
                k::gated_cell(
                    x[0].clone(),
                    vec![x[1].clone(), x[2].clone()],
                    &GateLayout::binary_tree_lstm(),
                )
            },
        )?,
        Op::GatedOutput => op_case::<B, 2, 2>(device, &[([n, 4 * h], 2.0), ([n, h], 1.0)], |x| {
            k::gated_output(x[0].clone(), x[1].clone(), &GateLayout::lstm())
        })?,
        Op::OrderedCell => op_case::<B, 2, 2>(
            device,
            &[
                ([n, 4 * h], 2.0),
                ([n, c], 0.5),
                ([n, c], 0.5),
                ([n, h], 1.0),
            ],
            |x| {
                // Master gates are activations in [0, 1].
                let m = |t: Tensor<B, 2>| t.add_scalar(0.5);
                k::ordered_cell(x[0].clone(), m(x[1].clone()), m(x[2].clone()), x[3].clone())
            },
        )?,
        Op::OrderedGates => op_case::<B, 2, 2>(
            device,
            &[([n, 4 * h], 2.0), ([n, c], 0.5), ([n, c], 0.5)],
            |x| {
                let m = |t: Tensor<B, 2>| t.add_scalar(0.5);
                k::ordered_gates(x[0].clone(), m(x[1].clone()), m(x[2].clone()))
            },
        )?,
        Op::LinearScan => {
            // `a` in (0, 1) then `u`, as the two halves of one input.
            let au = input::<B, 3>([b, t, 2 * h], 0.5, 1, device)
                .add_scalar(0.5)
                .require_grad();
            let c0 = input::<B, 2>([b, h], 1.0, 3, device).require_grad();
            let out = k::linear_scan(au.clone(), c0.clone());
            let grads = weighted_sum(out.clone(), 99).backward();
            let mut named = vec![("output".to_string(), read(out)?)];
            push_grad(&mut named, &grads, "au", &au)?;
            push_grad(&mut named, &grads, "c0", &c0)?;
            return Ok((named, seq_shape));
        }
        Op::SelectMix => {
            // A soft selection (the straight-through gradient path) over K = t nodes.
            let s = input::<B, 2>([b, t], 2.0, 1, device);
            let s = burn::tensor::activation::softmax(s, 1)
                .detach()
                .require_grad();
            let [p, l, r] =
                [2u64, 3, 4].map(|i| input::<B, 3>([b, t, h], 1.0, i, device).require_grad());
            let out = k::select_mix(s.clone(), p.clone(), l.clone(), r.clone());
            let grads = weighted_sum(out.clone(), 99).backward();
            let mut named = vec![("output".to_string(), read(out)?)];
            push_grad(&mut named, &grads, "s", &s)?;
            for (name, x) in [("parent", &p), ("left", &l), ("right", &r)] {
                push_grad(&mut named, &grads, name, x)?;
            }
            return Ok((named, format!("batch {b}, K {t}, D {h}")));
        }
        Op::AdjacentPairs => {
            let named = op_case::<B, 3, 3>(device, &[([b, t, h], 1.0)], |x| {
                k::adjacent_pairs(x[0].clone())
            })?;
            return Ok((named, seq_shape));
        }
        Op::Sigmoid => op_case::<B, 2, 2>(device, &[([n, h], 6.0)], |x| k::sigmoid(x[0].clone()))?,
        Op::Tanh => op_case::<B, 2, 2>(device, &[([n, h], 6.0)], |x| k::tanh(x[0].clone()))?,
        Op::Gelu => op_case::<B, 2, 2>(device, &[([n, h], 6.0)], |x| k::gelu(x[0].clone()))?,
        Op::SelectRows => {
            let rows: Vec<usize> = (0..n).map(|i| (i * 7 + 3) % n).collect();
            op_case::<B, 2, 2>(device, &[([n, h], 1.0)], |x| {
                k::select_rows(x[0].clone(), &rows)
            })?
        }
        Op::WriteRows => {
            let r = (n / 3).max(1);
            op_case::<B, 2, 2>(device, &[([n, h], 1.0), ([r, h], 1.0)], |x| {
                k::write_rows(x[0].clone(), n - r, x[1].clone())
            })?
        }
        Op::Narrow => {
            let named = op_case::<B, 3, 3>(device, &[([b, t, h], 1.0)], |x| {
                k::narrow(x[0].clone(), 1, 1, t - 1)
            })?;
            return Ok((named, seq_shape));
        }
        Op::Linear => {
            let x = input::<B, 2>([n, h], 1.0, 1, device).require_grad();
            let w = input::<B, 2>([h, 4 * h], 0.1, 2, device).require_grad();
            let bias = input::<B, 1>([4 * h], 0.1, 3, device).require_grad();
            let out = k::linear(x.clone(), w.clone(), Some(bias.clone()));
            let grads = weighted_sum(out.clone(), 99).backward();
            let mut named = vec![("output".to_string(), read(out)?)];
            push_grad(&mut named, &grads, "x", &x)?;
            push_grad(&mut named, &grads, "weight", &w)?;
            push_grad(&mut named, &grads, "bias", &bias)?;
            named
        }
        Op::LinearPair => {
            let x = input::<B, 2>([n, h], 1.0, 1, device).require_grad();
            let w = input::<B, 2>([h, 4 * h + 2 * c], 0.1, 2, device).require_grad();
            let hh = input::<B, 2>([n, h], 1.0, 3, device).require_grad();
            let u = input::<B, 2>([h, 4 * h], 0.1, 4, device).require_grad();
            let bias = input::<B, 1>([4 * h + 2 * c], 0.1, 5, device).require_grad();
            let out = k::linear_pair(
                x.clone(),
                w.clone(),
                hh.clone(),
                u.clone(),
                Some(bias.clone()),
            );
            let grads = weighted_sum(out.clone(), 99).backward();
            let mut named = vec![("output".to_string(), read(out)?)];
            for (name, t) in [("x", &x), ("weight", &w), ("h", &hh), ("weight_h", &u)] {
                push_grad(&mut named, &grads, name, t)?;
            }
            push_grad(&mut named, &grads, "bias", &bias)?;
            named
        }
        Op::LayerNorm | Op::LayerNormPlain => {
            let x = input::<B, 2>([n, h], 2.0, 1, device).require_grad();
            let gamma = input::<B, 1>([h], 0.5, 2, device)
                .add_scalar(1.0)
                .require_grad();
            let beta = input::<B, 1>([h], 0.5, 3, device).require_grad();
            let affine = (op == Op::LayerNorm).then(|| (gamma.clone(), beta.clone()));
            let out = k::layer_norm(x.clone(), affine, 1e-5);
            let grads = weighted_sum(out.clone(), 99).backward();
            let mut named = vec![("output".to_string(), read(out)?)];
            push_grad(&mut named, &grads, "x", &x)?;
            push_grad(&mut named, &grads, "gamma", &gamma)?;
            push_grad(&mut named, &grads, "beta", &beta)?;
            named
        }
        Op::Contiguous => {
            let named = op_case::<B, 3, 3>(device, &[([b, t, h], 1.0)], |x| {
                k::contiguous(x[0].clone().swap_dims(0, 1))
            })?;
            return Ok((named, seq_shape));
        }
        Op::Zeros => {
            let z = k::zeros::<B, 2>([n, h], device);
            vec![("output".to_string(), read(z)?)]
        }
    };
    Ok((named, rows_shape))
}

/// Appends `t`'s gradient as `grad {name}`, when it has one.
fn push_grad<B: AutodiffBackend, const D: usize>(
    named: &mut Named,
    grads: &B::Gradients,
    name: &str,
    t: &Tensor<B, D>,
) -> Result<()> {
    if let Some(g) = t.grad(grads) {
        named.push((format!("grad {name}"), read(g)?));
    }
    Ok(())
}

/// Collects every float parameter's gradient, by its position in the module.
struct ParamGrads<'a, B: AutodiffBackend> {
    grads: &'a B::Gradients,
    path: Vec<String>,
    out: Vec<(String, Result<Vec<f32>>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ParamGrads<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = param.val().grad(self.grads) {
            let name = format!("grad {}", self.path.join("."));
            self.out.push((name, read(g)));
        }
    }
}

/// Shapes of an encoder case: batch, lengths, input width, hidden width.
fn encoder_shape(kind: EncoderKind, size: Size) -> (Vec<usize>, usize, usize) {
    let (batch, max_len, d) = match (size, kind) {
        (Size::Small, _) => (4, 7, 16),
        // R2D2's pruned chart and the exhaustive work grow fast with length: the bench's R2D2
        // batch (8) at n = 32.
        (Size::Bench, EncoderKind::R2d2) => (8, 32, 128),
        (Size::Bench, _) => (64, 25, 256),
    };
    let lengths = (0..batch)
        .map(|i| {
            if i == 0 {
                max_len
            } else {
                2 + (i * 7) % (max_len - 1)
            }
        })
        .collect();
    (lengths, d, d)
}

/// Left-branching gold transitions for a sentence of `n` words (SPINN follows them).
fn left_branching(n: usize) -> Vec<Transition> {
    let mut t = vec![Transition::Shift];
    for _ in 1..n {
        t.push(Transition::Shift);
        t.push(Transition::Reduce);
    }
    t
}

/// The encoder's configuration in a parity case.
fn encoder_config(kind: EncoderKind, d_input: usize, d_hidden: usize) -> EncoderConfig {
    EncoderConfig::of_kind(kind, d_input, d_hidden)
}

/// Runs encoder `kind` with weights from `record`, forward (argmax decisions) and backward.
fn run_encoder<B: ArborAutodiffBackend>(
    kind: EncoderKind,
    size: Size,
    record: Vec<u8>,
    device: &B::Device,
) -> Result<(Named, String)> {
    let (lengths, d_input, d_hidden) = encoder_shape(kind, size);
    let config = encoder_config(kind, d_input, d_hidden);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let loaded = Recorder::<B>::load(&recorder, record, device).context("loading the weights")?;
    let encoder = config.init::<B>(device).load_record(loaded);
    let time = lengths.iter().copied().max().unwrap_or(1);
    let x = input::<B, 3>([lengths.len(), time, d_input], 1.0, 7, device).require_grad();
    let mut enc_input = EncoderInput::new(x.clone(), lengths.clone());
    if kind.needs_transitions() {
        enc_input =
            enc_input.with_transitions(lengths.iter().map(|&n| left_branching(n)).collect());
    }
    let out = encoder.encode(enc_input, Decisions::Argmax);
    let mut loss = weighted_sum(out.sentence.clone(), 99);
    if let Some(aux) = out.aux_loss.clone() {
        loss = loss + aux;
    }
    let grads = loss.backward();
    let mut named = vec![("sentence".to_string(), read(out.sentence)?)];
    push_grad(&mut named, &grads, "embeddings", &x)?;
    let mut visitor = ParamGrads::<B> {
        grads: &grads,
        path: Vec::new(),
        out: Vec::new(),
    };
    encoder.visit(&mut visitor);
    for (name, values) in visitor.out {
        named.push((name, values?));
    }
    let shape = format!(
        "batch {}, lengths {}..={}, d_input {d_input}, d_hidden {d_hidden}",
        lengths.len(),
        lengths.iter().min().unwrap_or(&0),
        time
    );
    Ok((named, shape))
}

/// The weights of encoder `kind` at `size`, drawn on backend `R` (seeded) and recorded as bytes.
fn encoder_weights<R: ArborBackend>(
    kind: EncoderKind,
    size: Size,
    device: &R::Device,
) -> Result<Vec<u8>> {
    let (_, d_input, d_hidden) = encoder_shape(kind, size);
    R::seed(device, 17);
    let module = encoder_config(kind, d_input, d_hidden).init::<R>(device);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    Recorder::<R>::record(&recorder, module.into_record(), ()).context("recording the weights")
}

/// Runs `f`, turning a panic into an error with its message (a backend that cannot run an op
/// panics inside Burn).
fn catching<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Err(anyhow::anyhow!("panicked: {msg}"))
        }
    }
}

fn run_case<B: ArborAutodiffBackend>(
    case: Case,
    size: Size,
    record: Option<Vec<u8>>,
    device: &B::Device,
) -> Result<(Named, String, f64)> {
    let start = Instant::now();
    let (named, shape) = match case {
        Case::Op(op) => run_op::<B>(op, size, device)?,
        Case::Encoder(kind) => run_encoder::<B>(
            kind,
            size,
            record.context("an encoder case needs weights")?,
            device,
        )?,
    };
    Ok((named, shape, start.elapsed().as_secs_f64() * 1e3))
}

/// Compares `case` at `size` on backend `D` (the device) against backend `R` (the reference).
pub fn compare<D: ArborBackend, R: ArborBackend>(
    case: Case,
    size: Size,
    device: &D::Device,
    reference: &R::Device,
) -> ParityRecord {
    let mut record = ParityRecord {
        group: case.group().into(),
        name: case.name(),
        size: size.label().into(),
        shape: String::new(),
        tensors: Vec::new(),
        max_abs: 0.0,
        max_rel: 0.0,
        rel_l2: 0.0,
        passed: false,
        error: None,
        device_ms: 0.0,
        reference_ms: 0.0,
    };
    let weights = match case {
        Case::Encoder(kind) => match catching(|| encoder_weights::<R>(kind, size, reference)) {
            Ok(w) => Some(w),
            Err(e) => {
                record.error = Some(format!("drawing the weights: {e:#}"));
                return record;
            }
        },
        Case::Op(_) => None,
    };
    let on_ref = catching(|| run_case::<Autodiff<R>>(case, size, weights.clone(), reference));
    let on_dev = catching(|| run_case::<Autodiff<D>>(case, size, weights, device));
    let ((r_named, shape, r_ms), (d_named, _, d_ms)) = match (on_ref, on_dev) {
        (Ok(r), Ok(d)) => (r, d),
        (Err(e), _) => {
            record.error = Some(format!("on the reference backend: {e:#}"));
            return record;
        }
        (_, Err(e)) => {
            record.error = Some(format!("on the device: {e:#}"));
            return record;
        }
    };
    record.shape = shape;
    record.reference_ms = r_ms;
    record.device_ms = d_ms;
    let mut passed = r_named.len() == d_named.len();
    for ((name, r), (d_name, d)) in r_named.iter().zip(&d_named) {
        passed &= name == d_name && within_tolerance(d, r);
        let (mut max_abs, mut max_rel) = (0f64, 0f64);
        for (a, b) in d.iter().zip(r) {
            let diff = f64::from((a - b).abs());
            let diff = if diff.is_nan() { f64::INFINITY } else { diff };
            max_abs = max_abs.max(diff);
            max_rel = max_rel.max(diff / (f64::from(b.abs()) + 1e-3));
        }
        let rel = rel_l2(d, r);
        record.max_abs = record.max_abs.max(max_abs);
        record.max_rel = record.max_rel.max(max_rel);
        record.rel_l2 = record.rel_l2.max(rel);
        record.tensors.push(TensorDiff {
            name: name.clone(),
            len: r.len().min(d.len()),
            max_abs,
            max_rel,
            rel_l2: rel,
        });
    }
    if r_named.len() != d_named.len() {
        record.error = Some(format!(
            "the device returned {} tensors, the reference {}",
            d_named.len(),
            r_named.len()
        ));
    }
    record.passed = passed;
    record
}

/// Compares every case at every size in `sizes`, calling `progress` after each.
pub fn compare_all<D: ArborBackend, R: ArborBackend>(
    cases: &[Case],
    sizes: &[Size],
    device: &D::Device,
    reference: &R::Device,
    mut progress: impl FnMut(&ParityRecord),
) -> Vec<ParityRecord> {
    let mut out = Vec::new();
    for &size in sizes {
        for &case in cases {
            let r = compare::<D, R>(case, size, device, reference);
            progress(&r);
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_is_normwise_and_rejects_nan() {
        // One element far off relative to itself, small against the tensor's norm: passes.
        assert!(within_tolerance(&[1e-4, 100.0], &[2e-4, 100.1]));
        // Rounding noise around a zero reference passes; an error above the floor does not.
        assert!(within_tolerance(&[3e-5, -2e-5], &[1e-8, 0.0]));
        assert!(!within_tolerance(&[3e-3, -2e-3], &[1e-8, 0.0]));
        assert!(!within_tolerance(&[1.0, 2.0], &[1.05, 2.0]));
        assert!(!within_tolerance(&[f32::NAN], &[0.0]));
        assert!(!within_tolerance(&[1.0], &[1.0, 2.0]));
        assert_eq!(rel_l2(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
        assert!((rel_l2(&[3.0, 4.0], &[0.0, 0.0]) - 5e12).abs() < 1.0);
    }

    #[test]
    fn every_case_has_a_distinct_name() {
        let names: std::collections::BTreeSet<String> =
            Case::all().into_iter().map(Case::name).collect();
        assert_eq!(names.len(), Case::all().len());
    }
}
