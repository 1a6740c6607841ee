//! Word-level language models on Penn Treebank with any recurrent cell; `--eval FILE` and
//! `--parse GOLD_TREES` with a trained checkpoint.
//!
//! ```text
//! cargo run --release --example ptb_lm -- --cell on-lstm --emb 200 --hidden 400 --layers 3 \
//!     --max-minutes 10 --out runs/lm-on-lstm
//! cargo run --release --example ptb_lm -- --checkpoint runs/lm-on-lstm \
//!     --parse ../shared/data/wsj_gold_trees/22.auto.clean
//! ```

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::ptb_lm::run(arbor::apps::ptb_lm::PtbLmArgs::parse())
}
