//! # arbor
//!
//! Tree-inducing sentence encoders on [Burn](https://burn.dev): SPINN, Gumbel Tree-LSTM, R2D2,
//! ON-LSTM/FastTrees and Transformer+FastTrees blocks, with the heads, tasks and programs they
//! are judged on. This facade re-exports the member crates, lowest layer first (see
//! `docs/architecture.md`):
//!
//! - [`data`]: trees, transitions, corpus readers, vocabularies, batching, downloads and the
//!   evaluation metrics (accuracy, perplexity, PPPL, unsupervised parsing F1). Burn-free.
//! - [`cells`]: cumax, straight-through Gumbel-softmax, the binary Tree-LSTM composition and the
//!   recurrent cells (LSTM, ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees) with a
//!   padded-sequence runner.
//! - [`blocks`]: the Transformer encoder layer and stack with the optional FastTrees gate.
//! - [`lm`]: the AWD-style recurrent language model over any cell.
//! - [`encoders`]: every sentence encoder behind one configuration enum.
//! - [`heads`]: embeddings, pair and sentence classifiers, losses.
//! - [`train`]: the training engine (seeded loop, checkpoints, resume) and [`device`].
//! - [`tasks`]: the engine tasks (classification, RNN LM, R2D2 LM) and their evaluation loops.
//! - [`apps`]: the programs behind `examples/` (`snli`, `sst`, `logic`, `listops`, `ptb_lm`,
//!   `r2d2`).
//! - [`convert`]: importing the reference PyTorch weights, and arbor checkpoints to safetensors
//!   and back (`arbor-convert`).
//! - [`device`]: picking a backend from a `--device` string.
//!
//! Everything model-related is generic over `B: ArborBackend`; the backends are cargo features:
//! `flex` (default, pure-Rust CPU), `ndarray`, `cuda`.

#![warn(missing_docs)]

pub use arbor_apps as apps;
pub use arbor_blocks as blocks;
pub use arbor_cells as cells;
pub use arbor_convert as convert;
pub use arbor_data as data;
pub use arbor_encoders as encoders;
pub use arbor_heads as heads;
pub use arbor_lm as lm;
pub use arbor_tasks as tasks;
pub use arbor_train as train;
pub use arbor_train::device;
pub use burn;
