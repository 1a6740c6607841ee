//! Gumbel Tree-LSTM (Choi, Yoo & Lee 2018; docs/models.md §2).
//!
//! Bottom-up, every example in the batch advances one layer at a time: all adjacent pairs of
//! the current layer are composed in one batched Tree-LSTM call, one candidate parent is
//! selected per example (straight-through Gumbel-softmax while training, argmax at
//! evaluation), and the layer shrinks by one node.
//!
//! The files: `config` ([`GumbelTreeLstmConfig`], [`GumbelSettings`]), `leaf` (how words become
//! leaves: [`LeafKind`], [`Leaf`], [`BiLstmLeaf`]), `encoder` ([`GumbelTreeLstm`]: the layers,
//! the scores, intra-attention and the encoder interface), `selection` (each layer's selection,
//! and [`GumbelTreeOutput`], the selections and the trees read from them), `carry` (how a layer
//! gets its candidate parents: [`CandidateSchedule`] and the carried candidates).

mod carry;
mod config;
mod encoder;
mod leaf;
mod selection;
#[cfg(test)]
mod tests;

pub use carry::CandidateSchedule;
pub use config::{GumbelSettings, GumbelTreeLstmConfig};
pub use encoder::GumbelTreeLstm;
pub use leaf::{BiLstmLeaf, Leaf, LeafKind};
pub use selection::GumbelTreeOutput;
