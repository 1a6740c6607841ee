//! SPINN (Bowman et al. 2016; docs/models.md §3): a shift-reduce Tree-LSTM computed as one batched
//! step per transition over a *thin stack*.
//!
//! - [`Spinn`] is the encoder in its three variants ([`SpinnVariant`]): SPINN-PI-NT (given
//!   transitions, no tracking), SPINN-PI (with a tracking LSTM), and full SPINN (with a
//!   transition classifier that parses on its own at evaluation).
//! - [`PointerQueue`], [`trace`], [`check_transitions`] and [`repair_transitions`] are the host
//!   side of the thin stack: pointer bookkeeping, the validity rule, and input checks.
//! - [`Spinn::encode_recursive`] is a per-sentence recursive Tree-LSTM over the same weights: a
//!   *reference and baseline* for tests and benchmarks, never used on a real code path.

mod reference;
mod thin_stack;

pub use thin_stack::{
    check_batch_transitions, check_transitions, repair_transitions, trace, PointerQueue, Reads,
    TraceStep,
};

use arbor_cells::ArborBackend;
use arbor_cells::{
    BinaryTreeLstm, BinaryTreeLstmConfig, LstmCell, LstmCellConfig, LstmState, RecurrentCell,
};
use arbor_data::tree::{BinaryTree, Transition};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::TensorData;

use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

/// Why SPINN refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpinnError {
    /// A transition sequence is malformed.
    #[error("sentence {sentence}: malformed transitions: {message}")]
    Transitions {
        /// Index of the sentence in the batch (or data set, for the apps' checks).
        sentence: usize,
        /// What is wrong, naming the step.
        message: String,
    },
    /// The number of transition sequences differs from the number of sentences.
    #[error("{sequences} transition sequences for {sentences} sentences")]
    Count {
        /// Sentences in the batch.
        sentences: usize,
        /// Transition sequences given.
        sequences: usize,
    },
    /// The variant and mode need gold transitions and none were given.
    #[error(
        "{variant} needs gold transitions here ({why}); pass them in EncoderInput::transitions"
    )]
    MissingTransitions {
        /// The variant's name.
        variant: SpinnVariant,
        /// Which mode needs them.
        why: &'static str,
    },
    /// A sentence length is 0 or longer than the padded batch.
    #[error("sentence {sentence}: length {length} is not within 1..={time}")]
    Length {
        /// Index of the sentence.
        sentence: usize,
        /// Its length.
        length: usize,
        /// The batch's padded time.
        time: usize,
    },
    /// A tree given to the recursive reference does not fit its sentence.
    #[error("sentence {sentence}: {message}")]
    Tree {
        /// Index of the sentence.
        sentence: usize,
        /// What is wrong.
        message: String,
    },
}

/// The three SPINN variants of the paper.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum SpinnVariant {
    /// SPINN-PI-NT: given transitions, no tracking LSTM. Computes exactly a recursive
    /// Tree-LSTM over the given trees.
    #[strum(serialize = "spinn-pi-nt")]
    PiNt,
    /// SPINN-PI: given transitions and a tracking LSTM whose state feeds every composition.
    #[default]
    #[strum(serialize = "spinn-pi")]
    Pi,
    /// Full SPINN: SPINN-PI plus a transition classifier; teacher-forced in training (with
    /// `α`·cross-entropy on the transitions), parsing with its own predictions at evaluation.
    #[strum(serialize = "spinn")]
    Full,
}

arbor_cells::value_enum_names!(SpinnVariant, "SPINN variant");

/// What full SPINN's transition classifier reads from the tracking LSTM's new state.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[strum(serialize_all = "kebab-case")]
pub enum ClassifierInput {
    /// The tracking `h` only (the paper; arbor before this option existed).
    #[serde(rename = "h")]
    #[strum(serialize = "h")]
    Hidden,
    /// `[h; c]`, the PyTorch port's `predict_use_cell` (its default).
    #[default]
    #[serde(rename = "h-c")]
    #[strum(serialize = "h-c")]
    HiddenCell,
}

arbor_cells::value_enum_names!(ClassifierInput, "transition-classifier input");

