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
    /// A left-to-right and a right-to-left LSTM over the words, each `D/2` wide (`D` even); leaf
    /// `i` is `h = [h→_i; h←_i]`, `c = [c→_i; c←_i]`, where the right-to-left LSTM starts at
    /// each sentence's own last word (the release's bidirectional leaf RNN).
    BiLstm,
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
    /// Intra-attention over the tree's nodes (the release's `intra_attention`): the sentence
    /// vector is an attention-weighted mix of the `h` of every leaf and every parent instead of
    /// the root `h` (docs/models.md §2). `None` (configurations written before this option) and
    /// `Some(false)`: the root `h`.
    pub intra_attention: Option<bool>,
}

/// The two LSTM cells of the bidirectional leaf ([`LeafKind::BiLstm`]), each `D/2` wide.
#[derive(Module, Debug)]
pub struct BiLstmLeaf<B: Backend> {
    /// The left-to-right cell (gate order `i, f, g, o`, see [`LstmCell`]).
    pub forward_cell: LstmCell<B>,
    /// The right-to-left cell, run over each sentence reversed within its own length.
    pub backward_cell: LstmCell<B>,
}

/// The leaf transformation of a [`GumbelTreeLstm`].
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Leaf<B: Backend> {
    /// `x → [h; c]`: a `Linear(d_input, 2D)` whose output is split into `h` and `c`.
    Affine(Linear<B>),
    /// A left-to-right LSTM cell (gate order `i, f, g, o`, see [`LstmCell`]).
    Lstm(LstmCell<B>),
    /// A left-to-right and a right-to-left LSTM cell, `D/2` wide each.
    BiLstm(BiLstmLeaf<B>),
}

/// Every step's state of `cell` run left to right from zeros over `x`.
///
/// # Shapes
/// - `x`: `[batch, n, d_input]`
/// - output `h`, `c`: `[batch, n, H]`
fn run_leaf_cell<B: ArborBackend>(cell: &LstmCell<B>, x: Tensor<B, 3>) -> LstmState<B, 3> {
    let [batch, n, _] = x.dims();
    let mut state = LstmState::zeros([batch, cell.d_hidden()], &x.device());
    let (mut hs, mut cs) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for t in 0..n {
        // The input projection step by step, with the recurrent one (one product sum), as the
        // cell runner does (slices of one precomputed tensor cost autodiff a full-size gradient
        // per step).
        let x_t = x.clone().narrow(1, t, 1).reshape([batch, cell.d_input()]);
        state = cell.step_input(x_t, None, state).state;
        hs.push(state.h.clone());
        cs.push(state.c.clone());
    }
    LstmState::new(Tensor::stack(hs, 1), Tensor::stack(cs, 1))
}

/// Reverses every sentence within its own length, leaving the padding where it is: position
/// `j < len` takes position `len − 1 − j`, position `j ≥ len` stays. The map is its own inverse.
///
/// # Shapes
/// - `x`: `[batch, n, d]`, `lengths[b] ≤ n`
/// - output: `[batch, n, d]`
fn reverse_within_lengths<B: ArborBackend>(x: Tensor<B, 3>, lengths: &[usize]) -> Tensor<B, 3> {
    let [batch, n, d] = x.dims();
    let rows: Vec<i64> = (0..batch)
        .flat_map(|b| {
            let len = lengths.get(b).copied().unwrap_or(n).min(n);
            (0..n).map(move |j| (b * n + if j < len { len - 1 - j } else { j }) as i64)
        })
        .collect();
    let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [batch * n]), &x.device());
    x.reshape([batch * n, d])
        .select(0, rows)
        .reshape([batch, n, d])
}

