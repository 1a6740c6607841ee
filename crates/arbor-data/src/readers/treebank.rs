//! Treebank files with one labelled tree per line, such as the WSJ `.clean` files
//! (`(TOP (S (NP (DT The) ...)))`) used for unsupervised parsing evaluation, or files of
//! predicted unlabelled trees.

use std::io::BufRead;
use std::path::Path;

use crate::error::{DataError, Loaded, ReadOptions, RecordError};
use crate::io::{open, read_lines, LineOutcome};
use crate::tree::{BracketStyle, Tree};

/// Reads a one-tree-per-line treebank (labels recognised with [`BracketStyle::Auto`]). Blank
/// lines are errors, so record `i` is always line `i + 1`.
pub fn read_treebank(path: impl AsRef<Path>, opts: ReadOptions) -> Result<Loaded<Tree>, DataError> {
    let path = path.as_ref();
    parse_treebank(open(path)?, path, BracketStyle::Auto, opts)
}

/// Reads one tree per line from any reader; `name` appears in errors.
pub fn parse_treebank<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    style: BracketStyle,
    opts: ReadOptions,
) -> Result<Loaded<Tree>, DataError> {
    read_lines(reader, name.as_ref(), opts, |_, line| {
        if line.trim().is_empty() {
            return Err(RecordError::EmptySentence);
        }
        let tree = Tree::parse_with(line, style)?;
        opts.check_tokens(tree.num_leaves())?;
        Ok(LineOutcome::Record(tree))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_trees() {
        let text = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))\n(TOP (NP (NN x)))\n";
        let l = parse_treebank(
            text.as_bytes(),
            "22.clean",
            BracketStyle::Auto,
            ReadOptions::strict(),
        )
        .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l.records[0].words(), ["The", "cat", "sat", "."]);
        let bad = "(TOP (S x)\n\n";
        let e = parse_treebank(
            bad.as_bytes(),
            "b",
            BracketStyle::Auto,
            ReadOptions::strict(),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "b:1: unbalanced bracket: 1 `(` never closed");
        let l = parse_treebank(
            bad.as_bytes(),
            "b",
            BracketStyle::Auto,
            ReadOptions::lenient(),
        )
        .unwrap();
        assert_eq!(l.skipped, 2);
        assert_eq!(l.errors[1], "b:2: empty sentence");
    }
}
