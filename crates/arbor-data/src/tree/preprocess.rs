//! Treebank preprocessing: punctuation removal, unary collapsing, function-tag stripping and
//! word normalisation.

use super::Tree;

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
    /// The evaluation convention of docs/models.md §7: punctuation removed, unaries collapsed.
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

impl Tree {
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
}

#[cfg(test)]
mod tests {
    use crate::tree::*;

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
}
