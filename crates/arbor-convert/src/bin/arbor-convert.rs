//! `arbor-convert`: import the reference PyTorch weights into arbor checkpoints, export arbor
//! checkpoints to safetensors and back, and list what a weights file holds (docs/interop.md).

use std::path::PathBuf;

use anyhow::Result;
use arbor_convert::{export_safetensors, import_safetensors, CheckpointModel, StateDict};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "arbor-convert", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every `import` reads and writes (used by the `import` subcommands as they land).
#[allow(dead_code)]
#[derive(clap::Args, Debug)]
struct ImportFiles {
    /// The reference model's state dict (`torch.save` output: `.pt`, `.pth`, `.bin`; or
    /// `.safetensors`).
    #[arg(long)]
    state_dict: PathBuf,
    /// The vocabulary, one token per line in id order (the reference's vocabulary file).
    /// Without it, tokens are named `<id>` and inputs must be given as ids.
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// The arbor checkpoint to write.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lists the tensors of a PyTorch state dict, a safetensors file or an arbor checkpoint.
    Inspect {
        /// The file: `.pt`/`.pth`/`.bin`, `.safetensors` or an arbor `.ckpt`.
        file: PathBuf,
    },
    /// Writes an arbor checkpoint as `DIR/model.safetensors` plus `DIR/config.json`.
    Export {
        /// The arbor checkpoint.
        #[arg(long)]
        checkpoint: PathBuf,
        /// The output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// Rebuilds an arbor checkpoint from an export (`model.safetensors` + `config.json`).
    FromSafetensors {
        /// The export directory (holding `model.safetensors` and `config.json`).
        dir: PathBuf,
        /// The checkpoint to write.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("arbor-convert: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect { file } => inspect(&file),
        Command::Export { checkpoint, out } => {
            let e = export_safetensors(&checkpoint, &out)?;
            println!(
                "exported {} ({} tensors) to {} and {}",
                e.model,
                e.tensors,
                e.weights.display(),
                e.config.display()
            );
            Ok(())
        }
        Command::FromSafetensors { dir, out } => {
            import_safetensors(
                &dir.join(arbor_convert::WEIGHTS_FILE),
                &dir.join(arbor_convert::CONFIG_FILE),
                &out,
            )?;
            println!("wrote {}", out.display());
            Ok(())
        }
    }
}

fn inspect(file: &std::path::Path) -> Result<()> {
    let is_ckpt = file.extension().is_some_and(|e| e == "ckpt");
    if is_ckpt {
        let ckpt = arbor_train::CheckpointFile::load(file)?;
        let kind = CheckpointModel::from_meta(&ckpt.meta)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let device = Default::default();
        let params = arbor_convert::model_parameters(&kind, &device);
        println!("{}: arbor {} checkpoint", file.display(), kind.name());
        for (path, shape) in params {
            println!("{path}\t{shape:?}");
        }
        return Ok(());
    }
    let sd = StateDict::read(file)?;
    for (key, shape) in sd.entries() {
        println!("{key}\t{shape:?}");
    }
    Ok(())
}
