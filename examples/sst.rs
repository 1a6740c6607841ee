//! Train a sentence encoder on SST-2 (tsv or PTB-style tree files).
//!
//! ```text
//! cargo run --release --example sst -- --train ../shared/data/sst2_glue/train.tsv \
//!     --valid ../shared/data/sst2_glue/dev.tsv --encoder gumbel
//! ```

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::sst::run(arbor::apps::sst::SstArgs::parse())
}
