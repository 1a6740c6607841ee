//! `arbor-gpu-check`: everything arbor claims about CUDA, checked on a machine that has a GPU
//! and no Rust toolchain, from the folder `cargo xtask gpu-pack` builds.
//!
//! The check writes `report.json` (a [`GpuReport`]) and `report.md` to the folder named on its
//! command line:
//! - the GPU, its driver and CUDA versions (`nvidia-smi`), and PyTorch's view of it;
//! - [`crate::parity`]: every fused op and every encoder, forward and backward, at small and
//!   bench shapes, on CUDA against the CPU backend;
//! - two short training runs (the main job, `snli` on its built-in sample, and a gold-tree logic
//!   run), each on CUDA and on the CPU with the same seed, loss and accuracy side by side;
//! - `arbor-bench` on CUDA for every workload, with device memory, beside the PyTorch twins on
//!   the same GPU.
//!
//! Each step has a time limit, and a step that fails is recorded with its error while the others
//! still run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::parity::ParityRecord;

/// The pack's manifest (`manifest.json`, written by `cargo xtask gpu-pack`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `git rev-parse HEAD` when the pack was built (with `-dirty` for uncommitted changes).
    pub commit: String,
    /// The cargo features the binaries were built with.
    pub features: Vec<String>,
    /// `CUDARC_CUDA_VERSION` at build time (the CUDA API the binaries were compiled against).
    pub cuda_version: String,
    /// `rustc --version`.
    pub rustc: String,
    /// Every file of the pack with its size in bytes.
    pub files: BTreeMap<String, u64>,
    /// The sum of `files`.
    pub total_bytes: u64,
}

/// The pack's size limit: 48 MiB.
pub const PACK_LIMIT_BYTES: u64 = 48 * 1024 * 1024;

/// What the machine's GPU is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// `nvidia-smi --query-gpu=name`.
    pub name: Option<String>,
    /// Driver version.
    pub driver: Option<String>,
    /// The CUDA version the driver supports (nvidia-smi's header).
    pub cuda_driver_version: Option<String>,
    /// Total device memory, MiB.
    pub memory_mib: Option<u64>,
    /// `torch.__version__`, `torch.version.cuda` and `torch.cuda.is_available()`, when Python
    /// and PyTorch are there.
    pub torch: Option<String>,
    /// The host's CPU (the CPU reference runs there).
    pub cpu: String,
}

/// One training run on one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSide {
    /// `cuda:0` or `flex`.
    pub device: String,
    /// Exit status and, on failure, the end of the program's output.
    pub ok: bool,
    /// The last lines of output when it failed.
    pub error: Option<String>,
    /// Wall time of the whole program, s.
    pub wall_s: f64,
    /// `train_seconds` of its result.json.
    pub train_s: Option<f64>,
    /// Steps done.
    pub steps: Option<u64>,
    /// Training loss at each logged step: `(step, loss)`.
    pub losses: Vec<(u64, f64)>,
    /// Accuracy of the scored weights on each split.
    pub accuracy: BTreeMap<String, f64>,
    /// Training examples per second over the last logged window.
    pub examples_per_s: Option<f64>,
}

/// The same training run on CUDA and on the CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainComparison {
    /// `snli` or `logic`.
    pub name: String,
    /// The command line, without `--device` and `--out`.
    pub args: Vec<String>,
    /// On the GPU.
    pub cuda: TrainSide,
    /// On the CPU reference backend.
    pub cpu: TrainSide,
}

/// How one step of the check went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStatus {
    /// `parity`, `train:snli`, `bench`, ...
    pub step: String,
    /// Whether it ran to the end without an error.
    pub ok: bool,
    /// Seconds it took.
    pub seconds: f64,
    /// What went wrong.
    pub error: Option<String>,
}

