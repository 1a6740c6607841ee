//! Transformer sentence encoders, with or without the FastTrees gate (`arbor-blocks`).

use arbor_blocks::{TransformerEncoder, TransformerEncoderConfig};
use arbor_cells::ArborBackend;
use burn::prelude::*;

use crate::lstm::distance_trees;
use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

/// How per-token outputs become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransformerPooling {
    /// The mean of the top layer's outputs over the sentence's real tokens (padding excluded).
    Mean,
    /// The top layer's output at the first token.
    First,
}

/// Configuration of a [`TransformerSentenceEncoder`].
#[derive(Config, Debug)]
pub struct TransformerSentenceEncoderConfig {
    /// The Transformer stack (its `fasttrees` switch selects the gated variant).
    pub stack: TransformerEncoderConfig,
    /// TransformerPooling over real tokens.
    #[config(default = "TransformerPooling::Mean")]
    pub pooling: TransformerPooling,
}

/// A Transformer encoder stack (optionally with FastTrees gates) pooled into a sentence vector.
#[derive(Module, Debug)]
pub struct TransformerSentenceEncoder<B: Backend> {
    /// The layers.
    pub stack: TransformerEncoder<B>,
    /// TransformerPooling over real tokens.
    pub pooling: TransformerPooling,
}

impl TransformerSentenceEncoderConfig {
    /// Checks the settings of the Transformer stack.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        self.stack.validate()
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// As [`TransformerEncoderConfig::init`].
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> TransformerSentenceEncoder<B> {
        TransformerSentenceEncoder {
            stack: self.stack.init(device),
            pooling: self.pooling,
        }
    }
}

impl<B: ArborBackend> SentenceEncoder<B> for TransformerSentenceEncoder<B> {
    fn d_output(&self) -> usize {
        self.stack.d_model()
    }

    /// Encodes a batch: `tokens` are the top layer's outputs (zeros at padding), `sentence` their
    /// pooling over real tokens. The encoder makes no discrete decisions; in evaluation mode
    /// (`Decisions::Argmax`) a gated encoder returns `trees` read from the top layer's gate
    /// distances `1 − mean(A)` by the split-at-maximum rule.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, D]`; `tokens`: `[batch, time, D]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let lengths = input.lengths;
        let [batch, _, _] = input.embeddings.dims();
        let device = input.embeddings.device();
        let mut out = self.stack.forward(input.embeddings, &lengths);
        let d = self.stack.d_model();
        let sentence = match self.pooling {
            TransformerPooling::Mean => {
                let lens: Vec<f32> = lengths.iter().map(|&l| l.max(1) as f32).collect();
                let lens = Tensor::<B, 2>::from_data(TensorData::new(lens, [batch, 1]), &device);
                out.outputs.clone().sum_dim(1).reshape([batch, d]) / lens
            }
            TransformerPooling::First => out.outputs.clone().narrow(1, 0, 1).reshape([batch, d]),
        };
        let trees = match (decisions.is_argmax(), out.distances.pop()) {
            (true, Some(distances)) => distance_trees(distances, &lengths),
            _ => None,
        };
        EncoderOutput {
            sentence,
            tokens: Some(out.outputs),
            trees,
            aux_loss: None,
        }
    }
}
