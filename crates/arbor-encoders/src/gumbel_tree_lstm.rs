//! Gumbel Tree-LSTM (Choi, Yoo & Lee 2018; docs/models.md §2).
//!
//! Bottom-up, every example in the batch advances one layer at a time: all adjacent pairs of
//! the current layer are composed in one batched Tree-LSTM call, one candidate parent is
//! selected per example (straight-through Gumbel-softmax while training, argmax at
//! evaluation), and the layer shrinks by one node.

use arbor_cells::kernels::select_mix;
use arbor_cells::ArborBackend;
use arbor_cells::{
    argmax_select, st_gumbel_softmax, BinaryTreeLstm, BinaryTreeLstmConfig, GumbelSampler,
    LstmCell, LstmCellConfig, LstmState, RecurrentCell, Selection,
};
use arbor_data::tree::BinaryTree;
use burn::module::{Initializer, Param};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

/// How Gumbel Tree-LSTM turns each word into a leaf state `(h, c)`.
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
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum LeafKind {
    /// One affine map `x → [h; c]` per word (eq. 6): leaves see only their own word.
    Affine,
    /// A left-to-right LSTM over the words (eq. 9), keeping both `h` and `c` at every
    /// position: leaf `i` sees words `0..=i`. The better variant in the paper.
    #[default]
    Lstm,
}

arbor_cells::value_enum_names!(LeafKind, "leaf kind");

/// Configuration of a [`GumbelTreeLstm`].
#[derive(Config, Debug)]
pub struct GumbelTreeLstmConfig {
    /// Width of the word embeddings.
    pub d_input: usize,
    /// Width `D` of every node's `h` and `c`.
    pub d_hidden: usize,
    /// How words become leaves.
    #[config(default = "LeafKind::Lstm")]
    pub leaf: LeafKind,
    /// Gumbel-softmax temperature τ used in training mode.
    #[config(default = 1.0)]
    pub tau: f64,
    /// Standard deviation of the normal initialisation of the query vector `q` (the released
    /// code uses 0.01).
    #[config(default = 0.01)]
    pub query_std: f64,
}

/// The leaf transformation of a [`GumbelTreeLstm`].
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Leaf<B: Backend> {
    /// `x → [h; c]`: a `Linear(d_input, 2D)` whose output is split into `h` and `c`.
    Affine(Linear<B>),
    /// A left-to-right LSTM cell (gate order `i, f, g, o`, see [`LstmCell`]).
    Lstm(LstmCell<B>),
}

impl<B: ArborBackend> Leaf<B> {
    /// The leaf state of every position.
    ///
    /// Leaf `i` depends on words `0..=i` only, so real leaves never see padding (which is at
    /// the end); leaves at padded positions hold values that the layers never let reach a
    /// real node.
    ///
    /// # Shapes
    /// - `x`: `[batch, n, d_input]`
    /// - output `h`, `c`: `[batch, n, D]`
    pub fn forward(&self, x: Tensor<B, 3>) -> LstmState<B, 3> {
        match self {
            Leaf::Affine(linear) => LstmState::split(arbor_cells::linear_rows(linear, x)),
            Leaf::Lstm(cell) => {
                let [batch, n, _] = x.dims();
                let mut state = LstmState::zeros([batch, cell.d_hidden()], &x.device());
                let (mut hs, mut cs) = (Vec::with_capacity(n), Vec::with_capacity(n));
                for t in 0..n {
                    // The input projection step by step, as the cell runner does for
                    // position-wise cells (slices of one precomputed tensor cost autodiff a
                    // full-size gradient per step).
                    let xp_t = cell.precompute(x.clone().narrow(1, t, 1));
                    let width = xp_t.dims()[2];
                    state = cell.step(xp_t.reshape([batch, width]), state).state;
                    hs.push(state.h.clone());
                    cs.push(state.c.clone());
                }
                LstmState::new(Tensor::stack(hs, 1), Tensor::stack(cs, 1))
            }
        }
    }
}

