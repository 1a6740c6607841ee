//! Running recurrent cells over padded sequences, one layer or a stack of layers.

use std::fmt;
use std::str::FromStr;

use burn::nn::{Dropout, DropoutConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::{
    syntactic_distance, ConvFastTreesCell, ConvFastTreesCellConfig, FastTreesCell,
    FastTreesCellConfig, FasterFastTreesCell, FasterFastTreesCellConfig, LstmCell, LstmCellConfig,
    LstmState, OnLstmCell, OnLstmCellConfig,
};

/// What one recurrent step produces.
#[derive(Debug, Clone)]
pub struct CellStep<B: Backend> {
    /// The new `(h_t, c_t)`.
    pub state: LstmState<B, 2>,
    /// The master forget gate `f̃_t` `[batch, C]` of cumax cells, from which the syntactic
    /// distance is read; `None` for cells without master gates.
    pub master_forget: Option<Tensor<B, 2>>,
}

/// The interface every recurrent cell implements.
///
/// A cell splits its work into what depends on the input alone, computed for the whole
/// sequence in one batched op, and the per-step recurrence.
pub trait RecurrentCell<B: Backend> {
    /// Input width.
    fn d_input(&self) -> usize;
    /// Hidden width `H`.
    fn d_hidden(&self) -> usize;
    /// Number of master-gate chunks `C`, for cells that have master gates.
    fn n_chunks(&self) -> Option<usize>;
    /// Everything that depends on `x` alone, for all steps at once.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`
    /// - output: `[batch, time, P]`, where `P` is the cell's own layout
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3>;
    /// One step from the precomputed slice of step `t` and the previous state.
    ///
    /// # Shapes
    /// - `xp`: `[batch, P]`
    /// - `state`: `[batch, H]` each
    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B>;
}

/// The result of running one cell over a batch of sequences.
#[derive(Debug, Clone)]
pub struct SequenceOutput<B: Backend> {
    /// `h_t` for every step `[batch, time, H]`; zeros at padded positions.
    pub outputs: Tensor<B, 3>,
    /// The state after each example's last real step `[batch, H]`.
    pub last: LstmState<B, 2>,
    /// Syntactic distances `d_t = 1 − mean(f̃_t)` `[batch, time]` for cumax cells (zeros at
    /// padded positions); `None` for the LSTM.
    pub distances: Option<Tensor<B, 2>>,
}

/// A `[batch, time]` mask, true where `t < lengths[b]`.
///
/// # Panics
/// If any length exceeds `time`.
pub fn length_mask<B: Backend>(
    lengths: &[usize],
    time: usize,
    device: &B::Device,
) -> Tensor<B, 2, Bool> {
    let mut values = Vec::with_capacity(lengths.len() * time);
    for &len in lengths {
        assert!(
            len <= time,
            "length {len} exceeds the padded time axis {time}"
        );
        values.extend((0..time).map(|t| t < len));
    }
    Tensor::from_data(TensorData::new(values, [lengths.len(), time]), device)
}

/// Runs `cell` over `x`, left to right.
///
/// With `lengths`, example `b` has `lengths[b]` real steps followed by padding: its state stops
/// changing after its last real step, its outputs at padded positions are zero, and its real
/// outputs are exactly those it gets alone (padding never influences a real position).
///
/// # Shapes
/// - `x`: `[batch, time, d_input]`
/// - `lengths`: `batch` entries, each `≤ time` (`None`: all `time`)
/// - `init`: `[batch, H]` each (`None`: zeros)
///
/// # Panics
/// If `lengths` has the wrong number of entries or an entry exceeds `time`.
pub fn run_sequence<B: Backend, C: RecurrentCell<B> + ?Sized>(
    cell: &C,
    x: Tensor<B, 3>,
    lengths: Option<&[usize]>,
    init: Option<LstmState<B, 2>>,
) -> SequenceOutput<B> {
    let device = x.device();
    let [batch, time, _] = x.dims();
    let h = cell.d_hidden();
    let mask = lengths.and_then(|lengths| {
        assert_eq!(lengths.len(), batch, "one length per example");
        let padded = lengths.iter().any(|&l| l < time);
        padded.then(|| length_mask::<B>(lengths, time, &device))
    });
    let xp = cell.precompute(x);
    let width = xp.dims()[2];
    let mut state = init.unwrap_or_else(|| LstmState::zeros([batch, h], &device));
    let mut outputs = Vec::with_capacity(time);
    let mut distances = Vec::with_capacity(time);
    for t in 0..time {
        let xp_t = xp
            .clone()
            .slice([0..batch, t..t + 1, 0..width])
            .reshape([batch, width]);
        let step = cell.step(xp_t, state.clone());
        let mut d_t = step.master_forget.map(syntactic_distance);
        let mut h_t = step.state.h.clone();
        state = match &mask {
            None => step.state,
            Some(mask) => {
                let m_t = mask.clone().slice([0..batch, t..t + 1]);
                let pad = m_t.clone().bool_not();
                h_t = h_t.mask_fill(pad.clone().expand([batch, h]), 0.0);
                d_t = d_t.map(|d| d.mask_fill(pad, 0.0));
                state.select(m_t, step.state)
            }
        };
        outputs.push(h_t.unsqueeze_dim::<3>(1));
        if let Some(d) = d_t {
            distances.push(d);
        }
    }
    SequenceOutput {
        outputs: Tensor::cat(outputs, 1),
        last: state,
        distances: (!distances.is_empty()).then(|| Tensor::cat(distances, 1)),
    }
}

/// The recurrent cells a [`RecurrentStack`] can be built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellKind {
    /// [`LstmCell`].
    Lstm,
    /// [`OnLstmCell`].
    OnLstm,
    /// [`FastTreesCell`].
    #[serde(rename = "fasttrees")]
    FastTrees,
    /// [`FasterFastTreesCell`].
    #[serde(rename = "faster-fasttrees")]
    FasterFastTrees,
    /// [`ConvFastTreesCell`].
    #[serde(rename = "conv-fasttrees")]
    ConvFastTrees,
}

