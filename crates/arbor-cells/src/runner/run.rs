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
    // The lengths when some example is padded (`None`: every example has all `time` steps).
    let padded = lengths.filter(|lengths| {
        assert_eq!(lengths.len(), batch, "one length per example");
        lengths.iter().any(|&l| l < time)
    });
    let state = init.unwrap_or_else(|| LstmState::zeros([batch, h], &device));
    if time > 0 {
        let pad = padded.map(|lengths| {
            length_mask::<B>(lengths, time, &device)
                .bool_not()
                .unsqueeze_dim::<3>(2)
        });
        if let Some(scan) = cell.scan(x.clone(), &state, pad.clone(), padded) {
            return from_scan(scan, state, lengths, pad);
        }
    }
    match padded {
        Some(lengths) => packed_steps(cell, x, lengths, state),
        None => {
            let context = cell.context(x.clone());
            run_steps(cell, x, context, state)
        }
    }
}

/// The step loop over a batch whose sequences all have `time` steps, from `state`, with the
/// cell's `context` for these steps (what [`RecurrentCell::context`] gives for `x`, or for `x`
/// with earlier steps in front when a sequence is run in segments). Each step precomputes from
/// `x_t` alone (see [`RecurrentCell::context`]).
///
/// # Shapes
/// - `x`: `[batch, time, d_input]`
/// - `context`: `[batch, time, K]`
/// - `state`: `[batch, H]` each
pub fn run_steps<B: ArborBackend, C: RecurrentCell<B> + ?Sized>(
    cell: &C,
    x: Tensor<B, 3>,
    context: Option<Tensor<B, 3>>,
    mut state: LstmState<B, 2>,
) -> SequenceOutput<B> {
    let [batch, time, _] = x.dims();
    let mut outputs = Vec::with_capacity(time);
    let mut distances = Vec::with_capacity(time);
    for t in 0..time {
        let step = step_at(cell, &x, context.as_ref(), batch, t, state);
        outputs.push(step.state.h.clone().unsqueeze_dim::<3>(1));
        if let Some(f) = step.master_forget {
            distances.push(syntactic_distance(f));
        }
        state = step.state;
    }
    SequenceOutput {
        outputs: Tensor::cat(outputs, 1),
        last: state,
        distances: (!distances.is_empty()).then(|| Tensor::cat(distances, 1)),
    }
}

/// Step `t` of the first `n` rows: `precompute(x_t)` with the step's context in front, then
/// `step` from `state` (`[n, H]`).
fn step_at<B: ArborBackend, C: RecurrentCell<B> + ?Sized>(
    cell: &C,
    x: &Tensor<B, 3>,
    context: Option<&Tensor<B, 3>>,
    n: usize,
    t: usize,
    state: LstmState<B, 2>,
) -> super::CellStep<B> {
    let at = |a: &Tensor<B, 3>| {
        let w = a.dims()[2];
        a.clone().slice([0..n, t..t + 1, 0..w]).reshape([n, w])
    };
    cell.step_input(at(x), context.map(at), state)
}

