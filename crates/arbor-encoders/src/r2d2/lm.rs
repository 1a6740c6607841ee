//! R2D2's bidirectional language model (eq. 8) and pseudo-perplexity (Salazar et al. 2020).

use arbor_cells::kernels::gelu;
use arbor_cells::ArborBackend;
use burn::module::{Initializer, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::TensorData;

use super::chart::{index_tensor, Chart, ChartStats};
use super::composition::{layer_norm_noaffine, CompositionConfig};
use super::encoder::{R2d2, R2d2Config};
use crate::Decisions;

/// Vocabulary ids of R2D2's special tokens, whose embeddings are then rows of the LM's (tied)
/// vocabulary embedding, as in the reference code (its config's `cls_token_id`,
/// `sum_token_id`, `mask_token_id`, `bos_token_id`, `eos_token_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct R2d2SpecialIds {
    /// `[CLS]`: the composition's mixing token.
    pub cls: u32,
    /// `[SUM]`: the composition's scoring token.
    pub sum: u32,
    /// `[MASK]`: the LM's prediction token.
    pub mask: u32,
    /// `[BOS]`: the left context of a sentence's first token.
    pub bos: u32,
    /// `[EOS]`: the right context of a sentence's last token.
    pub eos: u32,
}

impl R2d2SpecialIds {
    /// The reference's choice in a WordPiece vocabulary (pieces in id order): `[CLS]` and
    /// `[MASK]`, and `[SUM]`, `[BOS]`, `[EOS]`, or, in a stock BERT vocabulary without them,
    /// `[unused6]`, `[unused3]`, `[unused4]`: the rows 7, 4 and 5 that the reference's own
    /// vocabulary renames `[SUM]`, `[BOS]`, `[EOS]` and its configuration points at. `None`
    /// when any of the five is missing.
    pub fn from_vocab<S: AsRef<str>>(pieces: &[S]) -> Option<Self> {
        let find = |names: &[&str]| {
            names.iter().find_map(|name| {
                pieces
                    .iter()
                    .position(|p| p.as_ref() == *name)
                    .and_then(|i| u32::try_from(i).ok())
            })
        };
        Some(R2d2SpecialIds {
            cls: find(&["[CLS]"])?,
            sum: find(&["[SUM]", "[unused6]"])?,
            mask: find(&["[MASK]"])?,
            bos: find(&["[BOS]", "[unused3]"])?,
            eos: find(&["[EOS]", "[unused4]"])?,
        })
    }

    /// `[CLS]`, `[SUM]`, `[MASK]`: the composition's task tokens, in its row order.
    fn task_ids(&self) -> [u32; 3] {
        [self.cls, self.sum, self.mask]
    }

    fn all(&self) -> [u32; 5] {
        [self.cls, self.sum, self.mask, self.bos, self.eos]
    }
}

/// Configuration of an [`R2d2Lm`].
#[derive(Config, Debug)]
pub struct R2d2LmConfig {
    /// Vocabulary size `V`.
    pub vocab_size: usize,
    /// The encoder: composition function, pruning window and temperature. Its width is the
    /// model width `D` (its `d_input` is ignored: the LM's embeddings are `D` wide).
    #[config(default = "R2d2Config::new(128, CompositionConfig::new(128))")]
    pub encoder: R2d2Config,
    /// Vocabulary ids of `[CLS]`, `[SUM]`, `[MASK]`, `[BOS]`, `[EOS]`: their vectors are then
    /// rows of the tied vocabulary embedding, as in the reference. `None` (the default, and
    /// what checkpoints written before this field read as): separate parameters
    /// ([`Composition::task_tokens`](super::Composition::task_tokens), [`R2d2Lm::edges`]).
    pub special_ids: Option<R2d2SpecialIds>,
}

