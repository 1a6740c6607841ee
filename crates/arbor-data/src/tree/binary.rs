//! Binary trees over word positions: construction from transitions, layer indices, spans and
//! syntactic distances, baseline shapes, and the SHIFT/REDUCE linearisation.

use std::collections::BTreeSet;

use rand::{Rng, RngExt};

use super::{validate_transitions, Span, Transition};
use crate::error::TreeError;

/// How n-ary nodes become binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Binarization {
    /// `(a b c)` → `(a (b c))`.
    #[default]
    Right,
    /// `(a b c)` → `((a b) c)`.
    Left,
}

/// A binary tree whose leaves are word positions.
///
/// Trees built by this crate number their leaves `0..n` from left to right; every method
/// uses the left-to-right order of the leaves (the stored positions are informative only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BinaryTree {
    /// The word at this position.
    Leaf(usize),
    /// An internal node with its left (earlier) and right (later) child.
    Node(Box<BinaryTree>, Box<BinaryTree>),
}

impl BinaryTree {
    /// A parent of two subtrees.
    pub fn node(left: BinaryTree, right: BinaryTree) -> Self {
        BinaryTree::Node(Box::new(left), Box::new(right))
    }

    /// Number of leaves (words).
    pub fn num_leaves(&self) -> usize {
        match self {
            BinaryTree::Leaf(_) => 1,
            BinaryTree::Node(l, r) => l.num_leaves() + r.num_leaves(),
        }
    }

    /// Whether this is a single leaf.
    pub fn is_leaf(&self) -> bool {
        matches!(self, BinaryTree::Leaf(_))
    }

    /// Height: 0 for a leaf.
    pub fn depth(&self) -> usize {
        match self {
            BinaryTree::Leaf(_) => 0,
            BinaryTree::Node(l, r) => 1 + l.depth().max(r.depth()),
        }
    }

    /// The stored leaf positions, left to right.
    pub fn leaves(&self) -> Vec<usize> {
        let mut out = Vec::new();
        fn go(t: &BinaryTree, out: &mut Vec<usize>) {
            match t {
                BinaryTree::Leaf(i) => out.push(*i),
                BinaryTree::Node(l, r) => {
                    go(l, out);
                    go(r, out);
                }
            }
        }
        go(self, &mut out);
        out
    }

    /// The same shape with leaves renumbered `0..n` left to right.
    pub fn renumbered(&self) -> BinaryTree {
        fn go(t: &BinaryTree, next: &mut usize) -> BinaryTree {
            match t {
                BinaryTree::Leaf(_) => {
                    *next += 1;
                    BinaryTree::Leaf(*next - 1)
                }
                BinaryTree::Node(l, r) => {
                    let l = go(l, next);
                    BinaryTree::node(l, go(r, next))
                }
            }
        }
        go(self, &mut 0)
    }

    /// The spans of all internal nodes (each has length ≥ 2), in post-order; the root's span
    /// `(0, n)` comes last. A single leaf has none.
    pub fn spans(&self) -> Vec<Span> {
        fn go(t: &BinaryTree, start: usize, out: &mut Vec<Span>) -> usize {
            match t {
                BinaryTree::Leaf(_) => start + 1,
                BinaryTree::Node(l, r) => {
                    let mid = go(l, start, out);
                    let end = go(r, mid, out);
                    out.push(Span::new(start, end));
                    end
                }
            }
        }
        let mut out = Vec::new();
        go(self, 0, &mut out);
        out
    }

    /// SHIFT/REDUCE linearisation (post-order): `2n − 1` transitions.
    pub fn to_transitions(&self) -> Vec<Transition> {
        fn go(t: &BinaryTree, out: &mut Vec<Transition>) {
            match t {
                BinaryTree::Leaf(_) => out.push(Transition::Shift),
                BinaryTree::Node(l, r) => {
                    go(l, out);
                    go(r, out);
                    out.push(Transition::Reduce);
                }
            }
        }
        let mut out = Vec::new();
        go(self, &mut out);
        out
    }

