//! `cargo xtask gpu-pack`: everything the GPU check needs, built here, for a machine with an
//! NVIDIA GPU and no Rust toolchain.
//!
//! One cargo invocation (so the features unify once) builds, in release mode with
//! `--features cuda`: `arbor-gpu-check` and `arbor-bench` (crate `arbor-bench`) and the `snli`
//! and `logic` examples. Into `OUT/` (default `gpu-pack/`, git-ignored) go:
//! - `bin/NAME.xz`: each binary stripped and xz-compressed (a stripped binary is 40–45 MiB,
//!   most of it Burn's CUDA and CPU backends monomorphised for every model; xz makes it 7–8 MiB);
//! - `data/propositional_logic/*.xz`: the logic data the gold-tree training run reads (from
//!   `--logic-data`), compressed the same way;
//! - every file of `crates/arbor-bench/pytorch/` (`twins.py`, the models it shares with
//!   `twins/` in `twin_models.py`, `authors.py` and the
//!   `references.json` pins `authors.py` reads at import): the bench's PyTorch twins and the
//!   adapters of the authors' own modules (whose checkouts are not packed: on the GPU machine
//!   they are skipped with a note unless `$ARBOR_REFERENCE_DIR` names them);
//! - `gpu-check`: the launcher, a POSIX shell script that unpacks the pack once into a cache
//!   folder (`xz`, or Python's `lzma`) and runs `arbor-gpu-check` there;
//! - `manifest.json`: commit, features, CUDA API version, rustc, every file's packed size, the
//!   packed total and the unpacked total.
//!
//! The packed total must stay under 48 MiB; a larger pack is an error naming the largest files.
//! On the GPU machine: `gpu-pack/gpu-check REPORT_DIR` (docs/gpu.md). Needs `strip` and `xz` here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The pack's size limit.
pub const LIMIT_BYTES: u64 = 48 * 1024 * 1024;

/// The binaries of the pack: (cargo target flag, name).
pub const BINARIES: [(&str, &str); 4] = [
    ("--bin", "arbor-gpu-check"),
    ("--bin", "arbor-bench"),
    ("--example", "snli"),
    ("--example", "logic"),
];

/// The features the pack is built with.
pub const FEATURES: &str = "arbor/cuda,arbor-bench/cuda";

/// The second bench binary, `bin/arbor-bench-fusion`: `arbor-bench` with Burn's kernel fusion
/// and autotuning on CUDA, so one GPU session can time both builds side by side (docs/gpu.md).
/// Built into its own target folder (`target/gpu-fusion`), as its features differ.
pub const FUSION_FEATURES: &str = "arbor-bench/cuda-fusion";

/// `cargo xtask gpu-pack` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuPackArgs {
    /// Where to put the pack.
    #[arg(long, default_value = "gpu-pack")]
    pub out: PathBuf,
    /// The propositional-logic data (train0..6, test0..6) for the gold-tree training run.
    #[arg(long, default_value = "../shared/data/propositional_logic")]
    pub logic_data: PathBuf,
    /// The CUDA API version to compile against (`CUDARC_CUDA_VERSION`, e.g. 13000 or 12080);
    /// the GPU machine's driver must support it.
    #[arg(long, default_value = "13000")]
    pub cuda_version: String,
    /// Do not build; pack the binaries already in target/release (and target/gpu-fusion).
    #[arg(long)]
    pub no_build: bool,
    /// Leave out `bin/arbor-bench-fusion` (saves a second build of about 10 minutes cold).
    #[arg(long)]
    pub no_fusion: bool,
}

