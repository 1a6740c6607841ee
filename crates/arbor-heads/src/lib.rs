//! # arbor-heads
//!
//! Task heads on top of any [`SentenceEncoder`](arbor_encoders::SentenceEncoder)
//! (docs/models.md §6):
//!
//! - [`NliClassifier`]: one shared encoder for premise and hypothesis, features
//!   `[u; v; u−v; u⊙v]` (or `|u−v|`), an MLP with ReLU, dropout and optional batch norm.
//! - [`SentenceClassifier`]: encoder → MLP → classes (SST-2).
//! - [`Mlp`], [`TokenEmbedding`] (optionally from pretrained vectors), and the loss and
//!   prediction helpers [`cross_entropy`], [`predictions`], [`count_correct`]
//!   ([`correct_on_device`] without the read).

#![warn(missing_docs)]

mod batch;
mod classifier;
mod embedding;
mod loss;
mod mlp;
mod nli;

pub use batch::SentenceBatch;
pub use classifier::{ClassifierOutput, SentenceClassifier, SentenceClassifierConfig};
pub use embedding::{TokenEmbedding, TokenEmbeddingConfig};
pub use loss::{correct_on_device, count_correct, cross_entropy, predictions};
pub use mlp::{Mlp, MlpConfig};
pub use nli::{NliClassifier, NliClassifierConfig, NliFeatures, NliOutput};