impl R2d2LmConfig {
    /// Checks the settings: a non-empty vocabulary and the encoder's settings.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        arbor_cells::check::at_least_one("vocab_size", self.vocab_size)?;
        if let Some(ids) = &self.special_ids {
            if let Some(&id) = ids.all().iter().find(|&&id| id as usize >= self.vocab_size) {
                return Err(arbor_cells::ConfigError::new(
                    "special_ids",
                    id,
                    format!("must be below vocab_size ({})", self.vocab_size),
                ));
            }
        }
        R2d2Config {
            d_input: self.d_model(),
            ..self.encoder.clone()
        }
        .validate()
    }

    /// [`R2d2LmConfig::init`] after [`R2d2LmConfig::validate`]: an error instead of a panic.
    pub fn try_init<B: ArborBackend>(
        &self,
        device: &B::Device,
    ) -> Result<R2d2Lm<B>, arbor_cells::ConfigError> {
        self.validate()?;
        Ok(self.init(device))
    }

    /// The benchmark configuration: `D = 128`, 2 layers, 4 heads, `m = 4`.
    pub fn bench(vocab_size: usize, pruning: bool) -> Self {
        let encoder = R2d2LmConfig::new(vocab_size).encoder.with_pruning(pruning);
        R2d2LmConfig::new(vocab_size).with_encoder(encoder)
    }

    /// The model width `D`.
    pub fn d_model(&self) -> usize {
        self.encoder.composition.d_model
    }

    /// Builds the model on `device`.
    ///
    /// # Panics
    /// As [`R2d2Config::init`]; also if `vocab_size` is 0 or a special id is not below it.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> R2d2Lm<B> {
        assert!(self.vocab_size > 0, "the vocabulary must not be empty");
        assert!(
            self.special_ids
                .is_none_or(|ids| ids.all().iter().all(|&i| (i as usize) < self.vocab_size)),
            "special ids must be below the vocabulary size"
        );
        let d = self.d_model();
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let mut encoder = R2d2Config {
            d_input: d,
            ..self.encoder.clone()
        }
        .init(device);
        // Tied special tokens: no separate rows (empty tables keep the record's layout).
        let edge_rows = if self.special_ids.is_some() {
            encoder.composition.task_tokens = Initializer::Zeros.init([0, d], device);
            0
        } else {
            2
        };
        R2d2Lm {
            embedding: EmbeddingConfig::new(self.vocab_size, d)
                .with_initializer(normal.clone())
                .init(device),
            encoder,
            edges: normal.init([edge_rows, d], device),
            head: LinearConfig::new(d, d).init(device),
            out_bias: Initializer::Zeros.init([self.vocab_size], device),
            special_ids: self.special_ids,
        }
    }
}

/// R2D2 with its bidirectional LM head: each token is predicted from the largest chart cells
/// to its left and right, through the composition Transformer run on `[E[MASK], left, right]`,
/// then `LayerNorm_noaffine → Linear → GELU → LayerNorm_noaffine`, then a vocabulary softmax
/// tied to the embedding, with its own bias.
#[derive(Module, Debug)]
pub struct R2d2Lm<B: Backend> {
    /// Token embeddings `E` `[V, D]`, tied with the output softmax.
    pub embedding: Embedding<B>,
    /// The encoder (composition function and chart).
    pub encoder: R2d2<B>,
    /// `[BOS]` and `[EOS]` vectors `[2, D]`, the contexts at the sentence's edges; `[0, D]`
    /// when [`R2d2Lm::special_ids`] takes them from the embedding.
    pub edges: Param<Tensor<B, 2>>,
    /// The head's `Linear`, `D → D`.
    pub head: Linear<B>,
    /// Output bias `[V]`.
    pub out_bias: Param<Tensor<B, 1>>,
    /// When set, `[CLS]`, `[SUM]`, `[MASK]`, `[BOS]`, `[EOS]` are these rows of
    /// [`R2d2Lm::embedding`] (and the composition's `task_tokens` and `edges` are empty).
    ///
    /// Kept as the last field on purpose: a constant field adds one byte (an empty record) at
    /// its place in the binary record, and records written before this field existed end just
    /// before it, which Burn reads as the empty record. A field added before it would shift
    /// every later byte of those records.
    pub special_ids: Option<R2d2SpecialIds>,
}

