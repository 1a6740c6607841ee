//! Supervised classification as one engine task, for sentence pairs and single sentences alike.

use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use arbor_data::tree::{BinaryTree, Transition};
use arbor_encoders::{Decisions, Encoder};
use arbor_heads::{NliClassifier, SentenceBatch, SentenceClassifier};
use arbor_train::{EvalReport, StepContext, StepOutput, Task};
use burn::module::AutodiffModule;
use burn::prelude::*;

use crate::data::{ClassifyData, Examples, NliData};
use crate::model::ModelMeta;

/// What a classifier returns for a batch, whatever its input shape.
#[derive(Debug, Clone)]
pub struct Classified<B: Backend> {
    /// Class logits `[batch, n_classes]`.
    pub logits: Tensor<B, 2>,
    /// The encoder's auxiliary loss, if any (full SPINN's transition loss).
    pub aux_loss: Option<Tensor<B, 1>>,
    /// The trees the encoder built, in the batch's sentence order (for pairs: every premise,
    /// then every hypothesis), where it builds them.
    pub trees: Option<Vec<BinaryTree>>,
}

/// A model a [`ClassificationTask`] can train: a batch of sentences in, logits out.
pub trait Classifier<B: ArborBackend> {
    /// Runs the model on `batch` with the encoder's `decisions`.
    ///
    /// # Shapes
    /// - `batch`: the examples' sentences (pairs: `2·n` sentences, premises first)
    /// - returns logits `[n, n_classes]`
    fn classify(&self, batch: SentenceBatch<B>, decisions: Decisions<'_>) -> Classified<B>;
}

impl<B: ArborBackend> Classifier<B> for SentenceClassifier<B, Encoder<B>> {
    fn classify(&self, batch: SentenceBatch<B>, decisions: Decisions<'_>) -> Classified<B> {
        let out = self.forward(batch, decisions);
        Classified {
            logits: out.logits,
            aux_loss: out.aux_loss,
            trees: out.trees,
        }
    }
}

impl<B: ArborBackend> Classifier<B> for NliClassifier<B, Encoder<B>> {
    fn classify(&self, batch: SentenceBatch<B>, decisions: Decisions<'_>) -> Classified<B> {
        let out = self.forward(batch, decisions);
        Classified {
            logits: out.logits,
            aux_loss: out.aux_loss,
            trees: out.trees.map(|(mut p, h)| {
                p.extend(h);
                p
            }),
        }
    }
}

/// Supervised classification as an engine task: cross-entropy training (plus the encoder's
/// auxiliary loss) on `train`, exact whole-split evaluation on `splits`. `D` is
/// [`NliData`] for pairs (see [`NliTask`]) or [`ClassifyData`] for single sentences (see
/// [`ClassifyTask`]).
#[derive(Debug)]
pub struct ClassificationTask<B: Backend, D> {
    /// Training examples.
    pub train: D,
    /// Evaluation splits by name, the first used for model selection.
    pub splits: Vec<(String, D)>,
    /// Batch size for evaluation.
    pub eval_batch_size: usize,
    /// Stored with every checkpoint.
    pub meta: ModelMeta,
    /// Where tensors go.
    pub device: B::Device,
}

/// Natural-language inference (or logic) pairs as an engine task.
pub type NliTask<B> = ClassificationTask<B, NliData>;

/// Single-sentence classification (SST-2, ListOps) as an engine task.
pub type ClassifyTask<B> = ClassificationTask<B, ClassifyData>;

impl<B: ArborBackend, D: Examples> ClassificationTask<B, D> {
    /// Whether evaluation also scores the encoder's own parses against the gold transitions
    /// (`transition_accuracy`): for full SPINN, which parses on its own at evaluation.
    pub fn scores_parses(&self) -> bool {
        self.meta.model.encoder().kind() == arbor_encoders::EncoderKind::Spinn
    }

    /// [`evaluate`] of `model` on `data` with this task's batch size and device.
    pub fn evaluate_data(&self, model: &D::Model<B>, data: &D) -> EvalReport {
        evaluate(
            model,
            data,
            self.eval_batch_size,
            self.scores_parses(),
            &self.device,
        )
    }

