//! # arbor-tasks
//!
//! The engine tasks ([`arbor_train::Task`]) arbor trains, with their evaluation loops:
//!
//! - [`ClassificationTask`]: supervised classification over any encoder of
//!   [`arbor_encoders`], one implementation for sentence pairs ([`NliTask`]: SNLI, logic) and
//!   single sentences ([`ClassifyTask`]: SST-2, ListOps), with exact whole-split evaluation
//!   ([`evaluate`]), per-group accuracy and, for full SPINN, the accuracy of its own parses;
//! - [`LmTask`]: word-level language modelling with truncated BPTT ([`evaluate_stream`]);
//! - [`R2d2LmTask`]: R2D2's bidirectional language-model pretraining.
//!
//! The programs in `arbor-apps` build these from files and flags.

#![warn(missing_docs)]

mod classification;
mod data;
mod legacy;
mod model;
mod r2d2_lm;
mod rnn_lm;

pub use classification::{
    evaluate, ClassificationTask, Classified, Classifier, ClassifyTask, NliTask,
};
pub use data::{ClassifyData, Examples, NliData, PairTransitions};
pub use model::{
    check_training_memory, load_classifier, ClassifierKind, ClassifierModel, LoadError,
    ModelConfig, ModelMeta, WrongKind,
};
pub use r2d2_lm::{R2d2LmTask, R2d2Meta};
pub use rnn_lm::{evaluate_stream, LmTask};

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

/// Padded tokens (examples × the longest) an evaluation batch holds at most, unless one example
/// alone is longer: 256 examples of 64 tokens. ListOps at its released lengths has expressions of
/// 800–1,100 tokens; 256 of them in one batch would hold 5 GB of attention scores in a
/// Transformer, so long examples are evaluated a few at a time.
pub const EVAL_MAX_TOKENS: usize = 256 * 64;

/// Batches of example indices for evaluation: sorted by `lengths` so padding stays small, in
/// chunks of at most `batch_size` examples and [`EVAL_MAX_TOKENS`] padded tokens (at least one
/// example each). Every index appears exactly once.
pub fn eval_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        // Sorted, so `lengths[i]` is the longest the batch would hold.
        let full = current.len() >= batch_size.max(1)
            || (!current.is_empty() && (current.len() + 1) * lengths[i] > EVAL_MAX_TOKENS);
        if full {
            out.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    #[test]
    fn eval_batches_bound_examples_and_padded_tokens() {
        // 300 short examples, then three of 1,000 tokens and one longer than the budget.
        let mut lengths = vec![10usize; 300];
        lengths.extend([1000, 1000, 1000, crate::EVAL_MAX_TOKENS + 5]);
        let batches = crate::eval_batches(&lengths, 256);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![256, 44, 3, 1]);
        let mut all: Vec<usize> = batches.concat();
        all.sort_unstable();
        assert_eq!(all, (0..lengths.len()).collect::<Vec<_>>());
        for b in &batches {
            let longest = b.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(b.len() == 1 || b.len() * longest <= crate::EVAL_MAX_TOKENS);
        }
    }

    use arbor_cells::ArborBackend;
    use arbor_data::tree::Transition;
    use arbor_encoders::Decisions;
    use arbor_heads::SentenceBatch;
    use burn::backend::Flex;
    use burn::prelude::*;
    use burn::tensor::TensorData;

    use crate::{Classified, Classifier, Examples};

    const LABELS: [usize; 5] = [0, 1, 1, 0, 1];
    const PRED: [usize; 5] = [0, 1, 0, 0, 0];
    const LENGTHS: [usize; 5] = [3, 1, 4, 2, 5];

    /// Example `i` is the sentence `[i; LENGTHS[i]]`.
    struct Fixed {
        groups: Option<Vec<usize>>,
        seen: RefCell<Vec<usize>>,
    }

    /// "Predicts" `PRED[i]` for the sentence of example `i`.
    struct Oracle;

    impl<B: ArborBackend> Classifier<B> for Oracle {
        fn classify(&self, batch: SentenceBatch<B>, _: Decisions<'_>) -> Classified<B> {
            let n = batch.lengths.len();
            let device = batch.ids.device();
            let first = batch.ids.slice([0..n, 0..1]).into_data().convert::<i64>();
            let logits: Vec<f32> = first
                .to_vec::<i64>()
                .unwrap_or_default()
                .into_iter()
                .flat_map(|i| {
                    if PRED[i as usize] == 0 {
                        [2.0, 0.0]
                    } else {
                        [0.0, 2.0]
                    }
                })
                .collect();
            Classified {
                logits: Tensor::from_data(TensorData::new(logits, [n, 2]), &device),
                aux_loss: None,
                trees: None,
            }
        }
    }

    impl<B: ArborBackend> crate::ClassifierKind<B> for Oracle {
        const NAME: &'static str = "an oracle";

        fn from_model(_: crate::ClassifierModel<B>) -> Option<Self> {
            None
        }
    }

    impl Examples for Fixed {
        type Model<B: ArborBackend> = Oracle;
        fn len(&self) -> usize {
            LABELS.len()
        }
        fn lengths(&self) -> Vec<usize> {
            LENGTHS.to_vec()
        }
        fn labels(&self) -> &[usize] {
            &LABELS
        }
        fn groups(&self) -> Option<&[usize]> {
            self.groups.as_deref()
        }
        fn batch<B: ArborBackend>(
            &self,
            idx: &[usize],
            device: &B::Device,
        ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
            self.seen.borrow_mut().extend_from_slice(idx);
            let sentences: Vec<Vec<u32>> =
                idx.iter().map(|&i| vec![i as u32; LENGTHS[i]]).collect();
            let targets: Vec<i64> = idx.iter().map(|&i| LABELS[i] as i64).collect();
            (
                SentenceBatch::from_ids(&sentences, 0, device),
                Tensor::from_data(TensorData::new(targets, [idx.len()]), device),
            )
        }
        fn gold_transitions(&self, _: &[usize]) -> Option<Vec<Vec<Transition>>> {
            None
        }
    }

    fn run(groups: Option<&[usize]>, batch_size: usize) -> arbor_train::EvalReport {
        let data = Fixed {
            groups: groups.map(<[usize]>::to_vec),
            seen: RefCell::new(Vec::new()),
        };
        let report =
            super::evaluate::<Flex, _, _>(&Oracle, &data, batch_size, false, &Default::default());
        let mut seen = data.seen.into_inner();
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
