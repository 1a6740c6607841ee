//! A straightforward per-sentence recursive Tree-LSTM over SPINN's weights: the reference that
//! SPINN-PI-NT must equal, and the "recursive" baseline of the speed comparison. Not for real
//! code paths: it makes one composition call per tree node.

use arbor_cells::ArborBackend;
use arbor_cells::LstmState;
use arbor_data::tree::BinaryTree;
use burn::prelude::*;

use super::{Spinn, SpinnError};

impl<B: ArborBackend> Spinn<B> {
    /// Encodes each sentence alone by recursion over its tree, with this encoder's projection
    /// and composition (no tracking: the composition's external input is absent, i.e. zero).
    ///
    /// This is what SPINN-PI-NT computes with the same trees, one node at a time: a *reference
    /// and baseline* for tests and benchmarks (per-node recursion, never batched). A tree's
    /// leaves must be numbered `0..len` left to right, as [`BinaryTree::from_transitions`] and
    /// [`BinaryTree::random`] number them.
    ///
    /// # Shapes
    /// - `embeddings`: `[batch, time, d_input]`, padded at the end of each sentence
    /// - output `h`, `c`: `[batch, D]`
    ///
    /// # Errors
    /// [`SpinnError`] if the numbers of lengths and trees differ, a length is out of range, or
    /// a tree's leaves are not `0..len`.
    pub fn encode_recursive(
        &self,
        embeddings: Tensor<B, 3>,
        lengths: &[usize],
        trees: &[BinaryTree],
    ) -> Result<LstmState<B, 2>, SpinnError> {
        let [batch, time, d_in] = embeddings.dims();
        if lengths.len() != trees.len() || lengths.len() != batch {
            return Err(SpinnError::Count {
                sentences: batch,
                sequences: trees.len(),
            });
        }
        let flat = embeddings.reshape([batch * time, d_in]);
        let mut hs = Vec::with_capacity(batch);
        let mut cs = Vec::with_capacity(batch);
        for (b, (&len, tree)) in lengths.iter().zip(trees).enumerate() {
            if len == 0 || len > time {
                return Err(SpinnError::Length {
                    sentence: b,
                    length: len,
                    time,
                });
            }
            if tree.leaves() != (0..len).collect::<Vec<_>>() {
                return Err(SpinnError::Tree {
                    sentence: b,
                    message: format!(
                        "the tree's leaves are {:?}, expected 0..{len} in order",
                        tree.leaves()
                    ),
                });
            }
            // arbor's `narrow`, not Burn's: Burn's slice backward (0.21, flex) fills a zero
            // tensor of the whole batch's shape and copies it twice, per sentence.
            let words = arbor_cells::kernels::narrow(flat.clone(), 0, b * time, len);
            let leaves = self.projection.forward(words);
            let root = self.node(tree, &leaves);
            hs.push(root.h);
            cs.push(root.c);
        }
        Ok(LstmState::new(Tensor::cat(hs, 0), Tensor::cat(cs, 0)))
    }

    /// The `(h, c)` of `tree`'s root, `[1, D]`, from the leaf states `[len, 2D]`.
    fn node(&self, tree: &BinaryTree, leaves: &Tensor<B, 2>) -> LstmState<B, 2> {
        match tree {
            BinaryTree::Leaf(i) => {
                LstmState::split(arbor_cells::kernels::narrow(leaves.clone(), 0, *i, 1))
            }
            BinaryTree::Node(l, r) => {
                let left = self.node(l, leaves);
                let right = self.node(r, leaves);
                self.composition.forward(left, right, None)
            }
        }
    }
}
