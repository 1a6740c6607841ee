//! `arbor-download <name>...`: fetch official corpora into `datasets/<name>/`. See
//! `datasets/README.md`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use arbor_data::download::{corpus, download_corpus, DownloadOptions, CORPORA};
use clap::Parser;

/// Download official corpus archives (resumable, SHA-256 checked, zip archives extracted).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Corpus names (see --list), or `all`.
    names: Vec<String>,
    /// Root directory; each corpus goes to `<root>/<name>/`.
    #[arg(long, default_value = "datasets")]
    root: PathBuf,
    /// List the known corpora and their sources.
    #[arg(long)]
    list: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.list || args.names.is_empty() {
        for c in CORPORA {
            println!("{:<16} {}", c.name, c.description);
            for f in c.files {
                println!("{:<16}   {}", "", f.url);
            }
        }
        println!("\nNot downloadable: WSJ treebank sections (LDC licence); the logic data (see datasets/README.md).");
        return Ok(());
    }
    let names: Vec<String> = if args.names.iter().any(|n| n == "all") {
        CORPORA
            .iter()
            .filter(|c| c.name != "glove")
            .map(|c| c.name.to_string())
            .collect()
    } else {
        args.names.clone()
    };
    let opts = DownloadOptions {
        progress: !args.quiet,
        ..DownloadOptions::default()
    };
    let mut failed = 0;
    for name in &names {
        let Some(c) = corpus(name) else {
            bail!("unknown corpus {name:?}; run with --list");
        };
        let dir = args.root.join(c.name);
        match download_corpus(c, &dir, &opts) {
            Ok(d) => println!("{name}: ready in {}", d.display()),
            Err(e) => {
                eprintln!("{name}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} corpora could not be downloaded",
            names.len()
        );
    }
    Ok(())
}
