//! Stanford Sentiment Treebank: SST-2 tab-separated files and the PTB-style 5-way trees.
//!
//! **SST-2 tsv.** Two columns, a sentence and a 0/1 label, in either order: GLUE's
//! `sentence<TAB>label` or the swapped `label<TAB>sentence`. The order is taken from the header
//! when the first line has a column named `label` (the other column, e.g. `sentence` or
//! `content`, is the text), otherwise from the first line's content (the column that is `0` or
//! `1`; if both are, GLUE's order). CRLF line endings are accepted.
//!
//! **SST trees.** One tree per line, `(3 (2 It) (4 ...))`, with a 0–4 sentiment label on every
//! node. SST-2 from trees keeps the root label mapping 0–1 → negative (0) and 3–4 → positive (1)
//! and drops neutral (2) trees.

use std::io::BufRead;
use std::path::Path;

use crate::error::{DataError, Loaded, ReadOptions, RecordError, TreeError};
use crate::io::{open, read_lines, tokens, LineOutcome};
use crate::tree::{BinaryTree, Transition, Tree};

/// One SST-2 example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sst2Example {
    /// Tokens (whitespace-split).
    pub tokens: Vec<String>,
    /// 0 negative, 1 positive.
    pub label: u8,
}

/// Reads an SST-2 tsv file (either column order, optional header, LF or CRLF).
pub fn read_sst2_tsv(
    path: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<Sst2Example>, DataError> {
    let path = path.as_ref();
    parse_sst2_tsv(open(path)?, path, opts)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    SentenceLabel,
    LabelSentence,
}

fn is_label(s: &str) -> bool {
    s == "0" || s == "1"
}

/// Reads SST-2 tsv from any reader; `name` appears in errors.
pub fn parse_sst2_tsv<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<Sst2Example>, DataError> {
    let mut layout: Option<Layout> = None;
    read_lines(reader, name.as_ref(), opts, |line_no, line| {
        if line.trim().is_empty() {
            return Ok(LineOutcome::Filtered);
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() != 2 {
            return Err(RecordError::ColumnCount {
                expected: 2,
                found: cols.len(),
            });
        }
        let (a, b) = (cols[0].trim(), cols[1].trim());
        if layout.is_none() {
            if line_no == 1 && (a.eq_ignore_ascii_case("label") || b.eq_ignore_ascii_case("label"))
            {
                layout = Some(if a.eq_ignore_ascii_case("label") {
                    Layout::LabelSentence
                } else {
                    Layout::SentenceLabel
                });
                return Ok(LineOutcome::Filtered);
            }
            layout = Some(if is_label(b) || !is_label(a) {
                Layout::SentenceLabel
            } else {
                Layout::LabelSentence
            });
        }
        let (text, label) = match layout.expect("set above") {
            Layout::SentenceLabel => (a, b),
            Layout::LabelSentence => (b, a),
        };
        if !is_label(label) {
            return Err(RecordError::UnknownLabel(label.to_string()));
        }
        let tokens = tokens(text);
        if tokens.is_empty() {
            return Err(RecordError::EmptySentence);
        }
        opts.check_tokens(tokens.len())?;
        Ok(LineOutcome::Record(Sst2Example {
            tokens,
            label: (label == "1") as u8,
        }))
    })
}

/// One SST tree with its root label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstTree {
    /// The tree; node labels and leaf tags are the 0–4 sentiment labels.
    pub tree: Tree,
    /// Root label 0 (very negative) … 4 (very positive).
    pub label: u8,
}

impl SstTree {
    /// The words.
    pub fn tokens(&self) -> Vec<String> {
        self.tree.words().into_iter().map(str::to_string).collect()
    }

    /// The binary tree (SST trees are binary; unaries are skipped, n-ary nodes right-binarised).
    pub fn binary_tree(&self) -> BinaryTree {
        self.tree.to_binary(crate::tree::Binarization::Right)
    }

    /// SHIFT/REDUCE transitions.
    pub fn transitions(&self) -> Vec<Transition> {
        self.binary_tree().to_transitions()
    }

    /// The SST-2 label of the root: `Some(0)` for 0–1, `Some(1)` for 3–4, `None` for 2.
    pub fn binary_label(&self) -> Option<u8> {
        sst2_label(self.label)
    }

    /// Every labelled phrase of the tree, the whole sentence first, then its constituents in
    /// pre-order down to the single words (`(4 good)`): the examples Tai et al. (2015) and the
    /// Gumbel Tree-LSTM reference (jihunchoi/unsupervised-treelstm, `sst/train.py`,
    /// torchtext's `SST.splits(..., train_subtrees=True)`, i.e. nltk's `Tree.subtrees()`) train
    /// on. Repeated phrases are kept, as there.
    pub fn phrases(&self) -> Vec<SstTree> {
        fn walk(t: &Tree, out: &mut Vec<SstTree>) {
            if let Ok(label) = t.label().parse::<u8>() {
                out.push(SstTree {
                    tree: t.clone(),
                    label,
                });
            }
            for c in t.children() {
                walk(c, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.tree, &mut out);
        out
    }
}

/// SST 5-way → SST-2: 0–1 → 0, 3–4 → 1, 2 (neutral) → `None`.
pub fn sst2_label(label: u8) -> Option<u8> {
    match label {
        0 | 1 => Some(0),
        3 | 4 => Some(1),
        _ => None,
    }
}

/// Reads an SST PTB-style tree file (one tree per line, every label in 0–4).
pub fn read_sst_trees(
    path: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<SstTree>, DataError> {
    let path = path.as_ref();
    parse_sst_trees(open(path)?, path, opts)
}

fn check_labels(t: &Tree) -> Result<(), RecordError> {
    let l = t.label();
    if !matches!(l, "0" | "1" | "2" | "3" | "4") {
        return Err(RecordError::UnknownLabel(l.to_string()));
    }
    t.children().iter().try_for_each(check_labels)
}

/// Reads SST trees from any reader; `name` appears in errors.
pub fn parse_sst_trees<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<SstTree>, DataError> {
    read_lines(reader, name.as_ref(), opts, |_, line| {
        if line.trim().is_empty() {
            return Ok(LineOutcome::Filtered);
        }
        let tree = Tree::parse(line)?;
        if tree.is_leaf() && tree.label().is_empty() {
            return Err(RecordError::Tree(TreeError::Unbalanced(
                "expected a bracketed tree".into(),
            )));
        }
        check_labels(&tree)?;
        opts.check_tokens(tree.num_leaves())?;
        let label = tree.label().parse::<u8>().expect("checked");
        Ok(LineOutcome::Record(SstTree { tree, label }))
    })
}

/// SST-2 sentences from SST trees: root labels mapped with [`sst2_label`], neutral trees
/// dropped. Gives 6,920 train / 872 dev sentences on the official splits.
pub fn sst2_from_trees(trees: &[SstTree]) -> Vec<Sst2Example> {
    trees
        .iter()
        .filter_map(|t| {
            t.binary_label().map(|label| Sst2Example {
                tokens: t.tokens(),
                label,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_are_every_labelled_node_root_first() {
        let t = parse_sst_trees(
            "(3 (2 It) (4 (4 (2 's) (4 good)) (2 .)))\n".as_bytes(),
            "fixture",
            ReadOptions::strict(),
        )
        .unwrap()
        .records
        .remove(0);
        let p = t.phrases();
        let shown: Vec<(u8, String)> = p.iter().map(|s| (s.label, s.tokens().join(" "))).collect();
        assert_eq!(
            shown,
            vec![
                (3, "It 's good .".to_string()),
                (2, "It".into()),
                (4, "'s good .".into()),
                (4, "'s good".into()),
                (2, "'s".into()),
                (4, "good".into()),
                (2, ".".into()),
            ]
        );
        // SST-2 keeps the non-neutral ones: 4 of 7.
        assert_eq!(p.iter().filter(|s| s.binary_label().is_some()).count(), 4);
        // Each phrase has its own gold transitions: n shifts and n − 1 reduces.
        assert_eq!(p[3].transitions().len(), 3);
        assert_eq!(p[5].transitions().len(), 1);
    }

    #[test]
    fn both_layouts() {
        let glue = "sentence\tlabel\nhide new secretions \t0\ngood fun\t1\n";
        let l = parse_sst2_tsv(glue.as_bytes(), "g.tsv", ReadOptions::strict()).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l.filtered, 1);
        assert_eq!(
            l.records[0],
            Sst2Example {
                tokens: vec!["hide".into(), "new".into(), "secretions".into()],
                label: 0
            }
        );
        let swapped = "label\tcontent\r\n1\tgood fun\r\n0\tbad\r\n";
        let l = parse_sst2_tsv(swapped.as_bytes(), "s.tsv", ReadOptions::strict()).unwrap();
        assert_eq!(l.records[0].tokens, ["good", "fun"]);
        assert_eq!(l.records[1].label, 0);
        let headerless = "1\tgood fun\n0\tbad\n";
        let l = parse_sst2_tsv(headerless.as_bytes(), "h.tsv", ReadOptions::strict()).unwrap();
        assert_eq!((l.len(), l.records[0].label), (2, 1));
        let headerless2 = "good fun\t1\n";
        let l = parse_sst2_tsv(headerless2.as_bytes(), "h.tsv", ReadOptions::strict()).unwrap();
        assert_eq!(l.records[0].tokens, ["good", "fun"]);
    }

    #[test]
    fn tsv_errors() {
        let bad = "sentence\tlabel\nonly one column\na\t7\n\t1\na\tb\tc\n";
        let e = parse_sst2_tsv(bad.as_bytes(), "b.tsv", ReadOptions::strict()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "b.tsv:2: wrong column count: expected 2, found 1"
        );
        let l = parse_sst2_tsv(bad.as_bytes(), "b.tsv", ReadOptions::lenient()).unwrap();
        assert_eq!(l.skipped, 4);
        assert_eq!(l.errors[1], "b.tsv:3: unknown label \"7\"");
        assert_eq!(l.errors[2], "b.tsv:4: empty sentence");
    }

    #[test]
    fn trees_and_sst2() {
        let text = "(3 (2 It) (4 (2 's) (3 good)))\n(2 (2 so) (2 so))\n(0 (1 bad) (0 film))\n";
        let l = parse_sst_trees(text.as_bytes(), "t.txt", ReadOptions::strict()).unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l.records[0].label, 3);
        assert_eq!(l.records[0].tokens(), ["It", "'s", "good"]);
        let s2 = sst2_from_trees(&l.records);
        assert_eq!(s2.len(), 2);
        assert_eq!((s2[0].label, s2[1].label), (1, 0));
        let bad = "(5 (2 a) (2 b))\n(2 (2 a) (x b))\n(2 (2 a)\nword\n";
        let l = parse_sst_trees(bad.as_bytes(), "t.txt", ReadOptions::lenient()).unwrap();
        assert_eq!(l.skipped, 4);
        assert_eq!(l.errors[0], "t.txt:1: unknown label \"5\"");
        assert_eq!(l.errors[1], "t.txt:2: unknown label \"x\"");
        assert!(l.errors[2].starts_with("t.txt:3: unbalanced bracket"));
    }
}