/// Configuration of a [`Spinn`] encoder.
#[derive(Config, Debug)]
pub struct SpinnConfig {
    /// Width of the word embeddings.
    pub d_input: usize,
    /// Width `D` of every node's `h` and `c` (the sentence vector's width).
    pub d_hidden: usize,
    /// Which variant.
    #[config(default = "SpinnVariant::Pi")]
    pub variant: SpinnVariant,
    /// Width of the tracking LSTM (PI and full); 0 means `d_hidden`.
    #[config(default = 0)]
    pub d_tracking: usize,
    /// Weight `α` of the transition cross-entropy added to the task loss (full SPINN).
    #[config(default = 1.0)]
    pub transition_weight: f64,
    /// What the transition classifier reads (full SPINN): `[h; c]` of the tracking LSTM by
    /// default, as the PyTorch port's `predict_use_cell`. `None` (configurations written
    /// before this option) means `h`, as those models were built.
    #[config(default = "Some(ClassifierInput::HiddenCell)")]
    pub classifier_input: Option<ClassifierInput>,
}

/// SPINN (Bowman et al. 2016): a shift-reduce Tree-LSTM over a thin stack.
///
/// **Buffer.** Word vectors go through a learned projection to `[h; c]` (width `2D`).
///
/// **Thin stack.** The stack is one device array of written rows, `[(T+1)·B, 2D]` in step-major
/// blocks of `B` rows (block 0 is all zeros and stands for "no item"). Step `t` (1-based) writes
/// block `t`: first `TreeLSTM(left = second, right = top, e = tracking h)` of the examples that
/// REDUCE, then the buffer tops of the examples that SHIFT; a SKIP writes nothing. The stack's
/// live items are only row pointers, kept per example on the host in a [`PointerQueue`], with
/// each written row's slot in its block; the reads are batched row reads (the tracker's of every
/// example, the composition's of its children only), and gradients flow back through them
/// ([`arbor_kernels::ThinStack`]). No stack is ever copied.
///
/// **Tracking** (PI, full). Before each step an LSTM reads `[h(top); h(second); h(buffer top)]`
/// (zeros for missing items) and its new `h` is the composition's external input `e`. It only
/// steps for examples whose step is real: SKIP padding leaves its state untouched.
///
/// **Transitions** (full). `Linear([h; c] → {SHIFT, REDUCE})` of the tracking state after the
/// tracking update (or `Linear(h → …)`, [`ClassifierInput::Hidden`]; the classifier's input
/// width says which).
/// Training (any [`Decisions::Sample`]) follows the gold transitions (teacher forcing) and
/// returns `α`·mean cross-entropy over the real steps as the auxiliary loss. Evaluation
/// ([`Decisions::Argmax`]) follows the classifier's argmax under the validity rule
/// ([`PointerQueue::enforce`]): fewer than two stack items force SHIFT, an empty buffer forces
/// REDUCE. So every sentence of `n` words takes exactly `2n − 1` steps and its tree covers every
/// word once.
///
/// **Padding.** Sentences shorter than the batch's longest take SKIP steps at the end, which
/// neither read nor write nor step the tracker; every read of a missing item gives zeros. So
/// each sentence gets exactly what it gets alone.
///
/// The variant and what the classifier reads are kept from the configuration at
/// [`SpinnConfig::init`] (not stored in a record: a loaded checkpoint keeps the module's).
#[derive(Module, Debug)]
pub struct Spinn<B: Backend> {
    /// Word → `[h; c]` leaf projection.
    pub projection: Linear<B>,
    /// The REDUCE composition (with the tracking state as external input when tracking).
    pub composition: BinaryTreeLstm<B>,
    /// The tracking LSTM over `[h(top); h(second); h(buffer top)]` (PI and full).
    pub tracker: Option<LstmCell<B>>,
    /// The transition classifier: tracking `[h; c]` (or `h`) → `[SHIFT, REDUCE]` logits (full).
    /// Its input width, `2·D_t` or `D_t`, says which it reads.
    pub classifier: Option<Linear<B>>,
    /// Width `D`.
    pub d_hidden: usize,
    /// Weight `α` of the transition loss.
    pub transition_weight: f64,
    /// The variant, from [`SpinnConfig::variant`].
    #[module(skip)]
    variant: SpinnVariant,
    /// What the transition classifier reads (full SPINN), from [`SpinnConfig::transition_input`].
    #[module(skip)]
    transition_input: Option<ClassifierInput>,
}

