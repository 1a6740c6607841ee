//! `--versus pytorch`: the PyTorch twins of the workloads (`crates/arbor-bench/pytorch/twins.py`),
//! run in a child Python process right after each workload's arbor runs (so both sides of a row
//! are timed in the same state of the machine), and their timings attached to the records as a
//! `pytorch` column and an arbor/PyTorch ratio.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::harness::{Mode, Record, Settings};

/// Environment variable naming the Python interpreter (default `python3`).
pub const PYTHON_ENV: &str = "ARBOR_PYTHON";
/// Environment variable naming the twins script (default: the one in this crate's sources).
pub const TWINS_ENV: &str = "ARBOR_TWINS";
/// The file (in `--out`) the twins' spec is written to: each run's, then every workload's.
pub const SPEC_FILE: &str = "pytorch-spec.json";
/// The prefix of the twins' result lines on stdout.
pub const TWIN_PREFIX: &str = "arbor-twin: ";

/// What PyTorch measured for one workload and mode, as written into the record's `pytorch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TorchTiming {
    /// Median of the timed runs, in seconds.
    pub median_s: f64,
    /// Fastest run, in seconds.
    pub min_s: f64,
    /// Slowest run, in seconds.
    pub max_s: f64,
    /// Items per second at the median.
    pub items_per_s: f64,
    /// `torch.get_num_threads()` while timing (set to arbor's thread count).
    pub threads: usize,
    /// `torch.__version__`.
    pub torch_version: String,
    /// Every timed run, in seconds, in order.
    #[serde(default)]
    pub times_s: Vec<f64>,
    /// R2D2 only: the compositions of one run (the pruned chart's work depends on its decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compositions: Option<u64>,
    /// The authors' own module that was timed (`owner/name@commit`, `pytorch/authors.py`);
    /// `None` for the twin (`pytorch/twins.py`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One result line of `twins.py`.
#[derive(Debug, Clone, PartialEq)]
pub enum TwinLine {
    /// A workload timed in one mode.
    Timed {
        /// Workload name.
        name: String,
        /// Mode.
        mode: Mode,
        /// The timing.
        timing: TorchTiming,
    },
    /// A workload the twins could not run (no twin, or an exception), with the reason.
    Failed {
        /// Workload name.
        name: String,
        /// Why.
        error: String,
        /// The authors' module that failed (`None`: the twin).
        source: Option<String>,
    },
}

/// How the comparison went, written into the report (`versus` in `bench.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versus {
    /// `pytorch`.
    pub framework: String,
    /// The Python interpreter used.
    pub python: String,
    /// `torch.__version__`, when torch could be imported.
    pub torch_version: Option<String>,
    /// Threads on both sides: arbor's CPU backend pool and `torch.set_num_threads`.
    pub threads: usize,
    /// `OMP_WAIT_POLICY` as the twins inherited it (`None`: unset, PyTorch's default). `PASSIVE`
    /// slows PyTorch's many-small-op workloads on a quiet machine (1.2–3.8× on the 2-core
    /// Zen 3 VM, docs/bench.md), so a report says which one ran.
    #[serde(default)]
    pub omp_wait_policy: Option<String>,
    /// Whether each workload's twins ran right after its arbor runs (the default, one child
    /// process per workload), rather than every twin after every arbor run (`--no-isolate`,
    /// and reports written before 2026-12-01). On a machine whose speed drifts over minutes,
    /// only the first keeps a row's two sides in the same machine state.
    #[serde(default)]
    pub interleaved: bool,
    /// Why the comparison did not run (torch missing, script missing, the twins crashed).
    pub skipped: Option<String>,
    /// Workloads without a PyTorch result and why, and caveats.
    pub notes: Vec<String>,
}

impl Mode {
    /// The mode whose [`label`](Mode::label) is `label`.
    pub fn from_label(label: &str) -> Option<Mode> {
        Mode::BOTH.into_iter().find(|m| m.label() == label)
    }
}

/// `arbor throughput / PyTorch throughput` = PyTorch median / arbor median: above 1, arbor is
/// faster. `None` unless both times are finite and positive.
pub fn ratio_vs_pytorch(arbor_median_ms: f64, torch_median_s: f64) -> Option<f64> {
    let ok = |t: f64| t.is_finite() && t > 0.0;
    (ok(arbor_median_ms) && ok(torch_median_s)).then(|| torch_median_s * 1e3 / arbor_median_ms)
}

/// A ratio for the table: `1.23×`, or `—` when there is none.
pub fn format_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "—".to_string(), |r| format!("{r:.2}×"))
}

