//! Any of the recurrent cells as one module type, dispatching to the cell inside.

use crate::ArborBackend;
use burn::prelude::*;

use super::{CellStep, RecurrentCell, ScanOutput};
use crate::{
    ConvFastTreesCell, FastTreesCell, FasterFastTreesCell, LstmCell, LstmState, OnLstmCell,
};

/// Any of the recurrent cells, as one module type.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnyCell<B: Backend> {
    /// An LSTM cell.
    Lstm(LstmCell<B>),
    /// An ON-LSTM cell.
    OnLstm(OnLstmCell<B>),
    /// A FastTrees cell.
    FastTrees(FastTreesCell<B>),
    /// A Faster FastTrees cell.
    FasterFastTrees(FasterFastTreesCell<B>),
    /// A Conv FastTrees cell.
    ConvFastTrees(ConvFastTreesCell<B>),
}

macro_rules! dispatch {
    ($self:ident, $cell:ident => $e:expr) => {
        match $self {
            AnyCell::Lstm($cell) => $e,
            AnyCell::OnLstm($cell) => $e,
            AnyCell::FastTrees($cell) => $e,
            AnyCell::FasterFastTrees($cell) => $e,
            AnyCell::ConvFastTrees($cell) => $e,
        }
    };
}

impl<B: ArborBackend> RecurrentCell<B> for AnyCell<B> {
    fn d_input(&self) -> usize {
        dispatch!(self, c => c.d_input())
    }
    fn d_hidden(&self) -> usize {
        dispatch!(self, c => c.d_hidden())
    }
    fn n_chunks(&self) -> Option<usize> {
        dispatch!(self, c => c.n_chunks())
    }
    fn precompute(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        dispatch!(self, c => c.precompute(x))
    }
    fn step(&self, xp: Tensor<B, 2>, state: LstmState<B, 2>) -> CellStep<B> {
        dispatch!(self, c => c.step(xp, state))
    }
    fn step_input(
        &self,
        x_t: Tensor<B, 2>,
        context_t: Option<Tensor<B, 2>>,
        state: LstmState<B, 2>,
    ) -> CellStep<B> {
        dispatch!(self, c => c.step_input(x_t, context_t, state))
    }
    fn context(&self, x: Tensor<B, 3>) -> Option<Tensor<B, 3>> {
        dispatch!(self, c => c.context(x))
    }
    fn scan(
        &self,
        x: Tensor<B, 3>,
        init: &LstmState<B, 2>,
        pad: Option<Tensor<B, 3, Bool>>,
        lengths: Option<&[usize]>,
    ) -> Option<ScanOutput<B>> {
        dispatch!(self, c => c.scan(x, init, pad, lengths))
    }
}