impl SpinnConfig {
    /// Checks the settings: positive widths and a finite, non-negative transition weight.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::at_least_one;
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_hidden", self.d_hidden)?;
        if !(self.transition_weight.is_finite() && self.transition_weight >= 0.0) {
            return Err(arbor_cells::ConfigError::new(
                "transition_weight",
                self.transition_weight,
                "must be a finite number ≥ 0",
            ));
        }
        Ok(())
    }

    /// What the transition classifier reads ([`ClassifierInput::Hidden`] when unset).
    pub fn transition_input(&self) -> ClassifierInput {
        self.classifier_input.unwrap_or(ClassifierInput::Hidden)
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `d_input` or `d_hidden` is 0.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> Spinn<B> {
        assert!(
            self.d_input > 0 && self.d_hidden > 0,
            "widths must be positive"
        );
        let d = self.d_hidden;
        let dt = if self.d_tracking == 0 {
            d
        } else {
            self.d_tracking
        };
        let tracking = self.variant != SpinnVariant::PiNt;
        Spinn {
            projection: LinearConfig::new(self.d_input, 2 * d).init(device),
            composition: BinaryTreeLstmConfig::new(d)
                .with_d_external(if tracking { dt } else { 0 })
                .init(device),
            tracker: tracking.then(|| LstmCellConfig::new(3 * d, dt).init(device)),
            classifier: (self.variant == SpinnVariant::Full).then(|| {
                let width = match self.transition_input() {
                    ClassifierInput::Hidden => dt,
                    ClassifierInput::HiddenCell => 2 * dt,
                };
                LinearConfig::new(width, 2).init(device)
            }),
            d_hidden: d,
            transition_weight: self.transition_weight,
            variant: self.variant,
            transition_input: (self.variant == SpinnVariant::Full).then(|| self.transition_input()),
        }
    }
}

/// What [`Spinn::forward`] computes.
#[derive(Debug, Clone)]
pub struct SpinnOutput<B: Backend> {
    /// The root `(h, c)` of every sentence: `[batch, D]`.
    pub root: LstmState<B, 2>,
    /// The transitions each sentence followed (gold, or its own parse at evaluation for full
    /// SPINN), without padding.
    pub transitions: Vec<Vec<Transition>>,
    /// Whether `transitions` are the model's own predictions (full SPINN at evaluation).
    pub parsed: bool,
    /// `α`·mean cross-entropy of the classifier over the real gold steps (full SPINN in
    /// training).
    pub transition_loss: Option<Tensor<B, 1>>,
}

impl<B: ArborBackend> SpinnOutput<B> {
    /// The trees of [`SpinnOutput::transitions`].
    pub fn trees(&self) -> Vec<BinaryTree> {
        self.transitions
            .iter()
            .map(|ts| BinaryTree::from_transitions(ts).unwrap_or(BinaryTree::Leaf(0)))
            .collect()
    }
}

/// Step-aligned transition accuracy of `predicted` against `gold` (SKIPs ignored): `(correct,
/// total)` over the gold SHIFT/REDUCE steps. A prediction shorter than the gold counts the
/// missing steps as wrong.
pub fn transition_accuracy(
    predicted: &[Vec<Transition>],
    gold: &[Vec<Transition>],
) -> (usize, usize) {
    let mut correct = 0;
    let mut total = 0;
    for (p, g) in predicted.iter().zip(gold) {
        let p: Vec<_> = p.iter().filter(|t| **t != Transition::Skip).collect();
        for (i, t) in g.iter().filter(|t| **t != Transition::Skip).enumerate() {
            total += 1;
            correct += usize::from(p.get(i) == Some(&t));
        }
    }
    (correct, total)
}

/// Where the transitions come from.
enum Plan {
    /// Follow these (valid, unpadded) sequences.
    Given(Vec<Vec<Transition>>),
    /// Parse with the classifier and the validity rule.
    Own,
}

impl<B: ArborBackend> Spinn<B> {
    /// The variant this encoder is (its configuration's).
    pub fn variant(&self) -> SpinnVariant {
        self.variant
    }

    /// What the transition classifier reads (`None` without one), as configured.
    pub fn transition_input(&self) -> Option<ClassifierInput> {
        self.transition_input
    }

    /// Whether this call parses with the classifier rather than following given transitions.
    fn parses(&self, decisions: &Decisions<'_>) -> bool {
        self.classifier.is_some() && decisions.is_argmax()
    }

