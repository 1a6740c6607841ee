//! BERT-style WordPiece tokenisation through the `tokenizers` crate, loaded offline from a
//! `vocab.txt` (one piece per line, id = line number), and WordPiece vocabulary training.
//!
//! The pipeline is BERT uncased's: `BertNormalizer` (clean text, Chinese characters spaced,
//! accents stripped, lower-case), `BertPreTokenizer` (split on whitespace and punctuation),
//! greedy longest-match WordPiece with `##` continuation pieces and `[UNK]` for words it
//! cannot cover. No `[CLS]`/`[SEP]` are added: model crates add their own specials.

use std::path::Path;

use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainer};
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Model, TokenizerImpl};

use crate::error::DataError;

type Inner = TokenizerImpl<
    WordPiece,
    BertNormalizer,
    BertPreTokenizer,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// The unknown-piece token of BERT vocabularies.
pub const WP_UNK: &str = "[UNK]";

/// The result of tokenising one sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordPieces {
    /// Piece strings, e.g. `["un", "##believ", "##able"]`.
    pub pieces: Vec<String>,
    /// Piece ids in the vocabulary.
    pub ids: Vec<u32>,
    /// For each piece, the index of the word it belongs to.
    pub word_ids: Vec<usize>,
}

impl WordPieces {
    /// Number of pieces of each word, in word order (the input of
    /// [`crate::tree::BinaryTree::to_pieces`]). Words that produced no piece are absent.
    pub fn piece_counts(&self) -> Vec<usize> {
        let mut counts: Vec<usize> = Vec::new();
        let mut last: Option<usize> = None;
        for &w in &self.word_ids {
            if last == Some(w) {
                *counts.last_mut().expect("non-empty") += 1;
            } else {
                counts.push(1);
                last = Some(w);
            }
        }
        counts
    }

    /// Whether piece `i` starts a word (word boundaries for word-level evaluation).
    pub fn starts_word(&self, i: usize) -> bool {
        i == 0 || self.word_ids.get(i) != self.word_ids.get(i - 1)
    }
}

/// A WordPiece tokenizer with the BERT uncased pipeline.
pub struct WordPieceTokenizer {
    inner: Inner,
    vocab_size: usize,
}

impl std::fmt::Debug for WordPieceTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordPieceTokenizer")
            .field("vocab_size", &self.vocab_size)
            .finish()
    }
}

fn tk_err(e: impl std::fmt::Display) -> DataError {
    DataError::Tokenizer(e.to_string())
}

fn pipeline(model: WordPiece, lowercase: bool) -> Inner {
    let mut t = TokenizerImpl::new(model);
    t.with_normalizer(Some(BertNormalizer::new(
        true,
        true,
        Some(lowercase),
        lowercase,
    )));
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    t
}

