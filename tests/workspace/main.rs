//! The cross-crate tests: the programs end to end (`snli`, `logic`, `listops`, `r2d2`), the out
//! folder's rules, kill -9 and resume, and the learning tests.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod kill_resume;
mod learning;
mod listops_cli;
mod logic_cli;
mod out_folder;
mod r2d2_cli;
mod snli_cli;
