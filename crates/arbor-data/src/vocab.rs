//! Word vocabularies and pre-trained word vectors (GloVe / word2vec text format).
//!
//! A [`Vocab`] always starts with the specials `<pad>` = 0 and `<unk>` = 1, then any extra
//! specials, then words by decreasing frequency (ties broken alphabetically, so building is
//! deterministic). Saved as a text file with one token per line; the id is the line number
//! (0-based).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use rand::{RngExt, SeedableRng};

use crate::error::{DataError, RecordError};
use crate::io::open;

/// Padding token, id 0.
pub const PAD: &str = "<pad>";
/// Unknown-word token, id 1.
pub const UNK: &str = "<unk>";
/// Id of [`PAD`].
pub const PAD_ID: u32 = 0;
/// Id of [`UNK`].
pub const UNK_ID: u32 = 1;

/// How [`Vocab::build`] selects words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VocabConfig {
    /// Keep words seen at least this often.
    pub min_freq: usize,
    /// At most this many entries in total, specials included (`None`: no cap).
    pub max_size: Option<usize>,
    /// Extra special tokens after `<pad>` and `<unk>` (e.g. `<eos>`).
    pub extra_specials: Vec<String>,
}

impl Default for VocabConfig {
    fn default() -> Self {
        VocabConfig {
            min_freq: 1,
            max_size: None,
            extra_specials: Vec::new(),
        }
    }
}

/// A token ↔ id mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    tokens: Vec<String>,
    index: HashMap<String, u32>,
}

impl Vocab {
    /// A vocabulary from a token list, in id order. The list must start with `<pad>`, `<unk>`
    /// and contain no duplicates.
    pub fn from_tokens(tokens: Vec<String>) -> Result<Self, DataError> {
        if tokens.len() < 2 || tokens[0] != PAD || tokens[1] != UNK {
            return Err(DataError::Invalid(format!(
                "a vocabulary must start with {PAD} and {UNK}"
            )));
        }
        let mut index = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            if index.insert(t.clone(), i as u32).is_some() {
                return Err(DataError::Invalid(format!(
                    "duplicate vocabulary entry {t:?}"
                )));
            }
        }
        Ok(Vocab { tokens, index })
    }

    /// Builds a vocabulary from token counts of `corpus`.
    pub fn build<I, S>(corpus: I, config: &VocabConfig) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for t in corpus {
            *counts.entry(t.as_ref().to_string()).or_default() += 1;
        }
        let mut tokens: Vec<String> = vec![PAD.into(), UNK.into()];
        for s in &config.extra_specials {
            if !tokens.contains(s) {
                tokens.push(s.clone());
            }
        }
        let mut words: Vec<(String, usize)> = counts
            .into_iter()
            .filter(|(w, c)| *c >= config.min_freq.max(1) && !tokens.contains(w))
            .collect();
        words.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let room = config
            .max_size
            .map(|m| m.saturating_sub(tokens.len()))
            .unwrap_or(usize::MAX);
        tokens.extend(words.into_iter().take(room).map(|(w, _)| w));
        Vocab::from_tokens(tokens).expect("specials first, no duplicates")
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Never true: a vocabulary always holds the specials.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Id of `token`, if present.
    pub fn get(&self, token: &str) -> Option<u32> {
        self.index.get(token).copied()
    }

    /// Id of `token`, or `<unk>`.
    pub fn id(&self, token: &str) -> u32 {
        self.get(token).unwrap_or(UNK_ID)
    }

    /// Token of `id`, if in range.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// All tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Ids of `tokens` (unknown words → `<unk>`).
    pub fn encode<S: AsRef<str>>(&self, tokens: &[S]) -> Vec<u32> {
        tokens.iter().map(|t| self.id(t.as_ref())).collect()
    }

    /// Id of `token`, else of its lower-cased form, else of its upper-cased form, else `<unk>`:
    /// the lookup of the SPINN port (nyu-mll/spinn), which imported SPINN vocabularies need.
    pub fn id_case_fallback(&self, token: &str) -> u32 {
        self.get(token)
            .or_else(|| self.get(&token.to_lowercase()))
            .or_else(|| self.get(&token.to_uppercase()))
            .unwrap_or(UNK_ID)
    }

    /// Ids of `tokens`, each looked up as is or, with `case_fallback`, as
    /// [`Vocab::id_case_fallback`] does.
    pub fn encode_with<S: AsRef<str>>(&self, tokens: &[S], case_fallback: bool) -> Vec<u32> {
        if case_fallback {
            tokens
                .iter()
                .map(|t| self.id_case_fallback(t.as_ref()))
                .collect()
        } else {
            self.encode(tokens)
        }
    }

    /// Tokens of `ids` (out-of-range ids → `<unk>`).
    pub fn decode(&self, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&i| self.token(i).unwrap_or(UNK).to_string())
            .collect()
    }

    /// Writes one token per line.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), DataError> {
        let path = path.as_ref();
        let mut s = String::new();
        for t in &self.tokens {
            s.push_str(t);
            s.push('\n');
        }
        std::fs::write(path, s).map_err(|e| DataError::io(path, e))
    }

    /// Reads a file written by [`Vocab::save`] (one token per line, id = line number).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, DataError> {
        let path = path.as_ref();
        let mut tokens = Vec::new();
        for (i, line) in open(path)?.split(b'\n').enumerate() {
            let mut line = line.map_err(|e| DataError::io(path, e))?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let t = String::from_utf8(line)
                .map_err(|_| DataError::record(path, i + 1, RecordError::InvalidUtf8))?;
            if t.is_empty() || t.contains(char::is_whitespace) {
                return Err(DataError::record(
                    path,
                    i + 1,
                    RecordError::Other("empty token or token with whitespace".into()),
                ));
            }
            tokens.push(t);
        }
        Vocab::from_tokens(tokens)
    }
}

