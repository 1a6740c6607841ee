//! `cargo xtask repro`: runs the recipes in `repro/` (one training program, its flags, the seeds
//! and the paper's number each) and records what came out next to what the paper reports.
//!
//! A run builds each program once (`cargo build --release --example PROGRAM` with the backend
//! feature `--device` needs, unless `--program` names a binary), runs it once per seed into
//! `OUT/RECIPE[-budgetMm]/seedK/` (with `--resume` where a `last.ckpt` is already there), reads
//! the `result.json` the program writes, and writes `record.json` and `record.md` for the
//! recipe. The recipe format is described in `repro/README.md`, the rest in `docs/repro.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Deserializer, Serialize};

use crate::backend_feature;

/// Program flags that `repro` sets itself, so a recipe may not.
pub const RESERVED_FLAGS: [&str; 4] = ["out", "seed", "resume", "device"];

/// The header of the results table (`record.md` and the summary printed at the end).
pub const TABLE_HEADER: &str = "| recipe | program/encoder | metric | arbor (mean ± sd, n seeds) \
                                | paper | source | training time | commit |\n\
                                |---|---|---|---:|---:|---|---:|---|\n";

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

// ---------------------------------------------------------------------------------------------
// Recipes

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    description: String,
    program: String,
    #[serde(default)]
    command: Option<String>,
    metric: String,
    #[serde(default = "default_seeds")]
    seeds: Vec<u64>,
    #[serde(default)]
    flags: toml::Table,
    paper: Paper,
}

fn default_seeds() -> Vec<u64> {
    vec![0]
}

/// What the paper reports for a recipe.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Paper {
    /// The paper's accuracy as a fraction in [0, 1], where it has one.
    pub accuracy: Option<f64>,
    /// Where the number comes from (paper, table).
    pub source: String,
    /// Free text.
    pub note: Option<String>,
}

/// A checked recipe: one program, its flags, the seeds, and the paper's number.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The recipe name (the file stem).
    pub name: String,
    /// The file it was read from.
    pub path: PathBuf,
    /// One line saying what is reproduced.
    pub description: String,
    /// The example program of the `arbor` package (`logic`, `sst`…).
    pub program: String,
    /// A subcommand of the program, written before the flags (`train` for `listops`).
    pub command: Option<String>,
    /// The split of `result.json` whose accuracy is compared with the paper.
    pub metric: String,
    /// The seeds a plain run uses.
    pub seeds: Vec<u64>,
    /// The program's flags (`key = value` → `--key value`).
    pub flags: toml::Table,
    /// The paper's number.
    pub paper: Paper,
}

impl Recipe {
    /// Reads and checks the recipe in `path`; errors name `path`.
    pub fn load(path: &Path) -> Result<Recipe> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("could not read recipe {}", path.display()))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .with_context(|| format!("{}: the file name is not a recipe name", path.display()))?;
        Recipe::parse(name, path, &text)
    }

    /// Parses and checks the recipe text `text` of the file `path` named `name`.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Recipe> {
        let file = path.display();
        let raw: RecipeFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim().replace('`', "'");
            match line {
                Some(line) => anyhow::anyhow!("{file}: line {line}: {message}"),
                None => anyhow::anyhow!("{file}: {message}"),
            }
        })?;
        ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{file}: the recipe name '{name}' may only have letters, digits, '-', '_' and '.'"
        );
        ensure!(
            !raw.description.trim().is_empty(),
            "{file}: description is empty"
        );
        ensure!(
            !raw.program.is_empty()
                && raw
                    .program
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{file}: program '{}' is not an example name (logic, sst, snli, listops, ptb_lm, r2d2)",
            raw.program
        );
        if let Some(c) = &raw.command {
            ensure!(
                c.starts_with(|c: char| c.is_ascii_lowercase())
                    && c.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{file}: command '{c}' is not a subcommand name (lowercase letters and '-')"
            );
        }
        ensure!(!raw.metric.trim().is_empty(), "{file}: metric is empty");
        ensure!(!raw.seeds.is_empty(), "{file}: seeds is empty");
        for (i, s) in raw.seeds.iter().enumerate() {
            ensure!(
                !raw.seeds[..i].contains(s),
                "{file}: seed {s} is listed twice"
            );
        }
        if let Some(a) = raw.paper.accuracy {
            ensure!(
                a.is_finite() && (0.0..=1.0).contains(&a),
                "{file}: paper.accuracy {a} must be a fraction in [0, 1]"
            );
        }
        ensure!(
            !raw.paper.source.trim().is_empty(),
            "{file}: paper.source is empty"
        );
        render_flags(&raw.flags, &[]).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        Ok(Recipe {
            name: name.to_string(),
            path: path.to_path_buf(),
            description: raw.description.trim().to_string(),
            program: raw.program,
            command: raw.command,
            metric: raw.metric.trim().to_string(),
            seeds: raw.seeds,
            flags: raw.flags,
            paper: raw.paper,
        })
    }

    /// The value of flag `key` as a string, where it is a string.
    fn flag_str(&self, key: &str) -> Option<&str> {
        self.flags.get(key).and_then(toml::Value::as_str)
    }
}