    /// The trees the model builds (argmax decisions) for the examples at `idx`, in batch
    /// sentence order (pairs: the premises, then the hypotheses), or `None` when the encoder
    /// builds none.
    pub fn trees(&self, model: &D::Model<B>, data: &D, idx: &[usize]) -> Option<Vec<BinaryTree>> {
        let (batch, _) = data.batch::<B>(idx, &self.device);
        model.classify(batch, Decisions::Argmax).trees
    }
}

impl<B, D> Task<B> for ClassificationTask<B, D>
where
    B: ArborAutodiffBackend,
    D: Examples + Sync,
    D::Model<B>: AutodiffModule<B>,
    <D::Model<B> as AutodiffModule<B>>::InnerModule: Classifier<B::InnerBackend>,
{
    type Model = D::Model<B>;

    fn train_lengths(&self) -> Vec<usize> {
        self.train.lengths()
    }

    fn step(
        &self,
        model: &Self::Model,
        idx: &[usize],
        ctx: StepContext,
        device: &B::Device,
    ) -> StepOutput<B> {
        let (batch, labels) = self.train.batch::<B>(idx, device);
        let mut sampler =
            arbor_cells::GumbelSampler::seeded(ctx.noise_seed).with_temperature(ctx.temperature);
        let out = model.classify(batch, Decisions::Sample(&mut sampler));
        let total = labels.dims()[0];
        let correct = arbor_heads::correct_on_device(out.logits.clone().detach(), labels.clone());
        let mut loss = arbor_heads::cross_entropy(out.logits, labels);
        if let Some(aux) = out.aux_loss {
            loss = loss.add(aux);
        }
        StepOutput {
            loss,
            correct: Some(correct),
            total,
        }
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
            Some((_, data)) => evaluate(
                model,
                data,
                self.eval_batch_size,
                self.scores_parses(),
                &self.device,
            ),
            None => EvalReport::default(),
        }
    }

    fn metadata(&self) -> serde_json::Value {
        serde_json::to_value(&self.meta).unwrap_or_default()
    }

    /// FNV-1a (64-bit, hex) of the number of training examples and every example's length and
    /// label: a resume on other training data is refused.
    fn data_fingerprint(&self) -> Option<String> {
        Some(fingerprint(&self.train))
    }
}

/// FNV-1a (64-bit) of `data`'s size and every example's length and label, in hex.
fn fingerprint<D: Examples>(data: &D) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |v: usize| {
        for b in (v as u64).to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(data.len());
    for (&len, &label) in data.lengths().iter().zip(data.labels()) {
        eat(len);
        eat(label);
    }
    format!("{h:016x}")
}

/// Exact accuracy and mean loss of a classifier over a whole split with argmax decisions, in
/// length-sorted batches of `batch_size`; per-group accuracy (`group_<g>_accuracy`,
/// `group_<g>_count`) when the data has groups; and with `score_parses`, when the data has gold
/// transitions and the model returns trees, `transition_accuracy`: the step-aligned agreement
/// of the model's own parses with the gold transitions.
pub fn evaluate<B: ArborBackend, M: Classifier<B>, D: Examples>(
    model: &M,
    data: &D,
    batch_size: usize,
    score_parses: bool,
    device: &B::Device,
) -> EvalReport {
    use burn::prelude::ElementConversion;
    let labels = data.labels();
    let groups = data.groups();
    let mut report = EvalReport::default();
    let mut per_group: std::collections::BTreeMap<usize, (usize, usize)> = Default::default();
    let mut transitions = (0usize, 0usize);
    for idx in crate::eval_batches(&data.lengths(), batch_size) {
        let (batch, targets) = data.batch::<B>(&idx, device);
        let out = model.classify(batch, Decisions::Argmax);
        if score_parses {
            if let (Some(trees), Some(gold)) = (&out.trees, data.gold_transitions(&idx)) {
                let pred: Vec<Vec<Transition>> =
                    trees.iter().map(BinaryTree::to_transitions).collect();
                let (c, t) = arbor_encoders::spinn::transition_accuracy(&pred, &gold);
                transitions.0 += c;
                transitions.1 += t;
            }
        }
        let logits = out.logits;
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
    if transitions.1 > 0 {
        report.extra.insert(
            "transition_accuracy".into(),
            transitions.0 as f64 / transitions.1 as f64,
        );
    }
    report
}
