//! `OUT/result.json`: what a classification program measured at the end of a run, in one
//! machine-readable file (read by `cargo xtask repro`, see docs/repro.md).
//!
//! ```json
//! {"program": "logic", "encoder": "spinn-pi-nt", "device": "flex", "checkpoint": "best",
//!  "stopped": "finished", "steps": 1234, "epochs": 3, "train_seconds": 512.3,
//!  "splits": {"valid": {"accuracy": 0.9, "correct": 900, "total": 1000}, "test": {…}},
//!  "tables": [{"title": "test accuracy by file", "split": "test", "key": "file",
//!              "rows": [{"key": "test0", "accuracy": 1.0, "correct": 6, "total": 6}]}]}
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arbor_cells::ArborBackend;
use arbor_tasks::{evaluate, Classifier, Examples};
use arbor_train::{EvalReport, TrainOutcome};
use serde::{Deserialize, Serialize};

use crate::cli::TrainArgs;

/// Accuracy over one split (or one row of a table).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// `correct / total` (0 when empty).
    pub accuracy: f64,
    /// Correct predictions.
    pub correct: usize,
    /// Predictions.
    pub total: usize,
}

impl Score {
    /// From counts.
    pub fn new(correct: usize, total: usize) -> Self {
        Self {
            accuracy: if total == 0 {
                0.0
            } else {
                correct as f64 / total as f64
            },
            correct,
            total,
        }
    }

    /// The accuracy of an evaluation report.
    pub fn of(report: &EvalReport) -> Self {
        Self::new(report.correct, report.total)
    }
}

/// One row of a [`ScoreTable`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRow {
    /// The row's key (a file name, an operator count, a depth…).
    pub key: String,
    /// Its accuracy.
    #[serde(flatten)]
    pub score: Score,
}

/// Accuracy of one split broken down by some key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreTable {
    /// What the table shows, e.g. "test accuracy by operator count".
    pub title: String,
    /// The split it breaks down.
    pub split: String,
    /// What the rows are keyed by (`file`, `operators`, `depth`, `length`).
    pub key: String,
    /// The rows, in order.
    pub rows: Vec<ScoreRow>,
}

impl ScoreTable {
    /// A table from `(key, correct, total)` rows.
    pub fn new(
        title: impl Into<String>,
        split: impl Into<String>,
        key: impl Into<String>,
        rows: impl IntoIterator<Item = (String, usize, usize)>,
    ) -> Self {
        Self {
            title: title.into(),
            split: split.into(),
            key: key.into(),
            rows: rows
                .into_iter()
                .map(|(key, c, n)| ScoreRow {
                    key,
                    score: Score::new(c, n),
                })
                .collect(),
        }
    }
}

/// What a classification program writes to `OUT/result.json` at the end of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The program (`logic`, `sst`, `snli`, `listops`).
    pub program: String,
    /// The encoder kind.
    pub encoder: String,
    /// The `--device` it ran on (with `--devices`, the first: the one that evaluated).
    pub device: String,
    /// With `--devices`: every worker's device, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// Which weights were scored: `best` (selected on validation) or `last` (no selection
    /// ran, or the last evaluation beat the best one: see
    /// [`scored_checkpoint`](crate::common::scored_checkpoint)).
    pub checkpoint: String,
    /// Why training stopped: `finished`, `max_steps`, `max_minutes` or `early_stopping`.
    pub stopped: String,
    /// The id of the run that wrote this result (as in its metrics records and checkpoints).
    #[serde(default)]
    pub run: String,
    /// Optimizer steps done.
    pub steps: u64,
    /// Epochs completed.
    pub epochs: u64,
    /// Seconds of training steps (evaluation excluded), across resumes.
    pub train_seconds: f64,
    /// Accuracy of the scored weights on every split.
    pub splits: BTreeMap<String, Score>,
    /// Breakdowns of splits.
    pub tables: Vec<ScoreTable>,
    /// How the program fed its data, where it has a choice (logic: `bracketed`, the formulas
    /// as written, or `leaves`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
}

