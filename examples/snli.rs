//! Train a tree-inducing sentence encoder on SNLI.
//!
//! ```text
//! cargo run --release --example snli                       # datasets/snli, downloaded if absent
//! cargo run --release --example snli -- --train ../shared/data/snli/snli_1.0_dev.jsonl --holdout 1000
//! cargo run --release --example snli -- --eval-only --checkpoint runs/default --test FILE
//! cargo run --release --example snli -- --parse "a man is playing a guitar"
//! ```
//! `--help` lists every flag.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::snli::run(arbor::apps::snli::SnliArgs::parse())
}
