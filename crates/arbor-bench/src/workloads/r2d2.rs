//! R2D2: pruned (window m = 4) against exhaustive CKY over sentence length; the pruned model's
//! time must grow linearly in n.

use std::cell::Cell;
use std::rc::Rc;

use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use arbor_encoders::r2d2::{ChartStats, R2d2Lm, R2d2LmConfig};
use arbor_encoders::Decisions;
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::prelude::*;
use serde_json::json;

use crate::harness::{Mode, Workload};
use crate::report::RatioSpec;

/// Vocabulary size.
pub const VOCAB: usize = 1000;
/// Sentences per batch.
pub const BATCH: usize = 8;
/// Lengths of the pruned sweep.
pub const LENGTHS: [usize; 4] = [16, 32, 64, 128];
/// Lengths at which exhaustive CKY also runs (it grows as n³: at n = 32 one CPU
/// forward+backward already takes minutes, too long for the suite's 10-minute budget).
pub const FULL_LENGTHS: [usize; 2] = [8, 16];

fn workload<B: ArborBackend>(device: &B::Device, n: usize, pruning: bool) -> Workload {
    let device = device.clone();
    let config = R2d2LmConfig::bench(VOCAB, pruning);
    let params = json!({
        "d_model": config.d_model(), "n_layers": config.encoder.composition.n_layers,
        "n_heads": config.encoder.composition.n_heads, "window": config.encoder.window, "pruning": pruning, "vocab": VOCAB, "batch": BATCH, "length": n,
        "tokens": "uniform ids, seed 0", "loss": "bidirectional LM loss (forward: argmax; forward+backward: ST Gumbel, seed 0)",
    });
    let (tag, series) = if pruning {
        ("pruned", "R2D2 pruned (m = 4)")
    } else {
        ("full-cky", "R2D2 exhaustive CKY")
    };
    let compositions = Rc::new(Cell::new(0));
    let counter = compositions.clone();
    Workload::new(
        "r2d2",
        format!("{tag}-n{n}"),
        params,
        BATCH * n,
        "tokens",
        move || {
            B::seed(&device, 0);
            let model: R2d2Lm<Autodiff<B>> = config.init(&device);
            let eval = model.valid();
            let tokens = random_tokens(BATCH, n, VOCAB, 0);
            Box::new(move |mode| {
                let (loss, stats) = match mode {
                    Mode::Forward => lm_forward(&eval, &tokens),
                    Mode::ForwardBackward => lm_forward_backward(&model, &tokens, 0),
                };
                counter.set(stats.compositions);
                loss
            })
        },
    )
    .with_compositions(compositions)
    .in_sweep("r2d2-length", series, n as f64, "sentence length (tokens)")
}

/// Pruned at 16/32/64/128, exhaustive at 8/16.
pub fn workloads<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    let mut out: Vec<Workload> = LENGTHS
        .iter()
        .map(|&n| workload::<B>(device, n, true))
        .collect();
    out.extend(
        FULL_LENGTHS
            .iter()
            .map(|&n| workload::<B>(device, n, false)),
    );
    out
}

/// Linear scaling means time(64)/time(16) ≈ 4.
pub fn ratios() -> Vec<RatioSpec> {
    vec![
        RatioSpec {
            label: "R2D2 pruned time(n=64) / time(n=16) (linear: 4)",
            numerator: "r2d2/pruned-n64",
            denominator: "r2d2/pruned-n16",
        },
        RatioSpec {
            label: "R2D2 pruned time(n=128) / time(n=64) (linear: 2)",
            numerator: "r2d2/pruned-n128",
            denominator: "r2d2/pruned-n64",
        },
        RatioSpec {
            label: "R2D2 exhaustive / pruned time at n=16",
            numerator: "r2d2/full-cky-n16",
            denominator: "r2d2/pruned-n16",
        },
    ]
}

/// Deterministic pseudo-random token ids `[batch][n]` below `vocab_size` (SplitMix64), for
/// the benchmarks.
pub fn random_tokens(batch: usize, n: usize, vocab_size: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..batch)
        .map(|_| {
            (0..n)
                .map(|_| (next() % vocab_size.max(1) as u64) as u32)
                .collect()
        })
        .collect()
}

/// Benchmark entry point: the LM loss of `tokens` in evaluation mode (forward only). Returns
/// the loss value and the chart counters.
pub fn lm_forward<B: ArborBackend>(model: &R2d2Lm<B>, tokens: &[Vec<u32>]) -> (f64, ChartStats) {
    let refs: Vec<&[u32]> = tokens.iter().map(|s| s.as_slice()).collect();
    let out = model.lm_loss(&refs, Decisions::Argmax);
    (out.loss.into_scalar().elem::<f64>(), out.stats)
}

/// Benchmark entry point: the LM loss of `tokens` in training mode (Gumbel noise from a
/// sampler seeded with `seed`) and its backward pass. Returns the loss value and the chart
/// counters; the gradients are computed and dropped.
pub fn lm_forward_backward<B: ArborAutodiffBackend>(
    model: &R2d2Lm<B>,
    tokens: &[Vec<u32>],
    seed: u64,
) -> (f64, ChartStats) {
    let refs: Vec<&[u32]> = tokens.iter().map(|s| s.as_slice()).collect();
    let mut sampler = arbor_cells::GumbelSampler::seeded(seed);
    let out = model.lm_loss(&refs, Decisions::Sample(&mut sampler));
    let value = out.loss.clone().into_scalar().elem::<f64>();
    let _grads = out.loss.backward();
    (value, out.stats)
}
