//! Gumbel Tree-LSTM: padding invariance, agreement with a per-example reference, leaves,
//! determinism, reproducible sampling, gradients, and tree correctness.

#[path = "../common/mod.rs"]
mod common;

mod attention;
mod encode;
mod gradients;
mod leaves;
mod reference;
mod support;
mod trees;