impl CellKind {
    /// Every kind, in a fixed order.
    pub const ALL: [CellKind; 5] = [
        CellKind::Lstm,
        CellKind::OnLstm,
        CellKind::FastTrees,
        CellKind::FasterFastTrees,
        CellKind::ConvFastTrees,
    ];

    /// The kind's command-line name (`lstm`, `on-lstm`, `fasttrees`, `faster-fasttrees`,
    /// `conv-fasttrees`).
    pub fn name(self) -> &'static str {
        match self {
            CellKind::Lstm => "lstm",
            CellKind::OnLstm => "on-lstm",
            CellKind::FastTrees => "fasttrees",
            CellKind::FasterFastTrees => "faster-fasttrees",
            CellKind::ConvFastTrees => "conv-fasttrees",
        }
    }

    /// Whether the cell has cumax master gates (and so produces syntactic distances).
    pub fn has_master_gates(self) -> bool {
        self != CellKind::Lstm
    }
}

impl fmt::Display for CellKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CellKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.to_ascii_lowercase().replace('_', "-");
        CellKind::ALL
            .into_iter()
            .find(|k| k.name() == key || k.name().replace('-', "") == key.replace('-', ""))
            .ok_or_else(|| {
                let names: Vec<_> = CellKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown cell `{s}`; expected one of {}", names.join(", "))
            })
    }
}

/// Any of the recurrent cells, as one module type.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnyCell<B: Backend> {
    /// An LSTM cell.
    Lstm(LstmCell<B>),
    /// An ON-LSTM cell.
    OnLstm(OnLstmCell<B>),
    /// A FastTrees cell.
    FastTrees(FastTreesCell<B>),
    /// A Faster FastTrees cell.
    FasterFastTrees(FasterFastTreesCell<B>),
    /// A Conv FastTrees cell.
    ConvFastTrees(ConvFastTreesCell<B>),
}

macro_rules! dispatch {
    ($self:ident, $cell:ident => $e:expr) => {
        match $self {
            AnyCell::Lstm($cell) => $e,
            AnyCell::OnLstm($cell) => $e,
            AnyCell::FastTrees($cell) => $e,
            AnyCell::FasterFastTrees($cell) => $e,
            AnyCell::ConvFastTrees($cell) => $e,
        }
    };
}

impl<B: Backend> RecurrentCell<B> for AnyCell<B> {
    fn d_input(&self) -> usize {
        dispatch!(self, c => c.d_input())
    }
    fn d_hidden(&self) -> usize {
        dispatch!(self, c => c.d_hidden())
    }
    fn n_chunks(&self) -> Option<usize> {
        dispatch!(self, c => c.n_chunks())
    }
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        dispatch!(self, c => c.precompute(x))
    }
    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        dispatch!(self, c => c.step(xp, state))
    }
}

