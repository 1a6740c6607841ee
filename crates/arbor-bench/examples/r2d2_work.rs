//! How much work R2D2's pruned chart does per sentence length, and what it costs per
//! composition: the check behind "linear in n" (docs/r2d2.md).
//!
//! `cargo run --release -p arbor-bench --example r2d2_work -- 16 32 64 128`
//!
//! Same model and inputs as the bench's `r2d2/pruned-n*` workloads (hidden 128, 2 layers,
//! 4 heads, m = 4, vocab 1000, batch 8, seed 0), on the default (flex) CPU backend. Each
//! length runs once untimed, then once timed per mode. Evaluation composes exactly the cells
//! the algorithm needs; training, which reads nothing back from the device, composes every
//! top-row cell a merge could create (docs/r2d2.md, "The chart on the device"), so it has its
//! own count.

use std::time::Instant;

use arbor_bench::workloads::r2d2::{lm_forward, lm_forward_backward, random_tokens};
use arbor_encoders::r2d2::{R2d2Lm, R2d2LmConfig};
use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::prelude::*;

const BATCH: usize = 8;
const VOCAB: usize = 1000;

fn main() -> anyhow::Result<()> {
    let lengths: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|e| anyhow::anyhow!("length {a:?}: {e}")))
        .collect::<anyhow::Result<_>>()?;
    let lengths = if lengths.is_empty() {
        vec![16, 32, 64, 128]
    } else {
        lengths
    };
    let device = Default::default();
    println!(
        "| n | compositions | per token | calls | forward s | µs/comp | training compositions | fwd+bwd s | µs/comp |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for n in lengths {
        Flex::seed(&device, 0);
        let model: R2d2Lm<Autodiff<Flex>> = R2d2LmConfig::bench(VOCAB, true).init(&device);
        let eval = model.valid();
        let tokens = random_tokens(BATCH, n, VOCAB, 0);
        lm_forward(&eval, &tokens);
        let t = Instant::now();
        let (_, stats) = lm_forward(&eval, &tokens);
        let forward = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (_, train) = lm_forward_backward(&model, &tokens, 0);
        let backward = t.elapsed().as_secs_f64();
        let per = |s: f64, c: u64| s * 1e6 / c as f64;
        println!(
            "| {n} | {} | {:.1} | {} | {forward:.3} | {:.0} | {} | {backward:.3} | {:.0} |",
            stats.compositions,
            stats.compositions as f64 / (BATCH * n) as f64,
            stats.calls,
            per(forward, stats.compositions),
            train.compositions,
            per(backward, train.compositions),
        );
    }
    Ok(())
}
