//! `arbor-gpu-check` on a machine without a usable GPU: one line, exit status 2, no report.

use std::process::Command;

#[test]
fn without_a_gpu_the_check_refuses_in_one_line() {
    if arbor_train::device::cuda_device_count().is_ok_and(|n| n > 0) {
        eprintln!("skipped: this machine has a CUDA GPU");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_arbor-gpu-check"))
        .arg(out.path().join("report"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("arbor-gpu-check: "), "{stderr}");
    assert!(stderr.contains("cuda"), "{stderr}");
    assert!(!out.path().join("report").exists());
}

#[test]
fn a_cpu_device_is_refused_by_name() {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_arbor-gpu-check"))
        .args(["--device", "flex"])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--device flex"), "{stderr}");
}
