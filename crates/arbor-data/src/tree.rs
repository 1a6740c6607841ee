//! Trees: binary trees over token positions, labelled n-ary treebank trees, bracketed strings,
//! SHIFT/REDUCE transitions, spans, treebank preprocessing and rendering.
//!
//! # Conventions
//!
//! * **Spans** are half-open: [`Span`] `{ start, end }` covers the words `start..end` (start
//!   inclusive, end exclusive), so a sentence of `n` words has the whole-sentence span
//!   `(0, n)` and a single word `i` would be `(i, i + 1)`.
//! * **Transitions**: each word is a SHIFT, each binary node (its closing bracket) a REDUCE, in
//!   post-order; `n` words give `2n − 1` transitions. SKIP is a no-op used only as padding at the
//!   end of a sequence.
//! * **Unary brackets**: in unlabelled input, `( word )` and `( ( a b ) )` are the same node as
//!   their only child. Labelled unaries such as `(NP (NN x))` are kept until
//!   [`Tree::collapse_unary`].

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rand::{Rng, RngExt};

use crate::error::TreeError;

/// The deepest bracket nesting the parsers accept (guards the recursive tree algorithms).
pub const MAX_DEPTH: usize = 4096;

/// A constituent span over word positions: words `start..end` (half-open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// First word (inclusive).
    pub start: usize,
    /// One past the last word (exclusive).
    pub end: usize,
}

impl Span {
    /// The span of words `start..end`.
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// Number of words covered.
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the span covers no word.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the two spans overlap without one containing the other.
    pub fn crosses(&self, other: &Span) -> bool {
        (self.start < other.start && other.start < self.end && self.end < other.end)
            || (other.start < self.start && self.start < other.end && other.end < self.end)
    }

    /// Whether `other` lies inside `self` (equal spans count).
    pub fn contains(&self, other: &Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

/// One step of a shift-reduce linearisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Push the next buffer word onto the stack (id 0).
    Shift,
    /// Pop the top two stack items (the top is the right child) and push their parent (id 1).
    Reduce,
    /// No-op padding step at the end of a sequence: neither reads nor writes (id 2).
    Skip,
}

impl Transition {
    /// Integer id: SHIFT 0, REDUCE 1, SKIP 2.
    pub fn id(self) -> u8 {
        match self {
            Transition::Shift => 0,
            Transition::Reduce => 1,
            Transition::Skip => 2,
        }
    }

    /// The transition with id 0, 1 or 2.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(Transition::Shift),
            1 => Some(Transition::Reduce),
            2 => Some(Transition::Skip),
            _ => None,
        }
    }

    /// One-letter form: `S`, `R` or `_`.
    pub fn letter(self) -> char {
        match self {
            Transition::Shift => 'S',
            Transition::Reduce => 'R',
            Transition::Skip => '_',
        }
    }
}

/// Renders transitions as `S S R ...`.
pub fn transitions_to_string(ts: &[Transition]) -> String {
    let mut s = String::with_capacity(ts.len() * 2);
    for (i, t) in ts.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push(t.letter());
    }
    s
}

/// Checks a transition sequence and returns the number of words it builds a tree over.
///
/// Valid means: a REDUCE always finds at least two stack items, the sequence ends with exactly
/// one item on the stack, it contains at least one SHIFT, and SKIPs only occur after the last
/// SHIFT/REDUCE (trailing padding). A valid unpadded sequence over `n` words has `2n − 1` steps.
pub fn validate_transitions(ts: &[Transition]) -> Result<usize, TreeError> {
    let mut depth = 0usize;
    let mut words = 0usize;
    let mut seen_skip = false;
    for (i, t) in ts.iter().enumerate() {
        match t {
            Transition::Skip => seen_skip = true,
            _ if seen_skip => {
                return Err(TreeError::Transitions(format!(
                    "step {i}: {t:?} after SKIP padding"
                )))
            }
            Transition::Shift => {
                depth += 1;
                words += 1;
            }
            Transition::Reduce => {
                if depth < 2 {
                    return Err(TreeError::Transitions(format!(
                        "step {i}: REDUCE with {depth} item(s) on the stack"
                    )));
                }
                depth -= 1;
            }
        }
    }
    if words == 0 {
        return Err(TreeError::Transitions("no SHIFT".into()));
    }
    if depth != 1 {
        return Err(TreeError::Transitions(format!(
            "{depth} items left on the stack at the end"
        )));
    }
    Ok(words)
}

