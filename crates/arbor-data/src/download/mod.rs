//! Official corpus sources, a resumable downloader with progress bar and SHA-256 check, and
//! `ensure_*` helpers that examples call.
//!
//! Files go to `datasets/<name>/` (or any directory you pass). A download writes to
//! `<file>.part` first and resumes it with an HTTP `Range` request when run again. Before a file
//! is used it is checked against the byte size and SHA-256 recorded in [`CORPORA`] (each hash
//! names its published source); a file that does not match is moved to `<file>.corrupt` and the
//! error says what to do. Where no hash is recorded, the computed one is printed so it can be.
//! Zip archives are then extracted next to the file.
//!
//! A file already on disk is verified too. To avoid hashing a 2 GB archive on every run, a
//! successful check leaves `<file>.sha256` holding the hash with the file's size and
//! modification time; the hash is recomputed whenever either changes.
//!
//! When a download fails (e.g. no network), the error says exactly which file to fetch by other
//! means and where to put it.
//!
//! The parts: `catalogue` ([`CORPORA`], [`corpus`]), `http` (one resumable request with its
//! progress bar), `verify` ([`sha256_file`], [`Expected`], the `.sha256` cache and the
//! `.corrupt` rejection), `archive` ([`unzip`]) and `snli` ([`ensure_snli`]); this module ties
//! them together in [`download_verified`] and [`download_corpus`].

mod archive;
mod catalogue;
mod http;
mod snli;
mod verify;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::DataError;

pub use archive::unzip;
pub use catalogue::{corpus, Corpus, SourceFile, CORPORA};
pub use snli::{ensure_snli, ensure_snli_from, SnliPaths};
pub use verify::{sha256_file, Expected};

use http::{fetch, Fetched};
use verify::{check_file, print_unrecorded, reject, verify_existing, write_marker};

/// Downloader settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadOptions {
    /// Show an indicatif progress bar on stderr.
    pub progress: bool,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Longest wait for the server's answer or for the next bytes of the body; a stalled
    /// download ends with an error after this long (the `.part` file is kept for resuming).
    pub read_timeout: Duration,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            progress: true,
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(60),
        }
    }
}

/// `path` with `suffix` appended to its file name (`a.zip` -> `a.zip.part`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn remove_if_present(path: &Path) -> Result<(), DataError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DataError::io(path, e)),
    }
}

/// Downloads `url` to `dest` (resuming `dest.part`), checks `sha256` when given and returns the
/// file's SHA-256. An existing `dest` is only checked, not downloaded again. Same as
/// [`download_verified`] with no recorded size.
pub fn download_file(
    url: &str,
    dest: &Path,
    sha256: Option<&str>,
    opts: &DownloadOptions,
) -> Result<String, DataError> {
    download_verified(url, dest, Expected { sha256, size: None }, opts)
}

/// Downloads `url` to `dest` and returns the file's SHA-256, refusing a file that does not
/// match `expected`.
///
/// * An existing `dest` is not downloaded again but verified (size, then SHA-256, with the
///   `<dest>.sha256` cache described in the module docs).
/// * Otherwise the body goes to `<dest>.part`, resumed with a `Range` request when a partial
///   file is there. A `416 Range Not Satisfiable` answer only completes the download when the
///   partial file has the full size (from the reply's `Content-Range: bytes */N`, else the
///   recorded size); otherwise the partial file is discarded and the download starts again
///   from byte 0, once. A resumed download whose result does not match is also retried from 0
///   once.
/// * A finished download that does not match is moved to `<dest>.corrupt`; the error gives the
///   expected and actual values and what to do. Nothing is left at `dest`.
/// * A stalled server fails after `opts.read_timeout`, keeping the `.part` for the next run.
pub fn download_verified(
    url: &str,
    dest: &Path,
    expected: Expected<'_>,
    opts: &DownloadOptions,
) -> Result<String, DataError> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| DataError::io(parent, e))?;
    }
    if dest.is_file() {
        return verify_existing(url, dest, expected);
    }
    let part = with_suffix(dest, ".part");
    let mut restarted = false;
    loop {
        let mut have = file_len(&part);
        if expected.size.is_some_and(|size| have > size) {
            remove_if_present(&part)?;
            have = 0;
        }
        match fetch(url, dest, &part, have, expected, opts)? {
            Fetched::Restart(reason) => {
                remove_if_present(&part)?;
                if restarted {
                    return Err(DataError::Download {
                        url: url.to_string(),
                        message: format!(
                            "{reason}, even after starting again from byte 0. Download the file \
                             by hand from {url} and place it at {}.",
                            dest.display()
                        ),
                    });
                }
                eprintln!(
                    "{reason}; discarding {} and downloading from the start",
                    part.display()
                );
                restarted = true;
            }
            Fetched::Done { resumed } => match check_file(&part, expected)? {
                Ok(hash) => {
                    fs::rename(&part, dest).map_err(|e| DataError::io(dest, e))?;
                    write_marker(dest, &hash);
                    if expected.sha256.is_none() {
                        print_unrecorded(&hash, dest);
                    }
                    return Ok(hash);
                }
                Err(m) if resumed && !restarted => {
                    remove_if_present(&part)?;
                    eprintln!(
                        "the resumed download of {url} does not match (expected {} {}, got {}); \
                         downloading it again from the start",
                        m.what, m.expected, m.actual
                    );
                    restarted = true;
                }
                Err(m) => return Err(reject(url, dest, &part, &m, true)),
            },
        }
    }
}

/// Whether every expected path of `corpus` exists under `dir`.
pub fn is_ready(corpus: &Corpus, dir: &Path) -> bool {
    corpus.expected.iter().all(|p| dir.join(p).exists())
}

/// Downloads (and extracts) `corpus` into `dir` unless it is already there; returns `dir`.
pub fn download_corpus(
    corpus: &Corpus,
    dir: &Path,
    opts: &DownloadOptions,
) -> Result<PathBuf, DataError> {
    if is_ready(corpus, dir) {
        return Ok(dir.to_path_buf());
    }
    for f in corpus.files {
        let dest = dir.join(f.file);
        download_verified(f.url, &dest, f.expected(), opts).map_err(|e| match e {
            DataError::Download { url, message } => DataError::Download {
                url,
                message: format!(
                    "{message}\nOnce in place{}, the corpus needs: {}",
                    if f.unzip {
                        " it is extracted automatically"
                    } else {
                        ""
                    },
                    corpus
                        .expected
                        .iter()
                        .map(|p| dir.join(p).display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            other => other,
        })?;
        if f.unzip {
            unzip(&dest, dir)?;
        }
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options for the tests: no progress bar, short timeouts.
    pub(super) fn quiet() -> DownloadOptions {
        DownloadOptions {
            progress: false,
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn offline_message_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e =
            ensure_snli_from(dir.path(), "http://127.0.0.1:9/snli_1.0.zip", &quiet()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataError::Missing(_)));
        assert!(msg.contains("snli_1.0/snli_1.0_train.jsonl"), "{msg}");
        assert!(
            msg.contains(&dir.path().join("snli_1.0.zip").display().to_string()),
            "{msg}"
        );
        let d = download_file(
            "http://127.0.0.1:9/x.txt",
            &dir.path().join("x.txt"),
            None,
            &quiet(),
        )
        .unwrap_err();
        assert!(d.to_string().contains("place the file at"), "{d}");
    }
}