/// Parses the result lines (`arbor-twin: {json}`) of the twins' stdout; other lines are ignored.
///
/// # Errors
/// When a result line is not valid JSON or lacks a field; the error quotes the line.
pub fn parse_twin_output(stdout: &str) -> Result<Vec<TwinLine>> {
    #[derive(Deserialize)]
    struct Timed {
        name: String,
        mode: String,
        #[serde(flatten)]
        timing: TorchTiming,
    }
    let mut out = Vec::new();
    for (i, line) in stdout.lines().enumerate() {
        let Some(json) = line.trim_end().strip_prefix(TWIN_PREFIX) else {
            continue;
        };
        let context = || format!("twins.py output line {}: {line}", i + 1);
        let value: serde_json::Value = serde_json::from_str(json).with_context(context)?;
        if let Some(error) = value.get("error") {
            let name = value
                .get("name")
                .and_then(|n| n.as_str())
                .with_context(context)?;
            out.push(TwinLine::Failed {
                name: name.to_string(),
                error: error.as_str().unwrap_or("unknown error").to_string(),
                source: value
                    .get("source")
                    .and_then(|s| s.as_str())
                    .map(str::to_string),
            });
            continue;
        }
        let t: Timed = serde_json::from_value(value).with_context(context)?;
        let Some(mode) = Mode::from_label(&t.mode) else {
            bail!("{}: unknown mode {:?}", context(), t.mode);
        };
        out.push(TwinLine::Timed {
            name: t.name,
            mode,
            timing: t.timing,
        });
    }
    Ok(out)
}

/// The twins' lines of several rounds (`arbor-bench --rounds`) as one line per workload, mode
/// and module, in the order they first appear: the timed runs of every round in order and the
/// statistics over all of them; of a workload's failures, the first.
pub fn merge_rounds(lines: Vec<TwinLine>) -> Vec<TwinLine> {
    let mut merged: Vec<TwinLine> = Vec::new();
    for line in lines {
        let same = merged.iter_mut().find(|m| match (&**m, &line) {
            (
                TwinLine::Timed { name, mode, timing },
                TwinLine::Timed {
                    name: n,
                    mode: md,
                    timing: t,
                },
            ) => name == n && mode == md && timing.source == t.source,
            (
                TwinLine::Failed { name, source, .. },
                TwinLine::Failed {
                    name: n, source: s, ..
                },
            ) => name == n && source == s,
            _ => false,
        });
        match (same, line) {
            (Some(TwinLine::Timed { timing, .. }), TwinLine::Timed { timing: t, .. })
                if !timing.times_s.is_empty() && !t.times_s.is_empty() =>
            {
                // Items per run, from the first round's throughput at its median.
                let items = timing.items_per_s * timing.median_s;
                timing.times_s.extend(&t.times_s);
                timing.median_s = crate::harness::median(&timing.times_s);
                timing.min_s = timing.min_s.min(t.min_s);
                timing.max_s = timing.max_s.max(t.max_s);
                timing.items_per_s = items / timing.median_s;
                timing.compositions = t.compositions.or(timing.compositions);
            }
            (Some(_), _) => {}
            (None, line) => merged.push(line),
        }
    }
    merged
}

/// Attaches the PyTorch timings to the matching records (same name and mode): the twin's as
/// `pytorch` with `ratio_vs_pytorch`, the authors' module's (a line with a `source`) as
/// `pytorch_authors` with `ratio_vs_authors`. Returns one note per record left without a twin
/// time, and one per authors' module that failed.
pub fn attach(records: &mut [Record], lines: &[TwinLine]) -> Vec<String> {
    let mut notes = Vec::new();
    for r in records.iter_mut() {
        let timed = |authors: bool| {
            lines.iter().find_map(|l| match l {
                TwinLine::Timed { name, mode, timing }
                    if *name == r.name && *mode == r.mode && timing.source.is_some() == authors =>
                {
                    Some(timing.clone())
                }
                _ => None,
            })
        };
        let failure = |authors: bool| {
            lines.iter().find_map(|l| match l {
                TwinLine::Failed {
                    name,
                    error,
                    source,
                } if *name == r.name && source.is_some() == authors => {
                    Some((error.clone(), source.clone()))
                }
                _ => None,
            })
        };
        match timed(false) {
            Some(t) => {
                r.ratio_vs_pytorch = ratio_vs_pytorch(r.median_ms, t.median_s);
                r.pytorch = Some(t);
            }
            None => {
                let why = failure(false).map_or_else(
                    || "the twins printed no result for it".to_string(),
                    |(e, _)| e,
                );
                notes.push(format!(
                    "`{}` ({}): no PyTorch time: {why}",
                    r.name,
                    r.mode.label()
                ));
            }
        }
        match timed(true) {
            Some(t) => {
                r.ratio_vs_authors = ratio_vs_pytorch(r.median_ms, t.median_s);
                r.pytorch_authors = Some(t);
            }
            None => {
                if let Some((why, source)) = failure(true) {
                    notes.push(format!(
                        "`{}` ({}): the authors' module ({}) did not run: {why}",
                        r.name,
                        r.mode.label(),
                        source.unwrap_or_default()
                    ));
                }
            }
        }
    }
    notes.dedup();
    notes
}

