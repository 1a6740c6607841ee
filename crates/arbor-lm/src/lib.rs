//! # arbor-lm
//!
//! Word-level language models (docs/models.md §6) over any recurrent cell of `arbor-cells` (LSTM,
//! ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees), with the AWD-LSTM recipe (Merity et al.
//! 2018) as the ON-LSTM code uses it:
//!
//! | piece | where |
//! | --- | --- |
//! | embedding ↔ decoder weight tying, last layer as wide as the embedding | [`RnnLm`] |
//! | locked (variational) dropout on inputs, between layers, on outputs | [`locked_dropout`] |
//! | embedding dropout (whole word rows) | [`embedding_dropout`] |
//! | DropConnect on the hidden-to-hidden weights | [`weight_drop`] |
//! | activation regularisation (AR) and temporal AR (TAR) | [`LmOutput::ar_tar`] |
//! | truncated BPTT: state carried across segments and detached | [`LmState`], [`Batchified`] |
//!
//! Every regulariser is active only with autodiff (`B::ad_enabled`), so `model.valid()`
//! evaluates deterministically.

#![warn(missing_docs)]

mod data;
mod model;
mod regularize;

pub use data::{ids_tensor, Batchified, Segment};
pub use model::{token_nll, LayerState, LmOutput, LmState, Regularisers, RnnLm, RnnLmConfig};
pub use regularize::{embedding_dropout, locked_dropout, weight_drop};
