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
        // The words and each sentence's leaves are read as thin stacks of written rows
        // (`ThinStack::from_rows`): in training each then gets one gradient buffer for all of
        // its reads. A `narrow` per read gives every read a zero gradient of the whole source,
        // which is quadratic in the batch (the words) and in the sentence (the leaves): 38% of
        // this path's training profile on the Zen 1 VM.
        let flat =
            arbor_cells::kernels::ThinStack::from_rows(embeddings.reshape([batch * time, d_in]));
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
            let words = flat.read(&(b * time..b * time + len).collect::<Vec<_>>());
            let leaves = arbor_cells::kernels::ThinStack::from_rows(self.projection.forward(words));
            let root = self.node(tree, &leaves);
            hs.push(root.h);
            cs.push(root.c);
        }
        Ok(LstmState::new(Tensor::cat(hs, 0), Tensor::cat(cs, 0)))
    }

    /// The `(h, c)` of `tree`'s root, `[1, D]`, from the leaf states `[len, 2D]`.
    fn node(
        &self,
        tree: &BinaryTree,
        leaves: &arbor_cells::kernels::ThinStack<B>,
    ) -> LstmState<B, 2> {
        match tree {
            BinaryTree::Leaf(i) => LstmState::split(leaves.read(&[*i])),
            BinaryTree::Node(l, r) => {
                let left = self.node(l, leaves);
                let right = self.node(r, leaves);
                self.composition.forward(left, right, None)
            }
        }
    }
}