/// Builds and writes the pack; returns its manifest.
pub fn run(root: &Path, args: &GpuPackArgs) -> Result<serde_json::Value> {
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    let target_root = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target = target_root.join("release");
    let fusion_target = target_root.join("gpu-fusion");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    if !args.no_build {
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "--release", "-p", "arbor", "-p", "arbor-bench"])
            .args(["--features", FEATURES])
            .env("CUDARC_CUDA_VERSION", &args.cuda_version)
            .current_dir(root);
        for (flag, name) in BINARIES {
            cmd.args([flag, name]);
        }
        let status = cmd.status().context("could not start cargo")?;
        if !status.success() {
            bail!("building the pack failed ({status})");
        }
        if !args.no_fusion {
            let status = Command::new(&cargo)
                .args([
                    "build",
                    "--release",
                    "-p",
                    "arbor-bench",
                    "--bin",
                    "arbor-bench",
                ])
                .args(["--features", FUSION_FEATURES, "--target-dir"])
                .arg(&fusion_target)
                .env("CUDARC_CUDA_VERSION", &args.cuda_version)
                .current_dir(root)
                .status()
                .context("could not start cargo")?;
            if !status.success() {
                bail!("building arbor-bench with {FUSION_FEATURES} failed ({status})");
            }
        }
    }
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(out.join("bin"))?;
    let mut unpacked: u64 = 0;
    for (flag, name) in BINARIES {
        let built = match flag {
            "--example" => target.join("examples").join(name),
            _ => target.join(name),
        };
        let dest = out.join("bin").join(name);
        std::fs::copy(&built, &dest)
            .with_context(|| format!("copying {} (build it first)", built.display()))?;
        strip(&dest);
        unpacked += std::fs::metadata(&dest)?.len();
        xz(&dest)?;
    }
    if !args.no_fusion {
        let built = fusion_target.join("release").join("arbor-bench");
        let dest = out.join("bin").join("arbor-bench-fusion");
        std::fs::copy(&built, &dest)
            .with_context(|| format!("copying {} (build it first)", built.display()))?;
        strip(&dest);
        unpacked += std::fs::metadata(&dest)?.len();
        xz(&dest)?;
    }
    copy_pytorch(&root.join(PYTORCH_DIR), &out)?;
    let launcher = out.join("gpu-check");
    std::fs::write(&launcher, LAUNCHER)?;
    make_executable(&launcher)?;
    let logic = if args.logic_data.is_absolute() {
        args.logic_data.clone()
    } else {
        root.join(&args.logic_data)
    };
    if logic.join("train0").is_file() {
        let to = out.join("data/propositional_logic");
        std::fs::create_dir_all(&to)?;
        for entry in std::fs::read_dir(&logic)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let dest = to.join(entry.file_name());
                std::fs::copy(entry.path(), &dest)?;
                unpacked += std::fs::metadata(&dest)?.len();
                xz(&dest)?;
            }
        }
    } else {
        eprintln!(
            "gpu-pack: no logic data at {} (--logic-data): the check's logic run will fail",
            logic.display()
        );
    }
    let mut manifest = manifest(root, &out, &args.cuda_version)?;
    manifest["unpacked_bytes"] = unpacked.into();
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    check_size(&manifest)?;
    eprintln!(
        "gpu-pack: {} ({:.1} MiB packed, {:.0} MiB unpacked); on the GPU machine run `{}/gpu-check REPORT_DIR`",
        out.display(),
        manifest["total_bytes"].as_u64().unwrap_or(0) as f64 / 1048576.0,
        unpacked as f64 / 1048576.0,
        args.out.display()
    );
    Ok(manifest)
}

/// The launcher script (`gpu-check` in the pack).
pub const LAUNCHER: &str = include_str!("../assets/gpu-check.sh");

/// The bench's PyTorch side, relative to the workspace root.
const PYTORCH_DIR: &str = "crates/arbor-bench/pytorch";

/// Copies every regular file of the PyTorch folder (the scripts import and read each other, so
/// the folder goes whole: packing a list of names once left out `references.json`, and
/// `twins.py` could not import on the GPU machine). Returns the names copied.
fn copy_pytorch(from: &Path, out: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_file() || name.starts_with('.') || name.ends_with(".pyc") {
            continue;
        }
        std::fs::copy(entry.path(), out.join(&name))
            .with_context(|| format!("copying the PyTorch file {}", entry.path().display()))?;
        names.push(name);
    }
    names.sort();
    Ok(names)
}

fn make_executable(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    let _ = path;
    Ok(())
}

/// Replaces `path` by `path.xz` (`xz -6`, multi-threaded).
fn xz(path: &Path) -> Result<()> {
    let status = Command::new("xz")
        .args(["-6", "-T0", "-f"])
        .arg(path)
        .status()
        .context("running `xz` (install xz-utils)")?;
    ensure!(status.success(), "xz {} failed ({status})", path.display());
    Ok(())
}

/// Strips symbols in place with `strip`, when the machine has it (the pack works unstripped,
/// only larger).
fn strip(path: &Path) {
    match Command::new("strip").arg(path).status() {
        Ok(s) if s.success() => {}
        _ => eprintln!("gpu-pack: could not strip {} (kept as is)", path.display()),
    }
}