    /// Rebuilds the tree from a transition sequence (trailing SKIPs allowed); leaves are
    /// numbered in SHIFT order.
    pub fn from_transitions(ts: &[Transition]) -> Result<BinaryTree, TreeError> {
        validate_transitions(ts)?;
        let mut stack: Vec<BinaryTree> = Vec::new();
        let mut next = 0;
        for t in ts {
            match t {
                Transition::Shift => {
                    stack.push(BinaryTree::Leaf(next));
                    next += 1;
                }
                Transition::Reduce => {
                    let r = stack.pop().expect("validated");
                    let l = stack.pop().expect("validated");
                    stack.push(BinaryTree::node(l, r));
                }
                Transition::Skip => {}
            }
        }
        Ok(stack.pop().expect("validated"))
    }

    /// Builds a tree from the node selected at each layer (Gumbel Tree-LSTM).
    ///
    /// Start with the `n` leaves as the first layer. At a layer with `M` nodes, index `k`
    /// (`0 ≤ k < M − 1`) merges nodes `k` and `k + 1` into one parent, giving `M − 1` nodes.
    /// Exactly `n − 1` indices are needed. The same encoding describes any sequence of merges of
    /// adjacent items (e.g. R2D2's pruned merges).
    pub fn from_layer_indices(n: usize, indices: &[usize]) -> Result<BinaryTree, TreeError> {
        if n == 0 {
            return Err(TreeError::LayerIndices(
                "a tree needs at least one word".into(),
            ));
        }
        if indices.len() != n - 1 {
            return Err(TreeError::LayerIndices(format!(
                "{n} words need {} indices, got {}",
                n - 1,
                indices.len()
            )));
        }
        let mut nodes: Vec<BinaryTree> = (0..n).map(BinaryTree::Leaf).collect();
        for (layer, &k) in indices.iter().enumerate() {
            if k + 1 >= nodes.len() {
                return Err(TreeError::LayerIndices(format!(
                    "layer {layer} has {} nodes, index {k} out of range",
                    nodes.len()
                )));
            }
            let r = nodes.remove(k + 1);
            let l = std::mem::replace(&mut nodes[k], BinaryTree::Leaf(0));
            nodes[k] = BinaryTree::node(l, r);
        }
        Ok(nodes.pop().expect("one node left"))
    }

