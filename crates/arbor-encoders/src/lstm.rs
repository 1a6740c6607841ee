//! Left-to-right recurrent encoders: the LSTM baseline and the ON-LSTM/FastTrees family.

use arbor_cells::{AnyCell, CellKind, RecurrentStack, RecurrentStackConfig, StackOutput};
use arbor_data::tree::BinaryTree;
use burn::prelude::*;

use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

/// Configuration of an [`LstmEncoder`].
#[derive(Config, Debug)]
pub struct LstmEncoderConfig {
    /// Width of the word embeddings.
    pub d_input: usize,
    /// Hidden width of every layer.
    pub d_hidden: usize,
    /// Number of stacked layers.
    #[config(default = 1)]
    pub n_layers: usize,
    /// Dropout between layers (not after the last one).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// The recurrent cell of every layer.
    #[config(default = "CellKind::Lstm")]
    pub cell: CellKind,
    /// Neurons per master-gate chunk for the cumax cells; 0 picks the largest divisor of
    /// `d_hidden` that is at most 10 (ON-LSTM's usual chunk size).
    #[config(default = 0)]
    pub chunk_size: usize,
}

/// The chunk size used for `d_hidden` when none is given: the largest divisor ≤ 10.
pub fn default_chunk_size(d_hidden: usize) -> usize {
    (1..=10.min(d_hidden.max(1)))
        .rev()
        .find(|c| d_hidden.is_multiple_of(*c))
        .unwrap_or(1)
}

/// A left-to-right multi-layer recurrent encoder over any cell of `arbor-cells` (LSTM, ON-LSTM,
/// FastTrees, Faster FastTrees, Conv FastTrees); the sentence vector is the top layer's `h` after
/// each sentence's last real word.
#[derive(Module, Debug)]
pub struct LstmEncoder<B: Backend> {
    /// The layers.
    pub stack: RecurrentStack<B>,
}

impl LstmEncoderConfig {
    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LstmEncoder<B> {
        LstmEncoder {
            stack: RecurrentStackConfig::new(self.cell, self.d_input, self.d_hidden)
                .with_n_layers(self.n_layers)
                .with_dropout(self.dropout)
                .with_chunk_size(match self.chunk_size {
                    0 => default_chunk_size(self.d_hidden),
                    c => c,
                })
                .init(device),
        }
    }
}

impl<B: Backend> LstmEncoder<B> {
    /// The cell of the layers.
    pub fn cell(&self) -> CellKind {
        match self.stack.layers.first() {
            Some(AnyCell::OnLstm(_)) => CellKind::OnLstm,
            Some(AnyCell::FastTrees(_)) => CellKind::FastTrees,
            Some(AnyCell::FasterFastTrees(_)) => CellKind::FasterFastTrees,
            Some(AnyCell::ConvFastTrees(_)) => CellKind::ConvFastTrees,
            _ => CellKind::Lstm,
        }
    }

    /// Runs the stack over the batch.
    ///
    /// # Shapes
    /// - `embeddings`: `[batch, time, d_input]`, padded at the end of each sentence
    /// - `lengths`: `batch` entries, each `≤ time`
    /// - output: see [`StackOutput`] (`outputs` `[batch, time, H]`, zeros at padding)
    pub fn forward(&self, embeddings: Tensor<B, 3>, lengths: &[usize]) -> StackOutput<B> {
        self.stack.forward(embeddings, Some(lengths), None)
    }
}

impl<B: Backend> SentenceEncoder<B> for LstmEncoder<B> {
    fn d_output(&self) -> usize {
        self.stack.d_hidden()
    }

    /// Encodes a batch: `sentence` is the top layer's last real `h`, `tokens` the top layer's
    /// outputs. Recurrent cells make no discrete decisions, so `decisions` is ignored.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, H]`; `tokens`: `[batch, time, H]`
    ///
    /// For the cumax cells in evaluation mode (`Decisions::Argmax`), `trees` holds the trees read
    /// from the top layer's syntactic distances by ON-LSTM's split-at-maximum rule
    /// ([`BinaryTree::from_distances`]); they are not computed in training mode, which would
    /// cost a device read per batch.
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let lengths = input.lengths;
        let mut out = self.forward(input.embeddings, &lengths);
        let top = out.last.pop().expect("a stack has at least one layer");
        let trees = match (decisions.is_argmax(), out.distances.pop()) {
            (true, Some(d)) => distance_trees(d, &lengths),
            _ => None,
        };
        EncoderOutput {
            sentence: top.h,
            tokens: Some(out.outputs),
            trees,
            aux_loss: None,
        }
    }
}

/// Trees from syntactic distances `[batch, time]`, one per example over its real words.
pub(crate) fn distance_trees<B: Backend>(
    distances: Tensor<B, 2>,
    lengths: &[usize],
) -> Option<Vec<BinaryTree>> {
    let [_, time] = distances.dims();
    let values = distances
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .ok()?;
    lengths
        .iter()
        .enumerate()
        .map(|(b, &len)| BinaryTree::from_distances(&values[b * time..b * time + len]))
        .collect()
}
