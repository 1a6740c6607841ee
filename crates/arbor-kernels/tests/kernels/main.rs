//! The kernels: every fused op against its plain-op reference (`fused`), `linear` and `layer_norm`
//! against Burn's, the counting backend, contiguous copies and zero-size tensors.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod contiguous;
mod counting;
mod fused;
mod layer_norm;
mod linear;
mod zeros;
