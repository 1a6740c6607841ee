//! The crate's error type: every reader names the file, the 1-based line and what is wrong.

use std::fmt;
use std::path::{Path, PathBuf};

/// What is wrong with a bracketed tree or a transition sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The input holds no tree at all.
    #[error("empty tree")]
    Empty,
    /// A `)` without a matching `(`, or a `(` never closed.
    #[error("unbalanced bracket: {0}")]
    Unbalanced(String),
    /// `()` or `(X)`: a constituent without any word.
    #[error("empty constituent")]
    EmptyConstituent,
    /// More input after the end of the first complete tree.
    #[error("text after the end of the tree: {0:?}")]
    Trailing(String),
    /// A node with other than two children where a binary tree is required.
    #[error("node with {0} children in a binary tree")]
    NotBinary(usize),
    /// Nesting deeper than [`crate::tree::MAX_DEPTH`].
    #[error("tree nested deeper than {0} levels")]
    TooDeep(usize),
    /// An invalid SHIFT/REDUCE/SKIP sequence.
    #[error("invalid transitions: {0}")]
    Transitions(String),
    /// Invalid per-layer merge indices (Gumbel Tree-LSTM style).
    #[error("invalid layer indices: {0}")]
    LayerIndices(String),
    /// Spans that cross or do not fit the sentence.
    #[error("invalid spans: {0}")]
    Spans(String),
    /// Word-piece counts that do not match the tree.
    #[error("word-piece counts do not match the tree: {0}")]
    Pieces(String),
}

/// What is wrong with one record (one line, one JSON object) of a data file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// The line is not valid UTF-8.
    #[error("invalid UTF-8")]
    InvalidUtf8,
    /// The sentence (or formula) has no tokens.
    #[error("empty sentence")]
    EmptySentence,
    /// A tab-separated line with the wrong number of columns.
    #[error("wrong column count: expected {expected}, found {found}")]
    ColumnCount {
        /// Number of columns the format needs.
        expected: usize,
        /// Number of columns found.
        found: usize,
    },
    /// A label outside the format's label set.
    #[error("unknown label {0:?}")]
    UnknownLabel(String),
    /// A malformed bracketed tree.
    #[error("{0}")]
    Tree(#[from] TreeError),
    /// A line that is not valid JSON (or not a JSON object).
    #[error("invalid JSON: {0}")]
    Json(String),
    /// A JSON field the format requires is missing or not a string.
    #[error("missing or non-string field {0:?}")]
    MissingField(String),
    /// A number that does not parse (embedding files).
    #[error("invalid number {0:?}")]
    Number(String),
    /// A line longer than any record of the formats arbor reads (see
    /// [`MAX_LINE_BYTES`](crate::MAX_LINE_BYTES)): refused before it is held in memory
    /// whole or handed to a model whose cost grows with its length.
    #[error(
        "line longer than {limit} bytes: no record of this format is that long (a corrupt or \
         hostile file?)"
    )]
    LineTooLong {
        /// The limit.
        limit: usize,
    },
    /// A sentence longer than [`ReadOptions::max_tokens`].
    #[error("a sentence of {tokens} tokens, over the limit of {max} (--max-sentence-len)")]
    TooLong {
        /// Its tokens.
        tokens: usize,
        /// The limit.
        max: usize,
    },
    /// Anything else, described in words.
    #[error("{0}")]
    Other(String),
}

/// The error type of every fallible function in this crate.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A malformed record: file, 1-based line and what is wrong.
    #[error("{}:{line}: {kind}", path.display())]
    Record {
        /// The file (or a name such as `<memory>` for in-memory input).
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        kind: RecordError,
    },
    /// A corpus file that is not there (and could not be downloaded); the message says exactly
    /// which file to put where.
    #[error("{0}")]
    Missing(String),
    /// A download failed.
    #[error("download of {url} failed: {message}")]
    Download {
        /// The URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A downloaded file does not have the known SHA-256.
    #[error("checksum mismatch for {}: expected {expected}, got {actual}", path.display())]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Known checksum.
        expected: String,
        /// Computed checksum.
        actual: String,
    },
    /// An error from the `tokenizers` crate.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Invalid arguments or inconsistent inputs, described in words.
    #[error("{0}")]
    Invalid(String),
}

impl DataError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A record error at `path:line`.
    pub fn record(path: impl AsRef<Path>, line: usize, kind: impl Into<RecordError>) -> Self {
        DataError::Record {
            path: path.as_ref().to_path_buf(),
            line,
            kind: kind.into(),
        }
    }

    /// The record-level error, if this is one.
    pub fn record_kind(&self) -> Option<&RecordError> {
        match self {
            DataError::Record { kind, .. } => Some(kind),
            _ => None,
        }
    }
}

/// Options shared by every reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip malformed records and count them instead of failing on the first one.
    pub skip_bad: bool,
    /// Refuse (or, with `skip_bad`, skip and count) a record whose sentence has more tokens
    /// than this (`None`: no limit): the sentence readers (SNLI, SST, logic, ListOps,
    /// treebanks) check it, naming file and line, so one huge sentence cannot reach a model
    /// whose cost grows with its length.
    pub max_tokens: Option<usize>,
}

impl ReadOptions {
    /// Fail on the first malformed record (the default).
    pub fn strict() -> Self {
        ReadOptions {
            skip_bad: false,
            max_tokens: None,
        }
    }

    /// Skip and count malformed records.
    pub fn lenient() -> Self {
        ReadOptions {
            skip_bad: true,
            max_tokens: None,
        }
    }

    /// These options with a sentence-length limit (see [`ReadOptions::max_tokens`]).
    pub fn with_max_tokens(self, max_tokens: Option<usize>) -> Self {
        ReadOptions { max_tokens, ..self }
    }

    /// The [`RecordError::TooLong`] of a sentence of `tokens` tokens, if over the limit.
    pub(crate) fn check_tokens(&self, tokens: usize) -> Result<(), RecordError> {
        match self.max_tokens {
            Some(max) if tokens > max => Err(RecordError::TooLong { tokens, max }),
            _ => Ok(()),
        }
    }
}

/// Records read from a file, with the number of malformed records skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded<T> {
    /// The records, in file order.
    pub records: Vec<T>,
    /// Malformed records skipped (only non-zero with [`ReadOptions::skip_bad`]).
    pub skipped: usize,
    /// Well-formed records left out by the format's rules (SNLI gold label `-`, header lines,
    /// SST-2 neutral trees, ...).
    pub filtered: usize,
    /// The first few skipped-record errors (at most 10), for reporting.
    pub errors: Vec<String>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Loaded {
            records: Vec::new(),
            skipped: 0,
            filtered: 0,
            errors: Vec::new(),
        }
    }
}

impl<T> Loaded<T> {
    /// Number of records kept.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record was kept.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Applies `f` to every record, keeping the counts.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Loaded<U> {
        Loaded {
            records: self.records.into_iter().map(f).collect(),
            skipped: self.skipped,
            filtered: self.filtered,
            errors: self.errors,
        }
    }
}

impl<T> fmt::Display for Loaded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} records ({} skipped as malformed, {} filtered)",
            self.len(),
            self.skipped,
            self.filtered
        )
    }
}
