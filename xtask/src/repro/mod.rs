//! `cargo xtask repro`: runs the recipes in `repro/` (one training program, its flags, the seeds
//! and the paper's number each) and records what came out next to what the paper reports.
//!
//! A run builds each program once (`cargo build --release --example PROGRAM` with the backend
//! feature `--device` needs, unless `--program` names a binary), runs it once per seed into
//! `OUT/RECIPE[-budgetMm]/seedK/` (with `--resume` where a `last.ckpt` is already there), reads
//! the `result.json` the program writes, and writes `record.json` and `record.md` for the
//! recipe. The recipe format is described in `repro/README.md`, the rest in `docs/repro.md`.
//!
//! The parts: [`recipe`] reads and checks the recipes, [`running`] builds the programs and runs
//! them once per seed, [`results`] reads what they write and averages it over the seeds, and
//! [`record`] writes `record.json` and `record.md`.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use crate::backend_feature;

mod recipe;
mod record;
mod results;
mod running;

use recipe::{find_recipe, list, Recipe};
use record::{git_commit, markdown_row, Record, TABLE_HEADER};
use running::{absolute, binaries, run_recipe, RunContext, RunOptions};

/// Options of `cargo xtask repro`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReproArgs {
    /// Recipes to run: names of files in repro/ (`logic-gold` for repro/logic-gold.toml) or
    /// paths to .toml files.
    #[arg(value_name = "RECIPE", required_unless_present = "list")]
    pub recipes: Vec<String>,
    /// List the recipes in repro/ (name, program, paper accuracy and source, description).
    #[arg(long, conflicts_with = "recipes")]
    pub list: bool,
    /// Run seeds 0..N-1 instead of the recipe's seeds.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: Option<u64>,
    /// A shorter run: pass `--max-minutes M` to the program (replacing the recipe's) and write
    /// to `RECIPE-budgetMm` instead of `RECIPE`.
    #[arg(long, value_name = "M")]
    pub budget_minutes: Option<f64>,
    /// Extra test file for the program (repeatable), passed on as `--test FILE`.
    #[arg(long, value_name = "FILE")]
    pub test: Vec<PathBuf>,
    /// Backend and device for the program: auto (the GPU when the machine has one and it
    /// answers, else the CPU), flex, ndarray, cuda, cuda:N.
    #[arg(long, value_name = "D", default_value = "auto")]
    pub device: String,
    /// Where the runs go: `DIR/RECIPE[-budgetMm]/seedK/` (default: runs/repro in the workspace).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run this program binary instead of building the recipe's program.
    #[arg(long, value_name = "PATH")]
    pub program: Option<PathBuf>,
    /// Print the commands a run would execute, and execute none of them.
    #[arg(long)]
    pub dry_run: bool,
}

/// `cargo xtask repro`: lists the recipes, or runs the recipes given (workspace root `root`)
/// and returns their records.
pub fn run(root: &Path, args: &ReproArgs) -> Result<Vec<Record>> {
    if args.list {
        list(root)?;
        return Ok(Vec::new());
    }
    ensure!(
        !args.recipes.is_empty(),
        "no recipe given (`--list` lists them)"
    );
    if let Some(m) = args.budget_minutes {
        ensure!(
            m.is_finite() && m > 0.0,
            "--budget-minutes {m}: must be a positive number of minutes"
        );
    }
    let feature = backend_feature(&["--device".to_string(), args.device.clone()])?;
    let recipes = load_recipes(root, &args.recipes)?;
    let opts = run_options(args)?;
    let out_root = match &args.out {
        Some(o) => absolute(o)?,
        None => root.join("runs").join("repro"),
    };
    // Build each program once, before any run, so that a build error stops everything early.
    let binaries = binaries(
        root,
        args.program.as_deref(),
        &recipes,
        &feature,
        args.dry_run,
    )?;
    let ctx = RunContext {
        root,
        out_root,
        opts,
        backend: feature,
        commit: git_commit(root),
        dry_run: args.dry_run,
    };
    // A failing recipe does not stop the ones after it: their runs may be long.
    let mut records = Vec::new();
    let mut failures = Vec::new();
    for r in &recipes {
        let seeds: Vec<u64> = match args.seeds {
            Some(n) => (0..n).collect(),
            None => r.seeds.clone(),
        };
        let binary = binaries
            .get(&r.program)
            .with_context(|| format!("no binary for program '{}'", r.program))?;
        match run_recipe(&ctx, r, binary, &seeds) {
            Ok(record) => records.push(record),
            Err(e) if recipes.len() == 1 => return Err(e),
            Err(e) => {
                eprintln!("repro: error: {e:#}");
                failures.push(format!("{e:#}"));
            }
        }
    }
    if recipes.len() > 1 && !records.is_empty() && !args.dry_run {
        println!("\nAll recipes:\n\n{TABLE_HEADER}");
        for r in &records {
            print!("{}", markdown_row(r));
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} recipes failed:\n  {}",
            failures.len(),
            recipes.len(),
            failures.join("\n  ")
        );
    }
    Ok(records)
}

