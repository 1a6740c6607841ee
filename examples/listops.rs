//! ListOps (Nangia & Bowman 2018): generate data, train any encoder, evaluate by depth and length.
//!
//! ```text
//! cargo run --release --example listops -- generate --out datasets/listops
//! cargo run --release --example listops -- train --encoder spinn-pi-nt --out runs/listops-tree
//! cargo run --release --example listops -- eval --checkpoint runs/listops-tree \
//!     --test path/to/test_d20s.tsv
//! ```

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::listops::run(arbor::apps::listops::ListOpsArgs::parse())
}