/// Gumbel Tree-LSTM (Choi, Yoo & Lee 2018): a Tree-LSTM that builds its own binary tree
/// bottom-up, merging one adjacent pair per layer.
///
/// At a layer of `M` nodes every adjacent pair is composed by [`BinaryTreeLstm`] into a
/// candidate parent `h̃_k` (`k < M − 1`), scored by `v_k = q·h̃_k / √D` (the √D is from the
/// authors' released code, not the paper), and one candidate is selected: straight-through
/// Gumbel-softmax in training ([`Decisions::Sample`]), argmax at evaluation
/// ([`Decisions::Argmax`]). With the selection `s` and `cum = cumsum(s)` the next layer is
/// `s·h̃ + (1 − cum)·h_left + (cum − s)·h_right` (eq. 7): nodes left of the selected pair are
/// copied, the pair is replaced by its parent, nodes right of it shift left by one. The same
/// mixing applies to `c`. Gradients reach `q` through the soft part of `s`.
///
/// Padding is exact: candidates that involve a padded node are never valid, and an example
/// whose tree is already complete keeps its root and only drops its last (padding) column, so
/// every sentence gets the root (and tree) it gets alone.
#[derive(Module, Debug)]
pub struct GumbelTreeLstm<B: Backend> {
    /// Word → leaf `(h, c)`.
    pub leaf: Leaf<B>,
    /// The composition function.
    pub composition: BinaryTreeLstm<B>,
    /// The query vector `q` `[D]`.
    pub query: Param<Tensor<B, 1>>,
    /// Width `D`.
    pub d_hidden: usize,
    /// Gumbel-softmax temperature τ.
    pub tau: f64,
}

impl GumbelTreeLstmConfig {
    /// Checks the settings: positive widths, a positive temperature and query scale.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, positive};
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_hidden", self.d_hidden)?;
        positive("tau", self.tau)?;
        positive("query_std", self.query_std)
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `d_hidden` or `d_input` is 0, or `tau` is not positive.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> GumbelTreeLstm<B> {
        assert!(
            self.d_input > 0 && self.d_hidden > 0,
            "widths must be positive"
        );
        assert!(self.tau > 0.0, "the temperature must be positive");
        let d = self.d_hidden;
        let leaf = match self.leaf {
            LeafKind::Affine => Leaf::Affine(LinearConfig::new(self.d_input, 2 * d).init(device)),
            // The reference's leaf LSTM starts its forget gate at 1 (docs/init.md).
            LeafKind::Lstm => Leaf::Lstm(
                LstmCellConfig::new(self.d_input, d)
                    .with_forget_bias(Some(1.0))
                    .init(device),
            ),
        };
        let query = Initializer::Normal {
            mean: 0.0,
            std: self.query_std,
        }
        .init([d], device);
        GumbelTreeLstm {
            leaf,
            composition: BinaryTreeLstmConfig::new(d).init(device),
            query,
            d_hidden: d,
            tau: self.tau,
        }
    }
}

/// What [`GumbelTreeLstm::forward`] computes.
#[derive(Debug, Clone)]
pub struct GumbelTreeOutput<B: Backend> {
    /// The root `(h, c)` of every sentence `[batch, D]` (a length-1 sentence's root is its
    /// leaf).
    pub root: LstmState<B, 2>,
    /// The leaf states `[batch, n, D]`, `n` the longest length in the batch; positions past
    /// an example's length hold unused values.
    pub leaves: LstmState<B, 3>,
    /// The index selected at each layer (`n − 1` layers; layer `t` has `n − t` nodes):
    /// `[batch]` each. Entry `b` of layer `t` is meaningful only while `t < lengths[b] − 1`;
    /// after that example `b` is complete and the entry is arbitrary.
    pub selected: Vec<Tensor<B, 1, Int>>,
    /// The selection distribution at each layer `[batch, n − 1 − t]`: the Gumbel-softmax `y`
    /// in training mode, the softmax of the scores at evaluation; zeros on invalid candidates
    /// and for complete examples.
    pub probabilities: Vec<Tensor<B, 2>>,
    /// The real length of each sentence.
    pub lengths: Vec<usize>,
}

impl<B: ArborBackend> GumbelTreeOutput<B> {
    /// The selected index of every real layer of every example (`lengths[b] − 1` entries for
    /// example `b`), read back to the host in one transfer.
    pub fn layer_indices(&self) -> Vec<Vec<usize>> {
        let batch = self.lengths.len();
        if self.selected.is_empty() {
            return vec![Vec::new(); batch];
        }
        let layers = self.selected.len();
        let all: Tensor<B, 2, Int> = Tensor::stack(self.selected.clone(), 1);
        let values: Vec<i64> = all.into_data().iter::<i64>().collect();
        self.lengths
            .iter()
            .enumerate()
            .map(|(b, &len)| {
                values[b * layers..b * layers + len - 1]
                    .iter()
                    .map(|&k| k as usize)
                    .collect()
            })
            .collect()
    }

