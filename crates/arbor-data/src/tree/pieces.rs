//! Moving trees and spans from word level to word-piece level.

use super::{BinaryTree, Span, Tree};
use crate::error::TreeError;

/// How a word's pieces are bracketed inside the word when trees are moved to word-piece level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PieceBranching {
    /// `(p1 (p2 p3))`: the default.
    #[default]
    Right,
    /// `((p1 p2) p3)`.
    Left,
}

impl BinaryTree {
    /// Moves the tree to word-piece level: word `i` becomes `counts[i]` pieces that form one
    /// constituent, bracketed inside the word as `within` says. Leaves are renumbered over the
    /// pieces. Every count must be ≥ 1 and there must be one count per word.
    pub fn to_pieces(
        &self,
        counts: &[usize],
        within: PieceBranching,
    ) -> Result<BinaryTree, TreeError> {
        if counts.len() != self.num_leaves() {
            return Err(TreeError::Pieces(format!(
                "{} counts for {} words",
                counts.len(),
                self.num_leaves()
            )));
        }
        if let Some(i) = counts.iter().position(|&c| c == 0) {
            return Err(TreeError::Pieces(format!("word {i} has 0 pieces")));
        }
        fn word(start: usize, count: usize, within: PieceBranching) -> BinaryTree {
            let sub = match within {
                PieceBranching::Right => BinaryTree::right_branching(count),
                PieceBranching::Left => BinaryTree::left_branching(count),
            };
            shift_leaves(&sub.expect("count ≥ 1"), start)
        }
        fn go(
            t: &BinaryTree,
            w: &mut usize,
            p: &mut usize,
            counts: &[usize],
            within: PieceBranching,
        ) -> BinaryTree {
            match t {
                BinaryTree::Leaf(_) => {
                    let c = counts[*w];
                    let out = word(*p, c, within);
                    *w += 1;
                    *p += c;
                    out
                }
                BinaryTree::Node(l, r) => {
                    let l = go(l, w, p, counts, within);
                    BinaryTree::node(l, go(r, w, p, counts, within))
                }
            }
        }
        Ok(go(self, &mut 0, &mut 0, counts, within))
    }
}

fn shift_leaves(t: &BinaryTree, by: usize) -> BinaryTree {
    match t {
        BinaryTree::Leaf(i) => BinaryTree::Leaf(i + by),
        BinaryTree::Node(l, r) => BinaryTree::node(shift_leaves(l, by), shift_leaves(r, by)),
    }
}

impl Tree {
    /// Moves the tree to word-piece level: word `i` is replaced by a constituent over
    /// `pieces[i]` (a single piece stays a leaf, keeping the word's tag), bracketed inside the
    /// word as `within` says; inner nodes are labelled `@word` with the word's tag.
    pub fn to_pieces<S: AsRef<str>>(
        &self,
        pieces: &[Vec<S>],
        within: PieceBranching,
    ) -> Result<Tree, TreeError> {
        if pieces.len() != self.num_leaves() {
            return Err(TreeError::Pieces(format!(
                "{} piece lists for {} words",
                pieces.len(),
                self.num_leaves()
            )));
        }
        if let Some(i) = pieces.iter().position(Vec::is_empty) {
            return Err(TreeError::Pieces(format!("word {i} has 0 pieces")));
        }
        fn word<S: AsRef<str>>(ps: &[S], tag: &Option<String>, within: PieceBranching) -> Tree {
            if ps.len() == 1 {
                return Tree::Leaf {
                    word: ps[0].as_ref().to_string(),
                    tag: tag.clone(),
                };
            }
            let label = format!("@{}", tag.as_deref().unwrap_or(""));
            let shape = match within {
                PieceBranching::Right => BinaryTree::right_branching(ps.len()),
                PieceBranching::Left => BinaryTree::left_branching(ps.len()),
            };
            fn conv<S: AsRef<str>>(t: &BinaryTree, ps: &[S], pos: &mut usize, label: &str) -> Tree {
                match t {
                    BinaryTree::Leaf(_) => {
                        *pos += 1;
                        Tree::leaf(ps[*pos - 1].as_ref())
                    }
                    BinaryTree::Node(l, r) => {
                        let l = conv(l, ps, pos, label);
                        Tree::node(label, vec![l, conv(r, ps, pos, label)])
                    }
                }
            }
            conv(&shape.expect("≥ 1 piece"), ps, &mut 0, &label)
        }
        fn go<S: AsRef<str>>(
            t: &Tree,
            w: &mut usize,
            pieces: &[Vec<S>],
            within: PieceBranching,
        ) -> Tree {
            match t {
                Tree::Leaf { tag, .. } => {
                    *w += 1;
                    word(&pieces[*w - 1], tag, within)
                }
                Tree::Node { label, children } => Tree::Node {
                    label: label.clone(),
                    children: children.iter().map(|c| go(c, w, pieces, within)).collect(),
                },
            }
        }
        Ok(go(self, &mut 0, pieces, within))
    }
}

/// The spans of `counts`-piece words: converts word-level spans to piece-level spans (word `i`
/// covers pieces `offsets[i]..offsets[i+1]`). Word spans must fit `counts.len()` words.
pub fn spans_to_pieces(spans: &[Span], counts: &[usize]) -> Result<Vec<Span>, TreeError> {
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    offsets.push(0usize);
    for c in counts {
        offsets.push(offsets.last().expect("non-empty") + c);
    }
    spans
        .iter()
        .map(|s| {
            if s.end > counts.len() || s.start > s.end {
                Err(TreeError::Pieces(format!(
                    "span ({}, {}) does not fit {} words",
                    s.start,
                    s.end,
                    counts.len()
                )))
            } else {
                Ok(Span::new(offsets[s.start], offsets[s.end]))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::tree::*;

    #[test]
    fn word_pieces() {
        let (t, _) = BinaryTree::parse("( ( a b ) c )").unwrap();
        let p = t.to_pieces(&[2, 1, 3], PieceBranching::Right).unwrap();
        assert_eq!(
            p.to_bracketed_positions(),
            "( ( ( 0 1 ) 2 ) ( 3 ( 4 5 ) ) )"
        );
        let q = t.to_pieces(&[2, 1, 3], PieceBranching::Left).unwrap();
        assert_eq!(
            q.to_bracketed_positions(),
            "( ( ( 0 1 ) 2 ) ( ( 3 4 ) 5 ) )"
        );
        assert!(t.to_pieces(&[1, 1], PieceBranching::Right).is_err());
        assert!(t.to_pieces(&[1, 0, 1], PieceBranching::Right).is_err());
        let g = Tree::parse("(S (NP (DT the) (NN unbelievable)) (VBD sat))").unwrap();
        let pieces = vec![vec!["the"], vec!["un", "##believ", "##able"], vec!["sat"]];
        let gp = g.to_pieces(&pieces, PieceBranching::Right).unwrap();
        assert_eq!(
            gp.to_bracketed(),
            "(S (NP (DT the) (@NN un (@NN ##believ ##able))) (VBD sat))"
        );
        assert_eq!(
            spans_to_pieces(&g.spans(), &[1, 3, 1]).unwrap(),
            vec![Span::new(0, 4), Span::new(0, 5)]
        );
    }
}
