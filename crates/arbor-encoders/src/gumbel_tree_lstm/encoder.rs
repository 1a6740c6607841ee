//! The Gumbel Tree-LSTM encoder: the bottom-up layers, the validity scores, intra-attention,
//! and the [`SentenceEncoder`] interface.

use arbor_cells::kernels::select_mix_adjacent;
use arbor_cells::ArborBackend;
use arbor_cells::{argmax_select, st_gumbel_softmax, BinaryTreeLstm, LstmState, Selection};
use burn::module::Param;
use burn::prelude::*;

use super::carry::{Carried, Carry};
use super::selection::{host_mask, sample};
use super::{CandidateSchedule, GumbelSettings, GumbelTreeOutput, Leaf};
use crate::{Decisions, EncoderInput, EncoderOutput, SentenceEncoder};

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
            Decisions::Sample(sampler) => {
                let carry = schedule.carry(false);
                if carry == Carry::FusedGates {
                    // The fused pass takes every layer's noise at once: drawn here, layer by
                    // layer, as the layers below would draw it, so either path sees the same.
                    let [batch, time, _] = embeddings.dims();
                    let n = lengths.iter().copied().max().unwrap_or(1).min(time);
                    let device = embeddings.device();
                    let noise: Vec<Tensor<B, 2>> = (0..n.saturating_sub(1))
                        .map(|t| sampler.sample::<B, 2>([batch, n - 1 - t], &device))
                        .collect();
                    let tau = sampler.temperature_or(tau);
                    return self.run_with_noise(embeddings, lengths, &noise, tau, carry);
                }
                self.run(embeddings, lengths, carry, |_, logits, mask| {
                    sample(sampler, logits, mask, tau)
                })
            }
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
        self.run_with_noise(embeddings, lengths, noise, tau, schedule.carry(false))
    }

    /// The training-mode layers with given noise (layer `t`'s `[batch, n − 1 − t]`) at
    /// temperature `tau`: the backend's fused pass where `carry` asks for it and the backend
    /// has one, the layers as tensor ops otherwise.
    fn run_with_noise(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        noise: &[Tensor<B, 2>],
        tau: f64,
        carry: Carry,
    ) -> GumbelTreeOutput<B> {
        let carry = match carry {
            Carry::FusedGates => {
                if let Some(out) = self.fused_training(embeddings.clone(), lengths, noise, tau) {
                    return out;
                }
                Carry::Gates
            }
            other => other,
        };
        self.run(embeddings, lengths, carry, |t, logits, mask| {
            let g = noise
                .get(t)
                .unwrap_or_else(|| panic!("no noise for layer {t}"))
                .clone();
            st_gumbel_softmax(logits, Some(mask), tau, Some(g))
        })
    }

    /// The whole training pass as the backend's fused op ([`BinaryTreeLstm::st_gumbel_tree`]),
    /// or `None` where it has none (the caller runs the layers as tensor ops; nothing has been
    /// computed that it would need).
    fn fused_training(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        noise: &[Tensor<B, 2>],
        tau: f64,
    ) -> Option<GumbelTreeOutput<B>> {
        let [batch, _, _] = embeddings.dims();
        let (x, n) = longest_prefix(embeddings, lengths);
        // (A temperature that is not positive, which a config refuses but a sampler could
        // carry, goes to the tensor layers, which give it the same non-finite values as
        // before instead of the op's panic.)
        if n < 2 || self.composition.external.is_some() || tau.is_nan() || tau <= 0.0 {
            return None;
        }
        assert!(
            noise.len() >= n - 1,
            "noise for {} layers needed, {} given",
            n - 1,
            noise.len()
        );
        let device = x.device();
        // Layer t's noise `[batch, n − 1 − t]` in row t of `[batch, n − 1, n − 1]`, constant.
        let rows: Vec<Tensor<B, 2>> = noise[..n - 1]
            .iter()
            .enumerate()
            .map(|(t, g)| {
                let g = g.clone().detach();
                if t == 0 {
                    g
                } else {
                    Tensor::cat(vec![g, arbor_cells::kernels::zeros([batch, t], &device)], 1)
                }
            })
            .collect();
        let noise = Tensor::stack::<3>(rows, 1);
        let leaves = self.leaf.forward(x, lengths);
        let tree =
            self.composition
                .st_gumbel_tree(&leaves, self.query.val(), noise, tau, lengths)?;
        Some(self.fused_output(tree, leaves, lengths))
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
    pub(super) fn scores_with(&self, h: Tensor<B, 3>, q: &Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, k, d] = h.dims();
        h.mul(q.clone())
            .sum_dim(2)
            .reshape([batch, k])
            .div_scalar((d as f64).sqrt())
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
    /// - `Carry::Fused` (argmax decisions): the whole pass as one op of the backend
    ///   ([`BinaryTreeLstm::argmax_tree`]: the same values with the nodes kept in place, so no
    ///   per-layer copy of the layer), where it has one (the CPU backends without autodiff);
    ///   `Carry::Values` elsewhere;
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
        let [batch, _, _] = embeddings.dims();
        let device = embeddings.device();
        let (x, n) = longest_prefix(embeddings, lengths);
        let d = self.d_hidden;
        let leaves = self.leaf.forward(x, lengths);
        if carry == Carry::Fused && n >= 2 {
            if let Some(tree) = self
                .composition
                .argmax_tree(&leaves, self.query.val(), lengths)
            {
                return self.fused_output(tree, leaves, lengths);
            }
        }
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
            let sel = select(t, logits.clone(), valid);
            // A complete example keeps its nodes and drops its last (padding) column: with no
            // selection (s = 0, so cum = 0) the mix below is exactly its first m − 1 nodes.
            let s = sel.hard.mask_fill(done.expand([batch, m - 1]), 0.0);
            // Eq. 7, fused: s·h̃ + (1 − cum)·h_left + (cum − s)·h_right with cum = cumsum(s),
            // left and right the layer's adjacent nodes (read from it in place).
            layer = LstmState::new(
                select_mix_adjacent(s.clone(), parent.h.clone(), layer.h),
                select_mix_adjacent(s.clone(), parent.c.clone(), layer.c),
            );
            if m > 2 {
                carried = match (carry, gates) {
                    (Carry::Values | Carry::Fused, _) => {
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
                    (Carry::Gates | Carry::FusedGates, Some(g)) => Some(Carried::Gates(
                        self.carry_gates(g, &s, sel.index.clone(), &layer.h),
                    )),
                    // (`Gates` with no gates cannot occur: a `Gates` layer always composes.)
                    // `run_with_noise` turns `FusedGates` into `Gates` before the layers run.
                    (Carry::Gates | Carry::FusedGates, None) | (Carry::Nothing, _) => None,
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
        let nodes = attend.then(|| Tensor::cat(nodes, 1));
        Self::output(root, nodes, leaves, selected, probabilities, lengths)
    }

    /// The pass's output from its root, its tree nodes for intra-attention (`None` without it:
    /// the sentence vector is the root `h`) and its per-layer selections.
    ///
    /// # Shapes
    /// - `nodes`: `[batch, 2n − 1, D]`: the leaves, then the parent selected at each layer
    fn output(
        root: LstmState<B, 2>,
        nodes: Option<Tensor<B, 3>>,
        leaves: LstmState<B, 3>,
        selected: Vec<Tensor<B, 1, Int>>,
        probabilities: Vec<Tensor<B, 2>>,
        lengths: &[usize],
    ) -> GumbelTreeOutput<B> {
        let (sentence, attention) = match nodes {
            Some(nodes) => {
                let (sentence, weights) = intra_attention(nodes, lengths);
                (sentence, Some(weights))
            }
            None => (root.h.clone(), None),
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

    /// The output of a fused pass ([`BinaryTreeLstm::argmax_tree`],
    /// [`BinaryTreeLstm::st_gumbel_tree`]) in the layout the layers' loop gives: per-layer
    /// selections and probabilities, intra-attention over the leaves and the chosen parents.
    fn fused_output(
        &self,
        tree: arbor_cells::kernels::TreePass<B>,
        leaves: LstmState<B, 3>,
        lengths: &[usize],
    ) -> GumbelTreeOutput<B> {
        let [batch, layers] = tree.selected.dims();
        let selected = (0..layers)
            .map(|t| tree.selected.clone().narrow(1, t, 1).reshape([batch]))
            .collect();
        let probabilities = (0..layers)
            .map(|t| {
                tree.probabilities
                    .clone()
                    .narrow(1, t, 1)
                    .reshape([batch, layers])
                    .narrow(1, 0, layers - t)
            })
            .collect();
        let root = LstmState::new(tree.root_h, tree.root_c);
        let nodes = self
            .settings
            .intra_attention
            .then(|| Tensor::cat(vec![leaves.h.clone(), tree.chosen], 1));
        Self::output(root, nodes, leaves, selected, probabilities, lengths)
    }
}

/// The embeddings narrowed to the longest sentence, and its length `n`.
///
/// # Panics
/// If `lengths` does not give one length in `1..=time` per example.
fn longest_prefix<B: Backend>(
    embeddings: Tensor<B, 3>,
    lengths: &[usize],
) -> (Tensor<B, 3>, usize) {
    let [batch, time, _] = embeddings.dims();
    assert_eq!(lengths.len(), batch, "one length per example");
    assert!(
        lengths.iter().all(|&l| (1..=time).contains(&l)),
        "every length must be in 1..={time}: {lengths:?}"
    );
    let n = lengths.iter().copied().max().unwrap_or(1);
    let x = if n < time {
        embeddings.narrow(1, 0, n)
    } else {
        embeddings
    };
    (x, n)
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
