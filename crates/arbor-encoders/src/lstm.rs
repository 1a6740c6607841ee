//! The plain LSTM baseline encoder.

use arbor_cells::{CellKind, RecurrentStack, RecurrentStackConfig, StackOutput};
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
}

/// A left-to-right (multi-layer) LSTM; the sentence vector is the top layer's `h` after each
/// sentence's last real word.
#[derive(Module, Debug)]
pub struct LstmEncoder<B: Backend> {
    /// The LSTM layers (cells with gate order `i, f, g, o`).
    pub stack: RecurrentStack<B>,
}

impl LstmEncoderConfig {
    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `n_layers` is 0.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LstmEncoder<B> {
        LstmEncoder {
            stack: RecurrentStackConfig::new(CellKind::Lstm, self.d_input, self.d_hidden)
                .with_n_layers(self.n_layers)
                .with_dropout(self.dropout)
                .init(device),
        }
    }
}

impl<B: Backend> LstmEncoder<B> {
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
    /// outputs. The LSTM makes no discrete decisions, so `decisions` is ignored.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, H]`; `tokens`: `[batch, time, H]`
    fn encode(&self, input: EncoderInput<B>, _decisions: Decisions<'_>) -> EncoderOutput<B> {
        let mut out = self.forward(input.embeddings, &input.lengths);
        let top = out.last.pop().expect("a stack has at least one layer");
        EncoderOutput {
            sentence: top.h,
            tokens: Some(out.outputs),
            trees: None,
            aux_loss: None,
        }
    }
}