impl<B: ArborBackend> Leaf<B> {
    /// The leaf state of every position.
    ///
    /// Real leaves never see padding (which is at the end): an affine leaf sees its word, a
    /// leaf-LSTM leaf `i` words `0..=i`, and a bidirectional leaf `i` words `0..=i` (left to
    /// right) and `i..len` (right to left, from the sentence's own last word). Leaves at padded
    /// positions hold values that the layers never let reach a real node.
    ///
    /// # Shapes
    /// - `x`: `[batch, n, d_input]`
    /// - `lengths`: `batch` entries `≤ n` (read by the bidirectional leaf only)
    /// - output `h`, `c`: `[batch, n, D]`
    pub fn forward(&self, x: Tensor<B, 3>, lengths: &[usize]) -> LstmState<B, 3> {
        match self {
            Leaf::Affine(linear) => LstmState::split(arbor_cells::linear_rows(linear, x)),
            Leaf::Lstm(cell) => run_leaf_cell(cell, x),
            Leaf::BiLstm(cells) => {
                let fw = run_leaf_cell(&cells.forward_cell, x.clone());
                let bw = run_leaf_cell(&cells.backward_cell, reverse_within_lengths(x, lengths));
                LstmState::new(
                    Tensor::cat(vec![fw.h, reverse_within_lengths(bw.h, lengths)], 2),
                    Tensor::cat(vec![fw.c, reverse_within_lengths(bw.c, lengths)], 2),
                )
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
///
/// With intra-attention ([`GumbelSettings::intra_attention`]) the sentence vector is
/// `Σ_j a_j n_j` over the `h` of the sentence's `2·len − 1` tree nodes (its leaves, then the
/// parent selected at each layer), `a = softmax_j(n_j · n̄)` with `n̄` their mean; padding
/// nodes get weight exactly 0.
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
    /// The settings without weights (temperature, intra-attention).
    pub settings: GumbelSettings,
}

/// The settings of a built [`GumbelTreeLstm`] that hold no weights.
///
/// They are one field of the module so that a new setting never changes the layout of the
/// module's record (a constant field records as one empty entry whatever its type), and
/// checkpoints written before the setting existed still load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GumbelSettings {
    /// Gumbel-softmax temperature τ.
    pub tau: f64,
    /// Whether the sentence vector is the intra-attention mix of the tree's nodes (else the
    /// root `h`).
    pub intra_attention: bool,
}

impl GumbelTreeLstmConfig {
    /// Checks the settings: positive widths (an even `d_hidden` for the bidirectional leaf,
    /// whose directions are `d_hidden / 2` wide each), a positive temperature and query scale.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, positive};
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_hidden", self.d_hidden)?;
        if self.leaf == LeafKind::BiLstm && !self.d_hidden.is_multiple_of(2) {
            return Err(arbor_cells::ConfigError::new(
                "d_hidden",
                self.d_hidden,
                "must be even for the bi-lstm leaf (each direction is d_hidden / 2 wide)",
            ));
        }
        positive("tau", self.tau)?;
        positive("query_std", self.query_std)
    }

    /// Whether the sentence vector is the intra-attention mix of the tree's nodes.
    pub fn uses_intra_attention(&self) -> bool {
        self.intra_attention.unwrap_or(false)
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `d_hidden` or `d_input` is 0, `d_hidden` is odd with the bidirectional leaf, or `tau`
    /// is not positive.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> GumbelTreeLstm<B> {
        assert!(
            self.d_input > 0 && self.d_hidden > 0,
            "widths must be positive"
        );
        assert!(self.tau > 0.0, "the temperature must be positive");
        let d = self.d_hidden;
        // The reference's leaf LSTMs start their forget gates at 1 (docs/init.md).
        let leaf_cell = |width: usize| {
            LstmCellConfig::new(self.d_input, width)
                .with_forget_bias(Some(1.0))
                .init(device)
        };
        let leaf = match self.leaf {
            LeafKind::Affine => Leaf::Affine(LinearConfig::new(self.d_input, 2 * d).init(device)),
            LeafKind::Lstm => Leaf::Lstm(leaf_cell(d)),
            LeafKind::BiLstm => {
                assert!(
                    d.is_multiple_of(2),
                    "the bi-lstm leaf needs an even d_hidden, got {d}"
                );
                Leaf::BiLstm(BiLstmLeaf {
                    forward_cell: leaf_cell(d / 2),
                    backward_cell: leaf_cell(d / 2),
                })
            }
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
            settings: GumbelSettings {
                tau: self.tau,
                intra_attention: self.uses_intra_attention(),
            },
        }
    }
}

/// What [`GumbelTreeLstm::forward`] computes.
#[derive(Debug, Clone)]
pub struct GumbelTreeOutput<B: Backend> {
    /// The root `(h, c)` of every sentence `[batch, D]` (a length-1 sentence's root is its
    /// leaf).
    pub root: LstmState<B, 2>,
    /// The sentence vector `[batch, D]`: the root `h`, or with intra-attention the
    /// attention-weighted mix of the `h` of every tree node.
    pub sentence: Tensor<B, 2>,
    /// With intra-attention, the weights `[batch, 2n − 1]` over the nodes: columns `0..n` the
    /// leaves, column `n + t` the parent selected at layer `t`. Example `b`'s real nodes are
    /// its leaves `0..len` and layers `0..len − 1`; every other column is exactly 0. `None`
    /// without intra-attention.
    pub attention: Option<Tensor<B, 2>>,
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
        self.forward_scheduled(embeddings, lengths, decisions, CandidateSchedule::default())
    }

