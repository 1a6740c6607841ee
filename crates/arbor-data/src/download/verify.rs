//! Verification: a file's SHA-256 ([`sha256_file`]) and size against what was recorded
//! ([`Expected`]), the `<file>.sha256` cache that spares hashing an unchanged file again, and
//! the rejection of a file that does not match (moved to `<file>.corrupt`).

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{remove_if_present, with_suffix};
use crate::error::DataError;

/// What a file must be before it is used: its SHA-256 and size, each when known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected<'a> {
    /// SHA-256, hex (either case).
    pub sha256: Option<&'a str>,
    /// Size in bytes.
    pub size: Option<u64>,
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

/// How a file differs from what was recorded.
#[derive(Debug)]
pub(super) struct Mismatch {
    pub(super) what: &'static str,
    pub(super) expected: String,
    pub(super) actual: String,
}

/// Checks `path` against `expected` (size first, then hash); returns the file's SHA-256.
pub(super) fn check_file(
    path: &Path,
    expected: Expected<'_>,
) -> Result<Result<String, Mismatch>, DataError> {
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
pub(super) fn reject(url: &str, dest: &Path, bad: &Path, m: &Mismatch, fresh: bool) -> DataError {
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
pub(super) fn write_marker(path: &Path, hash: &str) {
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

pub(super) fn print_unrecorded(hash: &str, path: &Path) {
    eprintln!(
        "sha256 {hash}  {} (no known checksum recorded)",
        path.display()
    );
}

/// Verifies a file that is already at `dest` before it is used.
pub(super) fn verify_existing(
    url: &str,
    dest: &Path,
    expected: Expected<'_>,
) -> Result<String, DataError> {
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

#[cfg(test)]
mod tests {
    use super::super::download_file;
    use super::super::tests::quiet;
    use super::*;

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
}
