//! The programs' shared flags and errors: bad flags name the flag and the problem; the engine's
//! flags reach `TrainConfig` as the table says.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod bad_flags;
mod engine_flag_table;
mod engine_flags;
mod engine_robustness_flags;
