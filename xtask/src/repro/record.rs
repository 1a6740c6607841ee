//! The record of a recipe's runs: `record.json` (everything about them) and `record.md` (its
//! row of the results table and its tables), the machine, the commit and the date.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use super::recipe::Paper;
use super::results::{Summary, TableSummary};
use super::running::minutes;

/// The header of the results table (`record.md` and the summary printed at the end).
pub const TABLE_HEADER: &str = "| recipe | program/encoder | metric | arbor (mean ± sd, n seeds) \
                                | paper | source | training time | commit |\n\
                                |---|---|---|---:|---:|---|---:|---|\n";

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
pub(super) fn budget_note(budget_minutes: Option<f64>) -> String {
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

/// Writes `record.json` and `record.md` of `record` into `dir` (each through [`write_atomic`]),
/// prints the markdown and says where the record went.
pub(super) fn write_record(dir: &Path, record: &Record) -> Result<()> {
    let json = serde_json::to_string_pretty(record).context("record.json")?;
    write_atomic(&dir.join("record.json"), format!("{json}\n").as_bytes())?;
    let md = record_markdown(record);
    write_atomic(&dir.join("record.md"), md.as_bytes())?;
    println!("\n{md}");
    eprintln!("repro: wrote {}", dir.join("record.json").display());
    Ok(())
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
pub(super) fn git_commit(root: &Path) -> String {
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

/// Now, as [`utc_date`] writes it.
pub(super) fn now_utc() -> String {
    utc_date(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repro::results::{summarize, RowSummary};
    use crate::repro::running::shell_quote;

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
}