/// The smaller of the ratios against the twin and against the authors' module: arbor against
/// the fastest PyTorch code measured for the workload.
pub fn ratio_vs_fastest(record: &Record) -> Option<f64> {
    match (record.ratio_vs_pytorch, record.ratio_vs_authors) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The thread count of arbor's CPU backends: Burn's `flex` runs its parallel kernels (matmuls
/// through `gemm`, reductions) on rayon's global pool, which has `RAYON_NUM_THREADS` threads
/// when that is set to a positive number, else one per logical CPU
/// ([`arbor_train::threads::rayon_default_threads`]).
pub fn arbor_threads() -> usize {
    arbor_train::threads::rayon_default_threads()
}

/// `OMP_WAIT_POLICY` from the environment the twins inherit; `None` when unset or blank.
pub fn omp_wait_policy() -> Option<String> {
    std::env::var("OMP_WAIT_POLICY")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The Python interpreter: `$ARBOR_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var(PYTHON_ENV)
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "python3".to_string())
}

/// The twins script: `$ARBOR_TWINS`, else this crate's `pytorch/twins.py`, else `twins.py` next
/// to the executable (for a binary copied to another machine; copy `twin_models.py`, the models
/// it imports, beside it too: `cargo xtask gpu-pack` copies the whole `pytorch/` folder).
///
/// # Errors
/// When none of them exists.
pub fn twins_script() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var(TWINS_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{TWINS_ENV}={} is not a file", p.display()))
        };
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("pytorch/twins.py");
    if source.is_file() {
        return Ok(source);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("twins.py")));
    match beside {
        Some(p) if p.is_file() => Ok(p),
        _ => Err(format!(
            "the twins script was not found ({} is missing; set {TWINS_ENV})",
            source.display()
        )),
    }
}

/// Checks that `python` can `import torch` and returns `torch.__version__`.
///
/// # Errors
/// A one-line reason: the interpreter could not be started, or the import failed.
pub fn probe_torch(python: &str) -> Result<String, String> {
    let out = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{python}` ({e})"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "`{python} -c \"import torch\"` failed: {}",
            last.unwrap_or("no error message").trim()
        ));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if version.is_empty() {
        return Err(format!("`{python}` imported torch but printed no version"));
    }
    Ok(version)
}

/// The line printed when the comparison cannot run.
pub fn skip_message(reason: &str) -> String {
    format!(
        "--versus pytorch: skipped: {reason}. Get PyTorch with `pip install torch` (the CPU \
         wheel is enough; `{PYTHON_ENV}` picks the interpreter) and run again; arbor-only results follow."
    )
}

/// What the twins are asked to run.
#[derive(Debug, Clone, Serialize)]
pub struct TwinSpec {
    /// The harness's timing policy (the same as arbor's).
    pub settings: Settings,
    /// `torch.set_num_threads`.
    pub threads: usize,
    /// `cpu`, or `cuda` when arbor ran on CUDA.
    pub device: String,
    /// One entry per workload: `{name, modes, inputs, reps}`, `reps` the number of timed runs
    /// arbor made in each mode, which the PyTorch side then makes too.
    pub workloads: Vec<serde_json::Value>,
    /// Whether the authors' own modules are timed beside the twins (`pytorch/authors.py`).
    pub authors: bool,
}

/// Sets each spec workload's `reps` to the number of timed runs arbor made per mode, so that
/// both sides are timed equally often.
pub fn match_repetitions(workloads: &mut [serde_json::Value], records: &[Record]) {
    for w in workloads.iter_mut() {
        let Some(name) = w.get("name").and_then(|n| n.as_str()).map(str::to_string) else {
            continue;
        };
        let reps: serde_json::Map<String, serde_json::Value> = records
            .iter()
            .filter(|r| r.name == name && !r.times_ms.is_empty())
            .map(|r| (r.mode.label().to_string(), r.times_ms.len().into()))
            .collect();
        if let Some(obj) = w.as_object_mut() {
            obj.insert("reps".to_string(), reps.into());
        }
    }
}

