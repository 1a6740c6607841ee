//! The examples of the classification tasks: single sentences ([`ClassifyData`]) and sentence
//! pairs ([`NliData`]), as token ids with labels, optional gold transitions and optional groups.

use arbor_cells::ArborBackend;
use arbor_data::tree::Transition;
use arbor_heads::SentenceBatch;
use burn::prelude::*;
use burn::tensor::TensorData;

/// What a [`ClassificationTask`](crate::ClassificationTask) needs from its examples, and which
/// model reads them.
pub trait Examples {
    /// The classifier that reads these examples, one of the kinds a [`ModelConfig`]
    /// builds ([`ModelConfig::init`], [`ClassifierModel::into_kind`]).
    ///
    /// [`ModelConfig`]: crate::ModelConfig
    /// [`ModelConfig::init`]: crate::ModelConfig::init
    /// [`ClassifierModel::into_kind`]: crate::ClassifierModel::into_kind
    type Model<B: ArborBackend>: crate::Classifier<B> + crate::ClassifierKind<B>;

    /// Number of examples.
    fn len(&self) -> usize;

    /// Whether there is no example.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size of every example (for length bucketing and evaluation order).
    fn lengths(&self) -> Vec<usize>;

    /// Label ids.
    fn labels(&self) -> &[usize];

    /// A group per example (e.g. a ListOps depth), for per-group accuracy.
    fn groups(&self) -> Option<&[usize]>;

    /// The examples at `idx` as one batch, with their labels.
    fn batch<B: ArborBackend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>);

    /// Gold transitions of the batch's sentences at `idx`, in the batch's sentence order, when
    /// the examples have them.
    fn gold_transitions(&self, idx: &[usize]) -> Option<Vec<Vec<Transition>>>;
}

fn labels_tensor<B: ArborBackend>(
    labels: &[usize],
    idx: &[usize],
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    let v: Vec<i64> = idx.iter().map(|&i| labels[i] as i64).collect();
    Tensor::from_data(TensorData::new(v, [idx.len()]), device)
}

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
    /// per-group accuracy (see [`per_group`](crate::per_group)).
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
    pub fn batch<B: ArborBackend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
        let sentences: Vec<&[u32]> = idx.iter().map(|&i| self.sentences[i].as_slice()).collect();
        let mut batch = SentenceBatch::from_ids(&sentences, 0, device);
        if let Some(t) = Examples::gold_transitions(self, idx) {
            batch = batch.with_transitions(t);
        }
        (batch, labels_tensor(&self.labels, idx, device))
    }
}

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
    pub fn batch<B: ArborBackend>(
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
        if let Some(t) = Examples::gold_transitions(self, idx) {
            batch = batch.with_transitions(t);
        }
        (batch, labels_tensor(&self.labels, idx, device))
    }
}

impl Examples for ClassifyData {
    type Model<B: ArborBackend> = arbor_heads::SentenceClassifier<B, arbor_encoders::Encoder<B>>;

    fn len(&self) -> usize {
        self.labels.len()
    }

    fn lengths(&self) -> Vec<usize> {
        ClassifyData::lengths(self)
    }

    fn labels(&self) -> &[usize] {
        &self.labels
    }

    fn groups(&self) -> Option<&[usize]> {
        self.groups.as_deref()
    }

    fn batch<B: ArborBackend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
        ClassifyData::batch(self, idx, device)
    }

    fn gold_transitions(&self, idx: &[usize]) -> Option<Vec<Vec<Transition>>> {
        let t = self.transitions.as_ref()?;
        Some(idx.iter().map(|&i| t[i].clone()).collect())
    }
}

impl Examples for NliData {
    type Model<B: ArborBackend> = arbor_heads::NliClassifier<B, arbor_encoders::Encoder<B>>;

    fn len(&self) -> usize {
        self.labels.len()
    }

    fn lengths(&self) -> Vec<usize> {
        NliData::lengths(self)
    }

    fn labels(&self) -> &[usize] {
        &self.labels
    }

    fn groups(&self) -> Option<&[usize]> {
        self.groups.as_deref()
    }

    fn batch<B: ArborBackend>(
        &self,
        idx: &[usize],
        device: &B::Device,
    ) -> (SentenceBatch<B>, Tensor<B, 1, Int>) {
        NliData::batch(self, idx, device)
    }

    fn gold_transitions(&self, idx: &[usize]) -> Option<Vec<Vec<Transition>>> {
        let (p, h) = self.transitions.as_ref()?;
        Some(
            idx.iter()
                .map(|&i| p[i].clone())
                .chain(idx.iter().map(|&i| h[i].clone()))
                .collect(),
        )
    }
}