    /// Builds a binary tree over `n` words from constituent spans.
    ///
    /// Spans of length < 2 and duplicates are ignored; the whole-sentence span is implied.
    /// The spans must not cross each other. Nodes the spans leave n-ary are binarised
    /// with `bin`, so any non-crossing set gives a tree containing all of its spans.
    pub fn from_spans(
        n: usize,
        spans: &[Span],
        bin: Binarization,
    ) -> Result<BinaryTree, TreeError> {
        if n == 0 {
            return Err(TreeError::Spans("a tree needs at least one word".into()));
        }
        let mut set: BTreeSet<Span> = BTreeSet::new();
        for s in spans {
            if s.end > n || s.start >= s.end {
                return Err(TreeError::Spans(format!(
                    "span ({}, {}) does not fit {n} words",
                    s.start, s.end
                )));
            }
            if s.len() >= 2 {
                set.insert(*s);
            }
        }
        set.insert(Span::new(0, n));
        let list: Vec<Span> = set.into_iter().collect();
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.crosses(b) {
                    return Err(TreeError::Spans(format!(
                        "spans ({}, {}) and ({}, {}) cross",
                        a.start, a.end, b.start, b.end
                    )));
                }
            }
        }
        // Sort outer-first: by start ascending, then by length descending.
        let mut sorted = list;
        sorted.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        fn build(span: Span, sorted: &[Span], bin: Binarization) -> BinaryTree {
            // Direct children: maximal spans strictly inside `span`.
            let mut children: Vec<BinaryTree> = Vec::new();
            let mut pos = span.start;
            let inner: Vec<Span> = sorted
                .iter()
                .copied()
                .filter(|s| span.contains(s) && *s != span)
                .collect();
            while pos < span.end {
                if let Some(child) = inner.iter().find(|s| s.start == pos) {
                    // The first one with this start is the longest (outer-first order).
                    children.push(build(*child, &inner, bin));
                    pos = child.end;
                } else {
                    children.push(BinaryTree::Leaf(pos));
                    pos += 1;
                }
            }
            combine(children, bin)
        }
        Ok(build(Span::new(0, n), &sorted, bin))
    }

    /// Left-branching tree `((((w0 w1) w2) w3) ...)`.
    pub fn left_branching(n: usize) -> Option<BinaryTree> {
        let mut it = (0..n).map(BinaryTree::Leaf);
        let mut t = it.next()?;
        for leaf in it {
            t = BinaryTree::node(t, leaf);
        }
        Some(t)
    }

    /// Right-branching tree `(w0 (w1 (w2 ...)))`.
    pub fn right_branching(n: usize) -> Option<BinaryTree> {
        let mut it = (0..n).rev().map(BinaryTree::Leaf);
        let mut t = it.next()?;
        for leaf in it {
            t = BinaryTree::node(leaf, t);
        }
        Some(t)
    }

    /// The tree ON-LSTM reads from syntactic distances (docs/models.md §5): in a span, the word `k`
    /// with the largest distance (the first one on ties) splits it; the words before `k` form
    /// the left part and `k` starts the right part, which is `(k, rest)` — exactly the released
    /// `build_tree`. Empty parts are dropped. `None` for an empty sentence or a non-finite
    /// distance.
    pub fn from_distances(distances: &[f64]) -> Option<BinaryTree> {
        fn build(d: &[f64], offset: usize) -> BinaryTree {
            if d.len() == 1 {
                return BinaryTree::Leaf(offset);
            }
            let k = (0..d.len()).fold(0, |best, i| if d[i] > d[best] { i } else { best });
            let head = BinaryTree::Leaf(offset + k);
            let right = if k + 1 < d.len() {
                BinaryTree::node(head, build(&d[k + 1..], offset + k + 1))
            } else {
                head
            };
            if k > 0 {
                BinaryTree::node(build(&d[..k], offset), right)
            } else {
                right
            }
        }
        if distances.is_empty() || distances.iter().any(|d| !d.is_finite()) {
            return None;
        }
        Some(build(distances, 0))
    }

    /// Balanced tree: a span `start..end` splits at `mid = (start + end) / 2` (integer
    /// division), so the left part has `⌊len/2⌋` words and the right part the rest.
    pub fn balanced(n: usize) -> Option<BinaryTree> {
        fn go(start: usize, end: usize) -> BinaryTree {
            if end - start == 1 {
                return BinaryTree::Leaf(start);
            }
            let mid = (start + end) / 2;
            BinaryTree::node(go(start, mid), go(mid, end))
        }
        (n > 0).then(|| go(0, n))
    }

    /// A random tree: at each layer with `M` nodes, one of the `M − 1` adjacent pairs is merged,
    /// chosen uniformly (the distribution of an untrained Gumbel Tree-LSTM with equal scores).
    pub fn random<R: Rng + ?Sized>(n: usize, rng: &mut R) -> Option<BinaryTree> {
        if n == 0 {
            return None;
        }
        let indices: Vec<usize> = (1..n).rev().map(|m| rng.random_range(0..m)).collect();
        BinaryTree::from_layer_indices(n, &indices).ok()
    }
}

