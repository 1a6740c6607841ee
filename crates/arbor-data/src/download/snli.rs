//! SNLI for the examples: [`ensure_snli`] uses the files already there or downloads the
//! official archive.

use std::path::{Path, PathBuf};

use super::archive::unzip;
use super::catalogue::SNLI_ZIP;
use super::verify::Expected;
use super::{download_verified, DownloadOptions};
use crate::error::DataError;

/// Where the SNLI splits are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnliPaths {
    /// `snli_1.0_train.jsonl`, if present.
    pub train: Option<PathBuf>,
    /// `snli_1.0_dev.jsonl`, if present.
    pub dev: Option<PathBuf>,
    /// `snli_1.0_test.jsonl`, if present.
    pub test: Option<PathBuf>,
}

impl SnliPaths {
    /// Looks for the split files directly in `dir` or in `dir/snli_1.0/`.
    pub fn find(dir: &Path) -> SnliPaths {
        let look = |split: &str| {
            let name = format!("snli_1.0_{split}.jsonl");
            [dir.join(&name), dir.join("snli_1.0").join(&name)]
                .into_iter()
                .find(|p| p.is_file())
        };
        SnliPaths {
            train: look("train"),
            dev: look("dev"),
            test: look("test"),
        }
    }

    /// Whether no split was found.
    pub fn is_empty(&self) -> bool {
        self.train.is_none() && self.dev.is_none() && self.test.is_none()
    }
}

/// SNLI for an example: use the files in `dir` (or `dir/snli_1.0/`) if any split is there, else
/// download the official zip into `dir`, else fail with a message that says exactly what to put
/// where.
pub fn ensure_snli(dir: impl AsRef<Path>) -> Result<SnliPaths, DataError> {
    ensure_snli_from(dir, SNLI_ZIP.url, &DownloadOptions::default())
}

/// [`ensure_snli`] with an explicit archive URL (tests use an unreachable one). The recorded
/// size and SHA-256 are checked only when `url` is the official one.
pub fn ensure_snli_from(
    dir: impl AsRef<Path>,
    url: &str,
    opts: &DownloadOptions,
) -> Result<SnliPaths, DataError> {
    let dir = dir.as_ref();
    let found = SnliPaths::find(dir);
    if !found.is_empty() {
        return Ok(found);
    }
    let archive = dir.join("snli_1.0.zip");
    // The recorded size and hash apply only to the official URL.
    let expected = if url == SNLI_ZIP.url {
        SNLI_ZIP.expected()
    } else {
        Expected::default()
    };
    let fetched =
        download_verified(url, &archive, expected, opts).and_then(|_| unzip(&archive, dir));
    if let Err(e) = fetched {
        return Err(DataError::Missing(format!(
            "SNLI not found in {d}. Tried to download it: {e}\nPut the official files at \
             {d}/snli_1.0/snli_1.0_train.jsonl, {d}/snli_1.0/snli_1.0_dev.jsonl and \
             {d}/snli_1.0/snli_1.0_test.jsonl (from {url}, extracted), or place the zip itself \
             at {a} and run again.",
            d = dir.display(),
            a = archive.display(),
        )));
    }
    let found = SnliPaths::find(dir);
    if found.is_empty() {
        return Err(DataError::Missing(format!(
            "{} did not contain snli_1.0/snli_1.0_*.jsonl",
            archive.display()
        )));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::tests::quiet;
    use super::*;

    #[test]
    fn existing_files_are_used() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("snli_1.0")).unwrap();
        fs::write(dir.path().join("snli_1.0/snli_1.0_dev.jsonl"), "").unwrap();
        let p = ensure_snli_from(dir.path(), "http://127.0.0.1:9/", &quiet()).unwrap();
        assert_eq!(p.dev, Some(dir.path().join("snli_1.0/snli_1.0_dev.jsonl")));
        assert_eq!(p.train, None);
    }
}
