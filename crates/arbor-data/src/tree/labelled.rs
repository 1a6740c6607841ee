//! Labelled n-ary (treebank) trees: construction, accessors, spans and conversion to binary
//! trees and transitions.

use std::collections::BTreeSet;

use super::binary::combine;
use super::{Binarization, BinaryTree, Span, Transition};
use crate::error::TreeError;

/// A general (n-ary, labelled) tree, as in treebanks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tree {
    /// A word with its part-of-speech tag (or SST sentiment label) when the input had one.
    Leaf {
        /// The word.
        word: String,
        /// The preterminal label, e.g. `DT` in `(DT the)`.
        tag: Option<String>,
    },
    /// A constituent.
    Node {
        /// Its label (empty for unlabelled brackets).
        label: String,
        /// Its children, left to right (at least one).
        children: Vec<Tree>,
    },
}

impl Tree {
    /// A leaf without tag.
    pub fn leaf(word: impl Into<String>) -> Self {
        Tree::Leaf {
            word: word.into(),
            tag: None,
        }
    }

    /// A leaf with a tag.
    pub fn tagged(tag: impl Into<String>, word: impl Into<String>) -> Self {
        Tree::Leaf {
            word: word.into(),
            tag: Some(tag.into()),
        }
    }

    /// An internal node.
    pub fn node(label: impl Into<String>, children: Vec<Tree>) -> Self {
        Tree::Node {
            label: label.into(),
            children,
        }
    }

    /// Whether this is a leaf.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Tree::Leaf { .. })
    }

    /// The node label, or the tag of a leaf (empty when there is none).
    pub fn label(&self) -> &str {
        match self {
            Tree::Leaf { tag, .. } => tag.as_deref().unwrap_or(""),
            Tree::Node { label, .. } => label,
        }
    }

    /// Children (empty for a leaf).
    pub fn children(&self) -> &[Tree] {
        match self {
            Tree::Leaf { .. } => &[],
            Tree::Node { children, .. } => children,
        }
    }

    /// The words, left to right.
    pub fn words(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |w, _| out.push(w));
        out
    }

    /// The leaf tags, left to right (`None` for untagged leaves).
    pub fn tags(&self) -> Vec<Option<&str>> {
        let mut out = Vec::new();
        self.visit_leaves(&mut |_, t| out.push(t));
        out
    }

    fn visit_leaves<'a>(&'a self, f: &mut dyn FnMut(&'a str, Option<&'a str>)) {
        match self {
            Tree::Leaf { word, tag } => f(word, tag.as_deref()),
            Tree::Node { children, .. } => children.iter().for_each(|c| c.visit_leaves(f)),
        }
    }

    /// Number of words.
    pub fn num_leaves(&self) -> usize {
        match self {
            Tree::Leaf { .. } => 1,
            Tree::Node { children, .. } => children.iter().map(Tree::num_leaves).sum(),
        }
    }

    /// Whether every node has exactly two children.
    pub fn is_binary(&self) -> bool {
        match self {
            Tree::Leaf { .. } => true,
            Tree::Node { children, .. } => {
                children.len() == 2 && children.iter().all(Tree::is_binary)
            }
        }
    }

    /// Labelled spans `(label, span)` of every internal node, in post-order (the root last).
    /// Unary chains give repeated spans; see [`Tree::spans`] for the deduplicated set.
    pub fn labelled_spans(&self) -> Vec<(String, Span)> {
        fn go(t: &Tree, start: usize, out: &mut Vec<(String, Span)>) -> usize {
            match t {
                Tree::Leaf { .. } => start + 1,
                Tree::Node { label, children } => {
                    let mut pos = start;
                    for c in children {
                        pos = go(c, pos, out);
                    }
                    out.push((label.clone(), Span::new(start, pos)));
                    pos
                }
            }
        }
        let mut out = Vec::new();
        go(self, 0, &mut out);
        out
    }

    /// The sorted, deduplicated unlabelled spans of all internal nodes (including
    /// length-1 spans of unary nodes over one word, and the whole sentence).
    pub fn spans(&self) -> Vec<Span> {
        let set: BTreeSet<Span> = self.labelled_spans().into_iter().map(|(_, s)| s).collect();
        set.into_iter().collect()
    }

    /// The binary tree, binarising n-ary nodes with `bin` (unary nodes are skipped).
    pub fn to_binary(&self, bin: Binarization) -> BinaryTree {
        fn go(t: &Tree, pos: &mut usize, bin: Binarization) -> BinaryTree {
            match t {
                Tree::Leaf { .. } => {
                    *pos += 1;
                    BinaryTree::Leaf(*pos - 1)
                }
                Tree::Node { children, .. } => {
                    let kids: Vec<BinaryTree> = children.iter().map(|c| go(c, pos, bin)).collect();
                    combine(kids, bin)
                }
            }
        }
        go(self, &mut 0, bin)
    }

    /// The binary tree, failing on any node with more than two children (unary nodes are
    /// skipped, as in `(NP (NN x))`).
    pub fn to_binary_strict(&self) -> Result<BinaryTree, TreeError> {
        fn check(t: &Tree) -> Result<(), TreeError> {
            match t {
                Tree::Leaf { .. } => Ok(()),
                Tree::Node { children, .. } if children.len() > 2 => {
                    Err(TreeError::NotBinary(children.len()))
                }
                Tree::Node { children, .. } => children.iter().try_for_each(check),
            }
        }
        check(self)?;
        Ok(self.to_binary(Binarization::Right))
    }

    /// SHIFT/REDUCE transitions of a binary tree (unaries skipped); error if a node has more
    /// than two children.
    pub fn to_transitions(&self) -> Result<Vec<Transition>, TreeError> {
        Ok(self.to_binary_strict()?.to_transitions())
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::*;

    #[test]
    fn sst_tree() {
        let t = Tree::parse("(3 (2 It) (4 (2 's) (3 good)))").unwrap();
        assert_eq!(t.label(), "3");
        assert_eq!(t.words(), ["It", "'s", "good"]);
        assert_eq!(t.tags(), [Some("2"), Some("2"), Some("3")]);
        assert_eq!(
            transitions_to_string(&t.to_transitions().unwrap()),
            "S S S R R"
        );
    }
}
