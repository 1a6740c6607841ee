//! `kill -9` of the real `logic` and `r2d2 pretrain` programs after a checkpoint, then
//! `--resume`: the final weights equal those of an uninterrupted run, bit for bit; also with
//! two data-parallel workers.
//!
//! The program runs in a child process: this test binary re-executes itself with the ignored
//! test `child_runs_the_logic_program` selected and the program's arguments in an environment
//! variable, so the child is the real program (flag parsing, data loading, engine, checkpoints)
//! and can be killed with SIGKILL at any moment.

use arbor_cells::ArborBackend;
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

/// The child's side: runs the program named by the first argument from the environment.
#[test]
#[ignore = "run by the kill tests below as their child process"]
fn child_runs_the_program() {
    let args: Vec<String> = serde_json::from_str(
        &std::env::var(CHILD_ARGS).expect("started by the parent test with its arguments"),
    )
    .expect("arguments as a JSON list");
    let result = match args[0].as_str() {
        "logic" => arbor_apps::logic::run(arbor_apps::logic::LogicArgs::parse_from(args)),
        "r2d2" => arbor_apps::r2d2::run(arbor_apps::r2d2::R2d2Args::parse_from(args)),
        other => panic!("unknown program {other}"),
    };
    result.expect("the program succeeds");
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
    let args: Vec<String> = [
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
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    spawn_program(args)
}

/// The name the test harness gives test `name` of this module: the modules of the test binary
/// prefix it (not the binary's own name), so `--exact` must be given the whole path.
fn test_path(name: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}

/// Starts this test binary as the child running the program with `args` (`args[0]` is its
/// name).
fn spawn_program(args: Vec<String>) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &test_path("child_runs_the_program"),
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

/// Every float parameter of the pair classifier saved in `path`, in module order. (The record
/// bytes themselves are not compared: they also hold parameter ids, which are not weights.)
fn logic_weights(path: &Path) -> Vec<f32> {
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
    float_params(arbor_train::load_model(model, path, &device).unwrap().0)
}

/// The float parameters of the R2D2 language model saved in `path`, in module order.
fn r2d2_weights(path: &Path) -> Vec<f32> {
    let file = CheckpointFile::load(path).unwrap();
    let meta = arbor_tasks::R2d2Meta::from_checkpoint(&file.meta).unwrap();
    let device = Default::default();
    let model = meta.model.init::<Flex>(&device);
    float_params(arbor_train::load_model(model, path, &device).unwrap().0)
}

/// Every float parameter of `model`, in module order.
fn float_params<M: Module<Flex>>(model: M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl<B: ArborBackend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0
                .extend(param.val().into_data().to_vec::<f32>().unwrap_or_default());
        }
    }
    let mut all = Collect(Vec::new());
    model.visit(&mut all);
    assert!(!all.0.is_empty());
    all.0
}

fn step_of(path: &Path) -> Option<u64> {
    let file = CheckpointFile::load(path).ok()?;
    file.meta["state"]["step"].as_u64()
}

/// Runs the program uninterrupted twice (it must be deterministic), then once more killed with
/// SIGKILL as soon as a mid-run `last.ckpt` exists, resumes that run, and checks that the final
/// weights equal the uninterrupted run's. `start(out, extra)` starts the program writing to
/// `out` with the `extra` flags; `weights` reads a checkpoint's parameters.
fn kill_and_resume(
    dir: &Path,
    start: &dyn Fn(&Path, &[&str]) -> Child,
    weights: fn(&Path) -> Vec<f32>,
) {
    // The reference: one uninterrupted run.
    let whole = dir.join("whole");
    finish(start(&whole, &[]));
    let total = step_of(&whole.join("last.ckpt")).unwrap();
    let reference = weights(&whole.join("last.ckpt"));
    assert!(
        total > 4,
        "the run must outlast its first checkpoints ({total} steps)"
    );
    // Precondition: the program is deterministic (same seed, same weights).
    let again = dir.join("again");
    finish(start(&again, &[]));
    assert!(
        weights(&again.join("last.ckpt")) == reference,
        "two uninterrupted runs with the same seed differ"
    );

    // The same run, killed with SIGKILL once a mid-run checkpoint exists, then resumed.
    let killed = dir.join("killed");
    let mut child = start(&killed, &[]);
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
    let resumed = start(&killed, &["--resume"]).wait_with_output().unwrap();
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

/// The `logic` program killed and resumed with `flags` added to every start (see
/// [`kill_and_resume`]); returns the folder of its runs.
fn logic_kill_and_resume(flags: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_data(&data);
    kill_and_resume(
        dir.path(),
        &|out, extra| spawn(&data, out, &[extra, flags].concat()),
        logic_weights,
    );
    dir
}

#[test]
fn kill_minus_nine_then_resume_equals_an_uninterrupted_run() {
    logic_kill_and_resume(&[]);
}

/// Data-parallel (issue 36): two workers on the CPU, `--devices flex,flex`, without dropout
/// (the backend's one generator is shared by the workers' threads, so dropout masks would
/// depend on their timing).
#[test]
fn a_two_worker_run_killed_and_resumed_equals_an_uninterrupted_one() {
    let dir = logic_kill_and_resume(&["--devices", "flex,flex", "--dropout", "0"]);
    // The result names the workers.
    let result: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("whole/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(result["devices"], "flex,flex", "{result}");
    assert_eq!(result["device"], "flex", "{result}");
}

#[test]
fn r2d2_pretraining_killed_and_resumed_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        " = Pets = \n\n The cat sat on the mat . The dog sat on the log . A cat saw a dog !\n \
                The dog saw the cat . A dog sat on a mat . The cats sat on the logs .\n \
                Dogs and cats saw the mat . The mat saw nothing !\n";
    std::fs::write(dir.path().join("train.txt"), text).unwrap();
    std::fs::write(
        dir.path().join("valid.txt"),
        " The cat saw the log . A dog sat .\n",
    )
    .unwrap();
    let train = dir.path().join("train.txt");
    let valid = dir.path().join("valid.txt");
    let start = |out: &Path, extra: &[&str]| {
        let base = [
            "r2d2",
            "pretrain",
            "--train",
            train.to_str().unwrap(),
            "--valid",
            valid.to_str().unwrap(),
            "--vocab-size",
            "60",
            "--dim",
            "8",
            "--layers",
            "1",
            "--heads",
            "2",
            "--window",
            "2",
            "--batch-size",
            "4",
            "--max-tokens",
            "64",
            "--warmup",
            "2",
            "--eval-every",
            "50",
            "--checkpoint-every",
            "2",
            "--epochs",
            "6",
            "--seed",
            "3",
            "--out",
            out.to_str().unwrap(),
        ];
        spawn_program(base.iter().chain(extra).map(|s| s.to_string()).collect())
    };
    kill_and_resume(dir.path(), &start, r2d2_weights);
}
