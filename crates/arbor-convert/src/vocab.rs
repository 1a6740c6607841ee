//! Reference vocabularies → arbor vocabularies, with the embedding-row permutation between them.
//!
//! arbor's word vocabularies start with `<pad>` (id 0) and `<unk>` (id 1); reference code bases
//! put their padding and unknown-word tokens elsewhere (jihunchoi/unsupervised-treelstm appends
//! `<PAD>` and `<UNK>` after the words). An import keeps every reference row and only moves
//! them: [`ReferenceVocab::to_arbor`] gives arbor's token list and, for each arbor id, the
//! reference row it takes.

use std::path::Path;

use crate::ConvertError;

/// A reference vocabulary in id order, with the names of its padding and unknown tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceVocab {
    /// Tokens in reference id order.
    pub tokens: Vec<String>,
    /// The reference's padding token.
    pub pad: String,
    /// The reference's unknown-word token.
    pub unk: String,
}

impl ReferenceVocab {
    /// Reads a vocabulary file: one entry per line in id order, the token being the line's first
    /// whitespace-separated field (so `word<TAB>count` files work); blank lines are refused.
    /// `limit` keeps the first entries only (the reference's `--vocab-size`). When the file
    /// does not list `pad` / `unk`, they are appended after the words, in that order (what
    /// `utils/vocab.py` of unsupervised-treelstm does with `add_pad`, `add_unk`).
    ///
    /// # Errors
    /// An unreadable file, a blank line (named by number) or a duplicate token.
    pub fn read(
        path: &Path,
        limit: Option<usize>,
        pad: &str,
        unk: &str,
    ) -> Result<Self, ConvertError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConvertError::file(path, e))?;
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if limit.is_some_and(|n| tokens.len() >= n) {
                break;
            }
            let Some(token) = line.split_whitespace().next() else {
                return Err(ConvertError::file(
                    path,
                    format!("line {}: empty line in a vocabulary file", i + 1),
                ));
            };
            tokens.push(token.to_string());
        }
        for special in [pad, unk] {
            if !tokens.iter().any(|t| t == special) {
                tokens.push(special.to_string());
            }
        }
        let v = ReferenceVocab {
            tokens,
            pad: pad.to_string(),
            unk: unk.to_string(),
        };
        v.check_unique().map_err(|e| ConvertError::file(path, e))?;
        Ok(v)
    }

    fn check_unique(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            if !seen.insert(t.as_str()) {
                return Err(format!("duplicate vocabulary entry {t:?} (id {i})"));
            }
        }
        Ok(())
    }

    /// The arbor vocabulary (`<pad>`, `<unk>`, then the other tokens in reference order) and,
    /// for each arbor id, the reference id whose embedding row it takes.
    ///
    /// # Errors
    /// When `n_rows` (the embedding's row count) differs from the vocabulary size, or the
    /// reference's padding/unknown tokens are missing.
    pub fn to_arbor(&self, n_rows: usize) -> Result<(Vec<String>, Vec<usize>), ConvertError> {
        if self.tokens.len() != n_rows {
            return Err(ConvertError::Config(format!(
                "the vocabulary has {} entries (with {} and {}) but the embedding has {n_rows} \
                 rows: give the vocabulary file (and --vocab-size) the model was trained with",
                self.tokens.len(),
                self.pad,
                self.unk
            )));
        }
        let find = |t: &str| {
            self.tokens
                .iter()
                .position(|x| x == t)
                .ok_or_else(|| ConvertError::Config(format!("the vocabulary has no {t:?} token")))
        };
        let pad = find(&self.pad)?;
        let unk = find(&self.unk)?;
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
        let v = ReferenceVocab::read(&p, None, "<PAD>", "<UNK>").unwrap();
        assert_eq!(v.tokens, ["the", "cat", "sat", "<PAD>", "<UNK>"]);
        let (tokens, rows) = v.to_arbor(5).unwrap();
        assert_eq!(tokens, ["<pad>", "<unk>", "the", "cat", "sat"]);
        assert_eq!(rows, [3, 4, 0, 1, 2]);
        assert!(v.to_arbor(6).unwrap_err().to_string().contains("6 rows"));
        let v = ReferenceVocab::read(&p, Some(2), "<PAD>", "<UNK>").unwrap();
        assert_eq!(v.tokens, ["the", "cat", "<PAD>", "<UNK>"]);
        std::fs::write(&p, "a\n\nb\n").unwrap();
        let err = ReferenceVocab::read(&p, None, "<PAD>", "<UNK>").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        std::fs::write(&p, "a\nb\na\n").unwrap();
        let err = ReferenceVocab::read(&p, None, "<PAD>", "<UNK>").unwrap_err();
        assert!(err.to_string().contains("duplicate"), "{err}");
    }
}
