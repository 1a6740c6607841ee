//! Reference vocabularies → arbor vocabularies, with the embedding-row permutation between them.
//!
//! arbor's word vocabularies start with `<pad>` (id 0) and `<unk>` (id 1); reference code bases
//! put their padding and unknown-word tokens elsewhere (jihunchoi/unsupervised-treelstm appends
//! `<PAD>` and `<UNK>` after the words). An import keeps every reference row and only moves
//! them: [`ReferenceVocab::to_arbor`] gives arbor's token list and, for each arbor id, the
//! reference row it takes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use arbor_data::readers::lm::EOS;

use crate::ConvertError;

/// A reference model's vocabulary, in its id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceVocab {
    /// Token of every reference id.
    pub tokens: Vec<String>,
    /// Where it came from (named in errors).
    pub source: String,
}

impl ReferenceVocab {
    /// Reads a vocabulary file: one entry per line in id order, the token being the line's
    /// first whitespace-separated field (so `word<TAB>count` files, as unsupervised-treelstm's
    /// `build_vocab.py` writes them, work too).
    ///
    /// # Errors
    /// When the file cannot be read, is not UTF-8, or has an empty line or a repeated token
    /// (named by line number).
    pub fn read_file(path: &Path) -> Result<Self, ConvertError> {
        let text = read_text(path)?;
        let mut tokens = Vec::new();
        let mut seen = HashSet::new();
        for (n, line) in text.lines().enumerate() {
            let Some(token) = line.split_whitespace().next() else {
                return Err(ConvertError::file(
                    path,
                    format!("line {}: expected one token per line, got {line:?}", n + 1),
                ));
            };
            if !seen.insert(token.to_string()) {
                return Err(ConvertError::file(
                    path,
                    format!("line {}: token {token:?} appears twice", n + 1),
                ));
            }
            tokens.push(token.to_string());
        }
        if tokens.is_empty() {
            return Err(ConvertError::file(path, "holds no tokens"));
        }
        Ok(ReferenceVocab {
            tokens,
            source: path.display().to_string(),
        })
    }

    /// Keeps the first `n` entries (the reference's `--vocab-size`).
    pub fn truncated(mut self, n: usize) -> Self {
        self.tokens.truncate(n);
        self
    }

    /// Appends each of `specials` the vocabulary does not list yet, in order (what
    /// unsupervised-treelstm's `Vocab` does with `add_pad`, `add_unk`: `<PAD>`, then `<UNK>`,
    /// after the words).
    pub fn with_specials(mut self, specials: &[&str]) -> Self {
        for s in specials {
            if !self.tokens.iter().any(|t| t == s) {
                self.tokens.push(s.to_string());
            }
        }
        self
    }
    /// Rebuilds the dictionary the way the reference's `data.Corpus` does: the words of every
    /// line (split on whitespace) followed by `<eos>`, each new word taking the next id, reading
    /// `files` in order (the reference reads `train.txt`, then `valid.txt`, then `test.txt`
    /// into one dictionary).
    ///
    /// # Errors
    /// When a file cannot be read or is not UTF-8, or `files` is empty.
    pub fn from_corpus(files: &[PathBuf]) -> Result<Self, ConvertError> {
        if files.is_empty() {
            return Err(ConvertError::Config(
                "rebuilding the reference dictionary needs its training text (--corpus-train)"
                    .into(),
            ));
        }
        let mut tokens = Vec::new();
        let mut seen = HashSet::new();
        for path in files {
            let text = read_text(path)?;
            for line in text.lines() {
                for w in line.split_whitespace().chain([EOS]) {
                    if seen.insert(w.to_string()) {
                        tokens.push(w.to_string());
                    }
                }
            }
        }
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        Ok(ReferenceVocab {
            tokens,
            source: names.join(" + "),
        })
    }