    /// [`forward`](Self::forward) with the given candidate schedule
    /// ([`CandidateSchedule::Recompose`] is the authors' schedule, the reference path).
    ///
    /// # Shapes
    /// As [`forward`](Self::forward).
    ///
    /// # Panics
    /// If `lengths` is malformed.
    pub fn forward_scheduled(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        decisions: Decisions<'_>,
        schedule: CandidateSchedule,
    ) -> GumbelTreeOutput<B> {
        let tau = self.settings.tau;
        match decisions {
            Decisions::Argmax => self.run(
                embeddings,
                lengths,
                schedule.carry(true),
                |_, logits, mask| argmax_select(logits, Some(mask)),
            ),
            Decisions::Sample(sampler) => self.run(
                embeddings,
                lengths,
                schedule.carry(false),
                |_, logits, mask| sample(sampler, logits, mask, tau),
            ),
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
        self.forward_with_noise_scheduled(embeddings, lengths, noise, CandidateSchedule::default())
    }

    /// [`forward_with_noise`](Self::forward_with_noise) with the given candidate schedule.
    ///
    /// # Shapes
    /// As [`forward_with_noise`](Self::forward_with_noise).
    ///
    /// # Panics
    /// As [`forward_with_noise`](Self::forward_with_noise).
    pub fn forward_with_noise_scheduled(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        noise: &[Tensor<B, 2>],
        schedule: CandidateSchedule,
    ) -> GumbelTreeOutput<B> {
        let tau = self.settings.tau;
        self.run(
            embeddings,
            lengths,
            schedule.carry(false),
            |t, logits, mask| {
                let g = noise
                    .get(t)
                    .unwrap_or_else(|| panic!("no noise for layer {t}"))
                    .clone();
                st_gumbel_softmax(logits, Some(mask), tau, Some(g))
            },
        )
    }

    /// Validity scores `q·h̃_k / √D` of a layer of candidates.
    ///
    /// # Shapes
    /// - `h`: `[batch, k, D]`
    /// - output: `[batch, k]`
    pub fn scores(&self, h: Tensor<B, 3>) -> Tensor<B, 2> {
        self.scores_with(h, &self.query_row())
    }

    /// The query as `[1, 1, D]`. The encoder reshapes it once per pass and scores every layer
    /// with it ([`scores_with`](Self::scores_with)): in Burn 0.21's autodiff, an op whose only
    /// tracked input is a parameter starts a graph of its own, and merging one into the
    /// model's growing graph at every layer costs time that grows with the graph.
    fn query_row(&self) -> Tensor<B, 3> {
        self.query.val().reshape([1, 1, self.d_hidden])
    }

    /// [`scores`](Self::scores) with the query row given (`[1, 1, D]`).
    fn scores_with(&self, h: Tensor<B, 3>, q: &Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, k, d] = h.dims();
        h.mul(q.clone())
            .sum_dim(2)
            .reshape([batch, k])
            .div_scalar((d as f64).sqrt())
    }

    /// The rows of the next layer's nodes `i − 1`, `i`, `i + 1` around the merged node `i`
    /// (`index`) in the layer's `[batch·K, D]` view, in that order (`3·batch` rows): the
    /// children of the next layer's two new pairs. Indices are clamped into the layer; at the
    /// edges the clamped pair is never placed.
    ///
    /// # Shapes
    /// - `index`: `[batch]`; `k`: the next layer's node count
    /// - output: `[3·batch]`
    fn merge_neighbour_rows(index: Tensor<B, 1, Int>, k: usize) -> Tensor<B, 1, Int> {
        let [batch] = index.dims();
        let device = index.device();
        let offsets = Tensor::<B, 1, Int>::arange(0..batch as i64, &device).mul_scalar(k as i64);
        Tensor::cat(
            [-1i64, 0, 1]
                .map(|shift| {
                    index
                        .clone()
                        .add_scalar(shift)
                        .clamp(0, k as i64 - 1)
                        .add(offsets.clone())
                })
                .to_vec(),
            0,
        )
    }

    /// The rows `rows` ([`merge_neighbour_rows`](Self::merge_neighbour_rows)) of a layer's
    /// `[batch, K, D]` values, as `[3, batch, D]`.
    fn gather_neighbours(x: &Tensor<B, 3>, rows: &Tensor<B, 1, Int>) -> Tensor<B, 3> {
        let [batch, k, d] = x.dims();
        x.clone()
            .reshape([batch * k, d])
            .select(0, rows.clone())
            .reshape([3, batch, d])
    }