/// The command-line words of one flag value (`None`: a value that is not a flag value).
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(_) => Some(value.to_string()),
        _ => None,
    }
}

/// The flags of a recipe as command-line words, leaving out the keys in `skip`: `key = value`
/// becomes `--key value`, `true` becomes `--key`, `false` nothing, and an array repeats the flag
/// for each element. Errors name the flag.
pub fn render_flags(flags: &toml::Table, skip: &[&str]) -> Result<Vec<String>> {
    let mut words = Vec::new();
    for (key, value) in flags {
        ensure!(
            !key.is_empty()
                && !key.starts_with('-')
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "flag '{key}' does not look like a flag: use lowercase letters, digits and '-' \
             (without the leading '--')"
        );
        ensure!(
            !RESERVED_FLAGS.contains(&key.as_str()),
            "flag '{key}' is set by repro itself (the reserved flags are {}); remove it",
            RESERVED_FLAGS.join(", ")
        );
        if skip.contains(&key.as_str()) {
            continue;
        }
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => words.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    let Some(v) = scalar(item) else {
                        bail!(
                            "flag '{key}': the elements of an array must be strings or numbers, \
                             not {}",
                            item.type_str()
                        );
                    };
                    words.push(flag.clone());
                    words.push(v);
                }
            }
            other => {
                let Some(v) = scalar(other) else {
                    bail!(
                        "flag '{key}': a {} is not a flag value (use a string, number, boolean \
                         or array)",
                        other.type_str()
                    );
                };
                words.push(flag);
                words.push(v);
            }
        }
    }
    Ok(words)
}

/// Where the recipe named or pointed to by `arg` lives: a path when `arg` ends in `.toml` or has
/// a `/`, else `ROOT/repro/ARG.toml`.
pub fn recipe_path(root: &Path, arg: &str) -> PathBuf {
    if arg.ends_with(".toml") || arg.contains('/') || arg.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(arg)
    } else {
        root.join("repro").join(format!("{arg}.toml"))
    }
}

fn find_recipe(root: &Path, arg: &str) -> Result<Recipe> {
    let path = recipe_path(root, arg);
    if !path.is_file() {
        if path.starts_with(root.join("repro")) {
            bail!(
                "no recipe '{arg}': {} does not exist (`cargo xtask repro --list` lists the \
                 recipes)",
                path.display()
            );
        }
        bail!("recipe {}: no such file", path.display());
    }
    Recipe::load(&path)
}