    /// Encodes a batch, strictly: every given transition sequence is checked.
    ///
    /// Gold transitions are needed except by full SPINN at evaluation ([`Decisions::Argmax`]),
    /// which parses on its own and ignores any it is given.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`, padded at the end of each sentence
    /// - output `root.h`, `root.c`: `[batch, D]`
    ///
    /// # Errors
    /// [`SpinnError`] for bad lengths and missing or malformed transitions.
    pub fn forward(
        &self,
        input: EncoderInput<B>,
        decisions: Decisions<'_>,
    ) -> Result<SpinnOutput<B>, SpinnError> {
        let [_, time, _] = input.embeddings.dims();
        for (i, &length) in input.lengths.iter().enumerate() {
            if length == 0 || length > time {
                return Err(SpinnError::Length {
                    sentence: i,
                    length,
                    time,
                });
            }
        }
        let plan = if self.parses(&decisions) {
            Plan::Own
        } else {
            let ts = input.transitions.ok_or(SpinnError::MissingTransitions {
                variant: self.variant(),
                why: if self.classifier.is_some() {
                    "training is teacher-forced"
                } else {
                    "this variant follows given trees"
                },
            })?;
            check_batch_transitions(&input.lengths, &ts)?;
            Plan::Given(
                ts.into_iter()
                    .map(|t| t.into_iter().filter(|t| *t != Transition::Skip).collect())
                    .collect(),
            )
        };
        Ok(self.run(input.embeddings, &input.lengths, plan))
    }

