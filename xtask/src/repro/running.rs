//! Running a recipe: the program's command line for each seed (the recipe's flags, `--seed`,
//! `--out`, the budget, `--resume` from a checkpoint), building the program, and running it once
//! per seed with its output logged, into the recipe's record.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use super::recipe::{render_flags, Recipe};
use super::record::{budget_note, duration, now_utc, write_record, Machine, Record, SeedRecord};
use super::results::{metric_accuracy, read_result, summarize, table_means, RunResult};

/// The settings of one `repro` call that every seed's command line shares.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// `--device` for the program.
    pub device: String,
    /// Extra `--test` files.
    pub tests: Vec<PathBuf>,
    /// `--max-minutes` for the program, replacing the recipe's.
    pub budget_minutes: Option<f64>,
}

/// What every recipe of one `repro` call shares.
#[derive(Debug)]
pub(super) struct RunContext<'a> {
    /// The workspace root, where the programs run.
    pub root: &'a Path,
    /// Where the runs go (`--out`, absolute).
    pub out_root: PathBuf,
    /// The settings every seed's command line shares.
    pub opts: RunOptions,
    /// The cargo backend feature the programs were built with.
    pub backend: String,
    /// The commit the record names (see `record::git_commit`).
    pub commit: String,
    /// Print the commands instead of running them.
    pub dry_run: bool,
}

/// Minutes as written in directory names and notes: `5`, `0.5`.
pub(super) fn minutes(m: f64) -> String {
    format!("{m}")
}

/// The directory of a recipe's runs: `OUT/NAME`, or `OUT/NAME-budgetMm` for a budgeted run.
pub fn recipe_dir(out: &Path, name: &str, budget_minutes: Option<f64>) -> PathBuf {
    match budget_minutes {
        Some(m) => out.join(format!("{name}-budget{}m", minutes(m))),
        None => out.join(name),
    }
}

/// The program's arguments for `seed`, writing to `out`: the recipe's flags, then `--seed`,
/// `--out`, `--device`, the `--test` files, `--max-minutes` for a budget, `--quiet`, and
/// `--resume` when `out/last.ckpt` exists, `--overwrite` when `out` holds a run that died before
/// writing it.
pub fn seed_args(recipe: &Recipe, seed: u64, out: &Path, opts: &RunOptions) -> Result<Vec<String>> {
    let skip: &[&str] = if opts.budget_minutes.is_some() {
        &["max-minutes"]
    } else {
        &[]
    };
    let mut args: Vec<String> = recipe.command.iter().cloned().collect();
    args.extend(
        render_flags(&recipe.flags, skip)
            .map_err(|e| anyhow::anyhow!("{}: {e}", recipe.path.display()))?,
    );
    args.extend([
        "--seed".to_string(),
        seed.to_string(),
        "--out".to_string(),
        out.display().to_string(),
        "--device".to_string(),
        opts.device.clone(),
    ]);
    for t in &opts.tests {
        args.push("--test".to_string());
        args.push(t.display().to_string());
    }
    if let Some(m) = opts.budget_minutes {
        args.push("--max-minutes".to_string());
        args.push(minutes(m));
    }
    if !args.iter().any(|a| a == "--quiet") {
        args.push("--quiet".to_string());
    }
    if out.join("last.ckpt").is_file() {
        args.push("--resume".to_string());
    } else if died_before_its_first_checkpoint(out) {
        // The programs refuse a folder holding a run unless told what to do with it
        // (arbor_train::outdir); with no checkpoint there is nothing to keep.
        args.push("--overwrite".to_string());
    }
    Ok(args)
}

/// Whether `out` holds a run that left no `last.ckpt`: a metrics log with records or a best
/// checkpoint (the files by which `arbor_train::outdir` tells that a folder holds a run).
fn died_before_its_first_checkpoint(out: &Path) -> bool {
    let metrics = std::fs::metadata(out.join("metrics.jsonl")).is_ok_and(|m| m.len() > 0);
    !out.join("last.ckpt").exists() && (metrics || out.join("best.ckpt").exists())
}

/// `word` quoted for a POSIX shell where it needs quoting.
pub(super) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A command line as one shell-quoted string.
fn command_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints the command line `words` as a dry run shows it: run in `root`.
fn print_command(root: &Path, words: &[String]) {
    println!(
        "(cd {} && {})",
        shell_quote(&root.display().to_string()),
        command_line(words)
    );
}

