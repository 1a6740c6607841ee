//! `arbor-convert`: import the reference PyTorch weights into arbor checkpoints, export arbor
//! checkpoints to safetensors and back, and list what a weights file holds (docs/interop.md).

use std::path::PathBuf;

use anyhow::Result;
use arbor_convert::{
    export_safetensors, import_safetensors, import_spinn, model_state_dict, read_vocab,
    CheckpointModel, SpinnImport, StateDict,
};
use burn::backend::Flex;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "arbor-convert", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every `import` reads and writes.
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

/// The reference models `import` reads, one subcommand each.
#[derive(Subcommand, Debug)]
enum Import {
    /// A SPINN SNLI model of nyu-mll/spinn's PyTorch port (SPINN-PI-NT, SPINN-PI or full SPINN,
    /// read off the keys).
    Spinn(SpinnArgs),
}

/// The flags of the SPINN import.
#[derive(clap::Args, Debug)]
struct SpinnArgs {
    #[command(flatten)]
    files: ImportFiles,
    /// The GloVe-format text vectors the model was trained with, when the state dict has no
    /// `embed.embed.weight` (the reference keeps pretrained vectors outside its state dict);
    /// needs --vocab.
    #[arg(long, requires = "vocab")]
    embeddings: Option<PathBuf>,
    /// The label names in the model's output order, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "entailment,neutral,contradiction"
    )]
    labels: Vec<String>,
    /// Lower-case words before lookup (the model was trained with the reference's
    /// `--lowercase`).
    #[arg(long)]
    lowercase: bool,
    /// Weight of the transition loss if full SPINN is trained further (the reference's
    /// `--transition_weight`; not in the weights).
    #[arg(long, default_value_t = 1.0)]
    transition_weight: f64,
    /// Classifier dropout if the model is trained further (not used at evaluation).
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Imports a reference model's PyTorch state dict as an arbor checkpoint.
    Import {
        #[command(subcommand)]
        family: Import,
    },
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
        Command::Import { family } => import(family),
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

fn import(family: Import) -> Result<()> {
    match family {
        Import::Spinn(args) => import_spinn_files(args),
    }
}

fn import_spinn_files(args: SpinnArgs) -> Result<()> {
    let sd = model_state_dict(StateDict::read(&args.files.state_dict)?);
    let vocab = args.files.vocab.as_deref().map(read_vocab).transpose()?;
    if vocab.is_none() {
        eprintln!(
            "arbor-convert: no --vocab: tokens are named <pad>, <unk>, <2>, <3>, ... and the \
             checkpoint cannot read text"
        );
    }
    let opts = SpinnImport {
        vocab,
        vocab_file: args.files.vocab.clone(),
        embeddings: args.embeddings,
        labels: args.labels,
        lowercase: args.lowercase,
        transition_weight: args.transition_weight,
        dropout: args.dropout,
    };
    let device = Default::default();
    let imported = import_spinn::<Flex>(sd, &opts, &device)?;
    imported.save::<Flex>(&args.files.out)?;
    let encoder = &imported.meta["task"]["model"]["encoder"];
    println!(
        "wrote {} ({}: {}, D = {}, tracker {}, {} words)",
        args.files.out.display(),
        arbor_convert::SPINN_LAYOUT,
        encoder["variant"].as_str().unwrap_or("?"),
        encoder["d_hidden"],
        encoder["d_tracking"],
        imported.meta["task"]["vocab"]
            .as_array()
            .map_or(0, Vec::len),
    );
    if let Some(e) = imported.meta["imported"].get("embeddings") {
        println!(
            "embeddings: {} of {} rows found in {} (the others are zero, as in the reference)",
            e["rows_found"], e["rows"], e["source"]
        );
    }
    Ok(())
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
