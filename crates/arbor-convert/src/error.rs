//! Why a conversion failed.

use std::fmt;
use std::path::PathBuf;

/// Why a state dict, checkpoint or safetensors file could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The source's tensors do not fit the layout being imported: every problem at once
    /// (missing keys, keys nothing reads, wrong shapes), never a partial load.
    #[error("{path}: does not match the {layout} layout ({} problem{}):\n{}", problems.len(), if problems.len() == 1 { "" } else { "s" }, Problems(problems))]
    Layout {
        /// The source file.
        path: PathBuf,
        /// Which layout was expected (e.g. `gumbel-snli`).
        layout: String,
        /// One line per problem.
        problems: Vec<String>,
    },
    /// A setting (a flag, or a configuration read from a file) is invalid.
    #[error("{0}")]
    Config(String),
    /// An arbor checkpoint (or its metadata) cannot be used.
    #[error(transparent)]
    Checkpoint(#[from] arbor_train::CheckpointError),
}

struct Problems<'a>(&'a [String]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl ConvertError {
    /// A [`ConvertError::File`] error for `path`.
    pub fn file(path: impl Into<PathBuf>, message: impl fmt::Display) -> Self {
        ConvertError::File {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
