use arbor_cells::ArborBackend;
use arbor_data::tree::Transition;
use burn::prelude::*;
use burn::tensor::TensorData;

/// A padded batch of token-id sentences on a device.
#[derive(Debug, Clone)]
pub struct SentenceBatch<B: Backend> {
    /// Token ids `[batch, time]`, padded at the end with the pad id.
    pub ids: Tensor<B, 2, Int>,
    /// Real length of each sentence.
    pub lengths: Vec<usize>,
    /// Gold transitions of each sentence, for encoders that follow given trees.
    pub transitions: Option<Vec<Vec<Transition>>>,
}

impl<B: ArborBackend> SentenceBatch<B> {
    /// Pads `sentences` to the longest one with `pad` and moves them to `device`.
    ///
    /// # Panics
    /// If a sentence is empty or the batch is empty.
    pub fn from_ids<S: AsRef<[u32]>>(sentences: &[S], pad: u32, device: &B::Device) -> Self {
        assert!(!sentences.is_empty(), "empty batch");
        let lengths: Vec<usize> = sentences.iter().map(|s| s.as_ref().len()).collect();
        assert!(lengths.iter().all(|&l| l > 0), "empty sentence in batch");
        let time = lengths.iter().copied().max().unwrap_or(1);
        let mut ids = Vec::with_capacity(sentences.len() * time);
        for s in sentences {
            let s = s.as_ref();
            ids.extend(s.iter().map(|&t| t as i64));
            ids.extend(std::iter::repeat_n(pad as i64, time - s.len()));
        }
        let ids = Tensor::from_data(TensorData::new(ids, [sentences.len(), time]), device);
        Self {
            ids,
            lengths,
            transitions: None,
        }
    }

    /// Adds gold transitions (one sequence per sentence).
    pub fn with_transitions(mut self, transitions: Vec<Vec<Transition>>) -> Self {
        self.transitions = Some(transitions);
        self
    }

    /// Number of sentences.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether the batch holds no sentence.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }
}