/// How a word's pieces are bracketed inside the word when trees are moved to word-piece level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PieceBranching {
    /// `(p1 (p2 p3))`: the default.
    #[default]
    Right,
    /// `((p1 p2) p3)`.
    Left,
}

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

    /// The tree ON-LSTM reads from syntactic distances (MODELS.md §5): in a span, the word `k`
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

    /// Parses an unlabelled binary bracketing such as `( ( the cat ) ( sat down ) )` or a logic
    /// formula `( not ( a ( and b ) ) )`; a bare word is a one-leaf tree. Returns the tree and
    /// the words. Unary brackets `( word )` are the same node as their child; nodes with more
    /// than two children are an error (parse with [`Tree::parse`] and call
    /// [`Tree::to_binary`] to binarise instead).
    pub fn parse(s: &str) -> Result<(BinaryTree, Vec<String>), TreeError> {
        let tree = Tree::parse_with(s, BracketStyle::Unlabelled)?;
        let words = tree.words().into_iter().map(str::to_string).collect();
        Ok((tree.to_binary_strict()?, words))
    }

    /// The unlabelled general tree with the given words at the leaves (missing words print as
    /// their positions).
    pub fn to_tree<S: AsRef<str>>(&self, words: &[S]) -> Tree {
        fn go<S: AsRef<str>>(t: &BinaryTree, pos: &mut usize, words: &[S]) -> Tree {
            match t {
                BinaryTree::Leaf(_) => {
                    let w = words.get(*pos).map(|w| w.as_ref().to_string());
                    let w = w.unwrap_or_else(|| pos.to_string());
                    *pos += 1;
                    Tree::leaf(w)
                }
                BinaryTree::Node(l, r) => {
                    let l = go(l, pos, words);
                    Tree::node("", vec![l, go(r, pos, words)])
                }
            }
        }
        go(self, &mut 0, words)
    }

    /// Bracketed form with the given words, e.g. `( ( the cat ) ( sat down ) )`.
    pub fn to_bracketed<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_bracketed()
    }

    /// Bracketed form with positions as words, e.g. `( ( 0 1 ) ( 2 3 ) )`.
    pub fn to_bracketed_positions(&self) -> String {
        self.to_tree::<&str>(&[]).to_bracketed()
    }

    /// Indented ASCII drawing (see [`Tree::to_ascii`]).
    pub fn to_ascii<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_ascii()
    }

    /// Graphviz DOT source (see [`Tree::to_dot`]).
    pub fn to_dot<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_dot()
    }

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

fn combine(mut children: Vec<BinaryTree>, bin: Binarization) -> BinaryTree {
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

/// How labels are recognised in bracketed input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BracketStyle {
    /// A label is an atom attached to its `(` with no space, as in `(NP (DT the) ...)` or
    /// SST's `(3 (2 It) ...)`; `( the cat )` is unlabelled. Right for every format this crate
    /// reads.
    #[default]
    Auto,
    /// The first atom after each `(` is the label, spaces or not.
    Labelled,
    /// No labels: every atom is a word.
    Unlabelled,
}

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

/// PTB punctuation tags removed by [`Tree::remove_punctuation`], plus the trace tag `-NONE-`.
pub const PUNCTUATION_TAGS: &[&str] = &[
    "``", "''", ",", ".", ":", "-LRB-", "-RRB-", "#", "$", "-NONE-",
];

/// Whether `tag` is a punctuation (or trace) tag of [`PUNCTUATION_TAGS`].
pub fn is_punctuation_tag(tag: &str) -> bool {
    PUNCTUATION_TAGS.contains(&tag)
}

