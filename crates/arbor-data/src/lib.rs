//! # arbor-data
//!
//! Trees, datasets, vocabularies, batching and evaluation metrics for arbor. The public API is
//! free of Burn: batches are plain `Vec` data that model crates turn into tensors.
//!
//! * [`tree`]: binary and labelled trees, bracketed strings, SHIFT/REDUCE transitions, spans,
//!   treebank preprocessing, word-piece conversion, rendering.
//! * [`readers`]: SNLI, SST-2 / SST trees, propositional logic, PTB / WikiText-2 LM text,
//!   WSJ `.clean` treebanks.
//! * [`vocab`]: word vocabularies and GloVe/word2vec vectors; [`wordpiece`]: BERT WordPiece
//!   through the `tokenizers` crate (loading and training).
//! * [`batch`]: length-bucketed batching, padding, SKIP-padded transitions.
//! * [`metrics`]: accuracy, perplexity, pseudo-perplexity, unsupervised parsing F1 and baselines.
//! * [`parseval`]: scoring predicted-tree files against a gold treebank (`arbor-parse-f1`).
//! * [`download`]: official corpus sources, downloader and `ensure_*` helpers.
//!
//! See `docs/data.md` for the conventions.

#![warn(missing_docs)]

pub mod batch;
pub mod download;
pub mod error;
mod io;
pub mod metrics;
pub mod parseval;
pub mod readers;
pub mod tree;
pub mod vocab;
pub mod wordpiece;

pub use error::{DataError, Loaded, ReadOptions, RecordError, TreeError};
pub use io::MAX_LINE_BYTES;
pub use tree::{BinaryTree, Span, Transition, Tree};