impl WordPieceTokenizer {
    /// Loads `vocab.txt` (BERT format) offline. `lowercase` selects the uncased pipeline
    /// (lower-case and strip accents), which is what `bert-base-uncased` and R2D2 use.
    pub fn from_vocab_file(path: impl AsRef<Path>, lowercase: bool) -> Result<Self, DataError> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(DataError::Missing(format!(
                "WordPiece vocabulary not found: put BERT uncased vocab.txt at {}",
                path.display()
            )));
        }
        let p = path
            .to_str()
            .ok_or_else(|| DataError::Invalid("non-UTF-8 path".into()))?;
        let model = WordPiece::from_file(p)
            .unk_token(WP_UNK.into())
            .build()
            .map_err(|e| {
                DataError::Invalid(format!(
                    "{}: not a WordPiece vocabulary (one piece per line, UTF-8): {e}",
                    path.display()
                ))
            })?;
        Ok(Self::from_model(model, lowercase))
    }

    /// A tokenizer from an in-memory vocabulary (id = position).
    pub fn from_pieces<S: AsRef<str>>(pieces: &[S], lowercase: bool) -> Result<Self, DataError> {
        let vocab: ahash::AHashMap<String, u32> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_ref().to_string(), i as u32))
            .collect();
        let model = WordPiece::builder()
            .vocab(vocab)
            .unk_token(WP_UNK.into())
            .build()
            .map_err(tk_err)?;
        Ok(Self::from_model(model, lowercase))
    }

    /// Wraps a built WordPiece model in the BERT normalisation/pre-tokenisation pipeline.
    fn from_model(model: WordPiece, lowercase: bool) -> Self {
        let vocab_size = model.get_vocab_size();
        WordPieceTokenizer {
            inner: pipeline(model, lowercase),
            vocab_size,
        }
    }

    /// Number of pieces in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Id of a piece.
    pub fn piece_id(&self, piece: &str) -> Option<u32> {
        self.inner.get_model().token_to_id(piece)
    }

    /// Piece of an id.
    pub fn id_piece(&self, id: u32) -> Option<String> {
        self.inner.get_model().id_to_token(id)
    }

    fn convert(enc: tokenizers::Encoding) -> WordPieces {
        let word_ids = enc
            .get_word_ids()
            .iter()
            .map(|w| w.unwrap_or(0) as usize)
            .collect();
        WordPieces {
            pieces: enc.get_tokens().to_vec(),
            ids: enc.get_ids().to_vec(),
            word_ids,
        }
    }

    /// Tokenises raw text; words are the pre-tokenizer's (whitespace and punctuation split).
    pub fn encode(&self, text: &str) -> Result<WordPieces, DataError> {
        self.inner
            .encode(text, false)
            .map(Self::convert)
            .map_err(tk_err)
    }

    /// Tokenises already-tokenised words; `word_ids` index into `words`.
    pub fn encode_words<S: AsRef<str>>(&self, words: &[S]) -> Result<WordPieces, DataError> {
        let ws: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
        self.inner
            .encode(ws.as_slice(), false)
            .map(Self::convert)
            .map_err(tk_err)
    }
}

/// Settings of [`train_wordpiece`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordPieceTrainConfig {
    /// Target vocabulary size (specials included).
    pub vocab_size: usize,
    /// Minimum pair frequency for a merge.
    pub min_frequency: u64,
    /// Special tokens placed first, in order.
    pub special_tokens: Vec<String>,
    /// Lower-case and strip accents.
    pub lowercase: bool,
}

impl Default for WordPieceTrainConfig {
    fn default() -> Self {
        WordPieceTrainConfig {
            vocab_size: 30_000,
            min_frequency: 2,
            special_tokens: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                .map(String::from)
                .to_vec(),
            lowercase: true,
        }
    }
}

/// Trains a WordPiece vocabulary on `lines` with the `tokenizers` trainer and returns the pieces
/// in id order (write them one per line to get a `vocab.txt`): the special tokens first, in
/// their configured order, then every other piece sorted (whole-word pieces before `##`
/// continuations, then by text). The trainer numbers pieces in hash-map order, which differs
/// from run to run; the sort makes the ids a function of the input, so a run with the same seed
/// and text reproduces.
pub fn train_wordpiece<I, S>(
    lines: I,
    config: &WordPieceTrainConfig,
) -> Result<Vec<String>, DataError>
where
    I: IntoIterator<Item = S>,
    I::IntoIter: Send,
    S: AsRef<str> + Send,
{
    let mut trainer: WordPieceTrainer = WordPieceTrainer::builder()
        .vocab_size(config.vocab_size)
        .min_frequency(config.min_frequency)
        .show_progress(false)
        .special_tokens(
            config
                .special_tokens
                .iter()
                .map(|s| AddedToken::from(s.clone(), true))
                .collect(),
        )
        .build();
    let mut tok = pipeline(WordPiece::default(), config.lowercase);
    tok.train(&mut trainer, lines.into_iter()).map_err(tk_err)?;
    let learned: std::collections::BTreeSet<(bool, String)> = tok
        .get_model()
        .get_vocab()
        .into_keys()
        .filter(|p| !config.special_tokens.contains(p))
        .map(|p| (p.starts_with("##"), p))
        .collect();
    let mut pieces: Vec<String> = config
        .special_tokens
        .iter()
        .filter(|s| tok.get_model().get_vocab().contains_key(*s))
        .cloned()
        .collect();
    pieces.extend(learned.into_iter().map(|(_, p)| p));
    Ok(pieces)
}

