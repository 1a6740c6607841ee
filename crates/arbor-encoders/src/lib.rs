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
mod transformer;

pub use any::{Encoder, EncoderConfig, EncoderKind};
pub use gumbel_tree_lstm::{
    GumbelTreeLstm, GumbelTreeLstmConfig, GumbelTreeOutput, Leaf, LeafKind,
};
pub use lstm::{default_chunk_size, LstmEncoder, LstmEncoderConfig};
pub use transformer::{Pooling, TransformerSentenceEncoder, TransformerSentenceEncoderConfig};