/// `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    /// The device checked (`cuda:0`).
    pub device: String,
    /// The GPU and the host.
    pub gpu: GpuInfo,
    /// The pack's manifest, when the check ran from a pack.
    pub manifest: Option<Manifest>,
    /// Every step, in order.
    pub steps: Vec<StepStatus>,
    /// Op and encoder parity, CUDA against the CPU.
    pub parity: Vec<ParityRecord>,
    /// The training runs.
    pub training: Vec<TrainComparison>,
    /// The CUDA bench: the records of every workload family that finished (each family is one
    /// `arbor-bench` run, `bench/FAMILY/bench.json`), merged by [`merge_bench`], with the
    /// families that did not finish under `"unfinished"`.
    pub bench: Option<serde_json::Value>,
    /// Total seconds.
    pub seconds: f64,
}

/// Runs `cmd` with a time limit, its output captured; returns (success, output tail, seconds).
///
/// The output goes to a file, not a pipe, so a chatty program never blocks on a full pipe while
/// this waits for it; the file is removed afterwards. The command runs in a process group of its
/// own, and at the limit the whole group is killed: `arbor-bench` measures each workload in a
/// child process, and killing only the parent left that worker running on the GPU beside the
/// next family's measurements (docs/gpu.md, run 5).
pub fn run_limited(mut cmd: Command, limit: Duration) -> Result<(bool, String, f64)> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let start = Instant::now();
    let dir = std::env::temp_dir().join(format!("arbor-gpu-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join(format!("{}.log", RUNS.fetch_add(1, Ordering::Relaxed)));
    let file = std::fs::File::create(&log)?;
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() > limit {
            kill_group(&child);
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let seconds = start.elapsed().as_secs_f64();
    let mut tail = tail_lines(&output, 30);
    let ok = match status {
        Some(s) => s.success(),
        None => {
            tail.push_str(&format!("\n(killed after the {} s limit)", limit.as_secs()));
            false
        }
    };
    Ok((ok, tail, seconds))
}

/// Kills the process group `child` leads (see [`run_limited`]), its children included.
pub fn kill_group(child: &std::process::Child) {
    #[cfg(unix)]
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = child;
}

/// The bench's workloads grouped by family (the name before the first `/`: `cells`, `gumbel`,
/// ...), families in their first-listed order. The check runs one `arbor-bench` per family, so a
/// time limit that stops the bench keeps every family that finished, with its PyTorch ratios
/// (`arbor-bench` times the twins after all of its own workloads).
pub fn bench_families(names: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for name in names {
        let family = name.split('/').next().unwrap_or(name).to_string();
        match out.iter_mut().find(|(f, _)| *f == family) {
            Some((_, members)) => members.push(name.clone()),
            None => out.push((family, vec![name.clone()])),
        }
    }
    out
}

/// One `bench.json` for the report from the per-family ones: their records and PyTorch notes
/// concatenated in order, the first skip reason, and `unfinished`: one line per family that did
/// not finish (its error, or that the time limit was spent before it started).
pub fn merge_bench(parts: &[serde_json::Value], unfinished: &[String]) -> serde_json::Value {
    let mut records = Vec::new();
    let mut notes = Vec::new();
    let mut skipped = None;
    let mut commands = Vec::new();
    for p in parts {
        records.extend(p["records"].as_array().cloned().unwrap_or_default());
        notes.extend(p["versus"]["notes"].as_array().cloned().unwrap_or_default());
        if skipped.is_none() {
            skipped = p["versus"]["skipped"].as_str().map(str::to_string);
        }
        if let Some(c) = p["command"].as_str() {
            commands.push(serde_json::Value::from(c));
        }
    }
    // The same note (e.g. that `--quick` timings are indicative) comes from every family.
    let mut seen = std::collections::HashSet::new();
    notes.retain(|n| seen.insert(n.to_string()));
    let mut versus = serde_json::json!({ "notes": notes });
    if let Some(s) = skipped {
        versus["skipped"] = s.into();
    }
    serde_json::json!({
        "records": records,
        "versus": versus,
        "commands": commands,
        "unfinished": unfinished,
    })
}

/// What the report keeps of a bench family that did not finish (killed at the time limit, or
/// failed): the arbor records its workers wrote to `out/bench.partial.json` before it stopped,
/// as a part for [`merge_bench`] (no PyTorch timings: the twins run after the last workload), and
/// the line for the report's "not finished" list.
pub fn unfinished_family(
    family: &str,
    workloads: usize,
    why: &str,
    out: &Path,
) -> (Option<serde_json::Value>, String) {
    match crate::read_partial(out) {
        Some(records) => {
            let names: std::collections::BTreeSet<&str> =
                records.iter().filter_map(|r| r["name"].as_str()).collect();
            let line = format!(
                "{family} ({workloads} workloads): {why}; {} of them measured before it stopped \
                 (arbor only, without PyTorch timings)",
                names.len()
            );
            let part = serde_json::json!({ "records": records });
            (Some(part), line)
        }
        None => (None, format!("{family} ({workloads} workloads): {why}")),
    }
}

/// The last `n` lines of `s`.
pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Reads a training run's `result.json` and `metrics.jsonl` from `out`.
pub fn read_train_side(
    device: &str,
    out: &Path,
    ok: bool,
    log_tail: String,
    wall_s: f64,
) -> TrainSide {
    let mut side = TrainSide {
        device: device.into(),
        ok,
        error: (!ok).then_some(log_tail),
        wall_s,
        train_s: None,
        steps: None,
        losses: Vec::new(),
        accuracy: BTreeMap::new(),
        examples_per_s: None,
    };
    if let Ok(text) = std::fs::read_to_string(out.join("result.json")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            side.train_s = v["train_seconds"].as_f64();
            side.steps = v["steps"].as_u64();
            if let Some(splits) = v["splits"].as_object() {
                for (name, score) in splits {
                    if let Some(a) = score["accuracy"].as_f64() {
                        side.accuracy.insert(name.clone(), a);
                    }
                }
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string(out.join("metrics.jsonl")) {
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["kind"] == "train" {
                if let (Some(step), Some(loss)) = (v["step"].as_u64(), v["loss"].as_f64()) {
                    side.losses.push((step, loss));
                }
                if let Some(r) = v["examples_per_sec"].as_f64() {
                    side.examples_per_s = Some(r);
                }
            }
        }
    }
    side
}

/// Asks `nvidia-smi` and Python about the GPU.
pub fn gpu_info() -> GpuInfo {
    let mut info = GpuInfo {
        cpu: crate::system::machine(),
        ..GpuInfo::default()
    };
    let query = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .output();
    if let Ok(o) = query {
        let text = String::from_utf8_lossy(&o.stdout);
        if let Some(line) = text.lines().next() {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            info.name = f.first().map(|s| s.to_string());
            info.driver = f.get(1).map(|s| s.to_string());
            info.memory_mib = f.get(2).and_then(|s| s.parse().ok());
        }
    }
    if let Ok(o) = Command::new("nvidia-smi").output() {
        let text = String::from_utf8_lossy(&o.stdout);
        info.cuda_driver_version = text
            .split("CUDA Version:")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .map(str::to_string);
    }
    let python = std::env::var(crate::versus::PYTHON_ENV).unwrap_or_else(|_| "python3".into());
    if let Ok(o) = Command::new(python)
        .args([
            "-c",
            "import torch; print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, \
             cuda available: {torch.cuda.is_available()}')",
        ])
        .output()
    {
        if o.status.success() {
            info.torch = Some(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
    }
    info
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The markdown report.
pub fn markdown(report: &GpuReport) -> String {
    let mut md = String::new();
    let g = &report.gpu;
    let _ = writeln!(md, "# arbor GPU check\n");
    let _ = writeln!(
        md,
        "- device: `{}`, GPU: {} ({} MiB), driver {}, CUDA (driver) {}",
        report.device,
        g.name.as_deref().unwrap_or("unknown"),
        g.memory_mib.map_or("?".into(), |m| m.to_string()),
        g.driver.as_deref().unwrap_or("?"),
        g.cuda_driver_version.as_deref().unwrap_or("?"),
    );
    let _ = writeln!(md, "- host CPU (the reference backend): {}", g.cpu);
    let _ = writeln!(
        md,
        "- PyTorch: {}",
        g.torch.as_deref().unwrap_or("not available")
    );
    if let Some(m) = &report.manifest {
        let _ = writeln!(
            md,
            "- pack: commit `{}`, features {}, CUDA API {}, {}, {:.1} MiB",
            m.commit,
            m.features.join(","),
            m.cuda_version,
            m.rustc,
            m.total_bytes as f64 / 1048576.0
        );
    }
    let _ = writeln!(md, "- total: {:.0} s\n", report.seconds);
    let _ = writeln!(
        md,
        "## Steps\n\n| step | ok | seconds | error |\n| --- | --- | ---: | --- |"
    );
    for s in &report.steps {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} |",
            s.step,
            if s.ok { "yes" } else { "**no**" },
            s.seconds,
            s.error.as_deref().map_or(String::new(), one_line)
        );
    }
    if !report.parity.is_empty() {
        let passed = report.parity.iter().filter(|r| r.passed).count();
        let _ = writeln!(
            md,
            "\n## Parity: CUDA against the CPU ({passed}/{} passed)\n\n\
             Forward and backward of the same inputs and weights, over the output and every \
             gradient: the largest normwise difference ‖Δ‖/‖cpu‖ (a tensor passes when ‖Δ‖ ≤ {:.0e}·‖cpu‖ + {:.0e}·√n), the largest \
             elementwise |Δ| and |Δ| / (|cpu| + 1e-3). Times are one call each, the first one \
             on CUDA compiling its kernels.\n\n\
             | group | case | size | shape | tensors | max ‖Δ‖/‖cpu‖ | max abs Δ | max rel Δ | cuda ms | cpu ms | ok |\n\
             | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            report.parity.len(),
            crate::parity::TOLERANCE,
            crate::parity::ABS_FLOOR
        );
        for r in &report.parity {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {:.2e} | {:.2e} | {:.2e} | {:.1} | {:.1} | {} |",
                r.group,
                r.name,
                r.size,
                r.shape,
                r.tensors.len(),
                r.rel_l2,
                r.max_abs,
                r.max_rel,
                r.device_ms,
                r.reference_ms,
                match (&r.error, r.passed) {
                    (Some(e), _) => format!("**error**: {}", one_line(e)),
                    (None, true) => "yes".into(),
                    (None, false) => "**no**".into(),
                }
            );
        }
    }
    if !report.training.is_empty() {
        let _ = writeln!(
            md,
            "\n## Training: the same seed on CUDA and on the CPU\n\n\
             | run | device | ok | steps | first loss | last loss | accuracy | examples/s | train s | wall s |\n\
             | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"
        );
        for t in &report.training {
            for side in [&t.cuda, &t.cpu] {
                let acc = side
                    .accuracy
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.4}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
                    t.name,
                    side.device,
                    if side.ok { "yes" } else { "**no**" },
                    side.steps.map_or("–".into(), |s| s.to_string()),
                    fmt_opt(side.losses.first().map(|l| l.1), 4),
                    fmt_opt(side.losses.last().map(|l| l.1), 4),
                    acc,
                    fmt_opt(side.examples_per_s, 0),
                    fmt_opt(side.train_s, 1),
                    side.wall_s
                );
            }
            let _ = writeln!(md, "\n`{} {}`\n", t.name, t.args.join(" "));
        }
    }
    if let Some(bench) = &report.bench {
        let _ = writeln!(
            md,
            "\n## Bench on CUDA\n\n\
             | workload | mode | items | arbor items/s | PyTorch items/s | arbor/PyTorch | device MiB |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in bench["records"].as_array().into_iter().flatten() {
            let ours = r["items_per_s"].as_f64();
            let theirs = r["pytorch"]["items_per_s"].as_f64();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r["name"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                r["items"],
                fmt_opt(ours, 0),
                fmt_opt(theirs, 0),
                match (ours, theirs) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
                    _ => "–".into(),
                },
                fmt_opt(r["device_memory_bytes"].as_f64().map(|b| b / 1048576.0), 0),
            );
        }
        if let Some(notes) = bench["versus"]["notes"].as_array() {
            for n in notes {
                let _ = writeln!(md, "\n- {}", n.as_str().unwrap_or(""));
            }
        }
        if let Some(s) = bench["versus"]["skipped"].as_str() {
            let _ = writeln!(md, "\n- PyTorch comparison skipped: {s}");
        }
        for u in bench["unfinished"].as_array().into_iter().flatten() {
            let _ = writeln!(md, "\n- not finished: {}", u.as_str().unwrap_or(""));
        }
    }
    md
}

