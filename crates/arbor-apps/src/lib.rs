//! # arbor-apps
//!
//! arbor's programs, as library code so they can be tested: each `examples/<name>.rs` of the
//! `arbor` crate parses its arguments and calls `run` here. Every program owns its command-line
//! arguments (clap), its data loading, its backend job and its printed report; the models,
//! tasks and engine come from the crates below (see `docs/architecture.md`).
//!
//! The crate also builds the corpus tools `arbor-download` and `arbor-parse-f1`.

#![warn(missing_docs)]

pub mod cli;
pub mod common;
pub mod listops;
pub mod logic;
pub mod ptb_lm;
pub mod r2d2;
pub mod result;
pub mod snli;
pub mod sst;
