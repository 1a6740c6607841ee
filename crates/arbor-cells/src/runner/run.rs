//! Running one cell over a batch of padded sequences.

use crate::ArborBackend;
use burn::prelude::*;
use burn::tensor::TensorData;

use super::RecurrentCell;
use crate::{syntactic_distance, LstmState};

/// The result of running one cell over a batch of sequences.
#[derive(Debug, Clone)]
pub struct SequenceOutput<B: Backend> {
    /// `h_t` for every step `[batch, time, H]`; zeros at padded positions.
    pub outputs: Tensor<B, 3>,
    /// The state after each example's last real step `[batch, H]`.
    pub last: LstmState<B, 2>,
    /// Syntactic distances `d_t = 1 − mean(f̃_t)` `[batch, time]` for cumax cells (zeros at
    /// padded positions); `None` for the LSTM.
    pub distances: Option<Tensor<B, 2>>,
}

/// A `[batch, time]` mask, true where `t < lengths[b]`.
///
/// # Panics
/// If any length exceeds `time`.
pub fn length_mask<B: ArborBackend>(
    lengths: &[usize],
    time: usize,
    device: &B::Device,
) -> Tensor<B, 2, Bool> {
    let mut values = Vec::with_capacity(lengths.len() * time);
    for &len in lengths {
        assert!(
            len <= time,
            "length {len} exceeds the padded time axis {time}"
        );
        values.extend((0..time).map(|t| t < len));
    }
    Tensor::from_data(TensorData::new(values, [lengths.len(), time]), device)
}

/// Runs `cell` over `x`, left to right.
///
/// With `lengths`, example `b` has `lengths[b]` real steps followed by padding: its state stops
/// changing after its last real step, its outputs at padded positions are zero, and its real
/// outputs are exactly those it gets alone (padding never influences a real position).
///
/// # Shapes
/// - `x`: `[batch, time, d_input]`
/// - `lengths`: `batch` entries, each `≤ time` (`None`: all `time`)
/// - `init`: `[batch, H]` each (`None`: zeros)
///
/// # Panics
/// If `lengths` has the wrong number of entries or an entry exceeds `time`.
pub fn run_sequence<B: ArborBackend, C: RecurrentCell<B> + ?Sized>(
    cell: &C,
    x: Tensor<B, 3>,
    lengths: Option<&[usize]>,
    init: Option<LstmState<B, 2>>,
) -> SequenceOutput<B> {
    let device = x.device();
    let [batch, time, _] = x.dims();
    let h = cell.d_hidden();
    let mask = lengths.and_then(|lengths| {
        assert_eq!(lengths.len(), batch, "one length per example");
        let padded = lengths.iter().any(|&l| l < time);
        padded.then(|| length_mask::<B>(lengths, time, &device))
    });
    let xp = cell.precompute(x);
    let width = xp.dims()[2];
    let mut state = init.unwrap_or_else(|| LstmState::zeros([batch, h], &device));
    let mut outputs = Vec::with_capacity(time);
    let mut distances = Vec::with_capacity(time);
    for t in 0..time {
        let xp_t = xp
            .clone()
            .slice([0..batch, t..t + 1, 0..width])
            .reshape([batch, width]);
        let step = cell.step(xp_t, state.clone());
        let mut d_t = step.master_forget.map(syntactic_distance);
        let mut h_t = step.state.h.clone();
        state = match &mask {
            None => step.state,
            Some(mask) => {
                let m_t = mask.clone().slice([0..batch, t..t + 1]);
                let pad = m_t.clone().bool_not();
                h_t = h_t.mask_fill(pad.clone().expand([batch, h]), 0.0);
                d_t = d_t.map(|d| d.mask_fill(pad, 0.0));
                state.select(m_t, step.state)
            }
        };
        outputs.push(h_t.unsqueeze_dim::<3>(1));
        if let Some(d) = d_t {
            distances.push(d);
        }
    }
    SequenceOutput {
        outputs: Tensor::cat(outputs, 1),
        last: state,
        distances: (!distances.is_empty()).then(|| Tensor::cat(distances, 1)),
    }
}