/// How many vocabulary entries found a pre-trained vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Entries with a vector for the exact token.
    pub exact: usize,
    /// Entries found only through their lower-cased form.
    pub lowercase: usize,
    /// Entries without a vector (initialised randomly; `<pad>` stays zero and is not counted).
    pub missing: usize,
    /// Lines of the vector file read.
    pub file_vectors: usize,
}

impl Coverage {
    /// Fraction of non-pad entries that found a vector.
    pub fn fraction(&self) -> f64 {
        let total = self.exact + self.lowercase + self.missing;
        if total == 0 {
            0.0
        } else {
            (self.exact + self.lowercase) as f64 / total as f64
        }
    }
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}% of the vocabulary covered ({} exact, {} lower-cased, {} missing; {} vectors in file)",
            100.0 * self.fraction(),
            self.exact,
            self.lowercase,
            self.missing,
            self.file_vectors
        )
    }
}

/// An embedding matrix for a vocabulary: `rows × dim` values, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Row-major values; row `i` is token id `i`.
    pub data: Vec<f32>,
    /// Number of rows (= vocabulary size).
    pub rows: usize,
    /// Vector width.
    pub dim: usize,
    /// Coverage report.
    pub coverage: Coverage,
}

impl Embeddings {
    /// Row `id`.
    pub fn row(&self, id: u32) -> &[f32] {
        let i = id as usize * self.dim;
        &self.data[i..i + self.dim]
    }
}

/// Reads GloVe or word2vec *text* vectors (`word v1 … vD` per line; a first line `count dim`
/// is skipped) into an embedding matrix for `vocab`. Words may contain spaces (GloVe 840B): the
/// last `dim` fields are the numbers. Entries without a vector get `U(-init_scale, init_scale)`
/// values from `seed`; `<pad>` is all zeros. An exact match wins over a lower-cased one.
pub fn load_text_vectors(
    path: impl AsRef<Path>,
    vocab: &Vocab,
    init_scale: f32,
    seed: u64,
) -> Result<Embeddings, DataError> {
    let path = path.as_ref();
    parse_text_vectors(open(path)?, path, vocab, init_scale, seed)
}

/// [`load_text_vectors`] from any reader; `name` appears in errors.
pub fn parse_text_vectors<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    vocab: &Vocab,
    init_scale: f32,
    seed: u64,
) -> Result<Embeddings, DataError> {
    let name = name.as_ref();
    let mut dim: Option<usize> = None;
    let mut found: Vec<Option<(Vec<f32>, bool)>> = vec![None; vocab.len()];
    let mut lower: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, t) in vocab.tokens().iter().enumerate() {
        lower.entry(t.to_lowercase()).or_default().push(i as u32);
    }
    let mut file_vectors = 0;
    for (i, line) in reader.split(b'\n').enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| DataError::io(name, e))?;
        let text = std::str::from_utf8(&line)
            .map_err(|_| DataError::record(name, line_no, RecordError::InvalidUtf8))?;
        let text = text.trim_end_matches(['\r', '\n', ' ']);
        if text.is_empty() {
            continue;
        }
        let fields: Vec<&str> = text.split(' ').collect();
        if line_no == 1 && fields.len() == 2 && fields.iter().all(|f| f.parse::<usize>().is_ok()) {
            dim = fields[1].parse().ok();
            continue;
        }
        let d = *dim.get_or_insert(fields.len().saturating_sub(1));
        if d == 0 || fields.len() < d + 1 {
            return Err(DataError::record(
                name,
                line_no,
                RecordError::ColumnCount {
                    expected: d + 1,
                    found: fields.len(),
                },
            ));
        }
        let split = fields.len() - d;
        let word = fields[..split].join(" ");
        let mut v = Vec::with_capacity(d);
        for f in &fields[split..] {
            v.push(f.parse::<f32>().map_err(|_| {
                DataError::record(name, line_no, RecordError::Number(f.to_string()))
            })?);
        }
        file_vectors += 1;
        if let Some(id) = vocab.get(&word) {
            found[id as usize] = Some((v.clone(), true));
        }
        if let Some(ids) = lower.get(&word.to_lowercase()) {
            for &id in ids {
                if found[id as usize].is_none() {
                    found[id as usize] = Some((v.clone(), false));
                }
            }
        }
    }
    let dim = dim
        .filter(|&d| d > 0)
        .ok_or_else(|| DataError::Invalid(format!("{}: no vectors found", name.display())))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut data = Vec::with_capacity(vocab.len() * dim);
    let mut coverage = Coverage {
        file_vectors,
        ..Coverage::default()
    };
    for (id, f) in found.into_iter().enumerate() {
        if id == PAD_ID as usize {
            data.extend(std::iter::repeat_n(0.0, dim));
            continue;
        }
        match f {
            Some((v, exact)) => {
                if exact {
                    coverage.exact += 1;
                } else {
                    coverage.lowercase += 1;
                }
                data.extend(v);
            }
            None => {
                coverage.missing += 1;
                let s = init_scale.abs();
                data.extend((0..dim).map(|_| {
                    if s > 0.0 {
                        rng.random_range(-s..s)
                    } else {
                        0.0
                    }
                }));
            }
        }
    }
    Ok(Embeddings {
        data,
        rows: vocab.len(),
        dim,
        coverage,
    })
}