/// How digits are normalised by [`TextNorm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DigitNorm {
    /// Leave digits alone.
    #[default]
    Keep,
    /// Replace each maximal run of digits with `N` (ON-LSTM's PTB preprocessing
    /// `re.sub('[0-9]+', 'N', w)`): `1.5` → `N.N`.
    RunsToN,
    /// Replace a whole token that is a number (digits with optional `,` `.` `-` `/` and a
    /// leading sign) with `N`, as in Mikolov's PTB LM text.
    NumbersToN,
}

/// Word normalisation applied to tree leaves and token lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TextNorm {
    /// Lower-case every word.
    pub lowercase: bool,
    /// Digit normalisation.
    pub digits: DigitNorm,
}

impl TextNorm {
    /// Normalises one word.
    pub fn apply(&self, word: &str) -> String {
        let w = if self.lowercase {
            word.to_lowercase()
        } else {
            word.to_string()
        };
        match self.digits {
            DigitNorm::Keep => w,
            DigitNorm::RunsToN => {
                let mut out = String::with_capacity(w.len());
                let mut in_run = false;
                for c in w.chars() {
                    if c.is_ascii_digit() {
                        if !in_run {
                            out.push('N');
                        }
                        in_run = true;
                    } else {
                        out.push(c);
                        in_run = false;
                    }
                }
                out
            }
            DigitNorm::NumbersToN => {
                let body = w.strip_prefix(['-', '+']).unwrap_or(&w);
                let numeric = body.chars().any(|c| c.is_ascii_digit())
                    && body
                        .chars()
                        .all(|c| c.is_ascii_digit() || ",.-/".contains(c))
                    && body.starts_with(|c: char| c.is_ascii_digit() || c == '.');
                if numeric {
                    "N".to_string()
                } else {
                    w
                }
            }
        }
    }
}

/// Gold-tree preprocessing for parsing evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreePrep {
    /// Remove punctuation and traces by tag ([`PUNCTUATION_TAGS`]), pruning emptied nodes.
    pub remove_punctuation: bool,
    /// Collapse unary chains ([`Tree::collapse_unary`]).
    pub collapse_unary: bool,
    /// Strip function tags and indices from labels (`NP-SBJ-1` → `NP`).
    pub strip_function_tags: bool,
    /// Word normalisation.
    pub norm: TextNorm,
}

impl TreePrep {
    /// The evaluation convention of MODELS.md §7: punctuation removed, unaries collapsed.
    pub fn evaluation() -> Self {
        TreePrep {
            remove_punctuation: true,
            collapse_unary: true,
            strip_function_tags: true,
            norm: TextNorm::default(),
        }
    }

    /// Applies the steps in order (function tags, punctuation, unaries, words). `None` when
    /// nothing is left (a sentence of punctuation only).
    pub fn apply(&self, tree: &Tree) -> Option<Tree> {
        let mut t = if self.strip_function_tags {
            tree.strip_function_tags()
        } else {
            tree.clone()
        };
        if self.remove_punctuation {
            t = t.remove_punctuation()?;
        }
        if self.collapse_unary {
            t = t.collapse_unary();
        }
        if self.norm != TextNorm::default() {
            t = t.map_words(&|w| self.norm.apply(w));
        }
        Some(t)
    }
}

