//! `arbor-bench --quick` on the smallest workloads, end to end: child processes, JSON, markdown,
//! ratios and fits, and the SVG plot. If the harness breaks, this fails.

#[cfg(unix)]
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use arbor_bench::{Mode, Report};

#[test]
fn quick_run_of_the_smallest_workloads_writes_every_output() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args([
            "--quick",
            "--filter",
            "gumbel/length/d100-affine-n8,gumbel/length/d100-affine-n16",
            "--out",
        ])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());

    let json = std::fs::read_to_string(out.path().join("bench.json")).unwrap();
    let report: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(report.records.len(), 4, "two workloads × two modes");
    for r in &report.records {
        assert!(r.name.starts_with("gumbel/length/"));
        assert_eq!(r.times_ms.len(), 1);
        assert!(r.median_ms > 0.0 && r.items_per_s > 0.0);
        assert_eq!(r.items, 16);
        assert_eq!(r.params["batch"], 16);
        assert_eq!(r.run.backend, "flex");
        assert!(!r.run.git_commit.is_empty());
        if cfg!(target_os = "linux") {
            assert!(r.peak_rss_bytes.unwrap() > 0);
        }
    }
    // Both modes are timed, and the length sweep has a fit over its two points.
    assert!(report.records.iter().any(|r| r.mode == Mode::Forward));
    assert!(report
        .records
        .iter()
        .any(|r| r.mode == Mode::ForwardBackward));
    assert_eq!(report.scaling.len(), 2);
    assert!(report.scaling.iter().all(|f| f.exponent.is_finite()));

    // The report is whole, so the partial one is gone.
    assert!(!out.path().join(arbor_bench::PARTIAL_FILE).exists());

    let md = std::fs::read_to_string(out.path().join("bench.md")).unwrap();
    assert!(
        md.contains("| gumbel/length/d100-affine-n8 | forward |"),
        "{md}"
    );
    assert!(md.contains("k = **"), "{md}");
    let svg = std::fs::read_to_string(out.path().join("gumbel-length.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("polyline"),
        "not an SVG plot"
    );
}

/// A run killed halfway (the GPU check's time limit) keeps the workloads that finished.
#[cfg(unix)]
#[test]
fn a_killed_run_keeps_the_workloads_it_finished() {
    let out = tempfile::tempdir().unwrap();
    // A fast workload, then one that takes far longer on a CPU (pruned R2D2 at n = 128).
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args([
            "--quick",
            "--jobs",
            "1",
            "--filter",
            "gumbel/length/d100-affine-n8,r2d2/pruned-n128",
            "--out",
        ])
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let partial = out.path().join(arbor_bench::PARTIAL_FILE);
    let start = std::time::Instant::now();
    while !partial.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the first workload's records were written"
        );
        assert!(
            start.elapsed().as_secs() < 600,
            "no partial records after 600 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The whole group: the worker measuring R2D2 goes too (minutes of CPU otherwise).
    arbor_bench::gpu_check::kill_group(&child);
    child.wait().unwrap();
    assert!(!out.path().join("bench.json").exists());
    let records = arbor_bench::read_partial(out.path()).expect("the finished workload's records");
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["gumbel/length/d100-affine-n8"; 2],
        "both of its modes, nothing else"
    );
}