    /// The next layer's values of a per-candidate quantity from this layer's and the two new
    /// pairs' (see `run`).
    ///
    /// With `i` the merged pair, the next layer's pair `j` is this layer's pair `j` for
    /// `j < i − 1` and pair `j + 1` for `j > i`; pairs `i − 1` and `i` are the merged node with
    /// its left and its right neighbour (`new`, in that order). A complete example (`s = 0`)
    /// keeps its pairs `0..K − 1`.
    ///
    /// # Shapes
    /// - `old`: `[batch, K, w]`; `new`: `[2, batch, w]`
    /// - `s`: `[batch, K]` the one-hot selection (zero rows for complete examples)
    /// - output: `[batch, K − 1, w]`
    fn place(old: Tensor<B, 3>, new: Tensor<B, 3>, s: &Tensor<B, 2>) -> Tensor<B, 3> {
        let [batch, k, w] = old.dims();
        let kept = k - 1;
        // The selection again, over the next layer's pairs: at i (right pair) and at i − 1.
        let at_merge = s.clone().narrow(1, 0, kept);
        let left_of_merge = s.clone().narrow(1, 1, kept);
        let new_at = |p: usize| {
            new.clone()
                .narrow(0, p, 1)
                .reshape([batch, 1, w])
                .expand([batch, kept, w])
        };
        // s·new_right + (1 − cum)·old_j + (cum − s)·old_{j+1}, then new_left at i − 1.
        let shifted = select_mix(
            at_merge,
            new_at(1),
            old.clone().narrow(1, 0, kept),
            old.narrow(1, 1, kept),
        );
        select_mix(left_of_merge, new_at(0), shifted.clone(), shifted)
    }

    /// The next layer's candidate parents and scores from this layer's (`Carry::Values`, see
    /// `run`): `2·batch` compositions for the two new pairs, the rest placed.
    ///
    /// # Shapes
    /// - `parent`: `[batch, K, D]` this layer's candidates, `logits`: `[batch, K]` their scores
    /// - `s`: `[batch, K]` the one-hot selection (zero rows for complete examples)
    /// - `index`: `[batch]` the selected pair
    /// - `next`: `[batch, K, D]` the next layer's nodes
    /// - output: `[batch, K − 1, D]` candidates and `[batch, K − 1]` scores
    fn carry_values(
        &self,
        parent: &LstmState<B, 3>,
        logits: Tensor<B, 2>,
        s: &Tensor<B, 2>,
        index: Tensor<B, 1, Int>,
        next: &LstmState<B, 3>,
        query: &Tensor<B, 3>,
    ) -> (LstmState<B, 3>, Tensor<B, 2>) {
        let [batch, k, _] = parent.h.dims();
        let rows = Self::merge_neighbour_rows(index, k);
        let (h, c) = (
            Self::gather_neighbours(&next.h, &rows),
            Self::gather_neighbours(&next.c, &rows),
        );
        // Pair i − 1 is (node i − 1, node i), pair i is (node i, node i + 1).
        let fresh = self.composition.forward(
            LstmState::new(h.clone().narrow(0, 0, 2), c.clone().narrow(0, 0, 2)),
            LstmState::new(h.narrow(0, 1, 2), c.narrow(0, 1, 2)),
            None,
        );
        let fresh_logits = self
            .scores_with(fresh.h.clone(), query)
            .reshape([2, batch, 1]);
        let candidates = LstmState::new(
            Self::place(parent.h.clone(), fresh.h, s),
            Self::place(parent.c.clone(), fresh.c, s),
        );
        let logits =
            Self::place(logits.reshape([batch, k, 1]), fresh_logits, s).reshape([batch, k - 1]);
        (candidates, logits)
    }

    /// The next layer's gate pre-activations from this layer's (`Carry::Gates`, see `run`):
    /// the products of the two new pairs (`2·batch` rows), the rest placed; all constants for
    /// autodiff.
    ///
    /// # Shapes
    /// - `gates`: `[batch, K, 5D]` this layer's; `s`, `index` as in `carry_values`
    /// - `next_h`: `[batch, K, D]` the next layer's `h`
    /// - output: `[batch, K − 1, 5D]`
    fn carry_gates(
        &self,
        gates: Tensor<B, 3>,
        s: &Tensor<B, 2>,
        index: Tensor<B, 1, Int>,
        next_h: &Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let rows = Self::merge_neighbour_rows(index, next_h.dims()[1]);
        let h = Self::gather_neighbours(next_h, &rows);
        // `gates_of` reads its inputs and weights as constants.
        let fresh = self
            .composition
            .gates_of(h.clone().narrow(0, 0, 2), h.narrow(0, 1, 2));
        Self::place(gates.detach(), fresh, &s.clone().detach())
    }

