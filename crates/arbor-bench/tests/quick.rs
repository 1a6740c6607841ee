//! `arbor-bench --quick` on the smallest workloads, end to end: child processes, JSON, markdown,
//! ratios and fits, and the SVG plot. If the harness breaks, this fails.

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
