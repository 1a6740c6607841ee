//! R2D2 language-model pretraining as an engine task.

use arbor_cells::ArborAutodiffBackend;
use arbor_cells::GumbelSampler;
use arbor_encoders::r2d2::{R2d2Lm, R2d2LmConfig, TreeRule};
use arbor_encoders::Decisions;
use arbor_train::{EvalReport, StepContext, StepOutput, Task};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// What a pretraining checkpoint stores besides the weights.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct R2d2Meta {
    /// The model configuration.
    pub model: R2d2LmConfig,
    /// The WordPiece vocabulary, in id order.
    pub vocab: Vec<String>,
    /// How trees are read off the chart by default (`r2d2 parse --tree-rule` overrides it):
    /// [`TreeRule::Reference`] for checkpoints imported from the reference, arbor's rule for
    /// those arbor trained. Checkpoints written before the field get arbor's rule, the one
    /// they were parsed with.
    #[serde(default)]
    pub tree_rule: TreeRule,
}

impl R2d2Meta {
    /// Reads the metadata back from a checkpoint's JSON (`meta["task"]`), including checkpoints
    /// written before R2D2's configurations nested one composition configuration (a flat model
    /// record with `d_model`) and before role embeddings were per layer (a composition record
    /// without `role_embeddings` is read as [`RoleEmbeddings::Shared`], the layout its weights
    /// have).
    ///
    /// [`RoleEmbeddings::Shared`]: arbor_encoders::r2d2::RoleEmbeddings::Shared
    pub fn from_checkpoint(meta: &serde_json::Value) -> Result<Self, String> {
        let mut task = meta["task"].clone();
        if let Some(model) = task.get_mut("model") {
            if model.get("d_model").is_some() && model.get("encoder").is_none() {
                let flat: crate::legacy::FlatR2d2LmConfig = serde_json::from_value(model.clone())
                    .map_err(|e| {
                    format!("checkpoint has an unreadable format-1 R2D2 record: {e}")
                })?;
                *model = serde_json::to_value(flat.into_config()).map_err(|e| e.to_string())?;
            }
            if let Some(encoder) = model.get_mut("encoder") {
                crate::legacy::r2d2_shared_roles_if_unset(encoder);
            }
        }
        serde_json::from_value(task)
            .map_err(|e| format!("checkpoint has no usable R2D2 metadata: {e}"))
    }
}

/// R2D2's language-model pretraining as an engine task: training sentences in length buckets,
/// the bidirectional LM loss with Gumbel noise drawn from the step's noise seed, and validation
/// LM perplexity (`lm_ppl`) over length-sorted batches.
pub struct R2d2LmTask<B: AutodiffBackend> {
    /// Training sentences (piece ids).
    pub train: Vec<Vec<u32>>,
    /// Validation sentences.
    pub valid: Vec<Vec<u32>>,
    /// Checkpoint metadata.
    pub meta: R2d2Meta,
    /// Sentences per validation batch.
    pub eval_batch: usize,
    /// Gumbel noise in training (the paper's pretraining; `false` selects splits by
    /// straight-through softmax of the scores alone, deterministically: an ablation, and what
    /// the data-parallel exactness test uses, since noise drawn for a whole batch cannot equal
    /// noise drawn for its shares).
    pub gumbel_noise: bool,
    /// Device.
    pub device: B::Device,
}

impl<B: ArborAutodiffBackend> Task<B> for R2d2LmTask<B> {
    type Model = R2d2Lm<B>;

    fn train_lengths(&self) -> Vec<usize> {
        self.train.iter().map(Vec::len).collect()
    }

    fn step(
        &self,
        model: &R2d2Lm<B>,
        batch: &[usize],
        ctx: StepContext,
        _device: &B::Device,
    ) -> StepOutput<B> {
        let refs: Vec<&[u32]> = batch.iter().map(|&i| self.train[i].as_slice()).collect();
        let mut sampler = GumbelSampler::seeded(ctx.noise_seed).with_temperature(ctx.temperature);
        if !self.gumbel_noise {
            sampler = sampler.without_noise();
        }
        let out = model.lm_loss(&refs, Decisions::Sample(&mut sampler));
        StepOutput {
            loss: out.loss,
            correct: None,
            total: 0,
        }
    }

    /// The LM loss is a mean over the share's tokens.
    fn loss_weight(&self, share: &[usize]) -> f64 {
        share.iter().map(|&i| self.train[i].len()).sum::<usize>() as f64
    }

    fn eval_splits(&self) -> Vec<String> {
        vec!["valid".into()]
    }

    fn evaluate(&self, model: &R2d2Lm<B::InnerBackend>, _split: &str) -> EvalReport {
        let mut report = EvalReport::default();
        let lengths: Vec<usize> = self.valid.iter().map(Vec::len).collect();
        for chunk in crate::eval_batches(&lengths, self.eval_batch) {
            let refs: Vec<&[u32]> = chunk.iter().map(|&i| self.valid[i].as_slice()).collect();
            let out = model.lm_loss(&refs, Decisions::Argmax);
            let sum: f64 = out.nll.sum().into_scalar().elem();
            report.loss_sum += sum;
            report.loss_count += out.tokens;
        }
        if let Some(l) = report.loss() {
            report.extra.insert("lm_ppl".into(), l.exp());
        }
        report
    }

    fn selection_metric(&self, report: &EvalReport) -> f64 {
        -report.loss().unwrap_or(f64::INFINITY)
    }

    fn metadata(&self) -> serde_json::Value {
        serde_json::to_value(&self.meta).unwrap_or(serde_json::Value::Null)
    }
}
