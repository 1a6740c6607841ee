//! The arbor benchmark suite, run by `cargo xtask bench`.
//!
//! Every workload is timed the same way on any backend: warm-up, then repeated runs with the
//! device synchronised inside the timed region (each run ends by reading back a scalar that
//! depends on all its work), in evaluation mode (forward on the inner backend, `valid()`
//! modules) and training mode (forward+backward on `Autodiff<B>`). Each record has the median,
//! the spread, items/s, the peak RSS and (on CUDA) the device memory held, plus the workload's
//! parameters, the backend, the arbor version and the git commit.
//!
//! Outputs: `bench.json`, `bench.md` (a markdown table with derived ratios and scaling fits)
//! and an SVG plot per scaling sweep.

#![warn(missing_docs)]

use arbor_cells::ArborBackend;
use std::path::Path;

use anyhow::{Context, Result};

pub mod git;
pub mod gpu_check;
pub mod harness;
pub mod parity;
pub mod report;
pub mod system;
pub mod versus;
pub mod workloads;

pub use harness::{measure, Mode, Probe, Record, Settings, Workload};
pub use report::{Ratio, RatioSpec, Report, ScalingFit};
pub use system::RunInfo;
pub use versus::{TorchTiming, Versus};

/// Whether a workload is selected by the filters (substrings of its name; none selects all).
pub fn selected(name: &str, filters: &[String]) -> bool {
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

/// The names of every workload in the suite.
pub fn workload_names<B: ArborBackend>(device: &B::Device) -> Vec<String> {
    workloads::suite::<B>(device)
        .into_iter()
        .map(|w| w.name)
        .collect()
}

/// What the PyTorch twins need to know of each named workload: `{name, modes, inputs}` (modes
/// by their labels, inputs from [`Workload::with_twin_inputs`]).
pub fn twin_workloads<B: ArborBackend>(
    device: &B::Device,
    names: &[String],
) -> Vec<serde_json::Value> {
    workloads::suite::<B>(device)
        .into_iter()
        .filter(|w| names.contains(&w.name))
        .map(|w| {
            let modes: Vec<&str> = w.modes.iter().map(|m| m.label()).collect();
            serde_json::json!({ "name": w.name, "modes": modes, "inputs": w.twin_inputs })
        })
        .collect()
}

/// Runs the workloads whose names `select` accepts on backend `B` and gathers the report.
///
/// `progress` sees each record as soon as it is measured.
///
/// # Errors
/// When nothing matches the filters, or a workload fails (device error, non-finite output).
pub fn run_suite<B: ArborBackend>(
    device: &B::Device,
    device_name: &str,
    settings: &Settings,
    select: impl Fn(&str) -> bool,
    probe: &Probe,
    command: &str,
    mut progress: impl FnMut(&Record),
) -> Result<Report> {
    let info = RunInfo::collect(&B::name(device), device_name);
    let chosen: Vec<Workload> = workloads::suite::<B>(device)
        .into_iter()
        .filter(|w| select(&w.name))
        .collect();
    if chosen.is_empty() {
        anyhow::bail!(
            "no workload selected; `--list` shows the names ({} in all)",
            workload_names::<B>(device).len()
        );
    }
    let mut records = Vec::new();
    for w in chosen {
        records.extend(measure(w, settings, probe, &info, &mut progress)?);
    }
    Ok(Report::from_records(command, *settings, records))
}

impl Report {
    /// A report from measured records, with the suite's ratios and scaling fits.
    pub fn from_records(command: &str, settings: Settings, records: Vec<Record>) -> Self {
        Report {
            command: command.to_string(),
            settings,
            ratios: report::ratios(&workloads::ratio_specs(), &records),
            scaling: report::scaling_fits(&records),
            records,
            versus: None,
        }
    }
}

/// The file an isolated run (one process per workload) rewrites in its output folder each time
/// a workload finishes: the records measured so far, so a run killed halfway (the GPU check's
/// time limit, a lost machine) keeps them. Removed when `bench.json` is written.
pub const PARTIAL_FILE: &str = "bench.partial.json";

/// Writes the records measured so far to `dir/bench.partial.json`, atomically (a temporary file
/// renamed over it, so a reader never sees half a file).
///
/// # Errors
/// When the folder or the file cannot be written.
pub fn write_partial(dir: &Path, records: &[&Record]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(PARTIAL_FILE);
    let tmp = dir.join(format!("{PARTIAL_FILE}.tmp"));
    let text = serde_json::to_string_pretty(&serde_json::json!({ "records": records }))?;
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The records of `dir/bench.partial.json` (JSON values, as `bench.json`'s), or `None` when the
/// file is missing, unreadable or holds none.
pub fn read_partial(dir: &Path) -> Option<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(dir.join(PARTIAL_FILE)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let records = v["records"].as_array()?.clone();
    (!records.is_empty()).then_some(records)
}

/// Writes `bench.json`, `bench.md` and the sweep plots into `dir` (created if missing), and
/// returns the markdown.
///
/// # Errors
/// When a file cannot be written.
pub fn write_outputs(report: &Report, dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("bench.json");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut md = report::markdown(report);
    let plots = report::plots(&report.records, dir)?;
    if !plots.is_empty() {
        md.push_str("\n**Plots**: ");
        let names: Vec<String> = plots
            .iter()
            .filter_map(|p| p.file_name())
            .map(|f| format!("`{}`", f.to_string_lossy()))
            .collect();
        md.push_str(&names.join(", "));
        md.push('\n');
    }
    let path = dir.join("bench.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    Ok(md)
}
