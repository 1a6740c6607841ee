//! The engine's robustness: warm-up, plateau decay, clipping, time budget, scheduled
//! checkpoints, the stop on a non-finite loss or gradient, the resume checks, training curves,
//! and a checkpoint loader that refuses damaged files without panicking.

mod checkpoints;
mod curves;
mod fuzz;
mod learning_rate;
mod non_finite;
mod resume;
mod support;
