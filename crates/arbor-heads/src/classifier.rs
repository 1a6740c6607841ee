use arbor_cells::ArborBackend;
use arbor_data::tree::BinaryTree;
use arbor_encoders::{Decisions, EncoderInput, SentenceEncoder};
use burn::prelude::*;

use crate::{Mlp, MlpConfig, SentenceBatch, TokenEmbedding};

/// Configuration of a [`SentenceClassifier`] (the encoder is built separately).
#[derive(Config, Debug)]
pub struct SentenceClassifierConfig {
    /// MLP hidden width.
    pub d_mlp: usize,
    /// Number of classes (2 for SST-2).
    #[config(default = 2)]
    pub n_classes: usize,
    /// MLP hidden layers.
    #[config(default = 1)]
    pub n_mlp_hidden: usize,
    /// Dropout on the embeddings and in the MLP.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Batch norm in the MLP.
    #[config(default = false)]
    pub batch_norm: bool,
}

/// Single-sentence classifier (SST-2): encoder → MLP → classes.
#[derive(Module, Debug)]
pub struct SentenceClassifier<B: Backend, E> {
    /// Word embeddings.
    pub embedding: TokenEmbedding<B>,
    /// The sentence encoder.
    pub encoder: E,
    /// The classifier MLP.
    pub mlp: Mlp<B>,
    /// Dropout on the word embeddings.
    pub dropout: burn::nn::Dropout,
}

/// What the sentence classifier returns.
#[derive(Debug, Clone)]
pub struct ClassifierOutput<B: Backend> {
    /// Class logits `[batch, n_classes]`.
    pub logits: Tensor<B, 2>,
    /// The trees, where the encoder builds them.
    pub trees: Option<Vec<BinaryTree>>,
    /// The encoder's auxiliary loss, if any.
    pub aux_loss: Option<Tensor<B, 1>>,
}

impl SentenceClassifierConfig {
    /// Builds the classifier around `encoder` on `device`.
    pub fn init<B: ArborBackend, E: SentenceEncoder<B>>(
        &self,
        encoder: E,
        embedding: TokenEmbedding<B>,
        device: &B::Device,
    ) -> SentenceClassifier<B, E> {
        let mlp = MlpConfig::new(encoder.d_output(), self.d_mlp, self.n_classes)
            .with_n_hidden(self.n_mlp_hidden)
            .with_dropout(self.dropout)
            .with_batch_norm(self.batch_norm)
            .init(device);
        SentenceClassifier {
            embedding,
            encoder,
            mlp,
            dropout: burn::nn::DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: ArborBackend, E: SentenceEncoder<B>> SentenceClassifier<B, E> {
    /// # Shapes
    /// - `batch.ids`: `[batch, time]`
    /// - output `logits`: `[batch, n_classes]`
    pub fn forward(
        &self,
        batch: SentenceBatch<B>,
        decisions: Decisions<'_>,
    ) -> ClassifierOutput<B> {
        let x = self.dropout.forward(self.embedding.forward(batch.ids));
        let mut input = EncoderInput::new(x, batch.lengths);
        input.transitions = batch.transitions;
        let out = self.encoder.encode(input, decisions);
        ClassifierOutput {
            logits: self.mlp.forward(out.sentence),
            trees: out.trees,
            aux_loss: out.aux_loss,
        }
    }
}