enum Tok<'a> {
    Open(Option<&'a str>),
    Close,
    Atom(&'a str),
}

fn lex(s: &str, style: BracketStyle) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    let is_delim = |c: u8| c == b'(' || c == b')' || c.is_ascii_whitespace();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' {
            i += 1;
            if style == BracketStyle::Auto && i < b.len() && !is_delim(b[i]) {
                let start = i;
                while i < b.len() && !is_delim(b[i]) {
                    i += 1;
                }
                out.push(Tok::Open(Some(&s[start..i])));
            } else {
                out.push(Tok::Open(None));
            }
        } else if c == b')' {
            i += 1;
            out.push(Tok::Close);
        } else {
            let start = i;
            while i < b.len() && !is_delim(b[i]) {
                i += 1;
            }
            out.push(Tok::Atom(&s[start..i]));
        }
    }
    out
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

    /// Parses one bracketed tree, recognising labels with [`BracketStyle::Auto`].
    pub fn parse(s: &str) -> Result<Tree, TreeError> {
        Tree::parse_with(s, BracketStyle::Auto)
    }

    /// Parses one bracketed tree.
    ///
    /// * `(TAG word)` becomes a tagged leaf; `(LABEL children...)` a node.
    /// * An unlabelled bracket with one child is that child (unary = same node).
    /// * A bare atom is a one-word tree.
    /// * Errors: unbalanced brackets, `()`/`(X)`, text after the tree, nesting deeper than
    ///   [`MAX_DEPTH`].
    pub fn parse_with(s: &str, style: BracketStyle) -> Result<Tree, TreeError> {
        let toks = lex(s, style);
        let mut stack: Vec<(Option<String>, Vec<Tree>)> = Vec::new();
        let mut done: Option<Tree> = None;
        let mut iter = toks.into_iter().peekable();
        while let Some(tok) = iter.next() {
            if done.is_some() {
                let rest = match tok {
                    Tok::Open(_) => "(".to_string(),
                    Tok::Close => ")".to_string(),
                    Tok::Atom(a) => a.to_string(),
                };
                if rest == ")" {
                    return Err(TreeError::Unbalanced(
                        "`)` after the end of the tree".into(),
                    ));
                }
                return Err(TreeError::Trailing(rest));
            }
            match tok {
                Tok::Open(label) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(TreeError::TooDeep(MAX_DEPTH));
                    }
                    let mut label = label.map(str::to_string);
                    if style == BracketStyle::Labelled {
                        if let Some(Tok::Atom(a)) = iter.peek() {
                            label = Some(a.to_string());
                            iter.next();
                        }
                    }
                    stack.push((label, Vec::new()));
                }
                Tok::Close => {
                    let Some((label, mut children)) = stack.pop() else {
                        return Err(TreeError::Unbalanced("`)` without matching `(`".into()));
                    };
                    let t = match label {
                        Some(label) => {
                            if children.is_empty() {
                                return Err(TreeError::EmptyConstituent);
                            }
                            if children.len() == 1
                                && matches!(&children[0], Tree::Leaf { tag: None, .. })
                            {
                                let Some(Tree::Leaf { word, .. }) = children.pop() else {
                                    unreachable!()
                                };
                                Tree::Leaf {
                                    word,
                                    tag: Some(label),
                                }
                            } else {
                                Tree::Node { label, children }
                            }
                        }
                        None => match children.len() {
                            0 => return Err(TreeError::EmptyConstituent),
                            1 => children.pop().expect("one child"),
                            _ => Tree::Node {
                                label: String::new(),
                                children,
                            },
                        },
                    };
                    match stack.last_mut() {
                        Some((_, siblings)) => siblings.push(t),
                        None => done = Some(t),
                    }
                }
                Tok::Atom(a) => match stack.last_mut() {
                    Some((_, siblings)) => siblings.push(Tree::leaf(a)),
                    None => done = Some(Tree::leaf(a)),
                },
            }
        }
        if !stack.is_empty() {
            return Err(TreeError::Unbalanced(format!(
                "{} `(` never closed",
                stack.len()
            )));
        }
        done.ok_or(TreeError::Empty)
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

    /// Removes leaves whose tag satisfies `drop`, pruning constituents left empty. `None` when
    /// no word is left.
    pub fn remove_leaves_by_tag(&self, drop: &dyn Fn(&str) -> bool) -> Option<Tree> {
        match self {
            Tree::Leaf { tag, .. } => match tag {
                Some(t) if drop(t) => None,
                _ => Some(self.clone()),
            },
            Tree::Node { label, children } => {
                let kept: Vec<Tree> = children
                    .iter()
                    .filter_map(|c| c.remove_leaves_by_tag(drop))
                    .collect();
                (!kept.is_empty()).then(|| Tree::Node {
                    label: label.clone(),
                    children: kept,
                })
            }
        }
    }

    /// Removes punctuation and traces ([`PUNCTUATION_TAGS`]), pruning emptied constituents.
    pub fn remove_punctuation(&self) -> Option<Tree> {
        self.remove_leaves_by_tag(&is_punctuation_tag)
    }

    /// Collapses unary chains: a node with a single child is replaced by that child, so a
    /// preterminal-only node such as `(NP (NN x))` becomes the leaf `(NN x)` and `(S (VP ...))`
    /// keeps the lower node `VP`. Spans are unchanged; duplicates disappear.
    pub fn collapse_unary(&self) -> Tree {
        match self {
            Tree::Leaf { .. } => self.clone(),
            Tree::Node { children, .. } if children.len() == 1 => children[0].collapse_unary(),
            Tree::Node { label, children } => Tree::Node {
                label: label.clone(),
                children: children.iter().map(Tree::collapse_unary).collect(),
            },
        }
    }

    /// Strips function tags and co-indices from node labels and tags: `NP-SBJ-1` → `NP`,
    /// `NP=2` → `NP`; labels starting with `-` (`-NONE-`, `-LRB-`) are kept.
    pub fn strip_function_tags(&self) -> Tree {
        fn strip(l: &str) -> String {
            if l.starts_with('-') {
                return l.to_string();
            }
            l.split(['-', '=']).next().unwrap_or(l).to_string()
        }
        match self {
            Tree::Leaf { word, tag } => Tree::Leaf {
                word: word.clone(),
                tag: tag.as_deref().map(strip),
            },
            Tree::Node { label, children } => Tree::Node {
                label: strip(label),
                children: children.iter().map(Tree::strip_function_tags).collect(),
            },
        }
    }

    /// Applies `f` to every word.
    pub fn map_words(&self, f: &dyn Fn(&str) -> String) -> Tree {
        match self {
            Tree::Leaf { word, tag } => Tree::Leaf {
                word: f(word),
                tag: tag.clone(),
            },
            Tree::Node { label, children } => Tree::Node {
                label: label.clone(),
                children: children.iter().map(|c| c.map_words(f)).collect(),
            },
        }
    }

    /// Applies a [`TextNorm`] to every word.
    pub fn normalize(&self, norm: TextNorm) -> Tree {
        self.map_words(&|w| norm.apply(w))
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

    /// Bracketed form. Labelled nodes print as `(LABEL ...)`, tagged leaves as `(TAG word)`,
    /// unlabelled nodes as `( ... )` with spaces, bare leaves as the word: parsing the output
    /// with [`Tree::parse`] gives the same tree back (for words without spaces or brackets).
    pub fn to_bracketed(&self) -> String {
        let mut s = String::new();
        fn go(t: &Tree, s: &mut String) {
            match t {
                Tree::Leaf {
                    word,
                    tag: Some(tag),
                } => {
                    let _ = write!(s, "({tag} {word})");
                }
                Tree::Leaf { word, tag: None } => s.push_str(word),
                Tree::Node { label, children } => {
                    s.push('(');
                    s.push_str(label);
                    for c in children {
                        s.push(' ');
                        go(c, s);
                    }
                    s.push_str(if label.is_empty() { " )" } else { ")" });
                }
            }
        }
        go(self, &mut s);
        s
    }

    /// Indented ASCII drawing, one node per line:
    ///
    /// ```text
    /// S
    /// +-- NP
    /// |   +-- DT the
    /// |   `-- NN cat
    /// `-- VBD sat
    /// ```
    /// Unlabelled nodes print as `*`.
    pub fn to_ascii(&self) -> String {
        fn name(t: &Tree) -> String {
            match t {
                Tree::Leaf {
                    word,
                    tag: Some(tag),
                } => format!("{tag} {word}"),
                Tree::Leaf { word, tag: None } => word.clone(),
                Tree::Node { label, .. } if label.is_empty() => "*".into(),
                Tree::Node { label, .. } => label.clone(),
            }
        }
        fn go(t: &Tree, prefix: &str, out: &mut String) {
            let kids = t.children();
            for (i, c) in kids.iter().enumerate() {
                let last = i + 1 == kids.len();
                let _ = writeln!(
                    out,
                    "{prefix}{}{}",
                    if last { "`-- " } else { "+-- " },
                    name(c)
                );
                go(
                    c,
                    &format!("{prefix}{}", if last { "    " } else { "|   " }),
                    out,
                );
            }
        }
        let mut out = name(self);
        out.push('\n');
        go(self, "", &mut out);
        out
    }

    /// Graphviz DOT source: internal nodes as ellipses, words as boxes kept in sentence order
    /// on one rank. Render with `dot -Tsvg`.
    pub fn to_dot(&self) -> String {
        fn esc(s: &str) -> String {
            s.replace('\\', "\\\\").replace('"', "\\\"")
        }
        let mut out = String::from("digraph tree {\n  node [fontname=\"Helvetica\"];\n");
        let mut leaves = Vec::new();
        fn go(t: &Tree, next: &mut usize, out: &mut String, leaves: &mut Vec<usize>) -> usize {
            let id = *next;
            *next += 1;
            match t {
                Tree::Leaf { word, tag } => {
                    let label = match tag {
                        Some(tag) => format!("{}\\n{}", esc(tag), esc(word)),
                        None => esc(word),
                    };
                    let _ = writeln!(out, "  n{id} [shape=box, label=\"{label}\"];");
                    leaves.push(id);
                }
                Tree::Node { label, children } => {
                    let _ = writeln!(out, "  n{id} [shape=ellipse, label=\"{}\"];", esc(label));
                    for c in children {
                        let cid = go(c, next, out, leaves);
                        let _ = writeln!(out, "  n{id} -> n{cid};");
                    }
                }
            }
            id
        }
        go(self, &mut 0, &mut out, &mut leaves);
        out.push_str("  { rank=same;");
        for l in &leaves {
            let _ = write!(out, " n{l};");
        }
        out.push_str(" }\n");
        for w in leaves.windows(2) {
            let _ = writeln!(out, "  n{} -> n{} [style=invis];", w[0], w[1]);
        }
        out.push_str("}\n");
        out
    }
}

