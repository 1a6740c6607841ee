//! Left-to-right recurrent encoders: the LSTM baseline and the ON-LSTM/FastTrees family.

use arbor_cells::ArborBackend;
use arbor_cells::{length_mask, CellKind, RecurrentStack, RecurrentStackConfig, StackOutput};
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
    /// How the sentence vector is read from the top layer's outputs.
    #[config(default = "Pooling::Last")]
    pub pooling: Pooling,
}

/// How a recurrent encoder turns its top layer's outputs `h_1 … h_n` into a sentence vector.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Pooling {
    /// `h_n`, the output after the last real word (the default).
    #[default]
    Last,
    /// `(1/n) Σ_t h_t` over the real words.
    Mean,
    /// The element-wise maximum of `h_t` over the real words.
    Max,
}

arbor_cells::value_enum_names!(Pooling, "pooling");

impl Pooling {
    /// Pools top-layer outputs over the real positions.
    ///
    /// # Shapes
    /// - `outputs`: `[batch, time, H]` (zeros at padding, as the runner returns them)
    /// - `last`: `[batch, H]`, the output after each example's last real word
    /// - `lengths`: `batch` entries, each in `1..=time`
    /// - output: `[batch, H]`
    pub fn apply<B: ArborBackend>(
        self,
        outputs: Tensor<B, 3>,
        last: Tensor<B, 2>,
        lengths: &[usize],
    ) -> Tensor<B, 2> {
        let [batch, time, h] = outputs.dims();
        let device = outputs.device();
        match self {
            Pooling::Last => last,
            Pooling::Mean => {
                let inv: Vec<f32> = lengths.iter().map(|&l| 1.0 / l.max(1) as f32).collect();
                let inv = Tensor::<B, 1>::from_floats(inv.as_slice(), &device).reshape([batch, 1]);
                // Padded positions hold zeros, so the plain sum is the sum over real words.
                outputs.sum_dim(1).reshape([batch, h]).mul(inv)
            }
            Pooling::Max => {
                let pad = length_mask::<B>(lengths, time, &device)
                    .bool_not()
                    .unsqueeze_dim::<3>(2)
                    .expand([batch, time, h]);
                outputs
                    .mask_fill(pad, f32::NEG_INFINITY)
                    .max_dim(1)
                    .reshape([batch, h])
            }
        }
    }
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
    /// How the sentence vector is read from the top layer.
    pub pooling: Pooling,
}

impl LstmEncoderConfig {
    /// Checks the settings: those of the recurrent stack it builds (with the chunk size
    /// resolved) and a dropout in `[0, 1)`.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        arbor_cells::check::dropout("dropout", self.dropout)?;
        RecurrentStackConfig::new(self.cell, self.d_input, self.d_hidden)
            .with_n_layers(self.n_layers)
            .with_chunk_size(match self.chunk_size {
                0 => default_chunk_size(self.d_hidden),
                c => c,
            })
            .validate()
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> LstmEncoder<B> {
        LstmEncoder {
            stack: RecurrentStackConfig::new(self.cell, self.d_input, self.d_hidden)
                .with_n_layers(self.n_layers)
                .with_dropout(self.dropout)
                .with_chunk_size(match self.chunk_size {
                    0 => default_chunk_size(self.d_hidden),
                    c => c,
                })
                .init(device),
            pooling: self.pooling,
        }
    }
}

impl<B: ArborBackend> LstmEncoder<B> {
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

impl<B: ArborBackend> SentenceEncoder<B> for LstmEncoder<B> {
    fn d_output(&self) -> usize {
        self.stack.d_hidden()
    }

    /// Encodes a batch: `sentence` is the top layer's last real `h` (or its mean or maximum over
    /// the real words, as [`Pooling`] says), `tokens` the top layer's outputs. Recurrent cells make no discrete decisions, so `decisions` is ignored.
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
        let sentence = self.pooling.apply(out.outputs.clone(), top.h, &lengths);
        EncoderOutput {
            sentence,
            tokens: Some(out.outputs),
            trees,
            aux_loss: None,
        }
    }
}

/// Trees from syntactic distances `[batch, time]`, one per example over its real words.
pub(crate) fn distance_trees<B: ArborBackend>(
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