/// The LM loss of a batch.
#[derive(Debug, Clone)]
pub struct LmLoss<B: Backend> {
    /// Mean cross-entropy over all tokens: `[1]`.
    pub loss: Tensor<B, 1>,
    /// Cross-entropy of every token, sentences concatenated: `[tokens]`.
    pub nll: Tensor<B, 1>,
    /// Number of predicted tokens.
    pub tokens: usize,
    /// Chart counters.
    pub stats: ChartStats,
}

fn pad_ids<B: ArborBackend>(sentences: &[&[u32]], device: &B::Device) -> Tensor<B, 2, Int> {
    let time = sentences.iter().map(|s| s.len()).max().unwrap_or(1);
    let mut ids = vec![0i64; sentences.len() * time];
    for (b, s) in sentences.iter().enumerate() {
        for (i, &t) in s.iter().enumerate() {
            ids[b * time + i] = t as i64;
        }
    }
    Tensor::from_data(TensorData::new(ids, [sentences.len(), time]), device)
}

impl<B: ArborBackend> R2d2Lm<B> {
    /// Vocabulary size `V`.
    pub fn vocab_size(&self) -> usize {
        self.embedding.weight.dims()[0]
    }

    /// Rows `ids` of the vocabulary embedding.
    ///
    /// # Shapes
    /// - output: `[ids.len(), D]`
    fn embedding_rows(&self, ids: &[u32]) -> Tensor<B, 2> {
        let device = self.embedding.weight.device();
        let rows: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        self.embedding
            .weight
            .val()
            .select(0, index_tensor::<B>(&rows, &device))
    }

    /// The composition's `[CLS]`, `[SUM]`, `[MASK]` vectors when they are tied to the
    /// vocabulary (`None`: the composition's own).
    ///
    /// # Shapes
    /// - output: `[3, D]`
    fn task_vectors(&self) -> Option<Tensor<B, 2>> {
        self.special_ids
            .map(|ids| self.embedding_rows(&ids.task_ids()))
    }

    /// The `[BOS]` and `[EOS]` vectors.
    ///
    /// # Shapes
    /// - output: `[2, D]`
    pub fn edge_vectors(&self) -> Tensor<B, 2> {
        match self.special_ids {
            Some(ids) => self.embedding_rows(&[ids.bos, ids.eos]),
            None => self.edges.val(),
        }
    }

    /// Builds the charts of token-id sentences (each non-empty).
    ///
    /// # Panics
    /// If a sentence is empty or an id is out of the vocabulary.
    pub fn chart(
        &self,
        sentences: &[&[u32]],
        word_ids: Option<&[Vec<usize>]>,
        decisions: Decisions<'_>,
    ) -> Chart<B> {
        let device = self.embedding.weight.device();
        let v = self.vocab_size();
        assert!(
            sentences
                .iter()
                .all(|s| !s.is_empty() && s.iter().all(|&t| (t as usize) < v)),
            "sentences must be non-empty with ids below {v}"
        );
        let ids = pad_ids::<B>(sentences, &device);
        let lengths: Vec<usize> = sentences.iter().map(|s| s.len()).collect();
        self.encoder.forward_with_tokens(
            self.embedding.forward(ids),
            &lengths,
            word_ids,
            decisions,
            self.task_vectors(),
        )
    }

    /// Vocabulary log-probabilities from left and right contexts.
    ///
    /// # Shapes
    /// - `left`, `right`: `[n, D]`
    /// - output: `[n, V]`
    pub fn predict(&self, left: Tensor<B, 2>, right: Tensor<B, 2>) -> Tensor<B, 2> {
        let composition = &self.encoder.composition;
        let h = match self.task_vectors() {
            Some(tokens) => composition
                .with_task_tokens(tokens)
                .mask_context(left, right),
            None => composition.mask_context(left, right),
        };
        let h = layer_norm_noaffine(gelu(self.head.forward(h)));
        let logits = h
            .matmul(self.embedding.weight.val().transpose())
            .add(self.out_bias.val().unsqueeze_dim(0));
        log_softmax(logits, 1)
    }

