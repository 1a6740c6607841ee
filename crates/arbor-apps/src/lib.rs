//! The examples' programs, as library code so they can be tested: each `examples/<name>.rs`
//! parses its arguments and calls `run` here.

pub mod common;
pub mod listops;
pub mod logic;
pub mod ptb_lm;
pub mod r2d2;
pub mod snli;
pub mod sst;