#[test]
fn an_unknown_filter_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args(["--quick", "--filter", "no-such-workload", "--out"])
        .arg(std::env::temp_dir().join("arbor-bench-never"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no workload matches"));
}

#[test]
fn bad_flag_values_are_refused_naming_the_flag() {
    for (flag, value) in [
        ("--jobs", "0"),
        ("--jobs", "-1"),
        ("--warmup", "-1"),
        ("--warmup", "x"),
        ("--device", "tpu"),
        ("--versus", "tensorflow"),
        ("--rounds", "0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
            .args(["--quick", flag, value, "--out"])
            .arg(std::env::temp_dir().join("arbor-bench-never"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(flag) || stderr.contains(value),
            "{flag} {value}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{flag} {value}: {stderr}");
    }
}

#[test]
fn an_unwritable_out_is_refused_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the folder should be: nothing can be written under it.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, "x").unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args([
            "--quick",
            "--filter",
            "gumbel/length/d100-affine-n8",
            "--out",
        ])
        .arg(blocked.join("report"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--out") && stderr.contains("cannot write"),
        "{stderr}"
    );
    // Nothing was measured: no workload's line.
    assert!(!stderr.contains("d100-affine-n8:"), "{stderr}");
    assert!(started.elapsed().as_secs() < 30);
}

/// `--versus pytorch` on the same two workloads: when `import torch` works, every record gains a
/// finite PyTorch time and ratio, and the table its two columns; otherwise the comparison is
/// skipped with a reason and the arbor results are still written. The authors' Gumbel
/// Tree-LSTM is timed beside the twin when its checkout is present (`cargo xtask references`),
/// and named in a note when it is not.
#[test]
fn quick_run_versus_pytorch_adds_the_pytorch_column() {
    let python = std::env::var("ARBOR_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_torch = Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    let references = std::env::var_os("ARBOR_REFERENCE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runs/reference")
        });
    let has_authors = references
        .join("unsupervised-treelstm/model/treelstm.py")
        .is_file();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .env("ARBOR_REFERENCE_DIR", &references)
        .args([
            "--quick",
            "--versus",
            "pytorch",
            "--filter",
            "gumbel/length/d100-affine-n8,gumbel/length/d100-affine-n16",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let json = std::fs::read_to_string(out.path().join("bench.json")).unwrap();
    let report: Report = serde_json::from_str(&json).unwrap();
    let md = std::fs::read_to_string(out.path().join("bench.md")).unwrap();
    assert_eq!(report.records.len(), 4);
    let versus = report.versus.as_ref().expect("a versus section");
    assert_eq!(versus.framework, "pytorch");
    assert!(versus.threads >= 1);
    if !has_torch {
        eprintln!("skipped the PyTorch half of this test: `{python} -c \"import torch\"` fails");
        assert!(versus.skipped.is_some());
        assert!(stderr.contains("pip install torch"), "{stderr}");
        assert!(md.contains("versus PyTorch: skipped"), "{md}");
        return;
    }
    assert_eq!(versus.skipped, None, "{stderr}");
    assert!(
        versus.notes.iter().all(|n| !n.contains("no PyTorch time")),
        "{:?}",
        versus.notes
    );
    assert!(versus
        .notes
        .iter()
        .any(|n| n.contains("not a speed comparison")));
    for r in &report.records {
        let t = r
            .pytorch
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no pytorch", r.name));
        assert!(t.median_s.is_finite() && t.median_s > 0.0);
        assert!(t.min_s <= t.median_s && t.median_s <= t.max_s);
        assert!(t.items_per_s.is_finite() && t.items_per_s > 0.0);
        assert_eq!(t.threads, versus.threads);
        assert_eq!(Some(&t.torch_version), versus.torch_version.as_ref());
        assert_eq!(t.times_s.len(), r.times_ms.len(), "timed as often as arbor");
        let ratio = r.ratio_vs_pytorch.unwrap();
        assert!(ratio.is_finite() && ratio > 0.0);
        assert!((ratio - t.median_s * 1e3 / r.median_ms).abs() < 1e-9 * ratio);
        assert_eq!(t.source, None, "the twin");
        if has_authors {
            let a = r
                .pytorch_authors
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no authors' time: {:?}", r.name, versus.notes));
            let source = a.source.as_deref().unwrap();
            assert!(
                source.starts_with("jihunchoi/unsupervised-treelstm@"),
                "{source}"
            );
            assert_eq!(a.times_s.len(), r.times_ms.len());
            let ra = r.ratio_vs_authors.unwrap();
            assert!((ra - a.median_s * 1e3 / r.median_ms).abs() < 1e-9 * ra);
            assert_eq!(
                arbor_bench::versus::ratio_vs_fastest(r),
                Some(ra.min(ratio))
            );
        } else {
            assert!(r.pytorch_authors.is_none());
        }
    }
    if !has_authors {
        eprintln!("the authors' modules were not timed: no checkout under {references:?}");
        assert!(
            versus
                .notes
                .iter()
                .any(|n| n.contains("did not run") && n.contains("cargo xtask references")),
            "{:?}",
            versus.notes
        );
    }
    assert!(json.contains("\"ratio_vs_pytorch\""));
    assert!(
        md.contains("| twin ms | authors' ms | arbor/twin | arbor/authors | arbor/fastest |"),
        "{md}"
    );
    assert!(md.contains("thread(s) on both sides"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| gumbel/length/d100-affine-n8 | forward |"))
        .unwrap();
    assert!(row.trim_end().ends_with("× |"), "{row}");
}

/// The twins' and the authors' adapters' own checks (small shapes, outputs, never speed).
#[test]
fn the_pytorch_scripts_pass_their_self_test() {
    let python = std::env::var("ARBOR_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_torch = Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        eprintln!("skipped: `{python} -c \"import torch\"` fails");
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pytorch/twins.py");
    let run = Command::new(&python)
        .arg(script)
        .arg("--self-test")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("self-test: ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn versus_without_torch_is_skipped_with_a_reason() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .env("ARBOR_PYTHON", "/nonexistent/python-for-arbor-tests")
        .args([
            "--quick",
            "--versus",
            "pytorch",
            "--filter",
            "gumbel/length/d100-affine-n8",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("--versus pytorch: skipped") && stderr.contains("pip install torch"));
    let report: Report =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("bench.json")).unwrap())
            .unwrap();
    assert_eq!(report.records.len(), 2);
    assert!(report.records.iter().all(|r| r.pytorch.is_none()));
    assert!(report
        .versus
        .unwrap()
        .skipped
        .unwrap()
        .contains("cannot run"));
}

/// `--versus pytorch` interleaves: each workload's twins run right after its arbor runs and
/// before the next workload's, one workload per run of the twins script, asked for as many runs
/// as arbor made. A stand-in interpreter (a shell script) logs, at each run of the twins, the
/// workloads it was asked for and those whose arbor records were already written
/// (`bench.partial.json`), and answers with fixed timings.
#[cfg(unix)]
#[test]
fn versus_runs_each_workloads_twins_right_after_its_arbor_runs() {
    let (dir, log) = versus_with_stand_in(
        r#"done=$(grep -o '"name": "[^"]*"' "$out/PARTIAL" | cut -d'"' -f4 | sort -u | tr '\n' ' ')
reps=$(grep -o '"reps":{[^}]*}' "$spec")
echo "asked: $asked| done: $done| $reps" >> "LOG""#,
        r#"\"median_s\": 0.002, \"min_s\": 0.001, \"max_s\": 0.003"#,
        &[
            "--filter",
            "gumbel/length/d100-affine-n8,gumbel/length/d100-affine-n16",
        ],
    );
    let out = dir.path().join("out");
    let lines: Vec<&str> = log.lines().collect();
    let (n8, n16) = (
        "gumbel/length/d100-affine-n8",
        "gumbel/length/d100-affine-n16",
    );
    assert_eq!(lines.len(), 2, "one run of the twins per workload: {log}");
    assert!(
        lines[0].starts_with(&format!("asked: {n8} | done: {n8} |")),
        "{log}"
    );
    assert!(
        lines[1].starts_with(&format!("asked: {n16} | done: {n16} {n8} |")),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains(r#""forward":1"#) && l.contains(r#""forward+backward":1"#)),
        "as many runs as arbor's (one with --quick): {log}"
    );
    let report: Report =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
    let versus = report.versus.unwrap();
    assert!(versus.interleaved && versus.skipped.is_none());
    assert_eq!(versus.torch_version.as_deref(), Some("9.9-fake"));
    assert_eq!(report.records.len(), 4);
    for r in &report.records {
        assert_eq!(r.pytorch.as_ref().unwrap().median_s, 0.002, "{}", r.name);
    }
    // The spec file left behind holds every workload asked for.
    let spec = std::fs::read_to_string(out.join(arbor_bench::versus::SPEC_FILE)).unwrap();
    assert!(spec.contains(n8) && spec.contains(n16), "{spec}");
}

/// `--rounds 2`: the workload measured twice, each time in its own child followed by its twins
/// (a stand-in interpreter that answers 2 ms in its first run and 4 ms in its second), and
/// reported once per mode over both rounds' runs, on each side.
#[cfg(unix)]
#[test]
fn rounds_alternate_arbor_and_the_twins_and_report_each_workload_once() {
    let n8 = "gumbel/length/d100-affine-n8";
    let (dir, log) = versus_with_stand_in(
        r#"runs=$(grep -o '"name": "[^"]*"' "$out/PARTIAL" | wc -l)
echo "asked: $asked| arbor records: $runs" >> "LOG"
t=$(( $(wc -l < "LOG") * 2 ))"#,
        r#"\"times_s\": [0.00$t], \"median_s\": 0.00$t, \"min_s\": 0.00$t, \"max_s\": 0.00$t"#,
        &["--rounds", "2", "--filter", n8],
    );
    let out = dir.path().join("out");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            format!("asked: {n8} | arbor records: 2"),
            format!("asked: {n8} | arbor records: 4"),
        ],
        "the twins after each round's arbor runs: {log}"
    );
    let report: Report =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
    assert_eq!(report.records.len(), 2, "one record per mode");
    for r in &report.records {
        assert_eq!(
            r.times_ms.len(),
            2,
            "one timed run a round with --quick: {}",
            r.name
        );
        let twin = r.pytorch.as_ref().unwrap();
        assert_eq!(twin.times_s, [0.002, 0.004]);
        assert!((twin.median_s - 0.003).abs() < 1e-12, "{}", twin.median_s);
    }
}

/// `arbor-bench --quick --jobs 1 --versus pytorch` with `args`, the Python interpreter a
/// stand-in (a shell script) that answers `-c` (the `import torch` probe) with a fake version,
/// and for a run of the twins sets `$spec`, `$out` (the spec's folder) and `$asked` (the
/// workloads the spec names), runs `log_lines` (where `PARTIAL` is the partial records' file
/// and `LOG` the log) and answers every workload asked for in both modes with `timing` (the
/// JSON fields of the timing, `$t` and the like expanded by the shell). Returns the folder
/// (the report in its `out`) and the log.
#[cfg(unix)]
fn versus_with_stand_in(
    log_lines: &str,
    timing: &str,
    args: &[&str],
) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (log, python) = (dir.path().join("log"), dir.path().join("python"));
    let log_lines = log_lines
        .replace("PARTIAL", arbor_bench::PARTIAL_FILE)
        .replace("LOG", &log.display().to_string());
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = "-c" ]; then echo 9.9-fake; exit 0; fi
spec="$3"; out=$(dirname "$spec")
asked=$(grep -o '"name":"[^"]*"' "$spec" | cut -d'"' -f4 | tr '\n' ' ')
{log_lines}
for n in $asked; do for m in forward forward+backward; do
echo "arbor-twin: {{\"name\": \"$n\", \"mode\": \"$m\", {timing}, \"items_per_s\": 8000, \"threads\": 1, \"torch_version\": \"9.9-fake\"}}"
done; done
"#
    );
    std::fs::write(&python, script).unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .env("ARBOR_PYTHON", &python)
        .args(["--quick", "--jobs", "1", "--versus", "pytorch"])
        .args(args)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let log = std::fs::read_to_string(&log).unwrap();
    (dir, log)
}
