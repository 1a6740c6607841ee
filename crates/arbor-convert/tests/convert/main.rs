//! Weight import: the converters against PyTorch fixtures (ours and the authors' modules), the
//! programs, safetensors, and untrusted files refused within bounds. `common` holds the shared
//! fixtures.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod authors;
mod authors_gumbel_sst;
mod authors_r2d2;
mod authors_rnn_lm;
mod authors_spinn;
mod common;
mod gumbel;
mod programs;
mod r2d2;
mod rnn_lm;
mod safetensors;
mod spinn;
mod untrusted;
