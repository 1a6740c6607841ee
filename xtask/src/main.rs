//! Project automation for arbor: `cargo xtask <command>`.
//!
//! - `cargo xtask ci`: runs exactly what CI runs (`.ci/run`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "arbor project automation")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run exactly what CI runs (`.ci/run`): fmt, clippy, the test suite, the CUDA build check.
    Ci,
}

/// The workspace root (the parent of this crate's directory).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Ci => {
            let script = root().join(".ci/run");
            let status = Command::new("bash")
                .arg(&script)
                .current_dir(root())
                .status()
                .with_context(|| format!("could not start {}", script.display()))?;
            if !status.success() {
                bail!("{} failed ({status})", script.display());
            }
            Ok(())
        }
    }
}