/// The `.toml` files of `ROOT/repro`, sorted by name.
fn recipe_files(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("repro");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `--list`: every recipe in `ROOT/repro`, one per line. Fails after listing if one is invalid.
fn list(root: &Path) -> Result<()> {
    let files = recipe_files(root)?;
    if files.is_empty() {
        println!("no recipes in {}", root.join("repro").display());
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut bad = 0;
    for path in &files {
        match Recipe::load(path) {
            Ok(r) => rows.push([
                r.name,
                r.program,
                r.paper
                    .accuracy
                    .map_or_else(|| "-".to_string(), |a| format!("{a:.4}")),
                r.paper.source,
                r.description,
            ]),
            Err(e) => {
                eprintln!("error: {e:#}");
                bad += 1;
            }
        }
    }
    let header = ["RECIPE", "PROGRAM", "PAPER", "SOURCE", "DESCRIPTION"];
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 4 {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    ensure!(bad == 0, "{bad} recipe(s) in repro/ could not be read");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Arguments

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

/// Minutes as written in directory names and notes: `5`, `0.5`.
fn minutes(m: f64) -> String {
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
fn shell_quote(word: &str) -> String {
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

// ---------------------------------------------------------------------------------------------
// Results

/// One split of a program's `result.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct SplitResult {
    /// Accuracy as a fraction.
    pub accuracy: Option<f64>,
}

/// One row of a table of a program's `result.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct TableRow {
    /// The row's key (a file name, an operator count…), numbers written as text.
    #[serde(deserialize_with = "key_string")]
    pub key: String,
    /// Accuracy as a fraction.
    pub accuracy: Option<f64>,
}

/// One table of a program's `result.json` (accuracy by file, by operator count…).
#[derive(Debug, Clone, Deserialize)]
pub struct ResultTable {
    /// Its title.
    pub title: String,
    /// The split it breaks down.
    pub split: Option<String>,
    /// What the row keys are (`file`, `operators`).
    pub key: Option<String>,
    /// The rows.
    #[serde(default)]
    pub rows: Vec<TableRow>,
}

/// The parts of a program's `result.json` that `repro` reads (the record keeps all of it).
#[derive(Debug, Clone, Deserialize)]
pub struct RunResult {
    /// The encoder that was trained.
    pub encoder: Option<String>,
    /// The device it ran on (`auto` resolved: `cuda:0`, `flex`).
    #[serde(default)]
    pub device: Option<String>,
    /// Scores per split.
    pub splits: BTreeMap<String, SplitResult>,
    /// Breakdowns.
    #[serde(default)]
    pub tables: Vec<ResultTable>,
}

fn key_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    })
}

/// Reads `path` (a program's `result.json`): the whole document and the parts repro uses.
pub fn read_result(path: &Path) -> Result<(serde_json::Value, RunResult)> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "could not read {} (the program should write it at the end of a run)",
            path.display()
        )
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let result: RunResult = serde_json::from_value(value.clone())
        .with_context(|| format!("{}: not a result.json", path.display()))?;
    Ok((value, result))
}

/// The accuracy of split `metric` in `result` (read from `path`).
pub fn metric_accuracy(result: &RunResult, metric: &str, path: &Path) -> Result<f64> {
    let Some(split) = result.splits.get(metric) else {
        let names: Vec<&str> = result.splits.keys().map(String::as_str).collect();
        bail!(
            "{}: no split '{metric}' (the recipe's metric); the splits are: {}",
            path.display(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    let Some(a) = split.accuracy.filter(|a| a.is_finite()) else {
        bail!("{}: split '{metric}' has no accuracy", path.display());
    };
    Ok(a)
}

/// Mean, sample standard deviation and count of a recipe's metric over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The split.
    pub metric: String,
    /// Mean accuracy over the seeds.
    pub mean: f64,
    /// Sample standard deviation (n − 1); `None` for one seed.
    pub sd: Option<f64>,
    /// Number of seeds.
    pub n: usize,
}

/// Mean and sample standard deviation of `values` (which must not be empty).
pub fn summarize(metric: &str, values: &[f64]) -> Summary {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n.max(1) as f64;
    let sd = (n > 1).then(|| {
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    Summary {
        metric: metric.to_string(),
        mean,
        sd,
        n,
    }
}

/// One row of a table, averaged over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowSummary {
    /// The row key.
    pub key: String,
    /// Mean accuracy over the seeds that have this row.
    pub accuracy: f64,
    /// How many seeds have it.
    pub n: usize,
}

/// One table of the programs' results, averaged over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableSummary {
    /// The table's title.
    pub title: String,
    /// The split it breaks down.
    pub split: Option<String>,
    /// What the row keys are.
    pub key: Option<String>,
    /// Rows in the order they first appear.
    pub rows: Vec<RowSummary>,
}

/// Every table of `results`, rows averaged over the seeds (tables matched by title, rows by key,
/// both in the order they first appear).
pub fn table_means(results: &[RunResult]) -> Vec<TableSummary> {
    let mut tables: Vec<(TableSummary, Vec<f64>)> = Vec::new();
    for r in results {
        for t in &r.tables {
            let i = match tables.iter().position(|(s, _)| s.title == t.title) {
                Some(i) => i,
                None => {
                    tables.push((
                        TableSummary {
                            title: t.title.clone(),
                            split: t.split.clone(),
                            key: t.key.clone(),
                            rows: Vec::new(),
                        },
                        Vec::new(),
                    ));
                    tables.len() - 1
                }
            };
            let (summary, sums) = &mut tables[i];
            for row in &t.rows {
                let Some(a) = row.accuracy.filter(|a| a.is_finite()) else {
                    continue;
                };
                match summary.rows.iter().position(|s| s.key == row.key) {
                    Some(j) => {
                        sums[j] += a;
                        summary.rows[j].n += 1;
                    }
                    None => {
                        summary.rows.push(RowSummary {
                            key: row.key.clone(),
                            accuracy: 0.0,
                            n: 1,
                        });
                        sums.push(a);
                    }
                }
            }
        }
    }
    tables
        .into_iter()
        .map(|(mut s, sums)| {
            for (row, sum) in s.rows.iter_mut().zip(sums) {
                row.accuracy = sum / row.n as f64;
            }
            s
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The record

/// The machine a recipe ran on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// CPU model (`model name` of /proc/cpuinfo).
    pub cpu: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// Total memory in bytes (`MemTotal` of /proc/meminfo).
    pub memory_bytes: Option<u64>,
}

impl Machine {
    /// Collects the facts of this machine.
    pub fn collect() -> Machine {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".to_string());
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let memory_bytes = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line
                .trim_start_matches("MemTotal:")
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kb * 1024)
        });
        Machine {
            hostname,
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
        }
    }
}

/// One seed of a recipe.
#[derive(Debug, Clone, Serialize)]
pub struct SeedRecord {
    /// The seed.
    pub seed: u64,
    /// Wall-clock seconds of this call's run (a resumed run counts only its own part).
    pub wall_seconds: f64,
    /// The program's whole `result.json`.
    pub result: serde_json::Value,
}

/// `record.json`: everything about one recipe's runs.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// The recipe name.
    pub recipe: String,
    /// The recipe file.
    pub recipe_file: String,
    /// The recipe's description.
    pub description: String,
    /// The program.
    pub program: String,
    /// The encoder (from the first seed's result, else the recipe's `encoder` flag).
    pub encoder: Option<String>,
    /// The recipe's flags.
    pub flags: toml::Table,
    /// The exact command line (program first) of each seed, in seed order.
    pub args: Vec<Vec<String>>,
    /// The directory the programs ran in.
    pub workdir: String,
    /// `git rev-parse HEAD`, with `-dirty` when the working tree had changes.
    pub commit: String,
    /// The machine.
    pub machine: Machine,
    /// The cargo backend feature (`flex`, `ndarray`, `cuda`).
    pub backend: String,
    /// The device the program ran on (its `result.json`; `--device` when it wrote none).
    pub device: String,
    /// `--budget-minutes`, for a shortened run.
    pub budget_minutes: Option<f64>,
    /// When the record was written (UTC, ISO 8601).
    pub date: String,
    /// Each seed's run.
    pub seeds: Vec<SeedRecord>,
    /// The metric over the seeds.
    pub summary: Summary,
    /// What the paper reports.
    pub paper: Paper,
    /// The programs' tables, averaged over the seeds.
    pub tables: Vec<TableSummary>,
}

