//! R2D2 (Hu et al. 2021; docs/models.md §4): a differentiable CKY chart whose cells are composed by
//! a small recursive Transformer, pruned so that the number of compositions grows linearly
//! with sentence length, trained as a bidirectional language model.
//!
//! - [`Composition`]: `f(left, right)` over `[CLS, SUM, left, right]` ([`RoleTransformerLayer`]).
//! - [`Chart`]: eq. 1–5 with pruned tree induction (Algorithms 1–2), batched by structure,
//!   with any [`Compose`] implementation (the tests use a stub with chosen scores).
//! - [`R2d2`]: the sentence encoder; [`R2d2Lm`]: the LM head, its loss and pseudo-perplexity.
//! - [`word_tree`]: word-level trees from word-piece trees.

mod chart;
mod composition;
mod encoder;
mod layer;
mod lm;

pub use chart::{Chart, ChartConfig, ChartStats, TreeRule};
pub use composition::{
    layer_norm_noaffine, Compose, Composed, Composition, CompositionConfig, RoleEmbeddings,
    WithTaskTokens,
};
pub use encoder::{R2d2, R2d2Config};
pub use layer::{RoleTransformerLayer, RoleTransformerLayerConfig};
pub use lm::{LmLoss, R2d2Lm, R2d2LmConfig, R2d2SpecialIds};

use arbor_data::tree::BinaryTree;

/// Collapses a word-piece tree into a word tree: every maximal subtree whose pieces all belong
/// to one word becomes that word's leaf. `word_of[p]` is the word index of piece `p` (leaves
/// numbered `0..n`). Returns `None` when some word's pieces do not form one subtree.
pub fn word_tree(tree: &BinaryTree, word_of: &[usize]) -> Option<BinaryTree> {
    fn go(t: &BinaryTree, start: usize, word_of: &[usize]) -> Option<(BinaryTree, usize)> {
        let n = t.num_leaves();
        let end = start + n;
        let words = word_of.get(start..end)?;
        if words.iter().all(|&w| w == words[0]) {
            // Whole word only if no piece of it lies outside this subtree.
            let whole = (start == 0 || word_of[start - 1] != words[0])
                && word_of.get(end).is_none_or(|&w| w != words[0]);
            return whole.then_some((BinaryTree::Leaf(words[0]), end));
        }
        match t {
            BinaryTree::Leaf(_) => None,
            BinaryTree::Node(l, r) => {
                let (lt, mid) = go(l, start, word_of)?;
                let (rt, end) = go(r, mid, word_of)?;
                Some((BinaryTree::node(lt, rt), end))
            }
        }
    }
    go(tree, 0, word_of).map(|(t, _)| t.renumbered())
}
