//! Running recurrent cells over padded sequences, one layer or a stack of layers.
//!
//! - `cell`: the [`RecurrentCell`] interface every cell implements and its [`CellStep`];
//! - `run`: [`run_sequence`], one cell over a padded `[batch, time, dim]` batch, and
//!   [`length_mask`];
//! - `kind`: [`CellKind`], the cells a stack can be built from, with their names;
//! - `any_cell`: [`AnyCell`], any of those cells as one module type;
//! - `stack`: [`RecurrentStack`], several layers of one kind with dropout between them.

mod any_cell;
mod cell;
mod kind;
mod run;
mod stack;

pub use any_cell::AnyCell;
pub use cell::{CellStep, RecurrentCell, ScanOutput};
pub use kind::CellKind;
pub use run::{length_mask, run_sequence, run_steps, SequenceOutput};
pub use stack::{RecurrentStack, RecurrentStackConfig, StackOutput};