/// A markdown table cell: no `|` or line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Seconds as `41s`, `12m 05s` or `3h 02m`.
pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// ` (budget M min)` for a budgeted run, else nothing.
fn budget_note(budget_minutes: Option<f64>) -> String {
    budget_minutes.map_or_else(String::new, |m| format!(" (budget {} min)", minutes(m)))
}

/// The recipe's row of the results table (see [`TABLE_HEADER`]), with its line break.
pub fn markdown_row(r: &Record) -> String {
    let s = &r.summary;
    let seeds = if s.n == 1 { "seed" } else { "seeds" };
    let arbor = match s.sd {
        Some(sd) => format!("{:.4} ± {sd:.4} ({} {seeds})", s.mean, s.n),
        None => format!("{:.4} ({} {seeds})", s.mean, s.n),
    };
    let paper = r
        .paper
        .accuracy
        .map_or_else(|| "—".to_string(), |a| format!("{a:.4}"));
    // The programs' own training time (across resumes, evaluation excluded), summed over the
    // seeds; this call's wall time where a result does not say.
    let wall: f64 = r
        .seeds
        .iter()
        .map(|s| {
            s.result
                .get("train_seconds")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(s.wall_seconds)
        })
        .sum();
    format!(
        "| {}{} | {}/{} | {} | {arbor} | {paper} | {} | {} | {} |\n",
        cell(&r.recipe),
        budget_note(r.budget_minutes),
        cell(&r.program),
        cell(r.encoder.as_deref().unwrap_or("?")),
        cell(&s.metric),
        cell(&r.paper.source),
        duration(wall),
        cell(&short_commit(&r.commit)),
    )
}