    /// The arbor vocabulary (`<pad>`, `<unk>`, then the other tokens in reference order) and,
    /// for each arbor id, the reference id whose embedding row it takes.
    ///
    /// # Errors
    /// When `n_rows` (the embedding's row count) differs from the vocabulary size, or the
    /// reference's padding/unknown tokens are missing.
    pub fn to_arbor(
        &self,
        n_rows: usize,
        pad: &str,
        unk: &str,
    ) -> Result<(Vec<String>, Vec<usize>), ConvertError> {
        if self.tokens.len() != n_rows {
            return Err(ConvertError::Config(format!(
                "{}: the vocabulary has {} entries (with {pad} and {unk}) but the embedding has \
                 {n_rows} rows: give the vocabulary file (and --vocab-size) the model was \
                 trained with",
                self.source,
                self.tokens.len(),
            )));
        }
        let find = |t: &str| {
            self.tokens
                .iter()
                .position(|x| x == t)
                .ok_or_else(|| ConvertError::Config(format!("the vocabulary has no {t:?} token")))
        };
        let pad = find(pad)?;
        let unk = find(unk)?;
        let mut tokens = vec![
            arbor_data::vocab::PAD.to_string(),
            arbor_data::vocab::UNK.to_string(),
        ];
        let mut rows = vec![pad, unk];
        for (i, t) in self.tokens.iter().enumerate() {
            if i != pad && i != unk {
                if t == arbor_data::vocab::PAD || t == arbor_data::vocab::UNK {
                    return Err(ConvertError::Config(format!(
                        "the vocabulary lists arbor's special token {t:?} as an ordinary word \
                         (id {i}); name it as the padding or unknown token instead"
                    )));
                }
                tokens.push(t.clone());
                rows.push(i);
            }
        }
        Ok((tokens, rows))
    }
}

fn read_text(path: &Path) -> Result<String, ConvertError> {
    let bytes = std::fs::read(path).map_err(|e| ConvertError::file(path, e))?;
    String::from_utf8(bytes).map_err(|e| ConvertError::file(path, format!("not UTF-8: {e}")))
}

/// The labels in the order arbor's program numbers them, and for each the reference's output
/// row. When every name of `arbor_order` is among `labels` (the reference's order), the outputs
/// are those rows in `arbor_order`: a permutation when the sets are equal, and with more labels
/// than the task has (torchtext's label field puts `<unk>` first: `<unk>,positive,negative`) the
/// extra classes are dropped, so they are never predicted. Any other label set keeps the
/// reference's order and every row.
pub fn arbor_label_order(labels: &[String], arbor_order: &[&str]) -> (Vec<String>, Vec<usize>) {
    let rows: Option<Vec<usize>> = arbor_order
        .iter()
        .map(|o| labels.iter().position(|l| l == o))
        .collect();
    match rows {
        Some(rows) => (arbor_order.iter().map(|s| s.to_string()).collect(), rows),
        None => (labels.to_vec(), (0..labels.len()).collect()),
    }
}

/// Rows `order[0], order[1], ...` of `a` (an embedding matrix or an output layer).
pub fn gather_rows(a: &crate::Array, order: &[usize]) -> crate::Array {
    let rows: Vec<crate::Array> = order.iter().map(|&r| a.rows(r, r + 1)).collect();
    crate::Array::concat(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_specials_move_to_the_front_and_rows_follow() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vocab.txt");
        std::fs::write(&p, "the\t0\ncat 3\nsat\n").unwrap();
        let v = ReferenceVocab::read_file(&p)
            .unwrap()
            .with_specials(&["<PAD>", "<UNK>"]);
        assert_eq!(v.tokens, ["the", "cat", "sat", "<PAD>", "<UNK>"]);
        let (tokens, rows) = v.to_arbor(5, "<PAD>", "<UNK>").unwrap();
        assert_eq!(tokens, ["<pad>", "<unk>", "the", "cat", "sat"]);
        assert_eq!(rows, [3, 4, 0, 1, 2]);
        let err = v.to_arbor(6, "<PAD>", "<UNK>").unwrap_err().to_string();
        assert!(err.contains("6 rows"), "{err}");
        let v = ReferenceVocab::read_file(&p)
            .unwrap()
            .truncated(2)
            .with_specials(&["<PAD>", "<UNK>"]);
        assert_eq!(v.tokens, ["the", "cat", "<PAD>", "<UNK>"]);
    }
}