/// The step loop over padded sequences, packed: the examples are ordered longest first, so
/// that the ones still running at step `t` are the first `n_t` rows, and each step runs on
/// those rows only (as PyTorch's packed sequences do). An example's state is set aside after
/// its last real step; outputs and distances are zero at padded positions.
fn packed_steps<B: ArborBackend, C: RecurrentCell<B> + ?Sized>(
    cell: &C,
    x: Tensor<B, 3>,
    lengths: &[usize],
    init: LstmState<B, 2>,
) -> SequenceOutput<B> {
    let device = x.device();
    let [batch, time, _] = x.dims();
    let h = cell.d_hidden();
    // Longest first; a stable sort keeps equal lengths in batch order.
    let mut order: Vec<usize> = (0..batch).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(lengths[b]));
    let sorted: Vec<usize> = order.iter().map(|&b| lengths[b]).collect();
    let permuted = order.iter().enumerate().any(|(i, &b)| i != b);
    let index = |ids: &[usize]| {
        let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [batch]), &device)
    };
    let (x, state) = if permuted {
        let idx = index(&order);
        let init = LstmState {
            h: init.h.select(0, idx.clone()),
            c: init.c.select(0, idx.clone()),
        };
        (x.select(0, idx), init)
    } else {
        (x, init)
    };
    let context = cell.context(x.clone());
    let running = |t: usize| sorted.iter().take_while(|&&l| l > t).count();
    // States of finished examples, last rows first.
    let mut finished: Vec<LstmState<B, 2>> = Vec::new();
    let mut outputs = Vec::with_capacity(time);
    let mut distances = Vec::with_capacity(time);
    let mut n_prev = batch;
    // The running examples' state; `None` once every example has finished.
    let mut state = (batch > 0).then_some(state);
    for t in 0..time {
        let n = running(t);
        if n < n_prev {
            let s = state.take().expect("running examples have a state");
            finished.push(s.clone().rows(n, n_prev - n));
            state = (n > 0).then(|| s.rows(0, n));
            n_prev = n;
        }
        let Some(running_state) = state.take() else {
            outputs.push(arbor_kernels::zeros([batch, 1, h], &device));
            if cell.n_chunks().is_some() {
                distances.push(arbor_kernels::zeros([batch, 1], &device));
            }
            continue;
        };
        let step = step_at(cell, &x, context.as_ref(), n, t, running_state);
        outputs.push(pad_rows(step.state.h.clone(), batch).unsqueeze_dim::<3>(1));
        if let Some(f) = step.master_forget {
            distances.push(pad_rows(syntactic_distance(f), batch));
        }
        state = Some(step.state);
    }
    if let Some(s) = state {
        finished.push(s);
    }
    finished.reverse();
    let last = LstmState {
        h: Tensor::cat(finished.iter().map(|s| s.h.clone()).collect(), 0),
        c: Tensor::cat(finished.into_iter().map(|s| s.c).collect(), 0),
    };
    let mut out = SequenceOutput {
        outputs: Tensor::cat(outputs, 1),
        last,
        distances: (!distances.is_empty()).then(|| Tensor::cat(distances, 1)),
    };
    if permuted {
        let mut inverse = vec![0; batch];
        for (i, &b) in order.iter().enumerate() {
            inverse[b] = i;
        }
        let idx = index(&inverse);
        out = SequenceOutput {
            outputs: out.outputs.select(0, idx.clone()),
            last: LstmState {
                h: out.last.h.select(0, idx.clone()),
                c: out.last.c.select(0, idx.clone()),
            },
            distances: out.distances.map(|d| d.select(0, idx)),
        };
    }
    out
}

/// `x` `[n, w]` with zero rows appended up to `batch` rows.
fn pad_rows<B: ArborBackend>(x: Tensor<B, 2>, batch: usize) -> Tensor<B, 2> {
    let [n, w] = x.dims();
    if n == batch {
        return x;
    }
    let zeros = arbor_kernels::zeros([batch - n, w], &x.device());
    Tensor::cat(vec![x, zeros], 0)
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
    let distances = scan.distances.map(|d| match &pad {
        Some(pad) => d
            .reshape([batch, time, 1])
            .mask_fill(pad.clone(), 0.0)
            .reshape([batch, time]),
        None => d,
    });
    let (outputs, h_last) = match (pad, lengths) {
        (Some(pad), Some(lengths)) => {
            // Each example's row of `h` at its last real step, as rows of `[batch·time, H]`
            // (one gather, whose backward writes the rows into one zero gradient; a one-hot
            // product summed over time made Flex walk a broadcast gradient element by
            // element); an example with no step reads its first row and takes its initial `h`.
            let rows: Vec<usize> = lengths
                .iter()
                .enumerate()
                .map(|(b, &n)| b * time + n.saturating_sub(1))
                .collect();
            let empty: Vec<bool> = lengths.iter().map(|&n| n == 0).collect();
            let empty =
                Tensor::<B, 2, Bool>::from_data(TensorData::new(empty, [batch, 1]), &device);
            let h_last =
                arbor_kernels::select_rows(scan.h.clone().reshape([batch * time, h]), &rows)
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
            c: scan.c_last,
        },
        distances,
    }
}
