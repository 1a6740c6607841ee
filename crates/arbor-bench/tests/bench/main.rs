//! The benchmark's programs: the quick run, the PyTorch parity checks and the GPU check's command line.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod gpu_check_cli;
mod parity;
mod quick;