    /// The batched thin-stack computation; `plan` must be valid for `lengths`.
    fn run(&self, embeddings: Tensor<B, 3>, lengths: &[usize], plan: Plan) -> SpinnOutput<B> {
        let device = embeddings.device();
        let [batch, time, _] = embeddings.dims();
        let d = self.d_hidden;
        let steps = lengths.iter().map(|&n| 2 * n - 1).max().unwrap_or(0);

        // Buffer: [batch·time, 2D], read as a thin stack whose rows are all written, so that
        // its gradient is one buffer however many steps read it (`select_rows` would give every
        // read a gradient of the whole buffer: 37 MB per step in the bench's workload). An
        // empty buffer reads as zeros: its rows are masked after the read, rather than
        // appending a zero row to the buffer, which would copy it whole.
        let buffer = arbor_cells::kernels::ThinStack::from_rows(
            arbor_cells::linear_rows(&self.projection, embeddings).reshape([batch * time, 2 * d]),
        );

        // The thin stack: [(steps+1)·batch, 2D], step-major; rows 0..batch stay zeros. Where
        // example `b`'s row of step `p` lies within its block: `slot[p·batch + b]` (step 0's
        // slots are the identity, so "no item" reads a zero row).
        let mut stack =
            arbor_cells::kernels::ThinStack::<B>::zeros((steps + 1) * batch, 2 * d, &device);
        let mut slot: Vec<usize> = (0..batch).collect();
        slot.resize((steps + 1) * batch, 0);
        let mut queues: Vec<PointerQueue> = lengths.iter().map(|&n| PointerQueue::new(n)).collect();
        let mut followed: Vec<Vec<Transition>> = lengths
            .iter()
            .map(|&n| Vec::with_capacity(2 * n - 1))
            .collect();
        let mut tracking = self
            .tracker
            .as_ref()
            .map(|cell| LstmState::<B, 2>::zeros([batch, cell.d_hidden()], &device));
        // Teacher-forced classifier logits and gold ids per step, for the transition loss.
        let with_cell = self.transition_input() == Some(ClassifierInput::HiddenCell);
        let mut logits_steps: Vec<Tensor<B, 2>> = Vec::new();
        let mut gold_ids: Vec<i64> = Vec::new();
        let mut gold_rows: Vec<i64> = Vec::new();

        let mask =
            |v: Vec<bool>| Tensor::<B, 2, Bool>::from_data(TensorData::new(v, [batch, 1]), &device);

        for t in 1..=steps {
            // The reads of this step, from each example's pointers (step 0 = a zero row).
            let reads: Vec<Reads> = queues.iter().map(PointerQueue::reads).collect();
            let row_of = |p: Option<usize>, b: usize| {
                let p = p.unwrap_or(0);
                p * batch + slot[p * batch + b]
            };

            // Which examples take a real step (known before the classifier: unfinished ones).
            let active: Vec<bool> = match &plan {
                Plan::Given(ts) => ts.iter().map(|s| t <= s.len()).collect(),
                Plan::Own => queues.iter().map(|q| !q.is_done()).collect(),
            };

            // Tracking LSTM (eq. of §3.2): input [h(top); h(second); h(buffer top)] of every
            // example (zeros for missing items).
            let mut e = None;
            // The classifier's input: the tracking h, or [h; c].
            let mut classifier_in = None;
            if let (Some(cell), Some(state)) = (&self.tracker, tracking.take()) {
                // Top and second in one read, so that the stack gets one gradient per read.
                let rows: Vec<usize> = (reads.iter().enumerate().map(|(b, r)| row_of(r.top, b)))
                    .chain(reads.iter().enumerate().map(|(b, r)| row_of(r.second, b)))
                    .collect();
                let pair = stack.read(&rows);
                // An empty buffer reads row 0 (any row), then zeros through the mask.
                let buffer_rows: Vec<usize> = reads
                    .iter()
                    .enumerate()
                    .map(|(b, r)| r.buffer.map_or(0, |w| b * time + w))
                    .collect();
                let buf_h = arbor_cells::kernels::narrow(buffer.read(&buffer_rows), 1, 0, d);
                let empty: Vec<bool> = reads.iter().map(|r| r.buffer.is_none()).collect();
                let buf_h = if empty.contains(&true) {
                    buf_h.mask_fill(mask(empty).expand([batch, d]), 0.0)
                } else {
                    buf_h
                };
                let x = Tensor::cat(
                    vec![
                        LstmState::split(arbor_cells::kernels::narrow(pair.clone(), 0, 0, batch)).h,
                        LstmState::split(arbor_cells::kernels::narrow(pair, 0, batch, batch)).h,
                        buf_h,
                    ],
                    1,
                );
                let new = cell.step_input(x, None, state.clone()).state;
                let state = state.select(mask(active.clone()), new);
                e = Some(state.h.clone());
                classifier_in = Some(if with_cell {
                    state.clone().concat()
                } else {
                    state.h.clone()
                });
                tracking = Some(state);
            }

            // This step's transitions.
            let ops: Vec<Transition> = match &plan {
                Plan::Given(ts) => ts
                    .iter()
                    .map(|s| s.get(t - 1).copied().unwrap_or(Transition::Skip))
                    .collect(),
                Plan::Own => {
                    let logits = match (&self.classifier, &classifier_in) {
                        (Some(c), Some(input)) => arbor_cells::linear_rows(c, input.clone()),
                        _ => Tensor::zeros([batch, 2], &device),
                    };
                    let wanted: Vec<i64> = logits
                        .argmax(1)
                        .into_data()
                        .convert::<i64>()
                        .to_vec()
                        .unwrap_or_else(|_| vec![0; batch]);
                    queues
                        .iter()
                        .zip(wanted)
                        .map(|(q, w)| {
                            q.enforce(if w == 1 {
                                Transition::Reduce
                            } else {
                                Transition::Shift
                            })
                        })
                        .collect()
                }
            };
            if let (Plan::Given(_), Some(c), Some(input)) = (&plan, &self.classifier, classifier_in)
            {
                // One fused `linear` (Burn's reshapes the bias: a parameter-only op, whose new
                // autodiff graph would be merged into the model's at every step).
                logits_steps.push(arbor_cells::linear_rows(c, input));
                for (b, op) in ops.iter().enumerate() {
                    if *op != Transition::Skip {
                        gold_rows.push(((t - 1) * batch + b) as i64);
                        gold_ids.push(i64::from(op.id()));
                    }
                }
            }

            // This step's block of the stack: the REDUCEing examples' composed nodes first, then
            // the SHIFTing examples' buffer tops; a SKIP writes nothing (its row is never read).
            // Each part is read and written for its own examples only, with no per-example mask
            // and no reordering copy.
            let reducing: Vec<usize> = (0..batch)
                .filter(|&b| ops[b] == Transition::Reduce)
                .collect();
            let shifting: Vec<usize> = (0..batch)
                .filter(|&b| ops[b] == Transition::Shift)
                .collect();
            let block = t * batch;
            if !reducing.is_empty() {
                let r = reducing.len();
                // Left (second) and right (top) children in one read.
                let rows: Vec<usize> = (reducing.iter().map(|&b| row_of(reads[b].second, b)))
                    .chain(reducing.iter().map(|&b| row_of(reads[b].top, b)))
                    .collect();
                let children = stack.read(&rows);
                let pick = || {
                    Tensor::<B, 1, Int>::from_data(
                        TensorData::new(reducing.iter().map(|&b| b as i64).collect(), [r]),
                        &device,
                    )
                };
                let reduced = self
                    .composition
                    .forward(
                        LstmState::split(arbor_cells::kernels::narrow(children.clone(), 0, 0, r)),
                        LstmState::split(arbor_cells::kernels::narrow(children, 0, r, r)),
                        e.map(|e| e.select(0, pick())),
                    )
                    .concat();
                stack = stack.write(block, reduced);
                for (j, &b) in reducing.iter().enumerate() {
                    slot[block + b] = j;
                }
            }
            if !shifting.is_empty() {
                // A SHIFT always has a buffer top.
                let rows: Vec<usize> = shifting
                    .iter()
                    .map(|&b| b * time + reads[b].buffer.unwrap_or(0))
                    .collect();
                let tops = buffer.read(&rows);
                stack = stack.write(block + reducing.len(), tops);
                for (j, &b) in shifting.iter().enumerate() {
                    slot[block + b] = reducing.len() + j;
                }
            }

            for (b, (q, op)) in queues.iter_mut().zip(&ops).enumerate() {
                // The plan is valid (checked, repaired or enforced), so this cannot fail.
                if q.apply(t, *op).is_ok() && *op != Transition::Skip {
                    followed[b].push(*op);
                }
            }
        }

        let roots: Vec<usize> = queues
            .iter()
            .enumerate()
            .map(|(b, q)| {
                let p = q.queue().last().copied().unwrap_or(0);
                p * batch + slot[p * batch + b]
            })
            .collect();
        let root = LstmState::split(stack.read(&roots));

        let transition_loss = (!gold_rows.is_empty()).then(|| {
            let k = gold_rows.len();
            let all = Tensor::cat(logits_steps, 0);
            let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(gold_rows, [k]), &device);
            let gold = Tensor::<B, 2, Int>::from_data(TensorData::new(gold_ids, [k, 1]), &device);
            let nll = log_softmax(all.select(0, rows), 1).gather(1, gold).neg();
            nll.mean().mul_scalar(self.transition_weight)
        });
        SpinnOutput {
            root,
            transitions: followed,
            parsed: matches!(plan, Plan::Own),
            transition_loss,
        }
    }
}

