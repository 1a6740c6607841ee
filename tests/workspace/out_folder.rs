//! One run per output folder (issue 35), through a real program (`logic` on a tiny fixture, in
//! process): a second run into a folder holding a run is refused without touching it, `--resume`
//! needs a checkpoint, `--overwrite` replaces the old run whole, a folder locked by another run
//! is refused naming the holder, and every metrics record names the run that wrote it.

use std::path::Path;
use std::sync::Mutex;

use arbor_apps::logic::{run, LogicArgs};
use clap::Parser;

/// Training uses the process-global backend generator.
static TRAINING: Mutex<()> = Mutex::new(());

fn write_fixture(dir: &Path) {
    let lines = [
        "=\ta\ta",
        "#\ta\tb",
        "^\ta\t( not a )",
        "<\t( a ( and b ) )\ta",
    ];
    let body: String = (0..4)
        .flat_map(|_| lines.iter().map(|l| format!("{l}\n")))
        .collect();
    for name in ["train0", "train1", "test0"] {
        std::fs::write(dir.join(name), &body).unwrap();
    }
}

fn args(data: &Path, out: &Path, extra: &[&str]) -> Result<LogicArgs, clap::Error> {
    let mut v = vec![
        "logic",
        "--data-dir",
        data.to_str().unwrap(),
        "--encoder",
        "lstm",
        "--dim",
        "8",
        "--batch-size",
        "8",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    v.extend_from_slice(extra);
    LogicArgs::try_parse_from(v)
}

/// The run ids of the metrics log, in order of first appearance, and the steps it logged.
fn runs_and_steps(out: &Path) -> (Vec<String>, Vec<u64>) {
    let log = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let mut ids: Vec<String> = Vec::new();
    let mut steps = Vec::new();
    for line in log.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = r["run"].as_str().expect("every record names its run");
        if !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
        if r["kind"] == "train" {
            steps.push(r["step"].as_u64().unwrap());
        }
    }
    (ids, steps)
}

#[test]
fn a_folder_holds_one_run_and_the_flags_say_what_to_do_with_it() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("out");
    let steps = |n: &'static str| ["--max-steps", n, "--log-every", "1"];

    run(args(dir.path(), &out, &steps("6")).unwrap()).unwrap();
    let (ids, logged) = runs_and_steps(&out);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(logged.last(), Some(&6));
    let first_run = ids[0].clone();
    let last = std::fs::read(out.join("last.ckpt")).unwrap();
    let metrics = std::fs::read(out.join("metrics.jsonl")).unwrap();

    // Again without --resume or --overwrite: refused, and nothing of the first run touched.
    let e = run(args(dir.path(), &out, &steps("2")).unwrap()).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("already holds a run")
            && msg.contains("--resume")
            && msg.contains("--overwrite"),
        "{msg}"
    );
    assert_eq!(std::fs::read(out.join("last.ckpt")).unwrap(), last);
    assert_eq!(std::fs::read(out.join("metrics.jsonl")).unwrap(), metrics);

    // --resume continues the same run: one id, the first run's records kept, no step twice.
    let (_, before) = runs_and_steps(&out);
    run(args(dir.path(), &out, &[&steps("9")[..], &["--resume"]].concat()).unwrap()).unwrap();
    let (ids, logged) = runs_and_steps(&out);
    assert_eq!(ids, vec![first_run.clone()]);
    assert!(logged.starts_with(&before), "{before:?} then {logged:?}");
    assert!(logged.windows(2).all(|w| w[0] < w[1]), "{logged:?}");
    assert_eq!(logged.last(), Some(&9));

    // --overwrite replaces it whole: a new id, the log starts again, the result is the new run's.
    run(args(
        dir.path(),
        &out,
        &[&steps("3")[..], &["--overwrite"]].concat(),
    )
    .unwrap())
    .unwrap();
    let (ids, logged) = runs_and_steps(&out);
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[0], first_run);
    assert!(logged.windows(2).all(|w| w[0] < w[1]), "{logged:?}");
    assert_eq!(logged.last(), Some(&3));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["steps"], 3, "{result}");
    assert_eq!(result["run"], ids[0].as_str(), "{result}");
}

#[test]
fn resume_needs_a_checkpoint_and_contradicting_flags_are_refused() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("empty");
    let e = run(args(dir.path(), &out, &["--max-steps", "2", "--resume"]).unwrap()).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("--resume") && msg.contains("no last.ckpt"),
        "{msg}"
    );
    assert!(!out.join("metrics.jsonl").exists());

    let e = args(dir.path(), &out, &["--resume", "--overwrite"]).unwrap_err();
    assert!(e.to_string().contains("--overwrite"), "{e}");
    let e = args(dir.path(), &out, &["--force"]).unwrap_err();
    assert!(e.to_string().contains("--resume"), "{e}");
}

#[test]
fn a_folder_another_run_holds_is_refused_naming_the_holder() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("busy");
    std::fs::create_dir_all(&out).unwrap();
    // Another process's lock as the OS sees it: a handle of its own on the lock file.
    let lock_path = out.join(arbor_train::outdir::LOCK_FILE);
    std::fs::write(&lock_path, "pid 4242 on host elsewhere since unix time 1\n").unwrap();
    let other = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&lock_path)
        .unwrap();
    other.lock().unwrap();
    let e = run(args(dir.path(), &out, &["--max-steps", "2"]).unwrap()).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("in use by another run (pid 4242 on host elsewhere"),
        "{msg}"
    );
    assert!(!out.join("metrics.jsonl").exists());
    drop(other);
    run(args(dir.path(), &out, &["--max-steps", "2"]).unwrap()).unwrap();
}

#[test]
fn resuming_with_another_encoder_is_refused_naming_both() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("out");
    run(args(dir.path(), &out, &["--max-steps", "2"]).unwrap()).unwrap();
    // `args` trains an LSTM; the same folder resumed as a Gumbel Tree-LSTM.
    let mut flags = args(dir.path(), &out, &["--max-steps", "4", "--resume"]).unwrap();
    flags.common.encoder = arbor_encoders::EncoderKind::Gumbel;
    let e = format!("{:#}", run(flags).unwrap_err());
    assert!(
        e.contains("holds a lstm model")
            && e.contains("different gumbel model")
            && e.contains("--overwrite"),
        "{e}"
    );
    // The same flags resume.
    run(args(dir.path(), &out, &["--max-steps", "4", "--resume"]).unwrap()).unwrap();
}
