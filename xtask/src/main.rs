//! Project automation for arbor: `cargo xtask <command>`.
//!
//! - `cargo xtask ci`: runs exactly what CI runs (`.ci/run`).
//! - `cargo xtask bench [ARGS]`: builds the benchmark suite (`crates/arbor-bench`) in release mode
//!   with the backend feature that `--device` needs, and runs it with `ARGS` (`--device cuda`,
//!   `--filter NAME`, `--quick`, `--out DIR`, `--list`, `--versus pytorch`: also time each
//!   workload's PyTorch twin and add a PyTorch column and the arbor/PyTorch ratio).
//! - `cargo xtask graph`: prints the crate graph of the workspace (normal dependencies between
//!   members, from `cargo metadata`) as the mermaid picture for `docs/architecture.md`, keeping the
//!   layers the document gives; crates in no layer are listed in `subgraph Unplaced`.
//! - `cargo xtask graph --check`: fails unless the picture in `docs/architecture.md` matches the
//!   manifests: the same edges, every crate in exactly one layer, every dependency in a strictly
//!   lower layer (CI runs this).
//! - `cargo xtask docs --check`: fails when a doc cites in backticks a Rust name of the
//!   workspace that does not exist (`Type::member` of an arbor type, `arbor_crate::…::name`; CI
//!   runs this).
//! - `cargo xtask repro RECIPE...`: reproduces papers' numbers. Each recipe (`repro/NAME.toml`,
//!   format in `repro/README.md`) names a training program, its flags, seeds and the paper's
//!   accuracy; repro builds the program (release, the backend feature `--device` needs), runs it
//!   once per seed into `runs/repro/NAME/seedK/` (resuming from a `last.ckpt` there), and writes
//!   `record.json` and `record.md` comparing the mean over seeds with the paper. `--list`,
//!   `--seeds N`, `--budget-minutes M`, `--test FILE`, `--device D`, `--out DIR`,
//!   `--program PATH`, `--dry-run`; see `docs/repro.md`.
//! - `cargo xtask gpu-pack`: builds the GPU check (`arbor-gpu-check`), `arbor-bench` and the
//!   `snli` and `logic` examples with `--features cuda`, stripped and xz-compressed, into
//!   `gpu-pack/` with the PyTorch twins, the logic data, the `gpu-check` launcher and a manifest,
//!   for a GPU machine without Rust (docs/gpu.md).
//! - `cargo xtask references [--mirror DIR] [--force]`: extracts the authors' repositories at the
//!   commits pinned in `crates/arbor-bench/pytorch/references.json` into `runs/reference/`, where
//!   `arbor-bench --versus pytorch` imports their modules to time them beside the twins.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

mod docs_check;
mod gpu_pack;
mod graph;
mod references;
mod repro;

#[derive(Parser)]
#[command(name = "xtask", about = "arbor project automation")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run exactly what CI runs (`.ci/run`): fmt, clippy, the graph and docs checks, the test suite,
    /// the CUDA build check.
    Ci,
    /// Run the benchmark suite (`arbor-bench`): `--device`, `--filter`, `--quick`, `--out`, `--list`;
    /// `--no-x86-v4` builds it without the AVX-512 matrix kernels (cargo feature `x86-v4`, on
    /// by default), to compare the two kernel sets on one AVX-512 CPU.
    Bench {
        /// Arguments for `arbor-bench` (see `cargo xtask bench --help-bench`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check that the Rust names the docs cite in backticks (`Type::member`, `arbor_x::name`)
    /// exist in the workspace (CI runs this).
    Docs {
        /// Check (the only mode).
        #[arg(long)]
        check: bool,
    },
    /// Print the crate graph as the mermaid picture for `docs/architecture.md`, or `--check` it.
    Graph {
        /// Check the picture in `docs/architecture.md` against the manifests instead of printing.
        #[arg(long)]
        check: bool,
    },
    /// Reproduce papers' numbers: run recipes from `repro/` and record arbor's result beside
    /// the paper's (see docs/repro.md).
    Repro(repro::ReproArgs),
    /// Build the GPU check's pack (release, `--features cuda`, stripped and xz-compressed, under
    /// 48 MiB) for a GPU machine without Rust: `gpu-pack/gpu-check REPORT_DIR` there.
    GpuPack(gpu_pack::GpuPackArgs),
    /// Extract the authors' repositories that `--versus pytorch` times beside the twins, at the
    /// commits pinned in `crates/arbor-bench/pytorch/references.json`, into `runs/reference/`.
    References(references::ReferencesArgs),
}