/// The recipes named or pointed to by `names` (see [`recipe::recipe_path`]), in that order;
/// fails on the first that cannot be read, or on two with the same name.
fn load_recipes(root: &Path, names: &[String]) -> Result<Vec<Recipe>> {
    let mut recipes: Vec<Recipe> = Vec::new();
    for arg in names {
        let recipe = find_recipe(root, arg)?;
        if let Some(other) = recipes.iter().find(|r| r.name == recipe.name) {
            bail!(
                "two recipes named '{}' ({} and {}): their runs would share a directory",
                recipe.name,
                other.path.display(),
                recipe.path.display()
            );
        }
        recipes.push(recipe);
    }
    Ok(recipes)
}

/// The settings of `args` that every seed's command line shares, the `--test` files made
/// absolute; fails when one of them is not a file.
fn run_options(args: &ReproArgs) -> Result<RunOptions> {
    let opts = RunOptions {
        device: args.device.clone(),
        tests: args
            .test
            .iter()
            .map(|t| absolute(t))
            .collect::<Result<_>>()?,
        budget_minutes: args.budget_minutes,
    };
    for t in &opts.tests {
        ensure!(t.is_file(), "--test {}: no such file", t.display());
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A stand-in program: writes `OUT/last.ckpt` and a `result.json` whose test accuracy is
    /// `0.K5` for seed K; fails with `--fail`.
    #[cfg(unix)]
    fn fake_program(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-program");
        std::fs::write(
            &path,
            r#"#!/bin/sh
out=""; seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift ;;
    --seed) seed="$2"; shift ;;
    --fail) echo "fake: failing as asked" >&2; exit 3 ;;
  esac
  shift
done
mkdir -p "$out" && : > "$out/last.ckpt"
printf '{"encoder": "fake", "splits": {"test": {"accuracy": 0.%s5}}, "tables": [{"title": "t", "key": "k", "rows": [{"key": 1, "accuracy": 0.5}]}]}' "$seed" > "$out/result.json"
"#,
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[cfg(unix)]
    #[test]
    fn several_recipes_run_in_turn_and_a_failure_does_not_stop_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let program = fake_program(tmp.path());
        let write = |name: &str, extra: &str, metric: &str| {
            let path = tmp.path().join(format!("{name}.toml"));
            std::fs::write(
                &path,
                format!(
                    "description = \"d\"\nprogram = \"logic\"\nmetric = \"{metric}\"\n\
                     [flags]\n{extra}\n[paper]\naccuracy = 0.5\nsource = \"s\"\n"
                ),
            )
            .unwrap();
            path.display().to_string()
        };
        let recipes = vec![
            write("fails", "fail = true", "test"),
            write("good", "dim = 4", "test"),
            write("wrong-metric", "", "dev"),
        ];
        let out = tmp.path().join("runs");
        let mut args = ReproArgs {
            recipes,
            list: false,
            seeds: Some(2),
            budget_minutes: None,
            test: Vec::new(),
            device: "flex".to_string(),
            out: Some(out.clone()),
            program: Some(program),
            dry_run: true,
        };
        let root = crate::root();
        // A dry run runs nothing and writes nothing.
        assert_eq!(run(&root, &args).unwrap().len(), 3);
        assert!(!out.exists());
        args.dry_run = false;
        let e = format!("{:#}", run(&root, &args).unwrap_err());
        assert!(e.contains("2 of 3 recipes failed"), "{e}");
        assert!(
            e.contains("recipe 'fails', seed 0") && e.contains("repro.log"),
            "{e}"
        );
        assert!(
            e.contains("no split 'dev'") && e.contains("splits are: test"),
            "{e}"
        );
        let log = std::fs::read_to_string(out.join("fails/seed0/repro.log")).unwrap();
        assert!(log.contains("failing as asked"), "{log}");
        let text = std::fs::read_to_string(out.join("good/record.json")).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(record["summary"]["n"], 2);
        assert!((record["summary"]["mean"].as_f64().unwrap() - 0.1).abs() < 1e-12);
        assert!(record["summary"]["sd"].as_f64().unwrap() > 0.0);
        assert_eq!(
            record["seeds"][1]["result"]["splits"]["test"]["accuracy"],
            0.15
        );
        assert_eq!(record["tables"][0]["rows"][0]["key"], "1");
        assert_eq!(record["encoder"], "fake");
        let md = std::fs::read_to_string(out.join("good/record.md")).unwrap();
        assert!(
            md.contains("| good | logic/fake | test | 0.1000 ± 0.0707 (2 seeds) | 0.5000 |"),
            "{md}"
        );
        // Again: every seed of the good recipe now resumes.
        args.recipes.truncate(2);
        args.recipes.remove(0);
        let records = run(&root, &args).unwrap();
        assert!(records[0]
            .args
            .iter()
            .all(|a| a.last().unwrap() == "--resume"));
        // A budget writes elsewhere and starts afresh.
        args.budget_minutes = Some(1.5);
        let records = run(&root, &args).unwrap();
        assert!(records[0]
            .args
            .iter()
            .all(|a| !a.contains(&"--resume".to_string())));
        assert!(out.join("good-budget1.5m/record.json").is_file());
        let md = std::fs::read_to_string(out.join("good-budget1.5m/record.md")).unwrap();
        assert!(md.contains("| good (budget 1.5 min) |"), "{md}");
    }

    /// Writes a tiny propositional-logic data directory: `train0..train2` (the operator count
    /// of each pair matches its file) and `test0`, `test1`.
    fn logic_fixture(dir: &Path) {
        let vars = ["a", "b", "c", "d", "e", "f"];
        let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for i in 0..14 {
            let (x, y) = (vars[i % 6], vars[(i * 5 + 1) % 6]);
            let rel0 = if x == y { "=" } else { "#" };
            files
                .entry("train0".into())
                .or_default()
                .push(format!("{rel0}\t{x}\t{y}"));
            let rel1 = if x == y { "^" } else { "#" };
            files
                .entry("train1".into())
                .or_default()
                .push(format!("{rel1}\t( not {x} )\t{y}"));
            files
                .entry("train2".into())
                .or_default()
                .push(format!("<\t( {x} ( and {y} ) )\t( {x} ( or {y} ) )"));
            if i < 10 {
                files
                    .entry("test0".into())
                    .or_default()
                    .push(format!("{rel0}\t{y}\t{x}"));
                files
                    .entry("test1".into())
                    .or_default()
                    .push(format!("|\t( {y} ( and {x} ) )\t( not {y} )"));
            }
        }
        for (name, lines) in files {
            std::fs::write(dir.join(name), lines.join("\n") + "\n").unwrap();
        }
    }

    #[test]
    fn a_tiny_recipe_runs_end_to_end_and_resumes() {
        let exe = std::env::current_exe().unwrap();
        let program = exe
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("examples").join("logic"))
            .unwrap();
        if !program.is_file() {
            eprintln!(
                "skipped: no {} (build it with `cargo build --example logic`)",
                program.display()
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        logic_fixture(&data);
        let recipe = tmp.path().join("tiny-logic.toml");
        std::fs::write(
            &recipe,
            format!(
                "description = \"A tiny LSTM run on a fixture\"\nprogram = \"logic\"\n\
                 metric = \"test\"\n[flags]\ndata-dir = {data:?}\nencoder = \"lstm\"\n\
                 dim = 8\nbatch-size = 8\nepochs = 1\nmax-train-operators = 2\n\
                 valid-fraction = 0.2\nshow-trees = 0\n[paper]\nsource = \"none\"\n",
                data = data.display().to_string()
            ),
        )
        .unwrap();
        let out = tmp.path().join("runs");
        let args = ReproArgs {
            recipes: vec![recipe.display().to_string()],
            list: false,
            seeds: None,
            budget_minutes: None,
            test: Vec::new(),
            device: "flex".to_string(),
            out: Some(out.clone()),
            program: Some(program.clone()),
            dry_run: false,
        };
        let root = crate::root();
        let dir = out.join("tiny-logic");
        for attempt in 0..2 {
            let records = run(&root, &args).unwrap_or_else(|e| panic!("run {attempt}: {e:#}"));
            assert_eq!(records.len(), 1);
            let text = std::fs::read_to_string(dir.join("record.json")).unwrap();
            let record: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(record["recipe"], "tiny-logic");
            let acc = record["seeds"][0]["result"]["splits"]["test"]["accuracy"]
                .as_f64()
                .unwrap();
            assert!((0.0..=1.0).contains(&acc), "{acc}");
            assert_eq!(record["summary"]["n"], 1);
            assert_eq!(record["summary"]["mean"].as_f64(), Some(acc));
            let words: Vec<&str> = record["args"][0]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            assert_eq!(words[0], program.display().to_string());
            assert_eq!(words.contains(&"--resume"), attempt == 1, "{words:?}");
            let md = std::fs::read_to_string(dir.join("record.md")).unwrap();
            assert!(md.contains("| tiny-logic | logic/lstm | test |"), "{md}");
            assert!(dir.join("seed0").join("repro.log").is_file());
            assert!(
                dir.join("seed0").join("last.ckpt").is_file(),
                "the program wrote no last.ckpt, so nothing can resume"
            );
        }
        let log = std::fs::read_to_string(dir.join("seed0").join("repro.log")).unwrap();
        let headers = log
            .lines()
            .filter(|l| l.starts_with("# ") && l.contains(" repro (in "))
            .count();
        assert_eq!(headers, 2, "{log}");
    }
}
