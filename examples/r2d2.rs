//! R2D2: pretrain the bidirectional LM on WikiText-2, evaluate pseudo-perplexity, parse.
//!
//! ```text
//! cargo run --release --example r2d2 -- pretrain --out runs/r2d2
//! cargo run --release --example r2d2 -- eval --checkpoint runs/r2d2/best.ckpt
//! cargo run --release --example r2d2 -- parse --checkpoint runs/r2d2/best.ckpt \
//!     --gold ../shared/data/wsj_gold_trees/22.auto.clean --output wsj22.pred
//! ```

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::r2d2::run(arbor::apps::r2d2::R2d2Args::parse())
}