/// Joins sibling subtrees (at least one) into one binary tree as `bin` says.
pub(super) fn combine(mut children: Vec<BinaryTree>, bin: Binarization) -> BinaryTree {
    match bin {
        Binarization::Right => {
            let mut t = children.pop().expect("non-empty");
            while let Some(c) = children.pop() {
                t = BinaryTree::node(c, t);
            }
            t
        }
        Binarization::Left => {
            let mut it = children.into_iter();
            let mut t = it.next().expect("non-empty");
            for c in it {
                t = BinaryTree::node(t, c);
            }
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::*;
    use rand::SeedableRng;

    use Transition::{Reduce as R, Shift as S};

    #[test]
    fn snli_example_transitions() {
        let (t, words) = BinaryTree::parse("( ( the cat ) ( sat down ) )").unwrap();
        assert_eq!(words, ["the", "cat", "sat", "down"]);
        assert_eq!(t.to_transitions(), vec![S, S, R, S, S, R, R]);
        assert_eq!(transitions_to_string(&t.to_transitions()), "S S R S S R R");
        assert_eq!(t.to_bracketed(&words), "( ( the cat ) ( sat down ) )");
        assert_eq!(
            t.spans(),
            vec![Span::new(0, 2), Span::new(2, 4), Span::new(0, 4)]
        );
    }

    #[test]
    fn spot_sat_down() {
        let (t, _) = BinaryTree::parse("( Spot ( sat down ) )").unwrap();
        assert_eq!(t.to_transitions(), vec![S, S, S, R, R]);
        assert_eq!(BinaryTree::from_transitions(&[S, S, S, R, R]).unwrap(), t);
    }

    #[test]
    fn layer_indices() {
        // 4 words: merge (1,2) → [0, (12), 3]; merge index 0 → [(0(12)), 3]; merge 0.
        let t = BinaryTree::from_layer_indices(4, &[1, 0, 0]).unwrap();
        assert_eq!(t.to_bracketed_positions(), "( ( 0 ( 1 2 ) ) 3 )");
        assert_eq!(t.leaves(), vec![0, 1, 2, 3]);
        assert!(BinaryTree::from_layer_indices(4, &[3, 0, 0]).is_err());
        assert!(BinaryTree::from_layer_indices(4, &[0, 0]).is_err());
        assert_eq!(
            BinaryTree::from_layer_indices(1, &[]).unwrap(),
            BinaryTree::Leaf(0)
        );
        let r = BinaryTree::from_layer_indices(4, &[2, 1, 0]).unwrap();
        assert_eq!(r, BinaryTree::right_branching(4).unwrap());
        let l = BinaryTree::from_layer_indices(4, &[0, 0, 0]).unwrap();
        assert_eq!(l, BinaryTree::left_branching(4).unwrap());
    }

    #[test]
    fn baselines_shapes() {
        let b = BinaryTree::balanced(5).unwrap();
        assert_eq!(b.to_bracketed_positions(), "( ( 0 1 ) ( 2 ( 3 4 ) ) )");
        assert_eq!(
            BinaryTree::left_branching(3)
                .unwrap()
                .to_bracketed_positions(),
            "( ( 0 1 ) 2 )"
        );
        assert_eq!(
            BinaryTree::right_branching(3)
                .unwrap()
                .to_bracketed_positions(),
            "( 0 ( 1 2 ) )"
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let r = BinaryTree::random(9, &mut rng).unwrap();
        assert_eq!(r.num_leaves(), 9);
        assert_eq!(r.leaves(), (0..9).collect::<Vec<_>>());
        assert!(BinaryTree::balanced(0).is_none());
    }

    #[test]
    fn from_spans_roundtrip() {
        let (t, _) = BinaryTree::parse("( ( a ( b c ) ) ( d e ) )").unwrap();
        let back = BinaryTree::from_spans(5, &t.spans(), Binarization::Right).unwrap();
        assert_eq!(back, t);
        // Incomplete: only (0,2) given; the rest right-binarised.
        let u = BinaryTree::from_spans(4, &[Span::new(0, 2)], Binarization::Right).unwrap();
        assert_eq!(u.to_bracketed_positions(), "( ( 0 1 ) ( 2 3 ) )");
        assert!(BinaryTree::from_spans(
            4,
            &[Span::new(0, 2), Span::new(1, 3)],
            Binarization::Right
        )
        .is_err());
        assert!(BinaryTree::from_spans(4, &[Span::new(0, 5)], Binarization::Right).is_err());
    }

    #[test]
    fn trees_from_distances_follow_on_lstm() {
        let t = |d: &[f64]| {
            BinaryTree::from_distances(d)
                .unwrap()
                .to_bracketed_positions()
        };
        assert_eq!(t(&[0.5]), "0");
        // The maximum at 2 splits (0 1) from (2 (3 4)).
        assert_eq!(t(&[0.1, 0.3, 0.9, 0.2, 0.4]), "( ( 0 1 ) ( 2 ( 3 4 ) ) )");
        // A maximum at the start gives a right-branching head.
        assert_eq!(t(&[0.9, 0.1, 0.5]), "( 0 ( 1 2 ) )");
        // A maximum at the end: the last word alone on the right.
        assert_eq!(t(&[0.1, 0.2, 0.9]), "( ( 0 1 ) 2 )");
        // Ties take the first maximum.
        assert_eq!(t(&[0.7, 0.7]), "( 0 1 )");
        assert!(BinaryTree::from_distances(&[]).is_none());
        assert!(BinaryTree::from_distances(&[0.1, f64::NAN]).is_none());
        for n in 1..12 {
            let d: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64).collect();
            assert_eq!(
                BinaryTree::from_distances(&d).unwrap().leaves(),
                (0..n).collect::<Vec<_>>()
            );
        }
    }
}