    /// `−log p(target)` of every row.
    ///
    /// # Shapes
    /// - `log_probs`: `[n, V]`
    /// - output: `[n]`
    fn nll(log_probs: Tensor<B, 2>, targets: &[u32]) -> Tensor<B, 1> {
        let n = targets.len();
        let device = log_probs.device();
        let t: Vec<i64> = targets.iter().map(|&t| t as i64).collect();
        let t = Tensor::<B, 2, Int>::from_data(TensorData::new(t, [n, 1]), &device);
        log_probs.gather(1, t).reshape([n]).neg()
    }

    /// The bidirectional LM loss (eq. 8): every token is predicted from the largest chart
    /// cell ending just before it and the largest starting just after it (`[BOS]`/`[EOS]` at
    /// the edges). No input masking.
    ///
    /// # Panics
    /// As [`R2d2Lm::chart`].
    pub fn lm_loss(&self, sentences: &[&[u32]], decisions: Decisions<'_>) -> LmLoss<B> {
        let chart = self.chart(sentences, None, decisions);
        let edges = self.edge_vectors();
        let (l, r) = chart.contexts(edges.clone().narrow(0, 0, 1), edges.narrow(0, 1, 1));
        let targets: Vec<u32> = sentences.iter().flat_map(|s| s.iter().copied()).collect();
        let n = targets.len();
        let nll = Self::nll(self.predict(l, r), &targets);
        LmLoss {
            loss: nll.clone().mean(),
            nll,
            tokens: n,
            stats: chart.stats,
        }
    }

    /// Pseudo-log-likelihood terms: for every position `i` of every sentence, `s_<i` and
    /// `s_>i` are encoded as two separate sentences (evaluation mode), their roots are the
    /// contexts (`[BOS]`/`[EOS]` when empty), and `−log p(s_i)` is returned, per sentence.
    ///
    /// # Panics
    /// As [`R2d2Lm::chart`].
    pub fn pseudo_nll(&self, sentences: &[&[u32]]) -> Vec<Vec<f64>> {
        let device = self.embedding.weight.device();
        let mut contexts: Vec<&[u32]> = Vec::new();
        // Per token: index of its left and right context in `contexts`.
        let mut slots = Vec::new();
        let mut targets = Vec::new();
        for s in sentences {
            for i in 0..s.len() {
                let left = (i > 0).then(|| {
                    contexts.push(&s[..i]);
                    contexts.len() - 1
                });
                let right = (i + 1 < s.len()).then(|| {
                    contexts.push(&s[i + 1..]);
                    contexts.len() - 1
                });
                slots.push((left, right));
                targets.push(s[i]);
            }
        }
        if targets.is_empty() {
            return sentences.iter().map(|_| Vec::new()).collect();
        }
        let d = self.encoder.d_model();
        let roots = if contexts.is_empty() {
            Tensor::zeros([0, d], &device)
        } else {
            self.chart(&contexts, None, Decisions::Argmax).roots()
        };
        let c = contexts.len();
        let all = Tensor::cat(vec![roots, self.edge_vectors()], 0);
        let left: Vec<usize> = slots.iter().map(|s| s.0.unwrap_or(c)).collect();
        let right: Vec<usize> = slots.iter().map(|s| s.1.unwrap_or(c + 1)).collect();
        let l = all.clone().select(0, index_tensor::<B>(&left, &device));
        let r = all.select(0, index_tensor::<B>(&right, &device));
        let nll: Vec<f64> = Self::nll(self.predict(l, r), &targets)
            .into_data()
            .convert::<f64>()
            .into_vec()
            .unwrap_or_default();
        let mut out = Vec::with_capacity(sentences.len());
        let mut at = 0;
        for s in sentences {
            out.push(nll[at..at + s.len()].to_vec());
            at += s.len();
        }
        out
    }
}