/// Whether this machine has an NVIDIA GPU and driver (`/dev/nvidiactl`, or `nvidia-smi -L`
/// listing a GPU): what `--device auto` builds the `cuda` feature for.
fn gpu_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
        || Command::new("nvidia-smi")
            .arg("-L")
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

/// The cargo features the `--device` among `args` needs. No `--device`, or `auto`, builds the
/// default CPU backend and, on a machine with an NVIDIA GPU, the `cuda` backend too; the program
/// then picks at run time (`auto`: the GPU when it answers).
fn backend_feature(args: &[String]) -> Result<String> {
    let mut device = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--device" {
            device = it.next().map(String::as_str);
        } else if let Some(d) = a.strip_prefix("--device=") {
            device = Some(d);
        }
    }
    features_for(device.unwrap_or("auto"), gpu_present())
}

/// The feature every build of xtask's adds to its backend's: `gemm`'s AVX-512 matrix kernels,
/// picked at run time on CPUs with AVX-512F (the facade's and `arbor-bench`'s default too;
/// docs/bench.md, "AVX-512 matrix products"). xtask builds with `--no-default-features`, so it
/// names the feature itself.
const CPU_PRODUCTS: &str = "x86-v4";

/// [`backend_feature`] for a device name, knowing whether the machine has a GPU.
fn features_for(device: &str, gpu: bool) -> Result<String> {
    let device = device.to_ascii_lowercase();
    let backend = match device.as_str() {
        "auto" if gpu => "flex,cuda",
        "auto" | "flex" | "cpu" => "flex",
        "ndarray" => "ndarray",
        d if d == "cuda" || d == "gpu" || d.starts_with("cuda:") => "cuda",
        other => {
            bail!("unknown --device `{other}`: expected auto, flex, ndarray, cuda or cuda:N")
        }
    };
    Ok(format!("{backend},{CPU_PRODUCTS}"))
}

/// xtask's own flag of `cargo xtask bench`: build `arbor-bench` without the `x86-v4` feature
/// (only `gemm`'s AVX2/FMA matrix kernels, to compare with the default on an AVX-512 CPU);
/// everything else goes to `arbor-bench`.
const NO_X86_V4_FLAG: &str = "--no-x86-v4";

/// The cargo features `cargo xtask bench ARGS` builds `arbor-bench` with, and the arguments it
/// passes on (without xtask's own `--no-x86-v4`; `--help-bench` becomes `arbor-bench --help`).
fn bench_build(args: &[String]) -> Result<(String, Vec<String>)> {
    let mut feature = backend_feature(args)?;
    let mut forwarded = Vec::with_capacity(args.len());
    for a in args {
        if a == NO_X86_V4_FLAG {
            feature = feature
                .split(',')
                .filter(|f| *f != CPU_PRODUCTS)
                .collect::<Vec<_>>()
                .join(",");
        } else if a == "--help-bench" {
            forwarded.push("--help".to_string());
        } else {
            forwarded.push(a.clone());
        }
    }
    Ok((feature, forwarded))
}

fn bench(args: &[String]) -> Result<()> {
    let (feature, forwarded) = bench_build(args)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args([
            "run",
            "--release",
            "--quiet",
            "--package",
            "arbor-bench",
            "--bin",
            "arbor-bench",
        ])
        .args(["--no-default-features", "--features", &feature, "--"])
        .args(&forwarded)
        .current_dir(root())
        .status()
        .context("could not start cargo")?;
    if !status.success() {
        bail!("arbor-bench failed ({status})");
    }
    Ok(())
}