/// Builds `program` with `feature` in release mode and returns the binary's path (or, for a dry
/// run, prints the command and returns where the binary would be).
fn build(root: &Path, program: &str, feature: &str, dry_run: bool) -> Result<PathBuf> {
    if !root
        .join("examples")
        .join(format!("{program}.rs"))
        .is_file()
    {
        let mut names: Vec<String> = std::fs::read_dir(root.join("examples"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let p = e.path();
                        (p.extension()? == "rs")
                            .then(|| p.file_stem()?.to_str().map(str::to_string))?
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        bail!(
            "program '{program}' is not an example of the arbor package (examples: {})",
            names.join(", ")
        );
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let args = [
        "build",
        "--release",
        "--example",
        program,
        "-p",
        "arbor",
        "--no-default-features",
        "--features",
        feature,
    ];
    let words: Vec<String> = std::iter::once(cargo.as_str())
        .chain(args)
        .map(str::to_string)
        .collect();
    if dry_run {
        print_command(root, &words);
    } else {
        eprintln!("repro: building {program}: {}", command_line(&words));
        let status = Command::new(&cargo)
            .args(args)
            .current_dir(root)
            .status()
            .context("could not start cargo")?;
        ensure!(status.success(), "building {program} failed ({status})");
    }
    Ok(target_directory(root, &cargo)?
        .join("release")
        .join("examples")
        .join(program))
}

/// The workspace's target directory, from `cargo metadata` (it follows `CARGO_TARGET_DIR`).
fn target_directory(root: &Path, cargo: &str) -> Result<PathBuf> {
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("could not run cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata failed ({})",
        out.status
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata: not JSON")?;
    let dir = meta["target_directory"]
        .as_str()
        .context("cargo metadata: no target_directory")?;
    Ok(PathBuf::from(dir))
}

/// Copies `from` to `to` and to `log` until `from` ends (console errors are ignored so that the
/// log still gets everything).
fn tee(mut from: impl Read, mut to: impl Write, mut log: File) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                let _ = log.write_all(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Runs `program args` in `workdir`, its output shown and appended to `log`; returns whether it
/// succeeded and the wall-clock seconds.
fn run_logged(
    program: &Path,
    args: &[String],
    workdir: &Path,
    log: &Path,
) -> Result<(std::process::ExitStatus, f64)> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("could not open {}", log.display()))?;
    let mut words = vec![program.display().to_string()];
    words.extend(args.iter().cloned());
    writeln!(
        file,
        "# {} repro (in {}): {}",
        now_utc(),
        workdir.display(),
        command_line(&words)
    )
    .with_context(|| format!("could not write {}", log.display()))?;
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {}", program.display()))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let log_out = file.try_clone().context("log file")?;
    let log_err = file;
    std::thread::scope(|s| {
        s.spawn(|| tee(stdout, std::io::stdout(), log_out));
        s.spawn(|| tee(stderr, std::io::stderr(), log_err));
    });
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", program.display()))?;
    Ok((status, start.elapsed().as_secs_f64()))
}

/// A path given on the command line, made absolute against the current directory.
pub(super) fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}: cannot make it absolute", p.display()))
}

/// The binary of each recipe's program: `program` (`--program`, made absolute) for all of them,
/// else each program built once with `feature` (see [`build`]; a dry run prints the commands).
pub(super) fn binaries(
    root: &Path,
    program: Option<&Path>,
    recipes: &[Recipe],
    feature: &str,
    dry_run: bool,
) -> Result<BTreeMap<String, PathBuf>> {
    let mut binaries: BTreeMap<String, PathBuf> = BTreeMap::new();
    if let Some(p) = program {
        let p = absolute(p)?;
        ensure!(p.is_file(), "--program {}: no such file", p.display());
        for r in recipes {
            binaries.insert(r.program.clone(), p.clone());
        }
    } else {
        for r in recipes {
            if !binaries.contains_key(&r.program) {
                let bin = build(root, &r.program, feature, dry_run)?;
                binaries.insert(r.program.clone(), bin);
            }
        }
    }
    Ok(binaries)
}

/// Runs one recipe's seeds with `binary` and writes its record; returns the record.
pub(super) fn run_recipe(
    ctx: &RunContext,
    recipe: &Recipe,
    binary: &Path,
    seeds: &[u64],
) -> Result<Record> {
    let dir = recipe_dir(&ctx.out_root, &recipe.name, ctx.opts.budget_minutes);
    let mut args = Vec::new();
    let mut seed_records = Vec::new();
    let mut results = Vec::new();
    let mut values = Vec::new();
    for &seed in seeds {
        let out = dir.join(format!("seed{seed}"));
        let seed_args = seed_args(recipe, seed, &out, &ctx.opts)?;
        let mut words = vec![binary.display().to_string()];
        words.extend(seed_args.iter().cloned());
        args.push(words.clone());
        if ctx.dry_run {
            print_command(ctx.root, &words);
            continue;
        }
        let run = run_seed(ctx, recipe, binary, seed, &out, &seed_args, &words)?;
        values.push(run.accuracy);
        seed_records.push(run.record);
        results.push(run.result);
    }
    let record = recipe_record(ctx, recipe, args, seed_records, &results, &values);
    if !ctx.dry_run {
        write_record(&dir, &record)?;
    }
    Ok(record)
}

/// What one seed's run gave.
struct SeedRun {
    /// Its part of the record.
    record: SeedRecord,
    /// The parts of its `result.json` that repro reads.
    result: RunResult,
    /// The accuracy of the recipe's metric.
    accuracy: f64,
}

/// Runs `binary seed_args` (`words` as one command line) for `seed` of `recipe` into `out`,
/// its output appended to `out/repro.log`, and reads the `result.json` it writes (after removing
/// an old one).
fn run_seed(
    ctx: &RunContext,
    recipe: &Recipe,
    binary: &Path,
    seed: u64,
    out: &Path,
    seed_args: &[String],
    words: &[String],
) -> Result<SeedRun> {
    let note = budget_note(ctx.opts.budget_minutes);
    std::fs::create_dir_all(out).with_context(|| format!("could not create {}", out.display()))?;
    if seed_args.iter().any(|a| a == "--resume") {
        eprintln!("repro: resuming {}", out.display());
    }
    let result_path = out.join("result.json");
    if result_path.exists() {
        std::fs::remove_file(&result_path)
            .with_context(|| format!("could not remove the old {}", result_path.display()))?;
    }
    let log = out.join("repro.log");
    eprintln!(
        "repro: {}{note} seed {seed}: {}",
        recipe.name,
        command_line(words)
    );
    let (status, wall) = run_logged(binary, seed_args, ctx.root, &log)?;
    if !status.success() {
        bail!(
            "recipe '{}', seed {seed}: the program failed ({status}); its output is in {}; \
             the command (run in {}): {}",
            recipe.name,
            log.display(),
            ctx.root.display(),
            command_line(words)
        );
    }
    let (value, result) = read_result(&result_path)
        .with_context(|| format!("recipe '{}', seed {seed}", recipe.name))?;
    let accuracy = metric_accuracy(&result, &recipe.metric, &result_path)?;
    eprintln!(
        "repro: {}{note} seed {seed}: {} accuracy {:.4} in {}",
        recipe.name,
        recipe.metric,
        accuracy,
        duration(wall)
    );
    Ok(SeedRun {
        record: SeedRecord {
            seed,
            wall_seconds: wall,
            result: value,
        },
        result,
        accuracy,
    })
}

/// The record of `recipe`'s runs: the command lines `args`, each seed's record, result and
/// metric value, in seed order (all empty for a dry run).
fn recipe_record(
    ctx: &RunContext,
    recipe: &Recipe,
    args: Vec<Vec<String>>,
    seeds: Vec<SeedRecord>,
    results: &[RunResult],
    values: &[f64],
) -> Record {
    Record {
        recipe: recipe.name.clone(),
        recipe_file: recipe.path.display().to_string(),
        description: recipe.description.clone(),
        program: recipe.program.clone(),
        encoder: results
            .first()
            .and_then(|r| r.encoder.clone())
            .or_else(|| recipe.flag_str("encoder").map(str::to_string)),
        flags: recipe.flags.clone(),
        args,
        workdir: ctx.root.display().to_string(),
        commit: ctx.commit.clone(),
        machine: Machine::collect(),
        backend: ctx.backend.clone(),
        device: results
            .first()
            .and_then(|r| r.device.clone())
            .unwrap_or_else(|| ctx.opts.device.clone()),
        budget_minutes: ctx.opts.budget_minutes,
        date: now_utc(),
        seeds,
        summary: summarize(&recipe.metric, values),
        paper: recipe.paper.clone(),
        tables: table_means(results),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::recipe::tests::{parse, GOOD};

    fn opts() -> RunOptions {
        RunOptions {
            device: "flex".to_string(),
            tests: Vec::new(),
            budget_minutes: None,
        }
    }

    #[test]
    fn seed_arguments_resume_only_from_a_checkpoint() {
        let r = parse(GOOD).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seed1");
        std::fs::create_dir_all(&out).unwrap();
        let args = seed_args(&r, 1, &out, &opts()).unwrap();
        let tail: Vec<&str> = args[args.len() - 7..].iter().map(String::as_str).collect();
        let out_s = out.display().to_string();
        assert_eq!(
            tail,
            ["--seed", "1", "--out", &out_s, "--device", "flex", "--quiet"]
        );
        assert!(!args.iter().any(|a| a == "--resume" || a == "--overwrite"));
        // A run that died before its first checkpoint starts again, replacing its log.
        std::fs::write(out.join("metrics.jsonl"), b"{}\n").unwrap();
        let args = seed_args(&r, 1, &out, &opts()).unwrap();
        assert_eq!(args.last().unwrap(), "--overwrite");
        assert!(!args.iter().any(|a| a == "--resume"));
        std::fs::write(out.join("last.ckpt"), b"x").unwrap();
        let args = seed_args(&r, 1, &out, &opts()).unwrap();
        assert_eq!(args.last().unwrap(), "--resume");
        assert_eq!(args.iter().filter(|a| *a == "--resume").count(), 1);
        assert!(!args.iter().any(|a| a == "--overwrite"));
    }

    #[test]
    fn a_subcommand_comes_before_the_flags() {
        let text = GOOD.replace(
            "program = \"logic\"",
            "program = \"listops\"\ncommand = \"train\"",
        );
        let r = parse(&text).unwrap();
        assert_eq!(r.command.as_deref(), Some("train"));
        let args = seed_args(&r, 0, Path::new("/o/seed0"), &opts()).unwrap();
        assert_eq!(args[0], "train");
        assert!(args[1].starts_with("--"), "{args:?}");
        assert_eq!(args.iter().filter(|a| *a == "train").count(), 1);
        let bad = GOOD.replace(
            "program = \"logic\"",
            "program = \"listops\"\ncommand = \"--train\"",
        );
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("command '--train'"), "{e}");
    }

    #[test]
    fn a_budget_replaces_max_minutes_and_test_files_are_appended() {
        let r = parse(GOOD).unwrap();
        let o = RunOptions {
            device: "cuda:1".to_string(),
            tests: vec![PathBuf::from("/d/test7"), PathBuf::from("/d/test8")],
            budget_minutes: Some(2.5),
        };
        let args = seed_args(&r, 0, Path::new("/o/seed0"), &o).unwrap();
        let mm: Vec<usize> = (0..args.len())
            .filter(|&i| args[i] == "--max-minutes")
            .collect();
        assert_eq!(mm.len(), 1, "{args:?}");
        assert_eq!(args[mm[0] + 1], "2.5");
        let tests: Vec<&str> = (0..args.len())
            .filter(|&i| args[i] == "--test")
            .map(|i| args[i + 1].as_str())
            .collect();
        // The recipe's test files, then the command line's.
        assert_eq!(tests, ["a/test5", "a/test6", "/d/test7", "/d/test8"]);
        let pos = |w: &str| args.iter().position(|a| a == w).unwrap();
        assert!(pos("--device") < pos("/d/test7") && pos("/d/test8") < mm[0]);
        assert_eq!(args[pos("--device") + 1], "cuda:1");
        // Without a budget the recipe's own limit stays.
        let args = seed_args(&r, 0, Path::new("/o/seed0"), &opts()).unwrap();
        assert_eq!(args[pos_of(&args, "--max-minutes") + 1], "30");
        assert_eq!(
            recipe_dir(Path::new("/o"), "x", Some(5.0)),
            Path::new("/o/x-budget5m")
        );
        assert_eq!(
            recipe_dir(Path::new("/o"), "x", Some(0.5)),
            Path::new("/o/x-budget0.5m")
        );
        assert_eq!(recipe_dir(Path::new("/o"), "x", None), Path::new("/o/x"));
    }

    fn pos_of(args: &[String], w: &str) -> usize {
        args.iter().position(|a| a == w).unwrap()
    }

    #[test]
    fn a_quiet_flag_in_the_recipe_is_not_repeated() {
        let r = parse(&GOOD.replace("quiet = false", "quiet = true")).unwrap();
        let args = seed_args(&r, 0, Path::new("/o/seed0"), &opts()).unwrap();
        assert_eq!(args.iter().filter(|a| *a == "--quiet").count(), 1);
    }
}
