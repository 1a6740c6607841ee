//! Word-level language modelling with truncated BPTT as an engine task.

use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use arbor_lm::{ids_tensor, token_nll, Batchified, LmState, RnnLm};
use arbor_train::{EvalReport, StepContext, StepOutput, Task};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// Correct top-1 next-word predictions of one segment, left on the device (`[1]`).
fn correct_predictions<B: ArborBackend>(
    logits: Tensor<B, 3>,
    targets: Tensor<B, 2, Int>,
) -> Tensor<B, 1, Int> {
    let [b, t, _] = logits.dims();
    let pred = logits.argmax(2).reshape([b, t]);
    pred.equal(targets).int().sum()
}

/// Perplexity evaluation of `model` over a whole batchified stream, carrying the state.
pub fn evaluate_stream<B: ArborBackend>(
    model: &RnnLm<B>,
    data: &Batchified,
    device: &B::Device,
) -> EvalReport {
    let mut state: Option<LmState<B>> = None;
    let mut report = EvalReport::default();
    for s in 0..data.num_segments() {
        let seg = data.segment(s);
        let x = ids_tensor::<B>(&seg.inputs, [seg.batch, seg.len], device);
        let y = ids_tensor::<B>(&seg.targets, [seg.batch, seg.len], device);
        let out = model.forward(x, state);
        let nll = token_nll(out.logits.clone(), y.clone())
            .sum()
            .into_scalar()
            .elem::<f64>();
        let correct = correct_predictions(out.logits, y)
            .into_scalar()
            .elem::<i64>() as usize;
        report.loss_sum += nll;
        report.loss_count += seg.batch * seg.len;
        report.correct += correct;
        report.total += seg.batch * seg.len;
        state = Some(out.state);
    }
    if let Some(l) = report.loss() {
        report.extra.insert("perplexity".into(), l.exp());
    }
    report
}

/// The token-weighted NLL sum and the tokens of the segments `running` holds, read back in one
/// transfer.
fn running_nll<B: Backend>(running: Vec<(Tensor<B, 1>, usize)>) -> (f64, usize) {
    if running.is_empty() {
        return (0.0, 0);
    }
    let (nll, tokens): (Vec<_>, Vec<_>) = running.into_iter().unzip();
    let values: Vec<f64> = Tensor::cat(nll, 0).into_data().iter::<f64>().collect();
    let sum = values
        .iter()
        .zip(&tokens)
        .fold(0.0, |acc, (v, &t)| acc + v * t as f64);
    (sum, tokens.iter().sum())
}

/// The language-modelling task for the engine: one batch = one TBPTT segment, in order; the
/// state of segment `s` starts from the detached final state of segment `s − 1`.
///
/// A batch lists the segment's rows as indices `s · rows + r`, so that data-parallel training
/// gives each worker a contiguous band of rows; each band carries its own state from one
/// segment to the next.
pub struct LmTask<B: AutodiffBackend> {
    /// Training stream.
    pub train: Batchified,
    /// Validation stream.
    pub valid: Batchified,
    /// AR weight.
    pub alpha: f64,
    /// TAR weight.
    pub beta: f64,
    /// Checkpoint metadata.
    pub meta: serde_json::Value,
    /// Device.
    pub device: B::Device,
    /// By the first row of a band of rows: `(next segment, its initial state)`.
    carry: Mutex<HashMap<usize, (usize, LmState<B>)>>,
    /// The mean training NLL of every segment since the last evaluation, left on the device
    /// (read once, at the evaluation), with its number of tokens.
    running: Mutex<Vec<(Tensor<B::InnerBackend, 1>, usize)>>,
}

impl<B: ArborAutodiffBackend> LmTask<B> {
    /// A task over the given streams.
    pub fn new(
        train: Batchified,
        valid: Batchified,
        alpha: f64,
        beta: f64,
        meta: serde_json::Value,
        device: B::Device,
    ) -> Self {
        LmTask {
            train,
            valid,
            alpha,
            beta,
            meta,
            device,
            carry: Mutex::new(HashMap::new()),
            running: Mutex::new(Vec::new()),
        }
    }
}

impl<B: ArborAutodiffBackend> Task<B> for LmTask<B> {
    type Model = RnnLm<B>;

    fn train_lengths(&self) -> Vec<usize> {
        vec![1; self.train.num_segments() * self.train.batch]
    }

    fn batches(&self, _epoch: u64) -> Option<Vec<Vec<usize>>> {
        let rows = self.train.batch;
        Some(
            (0..self.train.num_segments())
                .map(|s| (s * rows..(s + 1) * rows).collect())
                .collect(),
        )
    }

    fn step(
        &self,
        model: &RnnLm<B>,
        batch: &[usize],
        _ctx: StepContext,
        device: &B::Device,
    ) -> StepOutput<B> {
        let rows = self.train.batch;
        let s = batch[0] / rows;
        let first = batch[0] % rows;
        let init = lock(&self.carry)
            .remove(&first)
            .filter(|(next, _)| *next == s)
            .map(|(_, st)| st);
        let seg = self.train.segment(s).rows(first..first + batch.len());
        let x = ids_tensor::<B>(&seg.inputs, [seg.batch, seg.len], device);
        let y = ids_tensor::<B>(&seg.targets, [seg.batch, seg.len], device);
        let out = model.forward(x, init);
        let nll = token_nll(out.logits.clone(), y.clone()).mean();
        let correct = correct_predictions(out.logits.clone().detach(), y);
        let tokens = seg.batch * seg.len;
        lock(&self.running).push((nll.clone().detach().inner().to_device(&self.device), tokens));
        let loss = nll.add(out.ar_tar(self.alpha, self.beta));
        lock(&self.carry).insert(first, (s + 1, out.state.clone().detach()));
        StepOutput {
            loss,
            correct: Some(correct),
            total: tokens,
        }
    }

    fn eval_splits(&self) -> Vec<String> {
        vec!["valid".into()]
    }

    fn evaluate(&self, model: &RnnLm<B::InnerBackend>, _split: &str) -> EvalReport {
        let started = Instant::now();
        let mut report = evaluate_stream(model, &self.valid, &self.device);
        let (sum, tokens) = running_nll(std::mem::take(&mut *lock(&self.running)));
        if tokens > 0 {
            report
                .extra
                .insert("train_perplexity".into(), (sum / tokens as f64).exp());
        }
        eprintln!(
            "valid perplexity {:.2} ({} tokens, {:.0} s); train perplexity {} (running, with \
             dropout)",
            report.extra.get("perplexity").copied().unwrap_or(f64::NAN),
            report.total,
            started.elapsed().as_secs_f64(),
            report
                .extra
                .get("train_perplexity")
                .map(|p| format!("{p:.2}"))
                .unwrap_or_else(|| "-".into()),
        );
        report
    }

    fn selection_metric(&self, report: &EvalReport) -> f64 {
        -report.loss().unwrap_or(f64::INFINITY)
    }

    fn metadata(&self) -> serde_json::Value {
        self.meta.clone()
    }
}

/// The task's own state behind a lock: a step that panicked cannot leave it half written (each
/// lock is held for one `insert`, `remove` or `push`), so a poisoned lock is used as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
