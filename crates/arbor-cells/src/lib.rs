//! # arbor-cells
//!
//! The recurrent and tree cells that arbor's sentence encoders are built from, following
//! `docs/models.md` §1 and §5:
//!
//! | item | what it computes |
//! | --- | --- |
//! | [`cumax`] | `cumsum(softmax(x))`, the ordered "master" gate activation |
//! | [`st_gumbel_softmax`], [`argmax_select`] | straight-through Gumbel-softmax selection and its evaluation-time argmax |
//! | [`BinaryTreeLstm`] | the binary Tree-LSTM composition (Tai et al. 2015) with an optional external input |
//! | [`LstmCell`] | a plain LSTM cell with fused gates |
//! | [`OnLstmCell`] | ON-LSTM (Shen et al. 2019): master gates from `x_t` and `h_{t-1}` |
//! | [`FastTreesCell`] | FastTrees: master gates from `x_t` only, computed for the whole sequence at once |
//! | [`FasterFastTreesCell`] | Faster FastTrees: every gate from `x_t`; the recurrence is an elementwise scan |
//! | [`ConvFastTreesCell`] | Conv FastTrees: master gates from a causal temporal convolution |
//! | [`RecurrentStack`] | multi-layer runner over `[batch, time, dim]` with lengths, dropout and distances |
//!
//! Every cell is a Burn [`Module`](burn::module::Module) built from a `…Config` with
//! `init(&device)`, generic over the backend `B`. Gates are fused: one matmul per input
//! (`x_t`, and `h_{t-1}` where a cell reads it). The gate order inside each fused weight is
//! documented on each cell so weights can be imported from other implementations.
//!
//! The recurrent cells share one interface, [`RecurrentCell`]: everything that depends on the
//! input alone is computed for the whole sequence in one batched op
//! ([`RecurrentCell::precompute`]); only what truly depends on `h_{t-1}` or `c_{t-1}` runs inside
//! the time loop ([`RecurrentCell::step`]).

#![warn(missing_docs)]

pub mod check;
mod conv_fast_trees;
mod cumax;
mod fast_trees;
mod faster_fast_trees;
mod gumbel;
mod linear;
mod lstm;
mod master;
pub mod names;
mod on_lstm;
mod runner;
mod state;
mod tree_lstm;

pub use arbor_kernels as kernels;
pub use arbor_kernels::{ArborAutodiffBackend, ArborBackend, GateLayout};
pub use check::ConfigError;
pub use conv_fast_trees::{ConvFastTreesCell, ConvFastTreesCellConfig};
pub use cumax::cumax;
pub use fast_trees::{FastTreesCell, FastTreesCellConfig};
pub use faster_fast_trees::{FasterFastTreesCell, FasterFastTreesCellConfig};
pub use gumbel::{argmax_select, masked_softmax, st_gumbel_softmax, GumbelSampler, Selection};
pub use linear::{
    activation, conv1d_over_time, layer_norm, layer_norm_epsilon, linear_columns, linear_pair_rows,
    linear_rows,
};
pub use lstm::{LstmCell, LstmCellConfig};
pub use master::{syntactic_distance, MasterGates};
pub use on_lstm::{OnLstmCell, OnLstmCellConfig};
pub use runner::{
    length_mask, run_sequence, run_steps, AnyCell, CellKind, RecurrentCell, RecurrentStack,
    RecurrentStackConfig, SequenceOutput, StackOutput,
};
pub use runner::{CellStep, ScanOutput};
pub use state::LstmState;
pub use tree_lstm::{BinaryTreeLstm, BinaryTreeLstmConfig};