impl std::fmt::Display for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_bracketed())
    }
}

impl std::fmt::Display for BinaryTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_bracketed_positions())
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
    use super::*;
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
    fn unary_brackets_are_the_same_node() {
        let (a, _) = BinaryTree::parse("( ( word ) ( ( x y ) ) )").unwrap();
        let (b, _) = BinaryTree::parse("( word ( x y ) )").unwrap();
        assert_eq!(a, b);
        let (c, w) = BinaryTree::parse("d").unwrap();
        assert_eq!(c, BinaryTree::Leaf(0));
        assert_eq!(w, ["d"]);
        assert_eq!(c.to_transitions(), vec![S]);
    }

    #[test]
    fn logic_formula() {
        let (t, w) = BinaryTree::parse("( not ( e ( or ( not c ) ) ) )").unwrap();
        assert_eq!(w, ["not", "e", "or", "not", "c"]);
        assert_eq!(
            transitions_to_string(&t.to_transitions()),
            "S S S S S R R R R"
        );
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            BinaryTree::parse("( a b c )").unwrap_err(),
            TreeError::NotBinary(3)
        );
        assert!(matches!(
            Tree::parse("( a b"),
            Err(TreeError::Unbalanced(_))
        ));
        assert!(matches!(Tree::parse("a b )"), Err(TreeError::Trailing(_))));
        assert!(matches!(
            Tree::parse("( a b ) )"),
            Err(TreeError::Unbalanced(_))
        ));
        assert!(matches!(Tree::parse(")"), Err(TreeError::Unbalanced(_))));
        assert_eq!(Tree::parse("   "), Err(TreeError::Empty));
        assert_eq!(Tree::parse("( )"), Err(TreeError::EmptyConstituent));
        assert_eq!(Tree::parse("(NP)"), Err(TreeError::EmptyConstituent));
        let deep = "(".repeat(MAX_DEPTH + 1);
        assert_eq!(Tree::parse(&deep), Err(TreeError::TooDeep(MAX_DEPTH)));
    }

    #[test]
    fn ptb_tree_preprocessing() {
        let s = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *T*))) (. .)))";
        let t = Tree::parse(s).unwrap();
        assert_eq!(t.words(), ["The", "cat", "sat", "*T*", "."]);
        assert_eq!(t.label(), "TOP");
        let p = t.remove_punctuation().unwrap();
        assert_eq!(
            p.to_bracketed(),
            "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))"
        );
        let c = p.collapse_unary();
        assert_eq!(c.to_bracketed(), "(S (NP (DT The) (NN cat)) (VBD sat))");
        assert_eq!(c.spans(), vec![Span::new(0, 2), Span::new(0, 3)]);
        let prep = TreePrep::evaluation().apply(&t).unwrap();
        assert_eq!(prep, c);
        assert!(Tree::parse("(TOP (. .))")
            .unwrap()
            .remove_punctuation()
            .is_none());
        assert_eq!(Tree::parse(s).unwrap().to_string(), s);
    }

    #[test]
    fn function_tags() {
        let t = Tree::parse("(S (NP-SBJ-1 (PRP it)) (VP=2 (VBZ is)) (-NONE- *))").unwrap();
        assert_eq!(
            t.strip_function_tags().to_bracketed(),
            "(S (NP (PRP it)) (VP (VBZ is)) (-NONE- *))"
        );
    }

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

    #[test]
    fn labelled_style_with_spaces() {
        let t =
            Tree::parse_with("( S ( NP the cat ) ( VP sat ) )", BracketStyle::Labelled).unwrap();
        assert_eq!(t.to_bracketed(), "(S (NP the cat) (VP sat))");
    }

    #[test]
    fn normalisation() {
        let n = TextNorm {
            lowercase: true,
            digits: DigitNorm::RunsToN,
        };
        assert_eq!(n.apply("AB12cd3"), "abNcdN");
        assert_eq!(n.apply("1.5"), "N.N");
        let m = TextNorm {
            lowercase: false,
            digits: DigitNorm::NumbersToN,
        };
        assert_eq!(m.apply("1,000"), "N");
        assert_eq!(m.apply("-3.5"), "N");
        assert_eq!(m.apply("B52"), "B52");
        assert_eq!(m.apply("-"), "-");
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
    fn transition_validation() {
        assert_eq!(validate_transitions(&[S, S, R]), Ok(2));
        assert_eq!(
            validate_transitions(&[S, S, R, Transition::Skip, Transition::Skip]),
            Ok(2)
        );
        assert!(validate_transitions(&[S, R]).is_err());
        assert!(validate_transitions(&[S, S]).is_err());
        assert!(validate_transitions(&[]).is_err());
        assert!(validate_transitions(&[S, Transition::Skip, S, R]).is_err());
        assert!(BinaryTree::from_transitions(&[S, R, S]).is_err());
    }

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

    #[test]
    fn rendering() {
        let t = Tree::parse("(S (NP (DT the) (NN cat)) (VBD sat))").unwrap();
        assert_eq!(
            t.to_ascii(),
            "S\n+-- NP\n|   +-- DT the\n|   `-- NN cat\n`-- VBD sat\n"
        );
        let dot = t.to_dot();
        assert!(dot.starts_with("digraph tree {"));
        assert!(dot.contains("n0 -> n1;"));
        assert!(dot.contains("label=\"DT\\nthe\""));
        let (b, w) = BinaryTree::parse("( a \"b\" )").unwrap();
        assert!(b.to_dot(&w).contains("\\\"b\\\""));
        assert_eq!(b.to_ascii(&w), "*\n+-- a\n`-- \"b\"\n");
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
