//! `cargo run --release --example sst`: the same engine on SST-2 (tsv or PTB-style trees).
