//! The cells: properties, gradients against central differences, backends agreeing, the scan
//! against the step, and precomputed input projections. Seeded initialisation goes through
//! `common::seeded`, which holds the one lock of this binary.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod backends;
mod common;
mod gradients;
mod properties;
mod scan;
mod step_input;
