//! The R2D2 sentence encoder: leaves → pruned differentiable CKY chart → root vector and tree.

use arbor_cells::ArborBackend;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use super::chart::{Chart, ChartConfig};
use super::composition::{Composition, CompositionConfig};
use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

/// Configuration of an [`R2d2`] encoder.
#[derive(Config, Debug)]
pub struct R2d2Config {
    /// Width of the input embeddings (projected to the composition width when different).
    pub d_input: usize,
    /// The composition function (its `d_model` is the model width `D`).
    pub composition: CompositionConfig,
    /// Pruning window `m`.
    #[config(default = 4)]
    pub window: usize,
    /// Pruned tree induction (`false`: exhaustive CKY).
    #[config(default = true)]
    pub pruning: bool,
    /// Gumbel-softmax temperature τ.
    #[config(default = 1.0)]
    pub tau: f64,
}

/// R2D2 (Hu et al. 2021) as a sentence encoder: a CKY chart whose cells are composed by a
/// recursive Transformer ([`Composition`]), pruned so that compositions grow linearly with the
/// sentence length. The sentence vector is the root cell `e_0(n−1)`; the tree follows the best
/// split of every cell from the root.
#[derive(Module, Debug)]
pub struct R2d2<B: Backend> {
    /// Input projection, when `d_input ≠ d_model`.
    pub input: Option<Linear<B>>,
    /// The composition function.
    pub composition: Composition<B>,
    /// Pruning window `m`.
    pub window: usize,
    /// Whether pruning is on.
    pub pruning: bool,
    /// Gumbel-softmax temperature.
    pub tau: f64,
}

impl R2d2Config {
    /// Checks the settings: the composition function's, a positive input width, a pruning
    /// window of at least 1 and a positive temperature.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, positive};
        at_least_one("d_input", self.d_input)?;
        at_least_one("window", self.window)?;
        positive("tau", self.tau)?;
        self.composition.validate()
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If a size is 0, `n_heads` does not divide `d_model`, or `tau` is not positive.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> R2d2<B> {
        assert!(self.window >= 1, "the pruning window must be at least 1");
        assert!(self.tau > 0.0, "the temperature must be positive");
        R2d2 {
            input: (self.d_input != self.composition.d_model)
                .then(|| LinearConfig::new(self.d_input, self.composition.d_model).init(device)),
            composition: self.composition.init(device),
            window: self.window,
            pruning: self.pruning,
            tau: self.tau,
        }
    }
}

impl<B: ArborBackend> R2d2<B> {
    /// The chart settings of this encoder.
    pub fn chart_config(&self) -> ChartConfig {
        ChartConfig {
            window: self.window,
            pruning: self.pruning,
            tau: self.tau,
        }
    }

    /// Model width `D`.
    pub fn d_model(&self) -> usize {
        self.composition.d_model
    }

    /// Builds the charts of a batch.
    ///
    /// # Shapes
    /// - `embeddings`: `[batch, time, d_input]`, padded at the end
    /// - `lengths`: `batch` entries, `1 ≤ len ≤ time`
    /// - `word_ids`: per sentence, the word index of every position (see [`Chart::build`])
    pub fn forward(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        word_ids: Option<&[Vec<usize>]>,
        decisions: Decisions<'_>,
    ) -> Chart<B> {
        self.forward_with_tokens(embeddings, lengths, word_ids, decisions, None)
    }

    /// [`R2d2::forward`] with the composition's `[CLS]`, `[SUM]`, `[MASK]` vectors taken from
    /// `tokens` (`None`: the composition's own), see [`Composition::with_task_tokens`].
    ///
    /// # Shapes
    /// - as [`R2d2::forward`]; `tokens`: `[3, D]`
    pub fn forward_with_tokens(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        word_ids: Option<&[Vec<usize>]>,
        decisions: Decisions<'_>,
        tokens: Option<Tensor<B, 2>>,
    ) -> Chart<B> {
        let leaves = match &self.input {
            Some(linear) => arbor_cells::linear_rows(linear, embeddings),
            None => embeddings,
        };
        let config = self.chart_config();
        match tokens {
            Some(t) => Chart::build(
                &self.composition.with_task_tokens(t),
                leaves,
                lengths,
                word_ids,
                &config,
                decisions,
            ),
            None => Chart::build(
                &self.composition.prepared(),
                leaves,
                lengths,
                word_ids,
                &config,
                decisions,
            ),
        }
    }
}

impl<B: ArborBackend> SentenceEncoder<B> for R2d2<B> {
    fn d_output(&self) -> usize {
        self.composition.d_model
    }

    /// `sentence` is the root cell, `trees` the induced trees at evaluation (in training the
    /// trees are not built: that would read the chart back from the device); no per-token
    /// states.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, D]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let evaluation = decisions.is_argmax();
        let chart = self.forward(input.embeddings, &input.lengths, None, decisions);
        EncoderOutput {
            sentence: chart.roots(),
            tokens: None,
            trees: evaluation.then(|| chart.trees()),
            aux_loss: None,
        }
    }
}