impl<B: ArborBackend> SentenceEncoder<B> for Spinn<B> {
    fn d_output(&self) -> usize {
        self.d_hidden
    }

    /// Encodes a batch; the sentence vector is the root's `h`. Full SPINN at evaluation returns
    /// the trees it parsed in `trees`, and in training the weighted transition loss in
    /// `aux_loss`.
    ///
    /// This never panics on bad input: a missing or malformed transition sequence is replaced
    /// by [`repair_transitions`] (the validity rule applied to what was given; with nothing
    /// given, all SHIFTs then REDUCEs, i.e. a right-branching tree), and lengths are clamped to
    /// `1..=time`. Use [`Spinn::forward`] (or check data first with
    /// [`check_batch_transitions`]) to have such input rejected instead.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, D]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let [_, time, _] = input.embeddings.dims();
        let lengths: Vec<usize> = input
            .lengths
            .iter()
            .map(|&n| n.clamp(1, time.max(1)))
            .collect();
        let plan = if self.parses(&decisions) {
            Plan::Own
        } else {
            let given = input.transitions.unwrap_or_default();
            Plan::Given(
                lengths
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        let ts = given.get(i).map(Vec::as_slice).unwrap_or(&[]);
                        match check_transitions(i, n, ts) {
                            Ok(()) => ts
                                .iter()
                                .copied()
                                .filter(|t| *t != Transition::Skip)
                                .collect(),
                            Err(_) => repair_transitions(n, ts),
                        }
                    })
                    .collect(),
            )
        };
        let out = self.run(input.embeddings, &lengths, plan);
        EncoderOutput {
            trees: out.parsed.then(|| out.trees()),
            sentence: out.root.h,
            tokens: None,
            aux_loss: out.transition_loss,
        }
    }
}
