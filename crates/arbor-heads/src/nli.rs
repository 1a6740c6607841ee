use arbor_cells::ArborBackend;
use arbor_data::tree::BinaryTree;
use arbor_encoders::{Decisions, EncoderInput, SentenceEncoder};
use burn::prelude::*;

use crate::{Mlp, MlpConfig, SentenceBatch, TokenEmbedding};

/// Which pair features feed the MLP.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum NliFeatures {
    /// `[u; v; u − v; u ⊙ v]` (Mou et al. 2016; the default).
    Difference,
    /// `[u; v; |u − v|; u ⊙ v]`.
    AbsDifference,
}

/// Configuration of an [`NliClassifier`] (the encoder is built separately and passed in).
#[derive(Config, Debug)]
pub struct NliClassifierConfig {
    /// Vocabulary size.
    pub n_tokens: usize,
    /// Word embedding width (the encoder's input width).
    pub d_embed: usize,
    /// MLP hidden width.
    pub d_mlp: usize,
    /// Number of labels (3 for SNLI, 7 for the logic data).
    #[config(default = 3)]
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
    /// Pair features.
    #[config(default = "NliFeatures::Difference")]
    pub features: NliFeatures,
}

/// Natural-language-inference pair classifier (docs/models.md §6): one encoder shared by premise
/// and hypothesis, pair features, an MLP and a softmax over the labels.
#[derive(Module, Debug)]
pub struct NliClassifier<B: Backend, E> {
    /// Word embeddings.
    pub embedding: TokenEmbedding<B>,
    /// The shared sentence encoder.
    pub encoder: E,
    /// The classifier MLP.
    pub mlp: Mlp<B>,
    /// Dropout on the word embeddings.
    pub dropout: burn::nn::Dropout,
    /// Whether the difference feature is `|u − v|`.
    pub abs_difference: bool,
}

/// What the pair classifier returns.
#[derive(Debug, Clone)]
pub struct NliOutput<B: Backend> {
    /// Label logits `[batch, n_classes]`.
    pub logits: Tensor<B, 2>,
    /// Trees of the premises and hypotheses, where the encoder builds them.
    pub trees: Option<(Vec<BinaryTree>, Vec<BinaryTree>)>,
    /// The encoder's auxiliary loss, if any.
    pub aux_loss: Option<Tensor<B, 1>>,
}

impl NliClassifierConfig {
    /// Builds the classifier around `encoder` on `device`.
    pub fn init<B: ArborBackend, E: SentenceEncoder<B>>(
        &self,
        encoder: E,
        embedding: TokenEmbedding<B>,
        device: &B::Device,
    ) -> NliClassifier<B, E> {
        let mlp = MlpConfig::new(4 * encoder.d_output(), self.d_mlp, self.n_classes)
            .with_n_hidden(self.n_mlp_hidden)
            .with_dropout(self.dropout)
            .with_batch_norm(self.batch_norm)
            .init(device);
        NliClassifier {
            embedding,
            encoder,
            mlp,
            dropout: burn::nn::DropoutConfig::new(self.dropout).init(),
            abs_difference: self.features == NliFeatures::AbsDifference,
        }
    }
}

impl<B: ArborBackend, E: SentenceEncoder<B>> NliClassifier<B, E> {
    /// Classifies premise/hypothesis pairs. Both sides go through the encoder in one call
    /// (`pairs` holds the premises first, then the hypotheses, `2·batch` sentences).
    ///
    /// # Shapes
    /// - `pairs.ids`: `[2·batch, time]`
    /// - output `logits`: `[batch, n_classes]`
    ///
    /// # Panics
    /// If `pairs` holds an odd number of sentences.
    pub fn forward(&self, pairs: SentenceBatch<B>, decisions: Decisions<'_>) -> NliOutput<B> {
        let n = pairs.len();
        assert!(
            n.is_multiple_of(2),
            "pairs must hold premises then hypotheses"
        );
        let x = self.dropout.forward(self.embedding.forward(pairs.ids));
        let mut input = EncoderInput::new(x, pairs.lengths);
        input.transitions = pairs.transitions;
        let out = self.encoder.encode(input, decisions);
        let d = out.sentence.dims()[1];
        let u = out.sentence.clone().slice([0..n / 2, 0..d]);
        let v = out.sentence.slice([n / 2..n, 0..d]);
        let diff = u.clone().sub(v.clone());
        let diff = if self.abs_difference {
            diff.abs()
        } else {
            diff
        };
        let features = Tensor::cat(vec![u.clone(), v.clone(), diff, u.mul(v)], 1);
        let trees = out.trees.map(|mut t| {
            let hyp = t.split_off(n / 2);
            (t, hyp)
        });
        NliOutput {
            logits: self.mlp.forward(features),
            trees,
            aux_loss: out.aux_loss,
        }
    }
}