/// A word vocabulary of training sentences: every word seen at least once, lower-cased when
/// `lowercase` is set, no size cap and no extra specials.
pub fn word_vocab<'a>(sentences: impl Iterator<Item = &'a [String]>, lowercase: bool) -> Vocab {
    Vocab::build(
        sentences.flat_map(|s| s.iter()).map(|w| {
            if lowercase {
                w.to_lowercase()
            } else {
                w.clone()
            }
        }),
        &VocabConfig {
            min_freq: 1,
            max_size: None,
            extra_specials: Vec::new(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_encode_save_load() {
        let corpus = "the cat sat on the mat the end".split(' ');
        let v = Vocab::build(
            corpus,
            &VocabConfig {
                min_freq: 1,
                max_size: Some(5),
                extra_specials: vec!["<eos>".into()],
            },
        );
        assert_eq!(v.tokens(), ["<pad>", "<unk>", "<eos>", "the", "cat"]);
        assert_eq!(v.encode(&["the", "dog"]), vec![3, UNK_ID]);
        assert_eq!(v.decode(&[4, 99]), ["cat", "<unk>"]);
        let v2 = Vocab::build(
            "a a b b c".split(' '),
            &VocabConfig {
                min_freq: 2,
                ..Default::default()
            },
        );
        assert_eq!(v2.tokens(), ["<pad>", "<unk>", "a", "b"]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vocab.txt");
        v.save(&p).unwrap();
        assert_eq!(Vocab::load(&p).unwrap(), v);
        std::fs::write(&p, "<pad>\n<unk>\nx\nx\n").unwrap();
        assert!(Vocab::load(&p).is_err());
        std::fs::write(&p, "a\nb\n").unwrap();
        assert!(Vocab::load(&p).is_err());
    }

    #[test]
    fn vectors() {
        let v = Vocab::from_tokens(
            ["<pad>", "<unk>", "cat", "Dog", "emu"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        )
        .unwrap();
        let glove = "cat 1 2\ndog 3 4\nnew york 5 6\n";
        let e = parse_text_vectors(glove.as_bytes(), "g.txt", &v, 0.1, 0).unwrap();
        assert_eq!((e.rows, e.dim), (5, 2));
        assert_eq!(e.row(0), [0.0, 0.0]);
        assert_eq!(e.row(2), [1.0, 2.0]);
        assert_eq!(e.row(3), [3.0, 4.0]);
        assert!(e.row(4).iter().all(|x| x.abs() <= 0.1));
        assert_eq!(
            e.coverage,
            Coverage {
                exact: 1,
                lowercase: 1,
                missing: 2,
                file_vectors: 3
            }
        );
        let w2v = "2 2\ncat 1 2\nemu 0.5 x\n";
        let err = parse_text_vectors(w2v.as_bytes(), "w.txt", &v, 0.1, 0).unwrap_err();
        assert_eq!(err.to_string(), "w.txt:3: invalid number \"x\"");
        let short = "cat 1 2\ndog 3\n";
        let err = parse_text_vectors(short.as_bytes(), "s.txt", &v, 0.1, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.txt:2: wrong column count: expected 3, found 2"
        );
    }

    #[test]
    fn case_fallback_tries_lower_then_upper_case() {
        let v = Vocab::from_tokens(
            ["<pad>", "<unk>", "dog", "NASA", "Paris"]
                .map(String::from)
                .to_vec(),
        )
        .unwrap();
        let words = ["Dog", "nasa", "Paris", "paris", "cat"];
        assert_eq!(v.encode(&words), vec![1, 1, 4, 1, 1]);
        assert_eq!(v.encode_with(&words, true), vec![2, 3, 4, 1, 1]);
        assert_eq!(v.encode_with(&words, false), v.encode(&words));
    }
}