/// Every file under `dir`, by its path relative to `dir` (with `/`), with its size.
pub fn files(dir: &Path) -> Result<BTreeMap<String, u64>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(base, &path, out)?;
            } else {
                let rel = path
                    .strip_prefix(base)?
                    .to_string_lossy()
                    .replace('\\', "/");
                if rel != "manifest.json" {
                    out.insert(rel, entry.metadata()?.len());
                }
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

fn command_line(cmd: &str, args: &[&str], root: &Path) -> Option<String> {
    let o = Command::new(cmd)
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The manifest of the pack in `out` (read by `arbor-gpu-check`, `arbor_bench::gpu_check::Manifest`).
pub fn manifest(root: &Path, out: &Path, cuda_version: &str) -> Result<serde_json::Value> {
    let files = files(out)?;
    let total: u64 = files.values().sum();
    let commit = command_line("git", &["rev-parse", "HEAD"], root).unwrap_or("unknown".into());
    let dirty = command_line(
        "git",
        &["status", "--porcelain", "--untracked-files=no"],
        root,
    )
    .is_some_and(|s| !s.is_empty());
    Ok(serde_json::json!({
        "commit": if dirty { format!("{commit}-dirty") } else { commit },
        "features": FEATURES.split(',').collect::<Vec<_>>(),
        "cuda_version": cuda_version,
        "rustc": command_line("rustc", &["--version"], root).unwrap_or("unknown".into()),
        "files": files,
        "total_bytes": total,
    }))
}

/// Fails when the pack is over [`LIMIT_BYTES`], naming its largest files.
pub fn check_size(manifest: &serde_json::Value) -> Result<()> {
    let total = manifest["total_bytes"].as_u64().unwrap_or(0);
    if total <= LIMIT_BYTES {
        return Ok(());
    }
    let mut files: Vec<(String, u64)> = manifest["files"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
        .collect();
    files.sort_by_key(|(_, size)| std::cmp::Reverse(*size));
    let largest: Vec<String> = files
        .iter()
        .take(3)
        .map(|(k, v)| format!("{k} {:.1} MiB", *v as f64 / 1048576.0))
        .collect();
    bail!(
        "the pack is {:.1} MiB, over the {} MiB limit (largest: {})",
        total as f64 / 1048576.0,
        LIMIT_BYTES / 1048576,
        largest.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_lists_every_file_and_the_total() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/arbor-gpu-check"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.path().join("twins.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("manifest.json"), "{}").unwrap();
        let m = manifest(dir.path(), dir.path(), "13000").unwrap();
        assert_eq!(m["files"]["bin/arbor-gpu-check"], 1000);
        assert_eq!(m["files"]["twins.py"], 6);
        assert!(m["files"].get("manifest.json").is_none());
        assert_eq!(m["total_bytes"], 1006);
        assert_eq!(m["cuda_version"], "13000");
        assert_eq!(m["features"][0], "arbor/cuda");
        check_size(&m).unwrap();
    }

    #[test]
    fn the_pytorch_side_is_packed_whole_and_imports_on_its_own() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let out = tempfile::tempdir().unwrap();
        let names = copy_pytorch(&root.join(PYTORCH_DIR), out.path()).unwrap();
        for needed in ["authors.py", "references.json", "twins.py"] {
            assert!(
                names.iter().any(|n| n == needed),
                "{needed} not packed: {names:?}"
            );
        }
        // Importing the packed scripts from the pack's folder alone (no workspace around it)
        // is what the GPU machine does; it needs PyTorch here.
        let has_torch = Command::new("python3")
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_torch {
            eprintln!("import check skipped: no python3 with torch on this machine");
            return;
        }
        let refs = tempfile::tempdir().unwrap();
        let imported = Command::new("python3")
            .args(["-c", "import twins, authors; print(sorted(authors.REPOS))"])
            .current_dir(out.path())
            .env("PYTHONPATH", out.path())
            .env("ARBOR_REFERENCE_DIR", refs.path())
            .output()
            .unwrap();
        assert!(
            imported.status.success(),
            "the packed twins.py does not import: {}",
            String::from_utf8_lossy(&imported.stderr)
        );
    }

    #[test]
    fn the_launcher_unpacks_once_and_runs_the_check_with_the_pack() {
        if Command::new("xz").arg("--version").output().is_err() {
            eprintln!("skipped: no xz on this machine");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("pack");
        std::fs::create_dir_all(pack.join("bin")).unwrap();
        std::fs::create_dir_all(pack.join("data/logic")).unwrap();
        // A stand-in for arbor-gpu-check: prints its arguments and the unpacked data file.
        let fake = pack.join("bin/arbor-gpu-check");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"args: $*\"\ncat \"$2/data/logic/train0\"\n",
        )
        .unwrap();
        std::fs::write(pack.join("data/logic/train0"), "a formula\n").unwrap();
        xz(&fake).unwrap();
        xz(&pack.join("data/logic/train0")).unwrap();
        std::fs::write(pack.join("manifest.json"), r#"{"commit": "abc123"}"#).unwrap();
        let launcher = pack.join("gpu-check");
        std::fs::write(&launcher, LAUNCHER).unwrap();
        make_executable(&launcher).unwrap();
        let cache = dir.path().join("cache");
        for _ in 0..2 {
            let o = Command::new(&launcher)
                .args(["REPORT", "--parts", "parity"])
                .env("ARBOR_GPU_CACHE", &cache)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{stdout} {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                stdout.contains(&format!(
                    "args: --pack {} REPORT --parts parity",
                    cache.display()
                )),
                "{stdout}"
            );
            assert!(stdout.contains("a formula"), "{stdout}");
        }
        assert!(cache.join(".unpacked").is_file());
        // Without arguments: usage, status 2.
        let o = Command::new(&launcher).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
    }

    #[test]
    fn an_oversized_pack_is_refused_naming_its_largest_file() {
        let m = serde_json::json!({
            "files": {"bin/big": LIMIT_BYTES, "bin/small": 10},
            "total_bytes": LIMIT_BYTES + 10,
        });
        let err = check_size(&m).unwrap_err().to_string();
        assert!(
            err.contains("over the 48 MiB limit") && err.contains("bin/big 48.0 MiB"),
            "{err}"
        );
    }
}
