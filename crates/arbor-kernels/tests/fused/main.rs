//! Every fused op equals its plain-op reference in values and gradients, on Flex and NdArray,
//! with contiguous and strided inputs; the autodiff nodes pass a finite-difference check in f64.
//!
//! One module per fused op (as `src/ops/` lays them out); `support` holds the shared fixtures.

mod activation;
mod adjacent;
mod argmax_tree;
mod gated_cell;
mod linear_scan;
mod lstm;
mod ordered_cell;
mod rows;
mod select_mix;
mod support;
mod thin_stack;
mod window;