/// Writes pieces one per line (a BERT `vocab.txt`).
pub fn save_vocab_txt(pieces: &[String], path: impl AsRef<Path>) -> Result<(), DataError> {
    let path = path.as_ref();
    let mut s = String::new();
    for p in pieces {
        s.push_str(p);
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|e| DataError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> WordPieceTokenizer {
        let pieces = [
            "[PAD]", "[UNK]", "the", "cat", "un", "##believ", "##able", "cafe", ",", ".",
        ];
        WordPieceTokenizer::from_pieces(&pieces, true).unwrap()
    }

    #[test]
    fn encodes_with_word_ids() {
        let t = small();
        let e = t.encode("The unbelievable CAFÉ, cat.").unwrap();
        assert_eq!(
            e.pieces,
            ["the", "un", "##believ", "##able", "cafe", ",", "cat", "."]
        );
        assert_eq!(e.ids, vec![2, 4, 5, 6, 7, 8, 3, 9]);
        assert_eq!(e.word_ids, vec![0, 1, 1, 1, 2, 3, 4, 5]);
        assert_eq!(e.piece_counts(), vec![1, 3, 1, 1, 1, 1]);
        assert!(e.starts_word(1) && !e.starts_word(2));
        let w = t.encode_words(&["unbelievable", "dog"]).unwrap();
        assert_eq!(w.pieces, ["un", "##believ", "##able", "[UNK]"]);
        assert_eq!(w.word_ids, vec![0, 0, 0, 1]);
    }

    #[test]
    fn training_is_deterministic() {
        let text = [
            "the cat sat on the mat . the dog sat on the log .",
            "a cat saw a dog ! dogs and cats saw the mat .",
        ];
        let config = WordPieceTrainConfig {
            vocab_size: 60,
            ..WordPieceTrainConfig::default()
        };
        let first = train_wordpiece(text, &config).unwrap();
        assert_eq!(
            first[..config.special_tokens.len()],
            config.special_tokens[..]
        );
        for _ in 0..8 {
            assert_eq!(train_wordpiece(text, &config).unwrap(), first);
        }
    }

    #[test]
    fn trains_a_vocab() {
        let lines = vec!["the cat sat on the mat"; 20];
        let cfg = WordPieceTrainConfig {
            vocab_size: 60,
            min_frequency: 1,
            ..Default::default()
        };
        let pieces = train_wordpiece(lines, &cfg).unwrap();
        assert_eq!(&pieces[..5], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
        assert!(pieces.contains(&"the".to_string()));
        assert!(pieces.len() <= 60);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vocab.txt");
        save_vocab_txt(&pieces, &p).unwrap();
        let t = WordPieceTokenizer::from_vocab_file(&p, true).unwrap();
        assert_eq!(t.encode("the cat").unwrap().pieces, ["the", "cat"]);
        let garbage = dir.path().join("garbage.bin");
        std::fs::write(&garbage, [0xffu8, 0xfe, 0x00, 0x80, b'\n', 0xc3]).unwrap();
        let Err(e) = WordPieceTokenizer::from_vocab_file(&garbage, true) else {
            panic!("a binary file is not a vocabulary");
        };
        let e = e.to_string();
        assert!(
            e.contains("garbage.bin") && e.contains("not a WordPiece vocabulary"),
            "{e}"
        );
        let missing = WordPieceTokenizer::from_vocab_file(dir.path().join("nope.txt"), true);
        assert!(missing.unwrap_err().to_string().contains("nope.txt"));
    }
}