    /// The bottom-up layers.
    ///
    /// `carry` says how layer `t + 1` gets its candidate parents (the authors' code recomposes
    /// every pair at every layer, [`CandidateSchedule::Recompose`]). A candidate is a function
    /// of its two nodes, and the nodes away from the merge are copied unchanged (the
    /// selection's forward value is one-hot), so layer `t + 1`'s candidates are layer `t`'s,
    /// shifted past the merge, plus the two new pairs around the merged node:
    /// - `Carry::Values` (argmax decisions, whose selection has no gradient path): the
    ///   candidates' `h`, `c` and scores are carried; 2 compositions per layer instead of
    ///   `m − 1`, `O(n)` instead of `O(n²)` per sentence, and the gradients are the same,
    ///   because a constant one-hot selection copies them as the identity;
    /// - `Carry::Gates` (sampled decisions): the straight-through selection sends gradient
    ///   into every next-layer node, so each layer's backward pass must still run through
    ///   every candidate. The gate pre-activations `[h_k; h_{k+1}]·W + b` are carried (and the
    ///   two new pairs' computed) instead of the product, and the product's autodiff node is
    ///   recorded with them ([`BinaryTreeLstm::forward_adjacent_with_gates`]): the forward products
    ///   are skipped, the gradients are those of recomposition.
    fn run(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        carry: Carry,
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
        let leaves = self.leaf.forward(x, lengths);
        let mut layer = leaves.clone();
        let mut selected = Vec::with_capacity(n.saturating_sub(1));
        let mut probabilities = Vec::with_capacity(n.saturating_sub(1));
        // Intra-attention's nodes: the leaves, then each layer's selected parent.
        let attend = self.settings.intra_attention;
        let mut nodes = Vec::new();
        if attend {
            nodes.push(leaves.h.clone());
        }
        // What layer t has from layer t − 1 (`None`: every pair is composed).
        let mut carried: Option<Carried<B>> = None;
        let query = self.query_row();
        for t in 0..n.saturating_sub(1) {
            let m = n - t;
            // Layer t: example b has lengths[b] − t real nodes while it is incomplete.
            let valid = host_mask::<B>(batch, m - 1, |b, k| k + t + 1 < lengths[b], &device);
            let done = host_mask::<B>(batch, 1, |b, _| lengths[b] < t + 2, &device);
            let compose = |known: Option<Tensor<B, 3>>| {
                let (parent, gates) = self.composition.forward_adjacent_with_gates(&layer, known);
                let logits = self.scores_with(parent.h.clone(), &query);
                (parent, logits, Some(gates))
            };
            let (parent, logits, gates) = match carried.take() {
                Some(Carried::Values(parent, logits)) => (parent, logits, None),
                Some(Carried::Gates(known)) => compose(Some(known)),
                None => compose(None),
            };
            let left = LstmState::new(
                layer.h.clone().narrow(1, 0, m - 1),
                layer.c.clone().narrow(1, 0, m - 1),
            );
            let right = LstmState::new(layer.h.narrow(1, 1, m - 1), layer.c.narrow(1, 1, m - 1));
            let sel = select(t, logits.clone(), valid);
            // A complete example keeps its nodes and drops its last (padding) column: with no
            // selection (s = 0, so cum = 0) the mix below is exactly `left`.
            let s = sel.hard.mask_fill(done.expand([batch, m - 1]), 0.0);
            // Eq. 7, fused: s·h̃ + (1 − cum)·h_left + (cum − s)·h_right with cum = cumsum(s).
            layer = LstmState::new(
                select_mix(s.clone(), parent.h.clone(), left.h, right.h),
                select_mix(s.clone(), parent.c.clone(), left.c, right.c),
            );
            if m > 2 {
                carried = match (carry, gates) {
                    (Carry::Values, _) => {
                        let (parent, logits) = self.carry_values(
                            &parent,
                            logits,
                            &s,
                            sel.index.clone(),
                            &layer,
                            &query,
                        );
                        Some(Carried::Values(parent, logits))
                    }
                    (Carry::Gates, Some(g)) => Some(Carried::Gates(self.carry_gates(
                        g,
                        &s,
                        sel.index.clone(),
                        &layer.h,
                    ))),
                    // (`Gates` with no gates cannot occur: a `Gates` layer always composes.)
                    (Carry::Gates, None) | (Carry::Nothing, _) => None,
                };
            }
            if attend {
                // The selected parent, read from the new layer as the release does:
                // Σ_k s_k·h'_k (zero for a complete example, whose s is 0).
                let chosen = s.unsqueeze_dim::<3>(2).mul(layer.h.clone()).sum_dim(1);
                nodes.push(chosen);
            }
            selected.push(sel.index);
            probabilities.push(sel.soft);
        }
        let root = LstmState::new(layer.h.reshape([batch, d]), layer.c.reshape([batch, d]));
        let (sentence, attention) = if attend {
            let (sentence, weights) = intra_attention(Tensor::cat(nodes, 1), lengths);
            (sentence, Some(weights))
        } else {
            (root.h.clone(), None)
        };
        GumbelTreeOutput {
            root,
            sentence,
            attention,
            leaves,
            selected,
            probabilities,
            lengths: lengths.to_vec(),
        }
    }
}

