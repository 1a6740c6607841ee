//! A multi-layer stack of one kind of recurrent cell.

use crate::ArborBackend;
use burn::nn::{Dropout, DropoutConfig};
use burn::prelude::*;

use super::{run_sequence, AnyCell, CellKind, RecurrentCell};
use crate::{
    ConvFastTreesCellConfig, FastTreesCellConfig, FasterFastTreesCellConfig, LstmCellConfig,
    LstmState, OnLstmCellConfig,
};

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
    /// Checks the settings: at least one layer, positive widths, and for the cumax cells a
    /// `chunk_size` dividing `d_hidden` (and a Conv FastTrees `kernel_size` ≥ 1).
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        use crate::check::{at_least_one, divides};
        at_least_one("n_layers", self.n_layers)?;
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_hidden", self.d_hidden)?;
        if self.kind.has_master_gates() {
            divides("chunk_size", self.chunk_size, "d_hidden", self.d_hidden)?;
        }
        if self.kind == CellKind::ConvFastTrees {
            at_least_one("kernel_size", self.kernel_size)?;
        }
        Ok(())
    }

    /// Builds the stack on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0, or the cell's own config rejects the widths.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> RecurrentStack<B> {
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

impl<B: ArborBackend> RecurrentStack<B> {
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
