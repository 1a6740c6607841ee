use arbor_cells::GumbelSampler;
use arbor_data::tree::{BinaryTree, Transition};
use arbor_encoders::{Decisions, Encoder};
use arbor_heads::{NliClassifier, SentenceBatch};
use arbor_train::{EvalReport, StepOutput, Task};
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorData;

use super::model::ModelMeta;

/// Gold transitions of every premise and every hypothesis.
pub type PairTransitions = (Vec<Vec<Transition>>, Vec<Vec<Transition>>);

/// Sentence pairs as token ids, with labels and (optionally) gold transitions.
#[derive(Debug, Clone, Default)]
pub struct NliData {
    /// Premise token ids.
    pub premises: Vec<Vec<u32>>,
    /// Hypothesis token ids.
    pub hypotheses: Vec<Vec<u32>>,
    /// Label ids.
    pub labels: Vec<usize>,
    /// Gold transitions of premises and hypotheses, when every pair has them.
    pub transitions: Option<PairTransitions>,
    /// A group per pair (e.g. the operator count of a logic pair), for per-group accuracy.
    pub groups: Option<Vec<usize>>,
}

impl NliData {
    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no pair.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The longer side of each pair.
    pub fn lengths(&self) -> Vec<usize> {
        self.premises
            .iter()
            .zip(&self.hypotheses)
            .map(|(p, h)| p.len().max(h.len()))
            .collect()
    }

    /// The pairs at `idx` as one batch (premises first, then hypotheses), with their labels.
    pub fn batch<B: Backend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
        let sentences: Vec<&[u32]> = idx
            .iter()
            .map(|&i| self.premises[i].as_slice())
            .chain(idx.iter().map(|&i| self.hypotheses[i].as_slice()))
            .collect();
        let mut batch = SentenceBatch::from_ids(&sentences, 0, device);
        if let Some((p, h)) = &self.transitions {
            let t = idx
                .iter()
                .map(|&i| p[i].clone())
                .chain(idx.iter().map(|&i| h[i].clone()))
                .collect();
            batch = batch.with_transitions(t);
        }
        let labels: Vec<i64> = idx.iter().map(|&i| self.labels[i] as i64).collect();
        let labels = Tensor::from_data(TensorData::new(labels, [idx.len()]), device);
        (batch, labels)
    }
}

/// Natural-language inference (or logic) as an engine task.
#[derive(Debug)]
pub struct NliTask<B: Backend> {
    /// Training pairs.
    pub train: NliData,
    /// Evaluation splits by name, the first used for model selection.
    pub splits: Vec<(String, NliData)>,
    /// Batch size for evaluation.
    pub eval_batch_size: usize,
    /// Stored with every checkpoint.
    pub meta: ModelMeta,
    /// Where tensors go.
    pub device: B::Device,
}

/// Exact accuracy (and mean loss, and per-group accuracy when the data has groups) of a model
/// over a whole split, with argmax decisions; for full SPINN also `transition_accuracy`, the
/// step-aligned agreement of its own parses with the gold transitions.
pub fn evaluate_nli<B: Backend>(
    model: &NliClassifier<B, Encoder<B>>,
    data: &NliData,
    batch_size: usize,
    device: &B::Device,
) -> EvalReport {
    // Full SPINN parses on its own at evaluation: compare its parses with the gold transitions.
    let parses = model.encoder.kind() == arbor_encoders::EncoderKind::Spinn;
    let mut transitions = (0usize, 0usize);
    let mut report = super::evaluate_batches(
        &data.lengths(),
        &data.labels,
        data.groups.as_deref(),
        batch_size,
        |idx| {
            let (batch, labels) = data.batch::<B>(idx, device);
            let out = model.forward(batch, Decisions::Argmax);
            if let (true, Some((l, r)), Some((gl, gr))) = (parses, &out.trees, &data.transitions) {
                let pred: Vec<Vec<Transition>> =
                    l.iter().chain(r).map(BinaryTree::to_transitions).collect();
                let gold: Vec<Vec<Transition>> = idx
                    .iter()
                    .map(|&i| gl[i].clone())
                    .chain(idx.iter().map(|&i| gr[i].clone()))
                    .collect();
                let (c, t) = arbor_encoders::spinn::transition_accuracy(&pred, &gold);
                transitions.0 += c;
                transitions.1 += t;
            }
            (out.logits, labels)
        },
    );
    if transitions.1 > 0 {
        report.extra.insert(
            "transition_accuracy".into(),
            transitions.0 as f64 / transitions.1 as f64,
        );
    }
    report
}

impl<B: Backend> NliTask<B> {
    /// [`evaluate_nli`] with this task's batch size and device.
    pub fn evaluate_data(
        &self,
        model: &NliClassifier<B, Encoder<B>>,
        data: &NliData,
    ) -> EvalReport {
        evaluate_nli(model, data, self.eval_batch_size, &self.device)
    }

    /// The trees the model builds (argmax decisions) for the pairs at `idx`: premise and
    /// hypothesis trees, or `None` when the encoder builds none.
    pub fn trees(
        &self,
        model: &NliClassifier<B, Encoder<B>>,
        data: &NliData,
        idx: &[usize],
    ) -> Option<(Vec<BinaryTree>, Vec<BinaryTree>)> {
        let (batch, _) = data.batch::<B>(idx, &self.device);
        model.forward(batch, Decisions::Argmax).trees
    }
}

impl<B: AutodiffBackend> Task<B> for NliTask<B> {
    type Model = NliClassifier<B, Encoder<B>>;

    fn train_lengths(&self) -> Vec<usize> {
        self.train.lengths()
    }

    fn step(
        &self,
        model: &Self::Model,
        idx: &[usize],
        sampler: &mut GumbelSampler,
    ) -> StepOutput<B> {
        let (batch, labels) = self.train.batch::<B>(idx, &self.device);
        let out = model.forward(batch, Decisions::Sample(sampler));
        super::classification_step(out.logits, labels, out.aux_loss)
    }

    fn eval_splits(&self) -> Vec<String> {
        self.splits.iter().map(|(n, _)| n.clone()).collect()
    }

    fn evaluate(
        &self,
        model: &<Self::Model as AutodiffModule<B>>::InnerModule,
        split: &str,
    ) -> EvalReport {
        match self.splits.iter().find(|(n, _)| n == split) {
            Some((_, data)) => evaluate_nli(model, data, self.eval_batch_size, &self.device),
            None => EvalReport::default(),
        }
    }

    fn metadata(&self) -> serde_json::Value {
        serde_json::to_value(&self.meta).unwrap_or_default()
    }
}
