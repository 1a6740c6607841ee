//! Running one cell over a batch of padded sequences.

use crate::ArborBackend;
use burn::prelude::*;
use burn::tensor::TensorData;

use super::{RecurrentCell, ScanOutput};
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
    let mut state = init.unwrap_or_else(|| LstmState::zeros([batch, h], &device));
    if time > 0 {
        let pad = mask.clone().map(|m| m.bool_not().unsqueeze_dim::<3>(2));
        if let Some(scan) = cell.scan(x.clone(), state.c.clone(), pad.clone()) {
            return from_scan(scan, state, lengths, pad);
        }
    }
    // The precompute runs per step on `x_t` (see `RecurrentCell::context`).
    let d_in = x.dims()[2];
    let context = cell.context(x.clone());
    let mut outputs = Vec::with_capacity(time);
    let mut distances = Vec::with_capacity(time);
    for t in 0..time {
        let mut xp_t = cell.precompute(x.clone().slice([0..batch, t..t + 1, 0..d_in]));
        if let Some(context) = &context {
            let k = context.dims()[2];
            xp_t = Tensor::cat(
                vec![context.clone().slice([0..batch, t..t + 1, 0..k]), xp_t],
                2,
            );
        }
        let width = xp_t.dims()[2];
        let xp_t = xp_t.reshape([batch, width]);
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

/// The runner's output from a cell's [`scan`](RecurrentCell::scan): padded outputs and distances
/// zeroed, and each example's last real `h` (its initial `h` when it has no step) picked out,
/// as the step loop leaves them.
fn from_scan<B: ArborBackend>(
    scan: ScanOutput<B>,
    init: LstmState<B, 2>,
    lengths: Option<&[usize]>,
    pad: Option<Tensor<B, 3, Bool>>,
) -> SequenceOutput<B> {
    let [batch, time, h] = scan.h.dims();
    let device = scan.h.device();
    let c_last = scan.c.narrow(1, time - 1, 1).reshape([batch, h]);
    let distances = scan.master_forget.map(|f| {
        let d = syntactic_distance(f);
        match &pad {
            Some(pad) => d.mask_fill(pad.clone(), 0.0),
            None => d,
        }
        .reshape([batch, time])
    });
    let (outputs, h_last) = match (pad, lengths) {
        (Some(pad), Some(lengths)) => {
            // One-hot over time at each example's last real step.
            let last: Vec<f32> = lengths
                .iter()
                .flat_map(|&n| (0..time).map(move |t| if t + 1 == n { 1.0 } else { 0.0 }))
                .collect();
            let last = Tensor::<B, 3>::from_data(TensorData::new(last, [batch, time, 1]), &device);
            let empty: Vec<bool> = lengths.iter().map(|&n| n == 0).collect();
            let empty =
                Tensor::<B, 2, Bool>::from_data(TensorData::new(empty, [batch, 1]), &device);
            let h_last = scan
                .h
                .clone()
                .mul(last)
                .sum_dim(1)
                .reshape([batch, h])
                .mask_where(empty.expand([batch, h]), init.h);
            (scan.h.mask_fill(pad.expand([batch, time, h]), 0.0), h_last)
        }
        _ => {
            let h_last = scan.h.clone().narrow(1, time - 1, 1).reshape([batch, h]);
            (scan.h, h_last)
        }
    };
    SequenceOutput {
        outputs,
        last: LstmState {
            h: h_last,
            c: c_last,
        },
        distances,
    }
}