/// Runs the twins of `spec` with `python script --spec FILE` (the spec written to `spec_path`),
/// their progress going to stderr, and parses their results.
///
/// # Errors
/// When the spec cannot be written, Python cannot be started, the script dies without results,
/// or its output is malformed.
pub fn run_twins(
    python: &str,
    script: &Path,
    spec: &TwinSpec,
    spec_path: &Path,
) -> Result<Vec<TwinLine>> {
    std::fs::write(spec_path, serde_json::to_string(spec)?)
        .with_context(|| format!("writing {}", spec_path.display()))?;
    let out = Command::new(python)
        .arg(script)
        .arg("--spec")
        .arg(spec_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running `{python} {}`", script.display()))?;
    let lines = parse_twin_output(&String::from_utf8_lossy(&out.stdout))?;
    // Exit status 1 means some workloads failed; their `error` lines say why.
    if lines.is_empty() && !out.status.success() {
        bail!("`{python} {}` failed ({})", script.display(), out.status);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = r#"pytorch twins: noise that is not a result
arbor-twin: {"name": "cells/a", "group": "cells", "mode": "forward", "items": 10, "unit": "tokens", "times_s": [0.2, 0.1, 0.3], "median_s": 0.2, "min_s": 0.1, "max_s": 0.3, "items_per_s": 50.0, "threads": 2, "torch_version": "2.15.0", "device": "cpu"}
arbor-twin: {"name": "cells/a", "mode": "forward+backward", "median_s": 0.5, "min_s": 0.5, "max_s": 0.5, "items_per_s": 20.0, "threads": 2, "torch_version": "2.15.0", "compositions": 64}
arbor-twin: {"name": "cells/b", "error": "no PyTorch twin"}
"#;

    #[test]
    fn rounds_merge_into_one_line_per_workload_mode_and_module() {
        let round = |times: &str, median: f64, authors_median: f64| {
            let authors = format!(
                r#"arbor-twin: {{"name": "cells/a", "mode": "forward", "times_s": [{authors_median}], "median_s": {authors_median}, "min_s": {authors_median}, "max_s": {authors_median}, "items_per_s": {}, "threads": 2, "torch_version": "2.15.0", "source": "o/n@c"}}"#,
                10.0 / authors_median
            );
            let text = format!(
                "arbor-twin: {{\"name\": \"cells/a\", \"mode\": \"forward\", \"times_s\": [{times}], \"median_s\": {median}, \"min_s\": 0.1, \"max_s\": 0.4, \"items_per_s\": {}, \"threads\": 2, \"torch_version\": \"2.15.0\"}}\n{authors}\narbor-twin: {{\"name\": \"cells/b\", \"error\": \"no PyTorch twin\"}}\n",
                10.0 / median
            );
            parse_twin_output(&text).unwrap()
        };
        let lines = [round("0.2, 0.1", 0.15, 0.5), round("0.4, 0.3", 0.35, 0.7)].concat();
        let merged = merge_rounds(lines);
        assert_eq!(merged.len(), 3, "{merged:?}");
        let TwinLine::Timed { timing, .. } = &merged[0] else {
            panic!("{:?}", merged[0])
        };
        assert_eq!(timing.source, None);
        assert_eq!(timing.times_s, [0.2, 0.1, 0.4, 0.3]);
        assert!((timing.median_s - 0.25).abs() < 1e-12);
        assert_eq!((timing.min_s, timing.max_s), (0.1, 0.4));
        assert!((timing.items_per_s - 10.0 / 0.25).abs() < 1e-9);
        let TwinLine::Timed { timing, .. } = &merged[1] else {
            panic!("{:?}", merged[1])
        };
        assert_eq!(timing.source.as_deref(), Some("o/n@c"));
        assert_eq!(timing.times_s, [0.5, 0.7]);
        assert!(matches!(&merged[2], TwinLine::Failed { name, .. } if name == "cells/b"));
    }

    #[test]
    fn parses_timings_and_failures() {
        let lines = parse_twin_output(OUTPUT).unwrap();
        assert_eq!(lines.len(), 3);
        match &lines[0] {
            TwinLine::Timed { name, mode, timing } => {
                assert_eq!(name, "cells/a");
                assert_eq!(*mode, Mode::Forward);
                assert_eq!(timing.median_s, 0.2);
                assert_eq!(timing.times_s, vec![0.2, 0.1, 0.3]);
                assert_eq!(timing.threads, 2);
                assert_eq!(timing.torch_version, "2.15.0");
                assert_eq!(timing.compositions, None);
            }
            other => panic!("{other:?}"),
        }
        match &lines[1] {
            TwinLine::Timed { mode, timing, .. } => {
                assert_eq!(*mode, Mode::ForwardBackward);
                assert!(timing.times_s.is_empty());
                assert_eq!(timing.compositions, Some(64));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            lines[2],
            TwinLine::Failed {
                name: "cells/b".into(),
                error: "no PyTorch twin".into(),
                source: None
            }
        );
    }

    #[test]
    fn malformed_lines_are_errors_that_quote_the_line() {
        let err = parse_twin_output("arbor-twin: {not json").unwrap_err();
        assert!(format!("{err:#}").contains("{not json"), "{err:#}");
        let err = parse_twin_output(r#"arbor-twin: {"name": "x", "mode": "forward"}"#).unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
        let bad_mode = r#"arbor-twin: {"name": "x", "mode": "sideways", "median_s": 1, "min_s": 1, "max_s": 1, "items_per_s": 1, "threads": 1, "torch_version": "t"}"#;
        let err = parse_twin_output(bad_mode).unwrap_err();
        assert!(err.to_string().contains("sideways"), "{err}");
        assert!(parse_twin_output("").unwrap().is_empty());
    }

    #[test]
    fn authors_lines_carry_their_source() {
        let out = r#"arbor-twin: {"name": "g/a", "mode": "forward", "median_s": 0.5, "min_s": 0.5, "max_s": 0.5, "items_per_s": 2.0, "threads": 1, "torch_version": "t", "source": "o/r@abc1234"}
arbor-twin: {"name": "g/a", "source": "FastTrees", "error": "no checkout"}
"#;
        let lines = parse_twin_output(out).unwrap();
        match &lines[0] {
            TwinLine::Timed { timing, .. } => {
                assert_eq!(timing.source.as_deref(), Some("o/r@abc1234"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            lines[1],
            TwinLine::Failed {
                name: "g/a".into(),
                error: "no checkout".into(),
                source: Some("FastTrees".into())
            }
        );
    }

    #[test]
    fn the_spec_asks_for_as_many_runs_as_arbor_made() {
        let mut workloads = vec![
            serde_json::json!({"name": "g/a", "modes": ["forward"]}),
            serde_json::json!({"name": "g/b"}),
        ];
        let record = |name: &str, mode: Mode, runs: usize| {
            let mut r: Record = serde_json::from_value(serde_json::json!({
                "name": name, "group": "g", "mode": mode, "params": {}, "items": 1,
                "unit": "x", "run": crate::system::RunInfo::collect("flex", "flex"),
                "warmup": 0, "times_ms": [], "median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0,
                "spread_pct": 0.0, "items_per_s": 1.0, "peak_rss_bytes": null,
                "device_memory_bytes": null, "sweep": null
            }))
            .unwrap();
            r.times_ms = vec![1.0; runs];
            r
        };
        let records = [
            record("g/a", Mode::Forward, 7),
            record("g/a", Mode::ForwardBackward, 3),
        ];
        match_repetitions(&mut workloads, &records);
        assert_eq!(
            workloads[0]["reps"],
            serde_json::json!({"forward": 7, "forward+backward": 3})
        );
        assert_eq!(workloads[1]["reps"], serde_json::json!({}));
    }

    #[test]
    fn ratio_is_arbor_throughput_over_pytorch_throughput() {
        // arbor 100 ms, PyTorch 0.25 s: arbor does 2.5× the work per second.
        assert_eq!(ratio_vs_pytorch(100.0, 0.25), Some(2.5));
        assert_eq!(ratio_vs_pytorch(400.0, 0.1), Some(0.25));
        assert_eq!(ratio_vs_pytorch(0.0, 0.1), None);
        assert_eq!(ratio_vs_pytorch(1.0, f64::NAN), None);
        assert_eq!(ratio_vs_pytorch(-1.0, 0.1), None);
        assert_eq!(format_ratio(Some(2.5)), "2.50×");
        assert_eq!(format_ratio(Some(0.123)), "0.12×");
        assert_eq!(format_ratio(None), "—");
    }

    #[test]
    fn modes_round_trip_through_their_labels() {
        for m in Mode::BOTH {
            assert_eq!(Mode::from_label(m.label()), Some(m));
        }
        assert_eq!(Mode::from_label("forward-backward"), None);
    }

    #[test]
    fn a_missing_interpreter_is_a_reason_not_a_panic() {
        let err = probe_torch("/nonexistent/python-for-arbor-tests").unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
        assert!(skip_message(&err).contains("pip install torch"));
    }

    #[test]
    fn thread_count_is_positive() {
        assert!(arbor_threads() >= 1);
    }
}