/// A commit as the docs write it: 7 hex digits, keeping a `-dirty` suffix.
fn short_commit(commit: &str) -> String {
    let (hash, dirty) = match commit.strip_suffix("-dirty") {
        Some(h) => (h, "-dirty"),
        None => (commit, ""),
    };
    if hash.len() > 7 && hash.chars().all(|c| c.is_ascii_hexdigit()) {
        format!("{}{dirty}", &hash[..7])
    } else {
        commit.to_string()
    }
}

/// The record's tables as markdown (accuracy per row key, mean over seeds).
pub fn markdown_tables(r: &Record) -> String {
    let mut md = String::new();
    for t in &r.tables {
        let n = t.rows.iter().map(|row| row.n).max().unwrap_or(0);
        let mut about = vec![cell(&r.recipe)];
        if let Some(m) = r.budget_minutes {
            about.push(format!("budget {} min", minutes(m)));
        }
        if n > 1 {
            about.push(format!("mean over {n} seeds"));
        }
        let _ = writeln!(md, "\n**{}** ({})\n", cell(&t.title), about.join(", "));
        let key = t.key.as_deref().unwrap_or("key");
        let _ = writeln!(md, "| {} | accuracy |\n|---|---:|", cell(key));
        for row in &t.rows {
            let _ = writeln!(md, "| {} | {:.4} |", cell(&row.key), row.accuracy);
        }
    }
    md
}

/// `record.md`: the header, the recipe's row, and its tables.
pub fn record_markdown(r: &Record) -> String {
    format!("{TABLE_HEADER}{}{}", markdown_row(r), markdown_tables(r))
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("could not write {}", tmp.display()));
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("could not rename {} to {}", tmp.display(), path.display()))
}