fn one_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .replace('|', "\\|")
}

/// Where the pack's files are: the folder holding the running binary's `bin/` folder, or the
/// binary's own folder.
pub fn pack_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let bin = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    match bin.file_name().and_then(|n| n.to_str()) {
        Some("bin") => bin.parent().map(Path::to_path_buf).unwrap_or(bin),
        _ => bin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_report() -> GpuReport {
        GpuReport {
            device: "cuda:0".into(),
            gpu: GpuInfo {
                name: Some("NVIDIA H100 80GB HBM3".into()),
                driver: Some("580.1".into()),
                cuda_driver_version: Some("13.0".into()),
                memory_mib: Some(81559),
                torch: None,
                cpu: "x (16 cores)".into(),
            },
            manifest: None,
            steps: vec![StepStatus {
                step: "parity".into(),
                ok: false,
                seconds: 1.0,
                error: Some("line one\nop | failed".into()),
            }],
            parity: vec![ParityRecord {
                group: "op".into(),
                name: "gated_output".into(),
                size: "small".into(),
                shape: "rows 6, H 8".into(),
                tensors: vec![],
                max_abs: 1e-7,
                max_rel: 2e-7,
                rel_l2: 3e-8,
                passed: true,
                error: None,
                device_ms: 1.0,
                reference_ms: 0.5,
            }],
            training: vec![],
            bench: Some(serde_json::json!({"records": [
                {"name": "cells/lstm", "mode": "forward", "items": 3200, "items_per_s": 2000.0,
                 "pytorch": {"items_per_s": 1000.0}, "device_memory_bytes": 10485760}
            ]})),
            seconds: 12.0,
        }
    }

    #[test]
    fn the_markdown_report_names_the_gpu_and_every_section() {
        let md = markdown(&sample_report());
        assert!(md.contains("NVIDIA H100 80GB HBM3 (81559 MiB)"), "{md}");
        assert!(
            md.contains("| parity | **no** | 1.0 | op \\| failed |"),
            "{md}"
        );
        assert!(
            md.contains("## Parity: CUDA against the CPU (1/1 passed)"),
            "{md}"
        );
        assert!(
            md.contains("| cells/lstm | forward | 3200 | 2000 | 1000 | 2.00× | 10 |"),
            "{md}"
        );
    }

    #[test]
    fn the_bench_runs_family_by_family_in_listed_order() {
        let names: Vec<String> = [
            "cells/a/lstm",
            "gumbel/d100",
            "cells/b/lstm",
            "gumbel/length/n8",
            "r2d2",
        ]
        .map(String::from)
        .to_vec();
        let fams = bench_families(&names);
        let got: Vec<(&str, usize)> = fams.iter().map(|(f, m)| (f.as_str(), m.len())).collect();
        assert_eq!(got, vec![("cells", 2), ("gumbel", 2), ("r2d2", 1)]);
        assert_eq!(fams[0].1, vec!["cells/a/lstm", "cells/b/lstm"]);
    }

    #[test]
    fn merged_bench_parts_keep_every_record_and_say_what_did_not_finish() {
        let a = serde_json::json!({"command": "bench --filter cells/", "records": [{"name": "cells/x"}],
            "versus": {"notes": ["n1"]}});
        let b = serde_json::json!({"records": [{"name": "gumbel/y"}, {"name": "gumbel/z"}],
            "versus": {"notes": ["n1", "n2"], "skipped": "no torch"}});
        let m = merge_bench(&[a, b], &["spinn: killed after the 10 s limit".to_string()]);
        let names: Vec<&str> = m["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["cells/x", "gumbel/y", "gumbel/z"]);
        assert_eq!(m["versus"]["notes"], serde_json::json!(["n1", "n2"]));
        assert_eq!(m["versus"]["skipped"], "no torch");
        let mut report = sample_report();
        report.bench = Some(m);
        let md = markdown(&report);
        assert!(
            md.contains("- not finished: spinn: killed after the 10 s limit"),
            "{md}"
        );
        assert!(md.contains("| gumbel/z |"), "{md}");
    }

    #[test]
    fn a_killed_family_keeps_the_workloads_it_finished() {
        let dir = tempfile::tempdir().unwrap();
        let why = "(killed after the 113 s limit)";
        let (part, line) = unfinished_family("spinn", 3, why, dir.path());
        assert!(part.is_none());
        assert_eq!(line, format!("spinn (3 workloads): {why}"));
        // One workload's two modes finished before the kill.
        std::fs::write(
            dir.path().join(crate::PARTIAL_FILE),
            r#"{"records": [{"name": "spinn/thin-stack", "mode": "forward"},
                            {"name": "spinn/thin-stack", "mode": "forward_backward"}]}"#,
        )
        .unwrap();
        let (part, line) = unfinished_family("spinn", 3, why, dir.path());
        let m = merge_bench(&[part.unwrap()], std::slice::from_ref(&line));
        assert_eq!(m["records"].as_array().unwrap().len(), 2);
        assert!(line.contains("1 of them measured"), "{line}");
        assert!(line.starts_with("spinn (3 workloads): (killed"), "{line}");
    }

    #[test]
    fn the_json_report_round_trips() {
        let r = sample_report();
        let text = serde_json::to_string(&r).unwrap();
        let back: GpuReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_training_side_is_read_from_its_result_and_metrics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("result.json"),
            r#"{"train_seconds": 3.5, "steps": 20, "splits": {"valid": {"accuracy": 0.5, "correct": 1, "total": 2}}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("metrics.jsonl"),
            "{\"kind\":\"train\",\"step\":10,\"loss\":1.1,\"examples_per_sec\":100.0}\n\
             {\"kind\":\"eval:valid\",\"step\":10,\"loss\":1.0}\n\
             {\"kind\":\"train\",\"step\":20,\"loss\":0.9,\"examples_per_sec\":120.0}\n",
        )
        .unwrap();
        let side = read_train_side("cuda:0", dir.path(), true, String::new(), 5.0);
        assert_eq!(side.steps, Some(20));
        assert_eq!(side.losses, vec![(10, 1.1), (20, 0.9)]);
        assert_eq!(side.accuracy.get("valid"), Some(&0.5));
        assert_eq!(side.examples_per_s, Some(120.0));
        assert!(side.error.is_none());
    }

    #[test]
    fn a_killed_command_is_reported_with_its_limit() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; sleep 5"]);
        let (ok, tail, secs) = run_limited(cmd, Duration::from_millis(300)).unwrap();
        assert!(!ok);
        assert!(tail.contains("started") && tail.contains("limit"), "{tail}");
        assert!(secs < 4.0);
    }

    /// As `arbor-bench` with a worker: the command's own child dies with it at the limit.
    #[cfg(unix)]
    #[test]
    fn a_killed_command_takes_its_children_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 60 & echo $! > {}; wait", pid_file.display()));
        let (ok, _, _) = run_limited(cmd, Duration::from_millis(500)).unwrap();
        assert!(!ok);
        let pid: libc::pid_t = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Dead means gone, or a zombie nobody has reaped yet (a container's PID 1 may never
        // reap orphans); wait a moment for the signal to land.
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: signal 0 only asks whether the process exists.
            let exists = unsafe { libc::kill(pid, 0) == 0 };
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, r)| r.starts_with('Z'))
            });
            !exists || zombie
        });
        assert!(gone, "the command's child {pid} is still running");
    }
}
