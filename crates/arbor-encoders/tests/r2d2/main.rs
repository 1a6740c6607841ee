//! R2D2: pruned chart vs exhaustive CKY, a hand-checked pruning walk-through, linear
//! composition counts, padding invariance, gradients.

#[path = "../common/mod.rs"]
mod common;

mod chart;
mod encoder;
mod lm;
mod pruning;
mod reference;
mod support;
