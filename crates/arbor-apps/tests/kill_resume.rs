//! `kill -9` of the real `logic` program after a checkpoint, then `--resume`: the final weights
//! equal those of an uninterrupted run, bit for bit.
//!
//! The program runs in a child process: this test binary re-executes itself with the ignored
//! test `child_runs_the_logic_program` selected and the program's arguments in an environment
//! variable, so the child is the real program (flag parsing, data loading, engine, checkpoints)
//! and can be killed with SIGKILL at any moment.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use arbor_tasks::{ModelConfig, ModelMeta};
use arbor_train::CheckpointFile;
use burn::backend::Flex;
use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use clap::Parser;

const CHILD_ARGS: &str = "ARBOR_KILL_TEST_ARGS";

/// The child's side: runs `logic` with the arguments from the environment.
#[test]
#[ignore = "run by kill_minus_nine_then_resume_equals_an_uninterrupted_run as its child"]
fn child_runs_the_logic_program() {
    let args: Vec<String> = serde_json::from_str(
        &std::env::var(CHILD_ARGS).expect("started by the parent test with its arguments"),
    )
    .expect("arguments as a JSON list");
    arbor_apps::logic::run(arbor_apps::logic::LogicArgs::parse_from(args))
        .expect("the logic program succeeds");
}

/// A small propositional-logic data directory: 200 pairs with up to 2 operators, and tests.
fn write_data(dir: &Path) {
    let vars = ["a", "b", "c", "d"];
    let mut train = [String::new(), String::new(), String::new()];
    for i in 0..200usize {
        let (x, y) = (vars[i % 4], vars[(i / 4) % 4]);
        let (rel, left, right, ops) = match i % 3 {
            0 => (
                if x == y { "=" } else { "#" },
                x.to_string(),
                y.to_string(),
                0,
            ),
            1 => ("^", x.to_string(), format!("( not {x} )"), 1),
            _ => ("<", format!("( {x} ( and {y} ) )"), x.to_string(), 1),
        };
        let ops = if i % 7 == 0 { 2 } else { ops };
        let left = if ops == 2 {
            format!("( not ( not {left} ) )")
        } else {
            left
        };
        let rel = if ops == 2 && rel == "^" { "=" } else { rel };
        train[ops].push_str(&format!("{rel}\t{left}\t{right}\n"));
    }
    for (k, body) in train.iter().enumerate() {
        std::fs::write(dir.join(format!("train{k}")), body).unwrap();
        std::fs::write(
            dir.join(format!("test{k}")),
            body.lines()
                .take(8)
                .fold(String::new(), |s, l| s + l + "\n"),
        )
        .unwrap();
    }
}

fn spawn(data: &Path, out: &Path, extra: &[&str]) -> Child {
    let mut args: Vec<String> = [
        "logic",
        "--data-dir",
        data.to_str().unwrap(),
        "--encoder",
        "lstm",
        "--dim",
        "16",
        "--batch-size",
        "8",
        "--epochs",
        "4",
        "--checkpoint-every",
        "3",
        "--seed",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runs_the_logic_program",
            "--ignored",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(CHILD_ARGS, serde_json::to_string(&args).unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the test binary re-executes itself")
}

fn finish(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the program failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every float parameter of the classifier saved in `path`, in module order. (The record
/// bytes themselves are not compared: they also hold parameter ids, which are not weights.)
fn weights(path: &Path) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0
                .extend(param.val().into_data().to_vec::<f32>().unwrap_or_default());
        }
    }
    let file = CheckpointFile::load(path).unwrap();
    let meta = ModelMeta::from_checkpoint(&file.meta).unwrap();
    let ModelConfig::Nli {
        embedding,
        encoder,
        head,
    } = meta.model
    else {
        panic!("a pair classifier")
    };
    let device = Default::default();
    let model = head.init(
        encoder.init::<Flex>(&device),
        embedding.init::<Flex>(&device),
        &device,
    );
    let (model, _) = arbor_train::load_model(model, path, &device).unwrap();
    let mut all = Collect(Vec::new());
    model.visit(&mut all);
    assert!(!all.0.is_empty());
    all.0
}

fn step_of(path: &Path) -> Option<u64> {
    let file = CheckpointFile::load(path).ok()?;
    file.meta["state"]["step"].as_u64()
}

#[test]
fn kill_minus_nine_then_resume_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_data(&data);

    // The reference: one uninterrupted run.
    let whole = dir.path().join("whole");
    finish(spawn(&data, &whole, &[]));
    let total = step_of(&whole.join("last.ckpt")).unwrap();
    let reference = weights(&whole.join("last.ckpt"));
    assert!(
        total > 6,
        "the run must outlast its first checkpoints ({total} steps)"
    );

    // The same run, killed with SIGKILL once a mid-run checkpoint exists, then resumed.
    let killed = dir.path().join("killed");
    let mut child = spawn(&data, &killed, &[]);
    let last = killed.join("last.ckpt");
    let started = Instant::now();
    let at = loop {
        if let Some(step) = step_of(&last) {
            break step;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be killed"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint after 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    let at_kill = step_of(&last).unwrap_or(at);
    assert!(
        at_kill < total,
        "killed at step {at_kill} of {total}: it must be mid-run"
    );
    // The resumed run must continue from the killed run's checkpoint, not start over (a fresh
    // start would reach the same weights, deterministically).
    let resumed = spawn(&data, &killed, &["--resume"])
        .wait_with_output()
        .unwrap();
    assert!(resumed.status.success(), "the resumed run failed");
    let said = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        said.contains(&format!("at step {at_kill} ")),
        "the resumed run does not say it continues from step {at_kill}: {said}"
    );

    assert_eq!(step_of(&last), Some(total));
    assert!(
        weights(&last) == reference,
        "weights differ after kill -9 at step {at_kill} and resume"
    );
}