/// What one layer of `GumbelTreeLstm::run` got from the layer before it.
enum Carried<B: Backend> {
    /// The candidate parents and their scores (`Carry::Values`).
    Values(LstmState<B, 3>, Tensor<B, 2>),
    /// The candidates' gate pre-activations (`Carry::Gates`).
    Gates(Tensor<B, 3>),
}

/// What `GumbelTreeLstm::run` carries from one layer to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carry {
    /// Nothing: every pair is recomposed at every layer.
    Nothing,
    /// The candidates' `h`, `c` and scores (argmax decisions only).
    Values,
    /// The candidates' gate pre-activations (any decisions; the gradients of recomposition).
    Gates,
}

/// How each layer of a [`GumbelTreeLstm`] gets its candidate parents.
///
/// Every schedule gives the same values and gradients, to rounding; they differ in time and
/// memory. Measured on the 2-core AMD EPYC VM (docs/bench.md, "Issue 33, round 1": carried
/// gate pre-activations), carrying the gates in training against recomposing: d300 training
/// 1.19× faster (two rounds), d100 and the length sweep level (0.95–1.05×), the same peak
/// memory (+2–4 MiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CandidateSchedule {
    /// Only the two pairs around the last merge are composed; every other candidate is carried
    /// from the previous layer. Evaluation (argmax) carries the candidates themselves: `O(n)`
    /// compositions per sentence. Training carries their gate pre-activations, so the forward
    /// products are `O(n)` and the backward pass, which must reach every candidate, is the same
    /// as recomposition's. The default.
    #[default]
    Carry,
    /// Argmax decisions carry the candidates themselves; sampled decisions recompose every
    /// pair (the default before training carried its gates).
    CarryInEvaluation,
    /// Every adjacent pair composed at every layer, as the authors' code does: the reference
    /// path, `O(n²)` compositions per sentence.
    Recompose,
}

impl CandidateSchedule {
    fn carry(self, argmax: bool) -> Carry {
        match (self, argmax) {
            (CandidateSchedule::Recompose, _) | (CandidateSchedule::CarryInEvaluation, false) => {
                Carry::Nothing
            }
            (CandidateSchedule::Carry | CandidateSchedule::CarryInEvaluation, true) => {
                Carry::Values
            }
            (CandidateSchedule::Carry, false) => Carry::Gates,
        }
    }
}