    /// The induced tree of every example, leaves numbered `0..len`.
    ///
    /// The selections are valid merges whenever the scores are finite. Non-finite scores (a
    /// diverged model) can make an argmax pick a masked position; such an index is clamped to
    /// the last valid merge of its layer, so a tree is still returned (the sentence vectors
    /// are non-finite too, and the training engine stops on the loss with a clear error)
    /// instead of a panic.
    pub fn trees(&self) -> Vec<BinaryTree> {
        self.layer_indices()
            .iter()
            .zip(&self.lengths)
            .map(|(indices, &len)| {
                let valid: Vec<usize> = indices
                    .iter()
                    .enumerate()
                    .map(|(t, &k)| k.min(len.saturating_sub(t + 2)))
                    .collect();
                BinaryTree::from_layer_indices(len, &valid)
                    .ok()
                    .or_else(|| BinaryTree::left_branching(len))
                    .unwrap_or(BinaryTree::Leaf(0))
            })
            .collect()
    }
}

/// `values[b·width + j] = f(b, j)` as a `[batch, width]` boolean tensor.
fn host_mask<B: ArborBackend>(
    batch: usize,
    width: usize,
    f: impl Fn(usize, usize) -> bool,
    device: &B::Device,
) -> Tensor<B, 2, Bool> {
    let values: Vec<bool> = (0..batch)
        .flat_map(|b| (0..width).map(move |j| (b, j)))
        .map(|(b, j)| f(b, j))
        .collect();
    Tensor::from_data(TensorData::new(values, [batch, width]), device)
}

impl<B: ArborBackend> GumbelTreeLstm<B> {
    /// Builds every sentence's tree and root.
    ///
    /// # Shapes
    /// - `embeddings`: `[batch, time, d_input]`, padded at the end of each sentence
    /// - `lengths`: `batch` entries, `1 ≤ len ≤ time`
    /// - output: see [`GumbelTreeOutput`] (`n = max(lengths)`)
    ///
    /// # Panics
    /// If `lengths` is malformed.
    pub fn forward(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        decisions: Decisions<'_>,
    ) -> GumbelTreeOutput<B> {
        let tau = self.tau;
        match decisions {
            Decisions::Argmax => self.run(embeddings, lengths, |_, logits, mask| {
                argmax_select(logits, Some(mask))
            }),
            Decisions::Sample(sampler) => self.run(embeddings, lengths, |_, logits, mask| {
                sample(sampler, logits, mask, tau)
            }),
        }
    }

    /// Training-mode forward pass with given Gumbel noise instead of a sampler, for tests and
    /// experiments that need exact control over the noise.
    ///
    /// # Shapes
    /// - `embeddings`, `lengths`: as in [`GumbelTreeLstm::forward`]
    /// - `noise`: one tensor per layer, layer `t` `[batch, n − 1 − t]` (`n = max(lengths)`);
    ///   entries on invalid candidates are ignored
    ///
    /// # Panics
    /// If `noise` has fewer than `n − 1` tensors or `lengths` is malformed.
    pub fn forward_with_noise(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        noise: &[Tensor<B, 2>],
    ) -> GumbelTreeOutput<B> {
        let tau = self.tau;
        self.run(embeddings, lengths, |t, logits, mask| {
            let g = noise
                .get(t)
                .unwrap_or_else(|| panic!("no noise for layer {t}"))
                .clone();
            st_gumbel_softmax(logits, Some(mask), tau, Some(g))
        })
    }

