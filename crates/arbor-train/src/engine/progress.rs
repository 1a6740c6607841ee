//! What a run shows and logs as it goes: the progress bar, the running window of training
//! statistics behind it and behind the `train` records of the metrics log, and the summary
//! table printed at the end.

use std::collections::BTreeMap;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::config::TrainConfig;
use super::state::TrainState;
use super::task::EvalReport;
use crate::log::MetricsRecord;

/// The progress bar of one epoch (hidden when quiet).
pub(super) struct Progress {
    pub(super) bar: ProgressBar,
}

impl Progress {
    /// A bar of `len` batches for epoch `epoch` (0-based).
    pub(super) fn new(len: u64, epoch: u64, quiet: bool) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(len)
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} eta {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("epoch {}", epoch + 1));
        Self { bar }
    }
}

/// Training statistics over the steps since the last `train` record of the metrics log.
pub(super) struct Window {
    loss: f64,
    steps: u64,
    correct: usize,
    total: usize,
    examples: usize,
    start: Instant,
}

impl Window {
    /// An empty window starting now.
    pub(super) fn new() -> Self {
        Self {
            loss: 0.0,
            steps: 0,
            correct: 0,
            total: 0,
            examples: 0,
            start: Instant::now(),
        }
    }

    /// Adds one step: its loss, its correct / total predictions and its examples.
    pub(super) fn add(&mut self, loss: f64, correct: usize, total: usize, examples: usize) {
        self.loss += loss;
        self.steps += 1;
        self.correct += correct;
        self.total += total;
        self.examples += examples;
    }

    /// Seconds since the window started (never 0).
    pub(super) fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64().max(1e-9)
    }

    fn mean_loss(&self) -> f64 {
        self.loss / self.steps as f64
    }

    fn accuracy(&self) -> Option<f64> {
        (self.total > 0).then(|| self.correct as f64 / self.total as f64)
    }

    /// The progress bar's message, `secs` after the window started, at learning rate `lr`.
    pub(super) fn message(&self, secs: f64, lr: f64) -> String {
        format!(
            "loss {:.4} acc {:.3} {:.0} ex/s lr {:.1e}",
            self.mean_loss(),
            self.accuracy().unwrap_or(0.0),
            self.examples as f64 / secs,
            lr
        )
    }

    /// The `train` record of the metrics log closing the window, `secs` after it started; `lr`
    /// is the learning rate of the window's last step (schedule and warm-up applied) and `tau`
    /// the annealed Gumbel temperature, if any.
    pub(super) fn record(
        &self,
        state: &TrainState,
        secs: f64,
        lr: f64,
        tau: Option<f64>,
    ) -> MetricsRecord {
        let mut extra = serde_json::Map::new();
        if let Some(t) = tau {
            extra.insert("tau".into(), serde_json::json!(t));
        }
        MetricsRecord {
            kind: "train".into(),
            step: state.step,
            epoch: state.epoch,
            loss: Some(self.mean_loss()),
            accuracy: self.accuracy(),
            lr,
            examples_per_sec: Some(self.examples as f64 / secs),
            elapsed_sec: state.elapsed_sec,
            run: Some(state.run_id.clone()),
            extra,
        }
    }
}

/// Prints the table of the last evaluation of every split and a line of totals.
pub(super) fn print_summary(
    state: &TrainState,
    evals: &BTreeMap<String, EvalReport>,
    config: &TrainConfig,
) {
    eprintln!();
    eprintln!("| split | accuracy | correct / total | loss |");
    eprintln!("| --- | --- | --- | --- |");
    for (split, r) in evals {
        eprintln!(
            "| {split} | {:.4} | {} / {} | {} |",
            r.accuracy(),
            r.correct,
            r.total,
            r.loss()
                .map(|l| format!("{l:.4}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    eprintln!(
        "\n{} steps, {} examples in {:.1} s ({:.1} examples/s); best {} at step {}; checkpoints in {}",
        state.step,
        state.examples,
        state.elapsed_sec,
        state.examples as f64 / state.elapsed_sec.max(1e-9),
        state
            .best_metric
            .map(|m| format!("{m:.4}"))
            .unwrap_or_else(|| "-".into()),
        state.best_step.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
        config.out_dir.display()
    );
}