/// Intra-attention over the tree's nodes (the release's `intra_attention`, with an exact
/// padding mask): with `M` the mask of real nodes and `n̄` the mean of the real nodes,
/// `a = softmax_j(n_j · n̄)` over the real nodes and the result is `Σ_j a_j n_j`.
///
/// # Shapes
/// - `nodes`: `[batch, 2n − 1, D]`: the `n` leaves, then the parent selected at each of the
///   `n − 1` layers (`n = max(lengths)`)
/// - output: the mix `[batch, D]` and the weights `[batch, 2n − 1]` (0 on padding nodes)
fn intra_attention<B: ArborBackend>(
    nodes: Tensor<B, 3>,
    lengths: &[usize],
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let [batch, k, d] = nodes.dims();
    let device = nodes.device();
    let n = k.div_ceil(2);
    // Leaf j is real iff j < len; layer t's parent is real iff t < len − 1.
    let real = host_mask::<B>(
        batch,
        k,
        |b, j| {
            if j < n {
                j < lengths[b]
            } else {
                j - n + 1 < lengths[b]
            }
        },
        &device,
    );
    let counts: Vec<f32> = lengths
        .iter()
        .map(|&len| 1.0 / (2 * len.max(1) - 1) as f32)
        .collect();
    let inv_count = Tensor::<B, 1>::from_floats(counts.as_slice(), &device).reshape([batch, 1, 1]);
    let nodes = nodes.mul(real.clone().float().unsqueeze_dim::<3>(2));
    let mean = nodes.clone().sum_dim(1).mul(inv_count);
    let scores = nodes.clone().mul(mean).sum_dim(2).reshape([batch, k]);
    let weights = arbor_cells::masked_softmax(scores, Some(real));
    let mix = nodes
        .mul(weights.clone().unsqueeze_dim::<3>(2))
        .sum_dim(1)
        .reshape([batch, d]);
    (mix, weights)
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

    /// Encodes a batch: `sentence` is the root `h` (with intra-attention, the attention mix of
    /// the tree's nodes), `tokens` the leaf `h` (zeros at padding), `trees` the induced trees
    /// in evaluation mode ([`Decisions::Argmax`]).
    ///
    /// In training mode ([`Decisions::Sample`]) `trees` is `None`: building them reads the
    /// selections back to the host, and a training step reads nothing (docs/training.md,
    /// "Reads from the device"). The sampled trees stay available from
    /// [`GumbelTreeLstm::forward`] ([`GumbelTreeOutput::trees`]).
    ///
    /// # Shapes
    /// - `input.embeddings`: `[batch, time, d_input]`
    /// - output `sentence`: `[batch, D]`; `tokens`: `[batch, time, D]`
    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        let [batch, time, _] = input.embeddings.dims();
        let device = input.embeddings.device();
        let evaluating = decisions.is_argmax();
        let out = self.forward(input.embeddings, &input.lengths, decisions);
        let trees = evaluating.then(|| out.trees());
        let d = self.d_hidden;
        let n = out.leaves.h.dims()[1];
        let mut tokens = out.leaves.h;
        if n < time {
            tokens = Tensor::cat(
                vec![
                    tokens,
                    arbor_cells::kernels::zeros([batch, time - n, d], &device),
                ],
                1,
            );
        }
        let lengths = &input.lengths;
        let pad = host_mask::<B>(batch, time, |b, t| t >= lengths[b], &device);
        let tokens = tokens.mask_fill(pad.unsqueeze_dim::<3>(2).expand([batch, time, d]), 0.0);
        EncoderOutput {
            sentence: out.sentence,
            tokens: Some(tokens),
            trees,
            aux_loss: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex, NdArray};
    use burn::module::Param;
    use burn::tensor::Distribution;

    /// Every float parameter's gradient in `grads`, flattened, in the module's visiting order
    /// (`None` for a parameter without one).
    fn parameter_grads<B: burn::tensor::backend::AutodiffBackend>(
        m: &GumbelTreeLstm<B>,
        grads: &B::Gradients,
    ) -> Vec<(usize, Option<Vec<f64>>)> {
        use burn::module::ModuleVisitor;
        struct Collect<'a, B: burn::tensor::backend::AutodiffBackend> {
            grads: &'a B::Gradients,
            out: Vec<(usize, Option<Vec<f64>>)>,
        }
        impl<B: burn::tensor::backend::AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let g = param
                    .grad(self.grads)
                    .map(|g| g.into_data().convert::<f64>().to_vec().unwrap());
                self.out.push((param.val().shape().num_elements(), g));
            }
        }
        let mut c = Collect::<B> {
            grads,
            out: Vec::new(),
        };
        m.visit(&mut c);
        c.out
    }

    /// Carried candidates (the default schedule) equal the authors' schedule (every pair
    /// recomposed at every layer) in the trees, the selection probabilities, the root, the
    /// intra-attention mix, and the gradients of every parameter and of the embeddings: with
    /// argmax decisions (carried `h`, `c` and scores) and with straight-through Gumbel
    /// decisions from the same noise (carried gate pre-activations).
    fn carried_candidates_match_recomposition<
        B: burn::tensor::backend::AutodiffBackend + ArborBackend,
    >(
        tol: f64,
    ) {
        let device = Default::default();
        // Lengths 1 to 9 in one batch (1-3-token sentences included), so that examples
        // complete at different layers and merges happen at both edges and inside.
        let lengths = [9, 1, 2, 7, 3, 9, 5, 8, 4, 6];
        let n = 9;
        for sampled in [false, true] {
            for (seed, leaf, attend) in [
                (1, LeafKind::Affine, false),
                (2, LeafKind::Lstm, true),
                (3, LeafKind::Affine, true),
                (4, LeafKind::BiLstm, false),
                (5, LeafKind::Lstm, false),
            ] {
                let what = format!("seed {seed}, sampled {sampled}");
                B::seed(&device, seed);
                let mut m = GumbelTreeLstmConfig::new(4, 6)
                    .with_leaf(leaf)
                    .with_intra_attention(Some(attend))
                    .init::<B>(&device);
                // Unit-scale query entries, so that the scores decide among many candidates.
                m.query = Param::from_tensor(Tensor::random(
                    [6],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                ));
                let x =
                    Tensor::<B, 3>::random([lengths.len(), 10, 4], Distribution::Default, &device)
                        .require_grad();
                let noise: Vec<Tensor<B, 2>> = (0..n - 1)
                    .map(|t| {
                        Tensor::random(
                            [lengths.len(), n - 1 - t],
                            Distribution::Normal(0.0, 1.0),
                            &device,
                        )
                    })
                    .collect();
                let run = |schedule: CandidateSchedule| {
                    if sampled {
                        m.forward_with_noise_scheduled(x.clone(), &lengths, &noise, schedule)
                    } else {
                        m.forward_scheduled(x.clone(), &lengths, Decisions::Argmax, schedule)
                    }
                };
                let (a, b) = (
                    run(CandidateSchedule::Carry),
                    run(CandidateSchedule::Recompose),
                );
                // The default carries at evaluation only: the same as one of the two.
                let c = run(CandidateSchedule::default());
                assert_eq!(
                    c.layer_indices(),
                    b.layer_indices(),
                    "{what}: default's trees"
                );
                assert_eq!(a.layer_indices(), b.layer_indices(), "{what}: trees");
                assert!(
                    a.layer_indices().iter().flatten().any(|&k| k > 0),
                    "{what}: some merge away from the left edge"
                );
                let close = |p: Vec<f64>, q: Vec<f64>, part: &str| {
                    assert_eq!(p.len(), q.len(), "{what}: {part}");
                    for (i, (u, v)) in p.iter().zip(&q).enumerate() {
                        assert!((u - v).abs() <= tol, "{what}: {part}[{i}]: {u} vs {v}");
                    }
                };
                let flat = |t: Tensor<B::InnerBackend, 2>| -> Vec<f64> {
                    t.into_data().convert::<f64>().to_vec().unwrap()
                };
                for (pa, pb) in a.probabilities.iter().zip(&b.probabilities) {
                    close(
                        flat(pa.clone().inner()),
                        flat(pb.clone().inner()),
                        "probabilities",
                    );
                }
                close(
                    flat(a.root.c.clone().inner()),
                    flat(b.root.c.clone().inner()),
                    "root c",
                );
                close(
                    flat(a.sentence.clone().inner()),
                    flat(b.sentence.clone().inner()),
                    "sentence",
                );
                // Gradients of a loss that reads every root unit with its own weight.
                let w = Tensor::<B, 2>::random([lengths.len(), 6], Distribution::Default, &device);
                let loss = |o: &GumbelTreeOutput<B>| {
                    o.sentence.clone().mul(w.clone()).sum() + o.root.c.clone().mul(w.clone()).sum()
                };
                let (ga, gb) = (loss(&a).backward(), loss(&b).backward());
                let dx = |g: &B::Gradients| {
                    x.grad(g)
                        .unwrap()
                        .into_data()
                        .convert::<f64>()
                        .to_vec()
                        .unwrap()
                };
                close(dx(&ga), dx(&gb), "d embeddings");
                let (pa, pb) = (parameter_grads(&m, &ga), parameter_grads(&m, &gb));
                assert_eq!(pa.len(), pb.len());
                for (k, ((size, p), (_, q))) in pa.into_iter().zip(pb).enumerate() {
                    match (p, q) {
                        (Some(p), Some(q)) => close(p, q, &format!("d parameter {k} ({size})")),
                        (p, q) => {
                            assert_eq!(p.is_some(), q.is_some(), "{what}: d parameter {k} ({size})")
                        }
                    }
                }
                // The composition weight and, when sampled, the query do get gradients.
                assert!(m.composition.children.weight.grad(&ga).is_some(), "{what}");
                if sampled {
                    assert!(m.query.grad(&ga).is_some(), "{what}: d query");
                }
            }
        }
    }

    #[test]
    fn carried_candidates_match_recomposition_flex_f32() {
        carried_candidates_match_recomposition::<Autodiff<Flex>>(2e-5);
    }

    #[test]
    fn carried_candidates_match_recomposition_ndarray_f64() {
        carried_candidates_match_recomposition::<Autodiff<NdArray<f64>>>(1e-12);
    }
}
