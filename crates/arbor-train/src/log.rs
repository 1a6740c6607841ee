//! The JSON-lines metrics log.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One line of the metrics log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricsRecord {
    /// `train` (a window of training steps) or `eval:<split>`.
    pub kind: String,
    /// Optimizer steps done so far.
    pub step: u64,
    /// Epoch (0-based) the step belongs to.
    pub epoch: u64,
    /// Mean training loss over the window, or the evaluation loss.
    pub loss: Option<f64>,
    /// Exact accuracy over the window or the whole split.
    pub accuracy: Option<f64>,
    /// Learning rate in force.
    pub lr: f64,
    /// Training examples (sentences, or pairs for NLI) per second over the window.
    pub examples_per_sec: Option<f64>,
    /// Seconds of training so far (resumed runs include the time before the interruption).
    pub elapsed_sec: f64,
    /// The id of the run that wrote the record ([`TrainState::run_id`](crate::TrainState)),
    /// so the records of two runs can never pass for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Task-specific values (per-group accuracy, perplexity…).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// An append-only JSON-lines file of [`MetricsRecord`]s.
#[derive(Debug)]
pub struct MetricsLog {
    path: PathBuf,
}

impl MetricsLog {
    /// Opens (creating) the log at `path`.
    pub fn new(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// Drops every record after `step` (used on resume: what a killed run logged after its last
    /// checkpoint is redone, so it must not appear twice).
    pub fn truncate_after(&self, step: u64) -> std::io::Result<()> {
        let kept: Vec<String> = self
            .read()?
            .into_iter()
            .filter(|r| r.step <= step)
            .map(|r| serde_json::to_string(&r).expect("records serialise"))
            .collect();
        let tmp = self.path.with_extension("jsonl.tmp");
        let mut body = kept.join("\n");
        if !body.is_empty() {
            body.push('\n');
        }
        fs::write(&tmp, body)?;
        fs::rename(tmp, &self.path)
    }

    /// Appends one record.
    pub fn append(&self, record: &MetricsRecord) -> std::io::Result<()> {
        let mut f = OpenOptions::new().append(true).open(&self.path)?;
        writeln!(
            f,
            "{}",
            serde_json::to_string(record).expect("records serialise")
        )
    }

    /// Reads every well-formed record (a partially written last line is skipped).
    pub fn read(&self) -> std::io::Result<Vec<MetricsRecord>> {
        let f = fs::File::open(&self.path)?;
        Ok(BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect())
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
