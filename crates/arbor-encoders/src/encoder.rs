//! The interface every sentence encoder implements.

use arbor_cells::ArborBackend;
use arbor_cells::GumbelSampler;
use arbor_data::tree::{BinaryTree, Transition};
use burn::prelude::*;

/// A batch of sentences to encode.
#[derive(Debug, Clone)]
pub struct EncoderInput<B: Backend> {
    /// Token embeddings, padded at the end of each sentence: `[batch, time, d_input]`.
    pub embeddings: Tensor<B, 3>,
    /// Real length of each sentence (`1 ≤ len ≤ time`).
    pub lengths: Vec<usize>,
    /// Gold SHIFT/REDUCE transitions of each sentence (unpadded, `2·len − 1` each), for
    /// encoders that follow given trees (SPINN). Others ignore them.
    pub transitions: Option<Vec<Vec<Transition>>>,
}

impl<B: ArborBackend> EncoderInput<B> {
    /// Embeddings and lengths, without transitions.
    pub fn new(embeddings: Tensor<B, 3>, lengths: Vec<usize>) -> Self {
        Self {
            embeddings,
            lengths,
            transitions: None,
        }
    }

    /// Adds gold transitions.
    pub fn with_transitions(mut self, transitions: Vec<Vec<Transition>>) -> Self {
        self.transitions = Some(transitions);
        self
    }
}

/// How an encoder makes its discrete structural decisions.
#[derive(Debug)]
pub enum Decisions<'a> {
    /// Training: straight-through Gumbel-softmax with noise from this sampler.
    Sample(&'a mut GumbelSampler),
    /// Evaluation: plain argmax, no noise; the result is deterministic.
    Argmax,
}

impl Decisions<'_> {
    /// Whether this is evaluation mode.
    pub fn is_argmax(&self) -> bool {
        matches!(self, Decisions::Argmax)
    }
}

/// What an encoder returns.
#[derive(Debug, Clone)]
pub struct EncoderOutput<B: Backend> {
    /// One vector per sentence: `[batch, d_output]`.
    pub sentence: Tensor<B, 2>,
    /// Per-token states `[batch, time, d]` (zeros at padding), where the encoder has them.
    pub tokens: Option<Tensor<B, 3>>,
    /// The tree the encoder built (or followed) for each sentence, where it builds one.
    pub trees: Option<Vec<BinaryTree>>,
    /// An auxiliary loss the encoder wants added to the task loss (e.g. SPINN's transition
    /// loss, already weighted); `None` when there is none.
    pub aux_loss: Option<Tensor<B, 1>>,
}

impl<B: ArborBackend> EncoderOutput<B> {
    /// An output with only the sentence vectors.
    pub fn sentence(sentence: Tensor<B, 2>) -> Self {
        Self {
            sentence,
            tokens: None,
            trees: None,
            aux_loss: None,
        }
    }
}

/// A sentence encoder: token embeddings and lengths in, one vector per sentence out.
///
/// Implementations batch by structure and give every sentence exactly what it would get alone,
/// whatever the padding of the batch.
pub trait SentenceEncoder<B: ArborBackend> {
    /// Width of [`EncoderOutput::sentence`].
    fn d_output(&self) -> usize;

    /// Encodes a batch.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, d_output]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B>;
}
