use arbor_cells::GumbelSampler;
use arbor_data::tree::{BinaryTree, Transition};
use arbor_encoders::{Decisions, Encoder};
use arbor_heads::{SentenceBatch, SentenceClassifier};
use arbor_train::{EvalReport, StepOutput, Task};
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorData;

use super::model::ModelMeta;

/// Sentences as token ids with labels and (optionally) gold transitions.
#[derive(Debug, Clone, Default)]
pub struct ClassifyData {
    /// Token ids.
    pub sentences: Vec<Vec<u32>>,
    /// Label ids.
    pub labels: Vec<usize>,
    /// Gold transitions, when every sentence has them.
    pub transitions: Option<Vec<Vec<Transition>>>,
    /// Optional group of every sentence (e.g. ListOps depth); evaluation then reports
    /// per-group accuracy (see [`per_group`](super::per_group)).
    pub groups: Option<Vec<usize>>,
}

impl ClassifyData {
    /// Number of sentences.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no sentence.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Sentence lengths.
    pub fn lengths(&self) -> Vec<usize> {
        self.sentences.iter().map(Vec::len).collect()
    }

    /// The sentences at `idx` as one batch, with their labels.
    pub fn batch<B: Backend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
        let sentences: Vec<&[u32]> = idx.iter().map(|&i| self.sentences[i].as_slice()).collect();
        let mut batch = SentenceBatch::from_ids(&sentences, 0, device);
        if let Some(t) = &self.transitions {
            batch = batch.with_transitions(idx.iter().map(|&i| t[i].clone()).collect());
        }
        let labels: Vec<i64> = idx.iter().map(|&i| self.labels[i] as i64).collect();
        (
            batch,
            Tensor::from_data(TensorData::new(labels, [idx.len()]), device),
        )
    }
}

/// Exact accuracy and mean loss of a classifier over a whole split, with argmax decisions.
pub fn evaluate_classify<B: Backend>(
    model: &SentenceClassifier<B, Encoder<B>>,
    data: &ClassifyData,
    batch_size: usize,
    device: &B::Device,
) -> EvalReport {
    super::evaluate_batches(
        &data.lengths(),
        &data.labels,
        data.groups.as_deref(),
        batch_size,
        |idx| {
            let (batch, labels) = data.batch::<B>(idx, device);
            (model.forward(batch, Decisions::Argmax).logits, labels)
        },
    )
}

/// Single-sentence classification (SST-2) as an engine task.
#[derive(Debug)]
pub struct ClassifyTask<B: Backend> {
    /// Training sentences.
    pub train: ClassifyData,
    /// Evaluation splits by name, the first used for model selection.
    pub splits: Vec<(String, ClassifyData)>,
    /// Batch size for evaluation.
    pub eval_batch_size: usize,
    /// Stored with every checkpoint.
    pub meta: ModelMeta,
    /// Where tensors go.
    pub device: B::Device,
}

impl<B: Backend> ClassifyTask<B> {
    /// The trees the model builds (argmax decisions) for the sentences at `idx`.
    pub fn trees(
        &self,
        model: &SentenceClassifier<B, Encoder<B>>,
        data: &ClassifyData,
        idx: &[usize],
    ) -> Option<Vec<BinaryTree>> {
        let (batch, _) = data.batch::<B>(idx, &self.device);
        model.forward(batch, Decisions::Argmax).trees
    }
}

impl<B: AutodiffBackend> Task<B> for ClassifyTask<B> {
    type Model = SentenceClassifier<B, Encoder<B>>;

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
            Some((_, data)) => evaluate_classify(model, data, self.eval_batch_size, &self.device),
            None => EvalReport::default(),
        }
    }

    fn metadata(&self) -> serde_json::Value {
        serde_json::to_value(&self.meta).unwrap_or_default()
    }
}