/// The workspace root (the parent of this crate's directory). `cargo run` passes the manifest
/// directory at run time; the compile-time one is only the fallback, because a build cache
/// shared by checkouts at different paths (CI's and a developer's) may run a binary built in
/// the other checkout.
fn root() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent()
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
        Cmd::Bench { args } => bench(&args),
        Cmd::Graph { check } => graph::run(&root(), check),
        Cmd::Docs { check: _ } => docs_check::run(&root()),
        Cmd::Repro(args) => repro::run(&root(), &args).map(drop),
        Cmd::GpuPack(args) => gpu_pack::run(&root(), &args).map(drop),
        Cmd::References(args) => references::run(&root(), &args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_device_picks_the_backend_feature() {
        // No --device is auto: the CPU, plus CUDA on a machine with a GPU; every build has the
        // AVX-512 matrix kernels.
        let auto = if gpu_present() {
            "flex,cuda,x86-v4"
        } else {
            "flex,x86-v4"
        };
        assert_eq!(backend_feature(&strings(&["--quick"])).unwrap(), auto);
        assert_eq!(features_for("auto", true).unwrap(), "flex,cuda,x86-v4");
        assert_eq!(features_for("AUTO", false).unwrap(), "flex,x86-v4");
        assert_eq!(
            backend_feature(&strings(&["--device", "cuda"])).unwrap(),
            "cuda,x86-v4"
        );
        assert_eq!(
            backend_feature(&strings(&["--device=cuda:1"])).unwrap(),
            "cuda,x86-v4"
        );
        assert_eq!(
            backend_feature(&strings(&["--device", "ndarray"])).unwrap(),
            "ndarray,x86-v4"
        );
        assert!(backend_feature(&strings(&["--device", "tpu"])).is_err());
    }

    #[test]
    fn no_x86_v4_is_xtasks_own_flag() {
        let (features, forwarded) =
            bench_build(&strings(&["--quick", "--no-x86-v4", "--filter", "cells"])).unwrap();
        assert!(!features.contains("x86-v4"), "{features}");
        assert!(features.starts_with("flex"), "{features}");
        assert_eq!(forwarded, strings(&["--quick", "--filter", "cells"]));
        let (features, forwarded) = bench_build(&strings(&["--help-bench"])).unwrap();
        assert!(features.ends_with(",x86-v4"), "{features}");
        assert_eq!(forwarded, strings(&["--help"]));
    }

    #[test]
    fn bench_arguments_pass_through() {
        let cli = Cli::try_parse_from(["xtask", "bench", "--quick", "--filter", "cells"]).unwrap();
        let Cmd::Bench { args } = cli.command else {
            panic!("bench")
        };
        assert_eq!(args, strings(&["--quick", "--filter", "cells"]));
    }

    #[test]
    fn repro_takes_recipes_or_list() {
        let cli = Cli::try_parse_from([
            "xtask",
            "repro",
            "logic-gold",
            "my.toml",
            "--seeds",
            "3",
            "--budget-minutes",
            "5",
            "--test",
            "a",
            "--test",
            "b",
            "--device",
            "cuda",
            "--dry-run",
        ])
        .unwrap();
        let Cmd::Repro(args) = cli.command else {
            panic!("repro")
        };
        assert_eq!(args.recipes, strings(&["logic-gold", "my.toml"]));
        assert_eq!(args.seeds, Some(3));
        assert_eq!(args.budget_minutes, Some(5.0));
        assert_eq!(args.test.len(), 2);
        assert_eq!(args.device, "cuda");
        assert!(args.dry_run && !args.list);
        assert!(Cli::try_parse_from(["xtask", "repro", "--list"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "repro"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "repro", "x", "--seeds", "0"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "repro", "x", "--list"]).is_err());
    }

    #[test]
    fn graph_takes_check() {
        let cli = Cli::try_parse_from(["xtask", "graph", "--check"]).unwrap();
        assert!(matches!(cli.command, Cmd::Graph { check: true }));
        let cli = Cli::try_parse_from(["xtask", "graph"]).unwrap();
        assert!(matches!(cli.command, Cmd::Graph { check: false }));
        let cli = Cli::try_parse_from(["xtask", "docs", "--check"]).unwrap();
        assert!(matches!(cli.command, Cmd::Docs { check: true }));
    }
}
