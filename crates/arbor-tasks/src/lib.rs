//! Ready-made training tasks for the engine ([`arbor_train::Task`]): NLI pairs and single
//! sentence classification, over any encoder of [`arbor_encoders`]. The examples are thin
//! command-line wrappers around these.

mod classify;
mod model;
mod nli;

pub use classify::{evaluate_classify, ClassifyData, ClassifyTask};
pub use model::{ModelConfig, ModelMeta};
pub use nli::{evaluate_nli, NliData, NliTask};

/// The training step shared by the classification tasks: cross-entropy of the logits (plus the
/// encoder's auxiliary loss, when it has one) and the batch's correct count.
fn classification_step<B: burn::prelude::Backend>(
    logits: burn::prelude::Tensor<B, 2>,
    labels: burn::prelude::Tensor<B, 1, burn::prelude::Int>,
    aux_loss: Option<burn::prelude::Tensor<B, 1>>,
) -> arbor_train::StepOutput<B> {
    let total = labels.dims()[0];
    let correct = arbor_heads::count_correct(logits.clone().detach(), labels.clone());
    let mut loss = arbor_heads::cross_entropy(logits, labels);
    if let Some(aux) = aux_loss {
        loss = loss.add(aux);
    }
    arbor_train::StepOutput {
        loss,
        correct,
        total,
    }
}

/// The evaluation loop shared by the classification tasks: runs `logits(idx)` over
/// length-sorted batches of a whole split and returns exact accuracy, mean loss, and (when
/// `groups` is given) per-group accuracy as `group_<g>_accuracy` / `group_<g>_count`.
fn evaluate_batches<B: burn::prelude::Backend>(
    lengths: &[usize],
    labels: &[usize],
    groups: Option<&[usize]>,
    batch_size: usize,
    mut logits: impl FnMut(
        &[usize],
    ) -> (
        burn::prelude::Tensor<B, 2>,
        burn::prelude::Tensor<B, 1, burn::prelude::Int>,
    ),
) -> arbor_train::EvalReport {
    use burn::prelude::ElementConversion;
    let mut report = arbor_train::EvalReport::default();
    let mut per_group: std::collections::BTreeMap<usize, (usize, usize)> = Default::default();
    for idx in eval_batches(lengths, batch_size) {
        let (logits, targets) = logits(&idx);
        let loss = arbor_heads::cross_entropy(logits.clone(), targets.clone())
            .into_scalar()
            .elem::<f64>();
        report.loss_sum += loss * idx.len() as f64;
        report.loss_count += idx.len();
        match groups {
            Some(g) => {
                let pred = logits.argmax(1).into_data().convert::<i64>();
                let pred = pred.to_vec::<i64>().unwrap_or_default();
                for (k, &i) in idx.iter().enumerate() {
                    let ok = pred.get(k).is_some_and(|&p| p as usize == labels[i]);
                    let e = per_group.entry(g[i]).or_default();
                    e.0 += usize::from(ok);
                    e.1 += 1;
                    report.correct += usize::from(ok);
                }
            }
            None => report.correct += arbor_heads::count_correct(logits, targets),
        }
        report.total += idx.len();
    }
    for (g, (c, t)) in per_group {
        report
            .extra
            .insert(format!("group_{g}_accuracy"), c as f64 / t as f64);
        report.extra.insert(format!("group_{g}_count"), t as f64);
    }
    report
}

/// Per-group accuracy from a report of a grouped evaluation: `group → (accuracy, count)`.
pub fn per_group(
    report: &arbor_train::EvalReport,
) -> std::collections::BTreeMap<usize, (f64, usize)> {
    let mut out = std::collections::BTreeMap::new();
    for (key, &value) in &report.extra {
        let Some(g) = key
            .strip_prefix("group_")
            .and_then(|k| k.strip_suffix("_accuracy"))
            .and_then(|k| k.parse::<usize>().ok())
        else {
            continue;
        };
        let count = report
            .extra
            .get(&format!("group_{g}_count"))
            .copied()
            .unwrap_or(0.0);
        out.insert(g, (value, count as usize));
    }
    out
}

/// Batches of example indices for evaluation: sorted by `lengths` so padding stays small, in
/// chunks of `batch_size`. Every index appears exactly once.
pub fn eval_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::prelude::*;
    use burn::tensor::TensorData;

    /// Fixed logits per example: the model "predicts" `pred[i]` for example `i`.
    fn run(groups: Option<&[usize]>, batch_size: usize) -> arbor_train::EvalReport {
        let labels = [0usize, 1, 1, 0, 1];
        let pred = [0usize, 1, 0, 0, 0];
        let lengths = [3usize, 1, 4, 2, 5];
        let mut seen = Vec::new();
        let report =
            super::evaluate_batches::<Flex>(&lengths, &labels, groups, batch_size, |idx| {
                seen.extend_from_slice(idx);
                let logits: Vec<f32> = idx
                    .iter()
                    .flat_map(|&i| if pred[i] == 0 { [2.0, 0.0] } else { [0.0, 2.0] })
                    .collect();
                let targets: Vec<i64> = idx.iter().map(|&i| labels[i] as i64).collect();
                let d = Default::default();
                (
                    Tensor::from_data(TensorData::new(logits, [idx.len(), 2]), &d),
                    Tensor::from_data(TensorData::new(targets, [idx.len()]), &d),
                )
            });
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4], "every example exactly once");
        report
    }

    #[test]
    fn evaluation_counts_exactly_over_the_split_and_per_group() {
        for batch_size in [1, 2, 5] {
            let r = run(None, batch_size);
            assert_eq!((r.correct, r.total, r.loss_count), (3, 5, 5));
            let g = run(Some(&[7, 7, 8, 8, 8]), batch_size);
            assert_eq!((g.correct, g.total), (3, 5));
            assert_eq!(g.extra["group_7_accuracy"], 1.0);
            assert_eq!(g.extra["group_7_count"], 2.0);
            assert!((g.extra["group_8_accuracy"] - 1.0 / 3.0).abs() < 1e-12);
        }
    }
}
