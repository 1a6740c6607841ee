//! Evaluation and model selection: every split evaluated, logged and printed
//! ([`Run::evaluate`], [`Run::report`]), and the first split's metric kept as the best (with
//! `best.ckpt`), decaying the learning rate on a plateau or stopping early ([`Run::select`]).

use std::collections::BTreeMap;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use super::curves::SELECTION_METRIC;
use super::error::{log_error, TrainError};
use super::optim::plateau_decay;
use super::run::Run;
use super::state::TrainState;
use super::task::{EvalReport, Task};
use crate::log::MetricsRecord;

impl<B: AutodiffBackend, T: Task<B>> Run<'_, B, T> {
    /// Evaluates `model` on every split, logging and printing each report into `evals`.
    ///
    /// `select`: whether this evaluation drives model selection and plateau decay. The extra
    /// evaluation made when a run stops between scheduled evaluations (max_steps) only reports,
    /// so a stopped-and-resumed run follows exactly the same schedule as an uninterrupted one.
    pub(super) fn evaluate(
        &self,
        model: &T::Model,
        state: &mut TrainState,
        evals: &mut BTreeMap<String, EvalReport>,
        select: bool,
    ) -> Result<(), TrainError> {
        let inner = model.valid();
        for (k, split) in self.splits.iter().enumerate() {
            let report = self.task.evaluate(&inner, split);
            let metric = (k == 0).then(|| self.task.selection_metric(&report));
            self.report(split, &report, metric, state)?;
            if k == 0 && select {
                self.select(model, &report, state)?;
            }
            evals.insert(split.clone(), report);
        }
        Ok(())
    }

    /// Appends the evaluation of `split` to the metrics log (with the `selection_metric` for
    /// the first split) and prints it.
    fn report(
        &self,
        split: &str,
        report: &EvalReport,
        selection_metric: Option<f64>,
        state: &TrainState,
    ) -> Result<(), TrainError> {
        let mut extra = serde_json::Map::new();
        for (key, v) in &report.extra {
            extra.insert(key.clone(), serde_json::json!(v));
        }
        if let Some(m) = selection_metric {
            extra.insert(SELECTION_METRIC.into(), serde_json::json!(m));
        }
        self.log
            .append(&MetricsRecord {
                kind: format!("eval:{split}"),
                step: state.step,
                epoch: state.epoch,
                loss: report.loss(),
                accuracy: (report.total > 0).then(|| report.accuracy()),
                lr: state.lr,
                examples_per_sec: None,
                elapsed_sec: state.elapsed_sec,
                run: Some(state.run_id.clone()),
                extra,
            })
            .map_err(log_error(self.log.path()))?;
        if !self.config.quiet {
            eprintln!(
                "step {:>7} {split:>8}: accuracy {:.4} ({}/{}){}",
                state.step,
                report.accuracy(),
                report.correct,
                report.total,
                report
                    .loss()
                    .map(|l| format!(", loss {l:.4}"))
                    .unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Model selection on the first split's `report`: a new best metric is recorded in `state`
    /// and `model` saved to `best.ckpt`; otherwise the plateau counter advances and the learning
    /// rate may decay.
    fn select(
        &self,
        model: &T::Model,
        report: &EvalReport,
        state: &mut TrainState,
    ) -> Result<(), TrainError> {
        let metric = self.task.selection_metric(report);
        if state.best_metric.is_none_or(|b| metric > b) {
            state.best_metric = Some(metric);
            state.best_step = Some(state.step);
            state.bad_evals = 0;
            state.evals_since_best = 0;
            self.save_checkpoint(model, Vec::new(), state, &self.best_path)?;
            return Ok(());
        }
        state.evals_since_best += 1;
        if self.config.lr_schedule.decays_on_plateau()
            && plateau_decay(self.config, &mut state.bad_evals, &mut state.lr)
            && !self.config.quiet
        {
            eprintln!("validation stalled: learning rate now {:.2e}", state.lr);
        }
        if let Some(patience) = self.config.early_stopping {
            if state.evals_since_best >= patience {
                state.stopped_early = true;
                if !self.config.quiet {
                    eprintln!(
                        "early stopping: no improvement in {} evaluations (best {:.4} at step {})",
                        state.evals_since_best,
                        state.best_metric.unwrap_or(f64::NAN),
                        state.best_step.unwrap_or(0)
                    );
                }
            }
        }
        Ok(())
    }
}