/// `git rev-parse HEAD` in `root`, with `-dirty` when `git status --porcelain` lists anything.
fn git_commit(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(hash) if !hash.is_empty() => match git(&["status", "--porcelain"]) {
            Some(s) if !s.is_empty() => format!("{hash}-dirty"),
            _ => hash,
        },
        _ => "unknown".to_string(),
    }
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_date(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64;
    let rem = unix_seconds % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

fn now_utc() -> String {
    utc_date(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

// ---------------------------------------------------------------------------------------------
// Running

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
        println!(
            "(cd {} && {})",
            shell_quote(&root.display().to_string()),
            command_line(&words)
        );
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
fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}: cannot make it absolute", p.display()))
}

/// Runs one recipe's seeds with `binary` and writes its record; returns the record.
#[allow(clippy::too_many_arguments)]
fn run_recipe(
    root: &Path,
    recipe: &Recipe,
    binary: &Path,
    seeds: &[u64],
    out_root: &Path,
    opts: &RunOptions,
    backend: &str,
    commit: &str,
    dry_run: bool,
) -> Result<Record> {
    let dir = recipe_dir(out_root, &recipe.name, opts.budget_minutes);
    let note = budget_note(opts.budget_minutes);
    let mut args = Vec::new();
    let mut seed_records = Vec::new();
    let mut results = Vec::new();
    let mut values = Vec::new();
    for &seed in seeds {
        let out = dir.join(format!("seed{seed}"));
        let seed_args = seed_args(recipe, seed, &out, opts)?;
        let mut words = vec![binary.display().to_string()];
        words.extend(seed_args.iter().cloned());
        args.push(words.clone());
        if dry_run {
            println!(
                "(cd {} && {})",
                shell_quote(&root.display().to_string()),
                command_line(&words)
            );
            continue;
        }
        std::fs::create_dir_all(&out)
            .with_context(|| format!("could not create {}", out.display()))?;
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
            command_line(&words)
        );
        let (status, wall) = run_logged(binary, &seed_args, root, &log)?;
        if !status.success() {
            bail!(
                "recipe '{}', seed {seed}: the program failed ({status}); its output is in {}; \
                 the command (run in {}): {}",
                recipe.name,
                log.display(),
                root.display(),
                command_line(&words)
            );
        }
        let (value, result) = read_result(&result_path)
            .with_context(|| format!("recipe '{}', seed {seed}", recipe.name))?;
        values.push(metric_accuracy(&result, &recipe.metric, &result_path)?);
        eprintln!(
            "repro: {}{note} seed {seed}: {} accuracy {:.4} in {}",
            recipe.name,
            recipe.metric,
            values.last().copied().unwrap_or(f64::NAN),
            duration(wall)
        );
        seed_records.push(SeedRecord {
            seed,
            wall_seconds: wall,
            result: value,
        });
        results.push(result);
    }
    let record = Record {
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
        workdir: root.display().to_string(),
        commit: commit.to_string(),
        machine: Machine::collect(),
        backend: backend.to_string(),
        device: results
            .first()
            .and_then(|r| r.device.clone())
            .unwrap_or_else(|| opts.device.clone()),
        budget_minutes: opts.budget_minutes,
        date: now_utc(),
        seeds: seed_records,
        summary: summarize(&recipe.metric, &values),
        paper: recipe.paper.clone(),
        tables: table_means(&results),
    };
    if !dry_run {
        let json = serde_json::to_string_pretty(&record).context("record.json")?;
        write_atomic(&dir.join("record.json"), format!("{json}\n").as_bytes())?;
        let md = record_markdown(&record);
        write_atomic(&dir.join("record.md"), md.as_bytes())?;
        println!("\n{md}");
        eprintln!("repro: wrote {}", dir.join("record.json").display());
    }
    Ok(record)
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
    let mut recipes: Vec<Recipe> = Vec::new();
    for arg in &args.recipes {
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
    let out_root = match &args.out {
        Some(o) => absolute(o)?,
        None => root.join("runs").join("repro"),
    };
    // Build each program once, before any run, so that a build error stops everything early.
    let mut binaries: BTreeMap<String, PathBuf> = BTreeMap::new();
    if let Some(p) = &args.program {
        let p = absolute(p)?;
        ensure!(p.is_file(), "--program {}: no such file", p.display());
        for r in &recipes {
            binaries.insert(r.program.clone(), p.clone());
        }
    } else {
        for r in &recipes {
            if !binaries.contains_key(&r.program) {
                let bin = build(root, &r.program, &feature, args.dry_run)?;
                binaries.insert(r.program.clone(), bin);
            }
        }
    }
    let commit = git_commit(root);
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
        match run_recipe(
            root,
            r,
            binary,
            &seeds,
            &out_root,
            &opts,
            &feature,
            &commit,
            args.dry_run,
        ) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description = "Gold-tree Tree-LSTM on propositional logic"
program = "logic"
metric = "test"
seeds = [0, 1]
[flags]
encoder = "spinn-pi-nt"
dim = 128
lr = 0.002
small = 2e-3
quiet = false
no-dropout = true
test = ["a/test5", "a/test6"]
max-minutes = 30
[paper]
accuracy = 0.9906
source = "Bowman et al. (2015), Table 3"
"#;

    fn parse(text: &str) -> Result<Recipe> {
        Recipe::parse("x", Path::new("repro/x.toml"), text)
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    fn opts() -> RunOptions {
        RunOptions {
            device: "flex".to_string(),
            tests: Vec::new(),
            budget_minutes: None,
        }
    }

    #[test]
    fn a_good_recipe_parses() {
        let r = parse(GOOD).unwrap();
        assert_eq!(r.name, "x");
        assert_eq!(r.program, "logic");
        assert_eq!(r.metric, "test");
        assert_eq!(r.seeds, [0, 1]);
        assert_eq!(r.paper.accuracy, Some(0.9906));
        assert_eq!(r.paper.source, "Bowman et al. (2015), Table 3");
        assert_eq!(r.paper.note, None);
        assert_eq!(r.flag_str("encoder"), Some("spinn-pi-nt"));
        let minimal = "description = \"d\"\nprogram = \"sst\"\nmetric = \"test\"\n\
                       [paper]\nsource = \"s\"\n";
        let r = parse(minimal).unwrap();
        assert_eq!(r.seeds, [0]);
        assert!(r.flags.is_empty());
        assert_eq!(r.paper.accuracy, None);
    }

    #[test]
    fn bad_recipes_are_refused_with_the_file_and_the_problem() {
        let e = error(&GOOD.replace("[flags]", "[flgs]"));
        assert!(e.starts_with("repro/x.toml"), "{e}");
        assert!(e.contains("unknown field 'flgs'"), "{e}");
        let e = error(&GOOD.replace("0.9906", "97"));
        assert!(
            e.contains("repro/x.toml: paper.accuracy 97 must be a fraction in [0, 1]"),
            "{e}"
        );
        let e = error(&GOOD.replace("dim = 128", "seed = 3"));
        assert!(
            e.contains("repro/x.toml") && e.contains("flag 'seed'"),
            "{e}"
        );
        for reserved in RESERVED_FLAGS {
            let e = error(&GOOD.replace("dim = 128", &format!("{reserved} = \"v\"")));
            assert!(e.contains(&format!("flag '{reserved}'")), "{e}");
        }
        let e = error(&GOOD.replace("dim = 128", "Dim = 128"));
        assert!(e.contains("flag 'Dim' does not look like a flag"), "{e}");
        let e = error(&GOOD.replace("dim = 128", "\"--dim\" = 128"));
        assert!(e.contains("flag '--dim'"), "{e}");
        let e = error(&GOOD.replace("source = \"Bowman et al. (2015), Table 3\"", ""));
        assert!(e.contains("missing field 'source'"), "{e}");
        let e = error(&GOOD.replace("paper]", "paperz]"));
        assert!(e.contains("unknown field 'paperz'"), "{e}");
        let e = error(&GOOD.replace("seeds = [0, 1]", "seeds = [1, 1]"));
        assert!(e.contains("seed 1 is listed twice"), "{e}");
        let e = error(&GOOD.replace("dim = 128", "dim = { a = 1 }"));
        assert!(e.contains("flag 'dim'"), "{e}");
        let e = error(&GOOD.replace("program = \"logic\"", "program = \"../logic\""));
        assert!(e.contains("program '../logic'"), "{e}");
        let e = error("description = \"d\"\nprogram = \"sst\"\nmetric = \"test\"\n");
        assert!(e.contains("missing field 'paper'"), "{e}");
        let e = error("description = ");
        assert!(e.starts_with("repro/x.toml: line 1: "), "{e}");
    }

    #[test]
    fn flags_render_as_command_line_words() {
        let r = parse(GOOD).unwrap();
        let words = render_flags(&r.flags, &[]).unwrap();
        // Keys are sorted; false is left out, true is a bare flag, arrays repeat the flag, and
        // numbers are written so that the programs parse them back.
        assert_eq!(
            words,
            [
                "--dim",
                "128",
                "--encoder",
                "spinn-pi-nt",
                "--lr",
                "0.002",
                "--max-minutes",
                "30",
                "--no-dropout",
                "--small",
                "0.002",
                "--test",
                "a/test5",
                "--test",
                "a/test6",
            ]
        );
        let table: toml::Table = toml::from_str("lr = 1e-10\nx = 1.0\nbig = 3e20").unwrap();
        let words = render_flags(&table, &[]).unwrap();
        for pair in words.chunks(2) {
            let v: f64 = pair[1].parse().unwrap();
            let want = table[&pair[0][2..]].as_float().unwrap();
            assert_eq!(v, want, "{words:?}");
        }
        let skipped = render_flags(&r.flags, &["max-minutes", "test"]).unwrap();
        assert!(!skipped
            .iter()
            .any(|w| w == "--max-minutes" || w == "--test"));
        let bad: toml::Table = toml::from_str("x = [true]").unwrap();
        assert!(render_flags(&bad, &[]).is_err());
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

    #[test]
    fn summaries_are_mean_and_sample_sd() {
        let s = summarize("test", &[0.8, 0.9, 1.0]);
        assert!((s.mean - 0.9).abs() < 1e-12);
        assert!((s.sd.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(s.n, 3);
        let s = summarize("test", &[0.75]);
        assert_eq!((s.mean, s.sd, s.n), (0.75, None, 1));
    }

    fn result(json: &str) -> RunResult {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn results_are_read_tolerantly_and_tables_averaged() {
        let a = result(
            r#"{"program": "logic", "encoder": "lstm", "new_field": [1],
                "splits": {"valid": {"accuracy": 0.5}, "test": {"accuracy": 0.6, "total": 10}},
                "tables": [{"title": "by operators", "split": "test", "key": "operators",
                            "rows": [{"key": "1", "accuracy": 1.0}, {"key": 2, "accuracy": 0.5}]}]}"#,
        );
        let b = result(
            r#"{"splits": {"test": {"accuracy": 0.8}},
                "tables": [{"title": "by operators", "key": "operators",
                            "rows": [{"key": "2", "accuracy": 0.7}, {"key": "3", "accuracy": 0.2}]}]}"#,
        );
        let p = Path::new("r/result.json");
        assert_eq!(metric_accuracy(&a, "test", p).unwrap(), 0.6);
        let e = metric_accuracy(&b, "valid", p).unwrap_err().to_string();
        assert!(
            e.contains("r/result.json") && e.contains("'valid'") && e.contains("test"),
            "{e}"
        );
        let t = table_means(&[a, b]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].split.as_deref(), Some("test"));
        assert_eq!(t[0].key.as_deref(), Some("operators"));
        let rows: Vec<(&str, f64, usize)> = t[0]
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.accuracy, r.n))
            .collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], ("1", 1.0, 1));
        assert_eq!((rows[1].0, rows[1].2), ("2", 2));
        assert!((rows[1].1 - 0.6).abs() < 1e-12);
        assert_eq!(rows[2], ("3", 0.2, 1));
    }

    fn record(budget: Option<f64>, values: &[f64]) -> Record {
        Record {
            recipe: "logic-gold".to_string(),
            recipe_file: "repro/logic-gold.toml".to_string(),
            description: "d".to_string(),
            program: "logic".to_string(),
            encoder: Some("spinn-pi-nt".to_string()),
            flags: toml::Table::new(),
            args: Vec::new(),
            workdir: "/w".to_string(),
            commit: "abc123-dirty".to_string(),
            machine: Machine::collect(),
            backend: "flex".to_string(),
            device: "flex".to_string(),
            budget_minutes: budget,
            date: utc_date(0),
            seeds: values
                .iter()
                .enumerate()
                .map(|(i, _)| SeedRecord {
                    seed: i as u64,
                    wall_seconds: 61.0,
                    result: serde_json::Value::Null,
                })
                .collect(),
            summary: summarize("test", values),
            paper: Paper {
                accuracy: Some(0.9906),
                source: "Bowman et al. (2015) | Table 3".to_string(),
                note: None,
            },
            tables: vec![TableSummary {
                title: "test accuracy by operator count".to_string(),
                split: Some("test".to_string()),
                key: Some("operators".to_string()),
                rows: vec![RowSummary {
                    key: "7".to_string(),
                    accuracy: 0.875,
                    n: values.len(),
                }],
            }],
        }
    }

    #[test]
    fn the_markdown_row_has_every_column() {
        let row = markdown_row(&record(None, &[0.8, 0.9, 1.0]));
        assert_eq!(
            row,
            "| logic-gold | logic/spinn-pi-nt | test | 0.9000 ± 0.1000 (3 seeds) | 0.9906 | \
             Bowman et al. (2015) \\| Table 3 | 3m 03s | abc123-dirty |\n"
        );
        assert_eq!(
            row.matches(" | ").count() + 2,
            TABLE_HEADER.lines().next().unwrap().matches('|').count()
        );
        let row = markdown_row(&record(Some(5.0), &[0.8]));
        assert!(
            row.starts_with(
                "| logic-gold (budget 5 min) | logic/spinn-pi-nt | test | 0.8000 (1 seed) |"
            ),
            "{row}"
        );
        // The programs' own training time (across resumes) counts where results give it.
        let mut resumed = record(None, &[0.8, 0.9]);
        resumed.seeds[0].result = serde_json::json!({"train_seconds": 600.0});
        assert!(
            markdown_row(&resumed).contains("| 11m 01s |"),
            "{}",
            markdown_row(&resumed)
        );
        let md = record_markdown(&record(Some(5.0), &[0.8, 0.9]));
        assert!(md.starts_with(TABLE_HEADER));
        assert!(
            md.contains(
                "**test accuracy by operator count** (logic-gold, budget 5 min, mean over 2 seeds)"
            ),
            "{md}"
        );
        assert!(
            md.contains("| operators | accuracy |\n|---|---:|\n| 7 | 0.8750 |"),
            "{md}"
        );
    }

    #[test]
    fn durations_and_dates_are_written_plainly() {
        assert_eq!(duration(41.4), "41s");
        assert_eq!(duration(725.0), "12m 05s");
        assert_eq!(duration(3.0 * 3600.0 + 125.0), "3h 02m");
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc_date(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("--lr"), "--lr");
        assert_eq!(
            short_commit("490fa15c0ffee490fa15c0ffee490fa15c0ffee0-dirty"),
            "490fa15-dirty"
        );
        assert_eq!(
            short_commit("490fa15c0ffee490fa15c0ffee490fa15c0ffee0"),
            "490fa15"
        );
        assert_eq!(short_commit("unknown"), "unknown");
    }

    #[test]
    fn recipes_are_found_by_name_or_path() {
        let root = Path::new("/w");
        assert_eq!(
            recipe_path(root, "logic-gold"),
            Path::new("/w/repro/logic-gold.toml")
        );
        assert_eq!(recipe_path(root, "my.toml"), Path::new("my.toml"));
        assert_eq!(recipe_path(root, "a/b"), Path::new("a/b"));
        let e = find_recipe(root, "nope").unwrap_err().to_string();
        assert!(
            e.contains("no recipe 'nope'") && e.contains("--list"),
            "{e}"
        );
    }

    #[test]
    fn atomic_writes_leave_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["record.json"]);
    }

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