impl RunResult {
    /// The result of a run of `program` with `args`, ended as `outcome` says; splits and tables
    /// are added with [`RunResult::split`] and [`RunResult::table`].
    pub fn new<M>(program: &str, args: &TrainArgs, outcome: &TrainOutcome<M>) -> Self {
        Self {
            program: program.into(),
            encoder: args.encoder.to_string(),
            device: args.device.clone(),
            devices: args.engine.devices.as_ref().map(ToString::to_string),
            checkpoint: if crate::common::scored_checkpoint(outcome, "valid").is_some() {
                "best"
            } else {
                "last"
            }
            .into(),
            stopped: outcome.stopped.name().into(),
            run: outcome.state.run_id.clone(),
            steps: outcome.state.step,
            epochs: outcome.state.epoch,
            train_seconds: outcome.state.elapsed_sec,
            splits: BTreeMap::new(),
            tables: Vec::new(),
            input: None,
        }
    }

    /// Records the accuracy of `report` as split `name`.
    pub fn split(&mut self, name: &str, report: &EvalReport) -> &mut Self {
        self.splits.insert(name.into(), Score::of(report));
        self
    }

    /// Adds a table.
    pub fn table(&mut self, table: ScoreTable) -> &mut Self {
        self.tables.push(table);
        self
    }

    /// Scores `model` on every split of `splits` (whole split, exact accuracy), prints one
    /// line per split naming `which` weights were scored, and records each.
    pub fn score_splits<B: ArborBackend, M: Classifier<B>, D: Examples>(
        &mut self,
        model: &M,
        splits: &[(String, D)],
        score_parses: bool,
        which: &str,
        device: &B::Device,
    ) -> &mut Self {
        for (split, data) in splits {
            let r = evaluate(model, data, 256, score_parses, device);
            println!(
                "{split:>8} accuracy {:.4} ({} / {}), {which}",
                r.accuracy(),
                r.correct,
                r.total
            );
            self.split(split, &r);
        }
        self
    }

    /// Where a run writing to `out_dir` puts its result.
    pub fn path(out_dir: &Path) -> PathBuf {
        out_dir.join(arbor_train::outdir::RESULT_FILE)
    }

    /// Writes `OUT/result.json` atomically (a temporary file in the same directory, synced,
    /// then renamed over the old one), so a reader never sees half a file.
    ///
    /// # Errors
    /// When the directory cannot be written.
    pub fn write(&self, out_dir: &Path) -> Result<PathBuf> {
        let path = Self::path(out_dir);
        let tmp = out_dir.join(".result.json.tmp");
        let json = serde_json::to_vec_pretty(self).context("serialising the result")?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = RunResult {
            program: "logic".into(),
            encoder: "lstm".into(),
            device: "flex".into(),
            devices: Some("flex,flex".into()),
            checkpoint: "best".into(),
            stopped: "finished".into(),
            run: "test-run".into(),
            steps: 10,
            epochs: 1,
            train_seconds: 1.5,
            splits: BTreeMap::new(),
            tables: Vec::new(),
            input: Some("bracketed".into()),
        };
        r.split(
            "test",
            &EvalReport {
                correct: 3,
                total: 4,
                ..Default::default()
            },
        )
        .table(ScoreTable::new(
            "test accuracy by file",
            "test",
            "file",
            [("test0".to_string(), 1, 2), ("test1".to_string(), 2, 2)],
        ));
        let path = r.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back: RunResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["splits"]["test"]["accuracy"], 0.75);
        assert_eq!(v["tables"][0]["rows"][1]["key"], "test1");
        assert_eq!(v["tables"][0]["rows"][1]["accuracy"], 1.0);
        assert!(!dir.path().join(".result.json.tmp").exists());
    }
}