/// Configuration of a [`RecurrentStack`].
#[derive(Config, Debug)]
pub struct RecurrentStackConfig {
    /// Which cell every layer uses.
    pub kind: CellKind,
    /// Input width of the first layer.
    pub d_input: usize,
    /// Hidden width of every layer.
    pub d_hidden: usize,
    /// Number of layers.
    #[config(default = 1)]
    pub n_layers: usize,
    /// Neurons per master-gate chunk (ignored by the LSTM).
    #[config(default = 8)]
    pub chunk_size: usize,
    /// Dropout applied between layers (not after the last one).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Temporal kernel width of Conv FastTrees.
    #[config(default = 3)]
    pub kernel_size: usize,
}

impl RecurrentStackConfig {
    /// Builds the stack on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0, or the cell's own config rejects the widths.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RecurrentStack<B> {
        assert!(self.n_layers > 0, "a stack needs at least one layer");
        let layers = (0..self.n_layers)
            .map(|l| {
                let d_in = if l == 0 { self.d_input } else { self.d_hidden };
                let (h, k) = (self.d_hidden, self.chunk_size);
                match self.kind {
                    CellKind::Lstm => AnyCell::Lstm(LstmCellConfig::new(d_in, h).init(device)),
                    CellKind::OnLstm => {
                        AnyCell::OnLstm(OnLstmCellConfig::new(d_in, h, k).init(device))
                    }
                    CellKind::FastTrees => {
                        AnyCell::FastTrees(FastTreesCellConfig::new(d_in, h, k).init(device))
                    }
                    CellKind::FasterFastTrees => AnyCell::FasterFastTrees(
                        FasterFastTreesCellConfig::new(d_in, h, k).init(device),
                    ),
                    CellKind::ConvFastTrees => AnyCell::ConvFastTrees(
                        ConvFastTreesCellConfig::new(d_in, h, k)
                            .with_kernel_size(self.kernel_size)
                            .init(device),
                    ),
                }
            })
            .collect();
        RecurrentStack {
            layers,
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

/// A multi-layer stack of one kind of recurrent cell, with dropout between layers.
#[derive(Module, Debug)]
pub struct RecurrentStack<B: Backend> {
    /// The layers, bottom first.
    pub layers: Vec<AnyCell<B>>,
    /// Dropout between layers (inactive without autodiff, e.g. after `model.valid()`).
    pub dropout: Dropout,
}

/// The result of running a [`RecurrentStack`].
#[derive(Debug, Clone)]
pub struct StackOutput<B: Backend> {
    /// The top layer's `h_t` `[batch, time, H]`; zeros at padded positions.
    pub outputs: Tensor<B, 3>,
    /// Each layer's state after each example's last real step, bottom first.
    pub last: Vec<LstmState<B, 2>>,
    /// Each layer's syntactic distances `[batch, time]`, bottom first; empty for the LSTM.
    pub distances: Vec<Tensor<B, 2>>,
}

impl<B: Backend> RecurrentStack<B> {
    /// Runs every layer over the batch.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, d_input]`
    /// - `lengths`: `batch` entries, each `≤ time` (`None`: all `time`)
    /// - `init`: one `[batch, H]` state per layer (`None`: zeros); pass the previous segment's
    ///   `last` (detached) for truncated BPTT
    /// - output: see [`StackOutput`]
    ///
    /// # Panics
    /// If `init` has the wrong number of layers or `lengths` is malformed.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        lengths: Option<&[usize]>,
        init: Option<Vec<LstmState<B, 2>>>,
    ) -> StackOutput<B> {
        let mut init = init.map(|s| {
            assert_eq!(s.len(), self.layers.len(), "one initial state per layer");
            s.into_iter()
        });
        let mut input = x;
        let mut last = Vec::with_capacity(self.layers.len());
        let mut distances = Vec::new();
        for (l, layer) in self.layers.iter().enumerate() {
            if l > 0 {
                input = self.dropout.forward(input);
            }
            let state = init.as_mut().and_then(|it| it.next());
            let out = run_sequence(layer, input, lengths, state);
            input = out.outputs;
            last.push(out.last);
            distances.extend(out.distances);
        }
        StackOutput {
            outputs: input,
            last,
            distances,
        }
    }

    /// Hidden width of the top layer.
    pub fn d_hidden(&self) -> usize {
        self.layers.last().map_or(0, |l| l.d_hidden())
    }
}
