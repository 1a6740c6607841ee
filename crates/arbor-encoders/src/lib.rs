//! # arbor-encoders
//!
//! Sentence encoders behind one interface, [`SentenceEncoder`]: token embeddings and lengths in,
//! a sentence vector (plus optional per-token states, induced trees and an auxiliary loss) out.

#![warn(missing_docs)]

mod encoder;

pub use encoder::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

mod any;
mod gumbel_tree_lstm;
mod lstm;
pub mod r2d2;
pub mod spinn;
mod transformer;

pub use any::{Encoder, EncoderConfig, EncoderKind, EncoderOptions, TRANSFORMER_EMBED_INIT_STD};
pub use gumbel_tree_lstm::{
    BiLstmLeaf, CandidateSchedule, GumbelSettings, GumbelTreeLstm, GumbelTreeLstmConfig,
    GumbelTreeOutput, Leaf, LeafKind,
};
pub use lstm::{default_chunk_size, LstmEncoder, LstmEncoderConfig, Pooling};
pub use r2d2::{R2d2, R2d2Config, R2d2Lm, R2d2LmConfig};
pub use spinn::{ClassifierInput, Spinn, SpinnConfig, SpinnError, SpinnOutput, SpinnVariant};
pub use transformer::{
    TransformerPooling, TransformerSentenceEncoder, TransformerSentenceEncoderConfig,
};