    /// Validity scores `q·h̃_k / √D` of a layer of candidates.
    ///
    /// # Shapes
    /// - `h`: `[batch, k, D]`
    /// - output: `[batch, k]`
    pub fn scores(&self, h: Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, k, d] = h.dims();
        let q = self.query.val().reshape([1, 1, d]);
        h.mul(q)
            .sum_dim(2)
            .reshape([batch, k])
            .div_scalar((d as f64).sqrt())
    }

    fn run(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        mut select: impl FnMut(usize, Tensor<B, 2>, Tensor<B, 2, Bool>) -> Selection<B>,
    ) -> GumbelTreeOutput<B> {
        let [batch, time, _] = embeddings.dims();
        assert_eq!(lengths.len(), batch, "one length per example");
        assert!(
            lengths.iter().all(|&l| (1..=time).contains(&l)),
            "every length must be in 1..={time}: {lengths:?}"
        );
        let device = embeddings.device();
        let n = lengths.iter().copied().max().unwrap_or(1);
        let d = self.d_hidden;
        let x = if n < time {
            embeddings.narrow(1, 0, n)
        } else {
            embeddings
        };
        let leaves = self.leaf.forward(x);
        let mut layer = leaves.clone();
        let mut selected = Vec::with_capacity(n.saturating_sub(1));
        let mut probabilities = Vec::with_capacity(n.saturating_sub(1));
        for t in 0..n.saturating_sub(1) {
            let m = n - t;
            // Layer t: example b has lengths[b] − t real nodes while it is incomplete.
            let valid = host_mask::<B>(batch, m - 1, |b, k| k + t + 1 < lengths[b], &device);
            let done = host_mask::<B>(batch, 1, |b, _| lengths[b] < t + 2, &device);
            let parent = self.composition.forward_adjacent(&layer);
            let left = LstmState::new(
                layer.h.clone().narrow(1, 0, m - 1),
                layer.c.clone().narrow(1, 0, m - 1),
            );
            let right = LstmState::new(layer.h.narrow(1, 1, m - 1), layer.c.narrow(1, 1, m - 1));
            let logits = self.scores(parent.h.clone());
            let sel = select(t, logits, valid);
            // A complete example keeps its nodes and drops its last (padding) column: with no
            // selection (s = 0, so cum = 0) the mix below is exactly `left`.
            let s = sel.hard.mask_fill(done.expand([batch, m - 1]), 0.0);
            // Eq. 7, fused: s·h̃ + (1 − cum)·h_left + (cum − s)·h_right with cum = cumsum(s).
            layer = LstmState::new(
                select_mix(s.clone(), parent.h, left.h, right.h),
                select_mix(s, parent.c, left.c, right.c),
            );
            selected.push(sel.index);
            probabilities.push(sel.soft);
        }
        let root = LstmState::new(layer.h.reshape([batch, d]), layer.c.reshape([batch, d]));
        GumbelTreeOutput {
            root,
            leaves,
            selected,
            probabilities,
            lengths: lengths.to_vec(),
        }
    }
}

fn sample<B: ArborBackend>(
    sampler: &mut GumbelSampler,
    logits: Tensor<B, 2>,
    mask: Tensor<B, 2, Bool>,
    tau: f64,
) -> Selection<B> {
    let noise = sampler.sample::<B, 2>(logits.dims(), &logits.device());
    let tau = sampler.temperature_or(tau);
    st_gumbel_softmax(logits, Some(mask), tau, Some(noise))
}

impl<B: ArborBackend> SentenceEncoder<B> for GumbelTreeLstm<B> {
    fn d_output(&self) -> usize {
        self.d_hidden
    }

    /// Encodes a batch: `sentence` is the root `h`, `tokens` the leaf `h` (zeros at padding),
    /// `trees` the induced trees.
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, D]`; `tokens`: `[batch, time, D]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let [batch, time, _] = input.embeddings.dims();
        let device = input.embeddings.device();
        let out = self.forward(input.embeddings, &input.lengths, decisions);
        let trees = out.trees();
        let d = self.d_hidden;
        let n = out.leaves.h.dims()[1];
        let mut tokens = out.leaves.h;
        if n < time {
            tokens = Tensor::cat(
                vec![tokens, Tensor::zeros([batch, time - n, d], &device)],
                1,
            );
        }
        let lengths = &input.lengths;
        let pad = host_mask::<B>(batch, time, |b, t| t >= lengths[b], &device);
        let tokens = tokens.mask_fill(pad.unsqueeze_dim::<3>(2).expand([batch, time, d]), 0.0);
        EncoderOutput {
            sentence: out.root.h,
            tokens: Some(tokens),
            trees: Some(trees),
            aux_loss: None,
        }
    }
}
