//! Each layer's selection of a candidate parent, and what a forward pass returns: the
//! selections, their probabilities, and the trees read from them.

use arbor_cells::ArborBackend;
use arbor_cells::{st_gumbel_softmax, GumbelSampler, LstmState, Selection};
use arbor_data::tree::BinaryTree;
use burn::prelude::*;
use burn::tensor::TensorData;

/// What [`GumbelTreeLstm::forward`](super::GumbelTreeLstm::forward) computes.
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
pub(super) fn host_mask<B: ArborBackend>(
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

/// A training-mode selection: straight-through Gumbel-softmax over `logits` (valid where
/// `mask`) with noise from `sampler`, at the sampler's temperature or else `tau`.
pub(super) fn sample<B: ArborBackend>(
    sampler: &mut GumbelSampler,
    logits: Tensor<B, 2>,
    mask: Tensor<B, 2, Bool>,
    tau: f64,
) -> Selection<B> {
    let noise = sampler.sample::<B, 2>(logits.dims(), &logits.device());
    let tau = sampler.temperature_or(tau);
    st_gumbel_softmax(logits, Some(mask), tau, Some(noise))
}
