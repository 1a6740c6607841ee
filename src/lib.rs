//! # arbor
//!
//! Tree-inducing sentence encoders on [Burn](https://burn.dev): SPINN, Gumbel Tree-LSTM, R2D2,
//! ON-LSTM/FastTrees and Transformer+FastTrees blocks, with the heads, tasks and benchmark they
//! are judged on. This facade re-exports the member crates:
//!
//! - [`blocks`]: the Transformer encoder layer and stack with the optional FastTrees gate.
//! - [`cells`]: cumax, straight-through Gumbel-softmax, the binary Tree-LSTM composition and the
//!   recurrent cells (LSTM, ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees) with a
//!   padded-sequence runner.
//! - [`data`]: trees, transitions, corpus readers, vocabularies, batching, downloads and the
//!   evaluation metrics (accuracy, perplexity, PPPL, unsupervised parsing F1). Burn-free.
//! - [`device`]: picking a backend from a `--device` string.
//!
//! Everything model-related is generic over `B: Backend`; the backends are cargo features:
//! `flex` (default, pure-Rust CPU), `ndarray`, `cuda`.

#![warn(missing_docs)]

pub use arbor_blocks as blocks;
pub use arbor_cells as cells;
pub use arbor_data as data;
pub use arbor_encoders as encoders;
pub use arbor_heads as heads;
pub use arbor_lm as lm;
pub use arbor_train as train;
pub use burn;

pub mod apps;
pub mod cli;
pub mod device;
pub mod tasks;
