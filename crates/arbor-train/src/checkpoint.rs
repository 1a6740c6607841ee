//! Single-file checkpoints, written atomically and verified on load.
//!
//! Layout: the magic line `ARBOR-CKPT v1\n`, then three sections (JSON metadata, model record,
//! optimizer record), each as a little-endian `u64` length followed by its bytes, then a
//! little-endian CRC-32 of everything before it. A file is written to a temporary name in the
//! same directory, flushed to disk, then renamed over the target, so a crash leaves either the
//! old checkpoint or the new one, never a mix. A truncated or altered file fails the length or
//! CRC check and is refused with an error naming the file.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"ARBOR-CKPT v1\n";

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file system refused.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not an arbor checkpoint.
    #[error("{0}: not an arbor checkpoint (bad header)")]
    BadMagic(PathBuf),
    /// The file ends before its sections do.
    #[error(
        "{0}: truncated checkpoint (the file ends inside a section); it was not written completely"
    )]
    Truncated(PathBuf),
    /// The CRC does not match the content.
    #[error("{0}: corrupt checkpoint (checksum mismatch)")]
    Corrupt(PathBuf),
    /// The metadata is not valid JSON of the expected shape.
    #[error("{path}: bad checkpoint metadata: {message}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model or optimizer record does not fit the model being restored.
    #[error("{path}: checkpoint does not match this model: {message}")]
    Record {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The raw content of a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFile {
    /// JSON metadata (training state, configuration, vocabulary…).
    pub meta: serde_json::Value,
    /// The model record bytes.
    pub model: Vec<u8>,
    /// The optimizer record bytes (empty for a model-only checkpoint).
    pub optim: Vec<u8>,
}

impl CheckpointFile {
    /// Writes the checkpoint to `path` atomically: a temporary file in the same directory,
    /// fsync, rename over `path`, then (on Unix) fsync of the directory so the rename itself
    /// survives a power loss. When writing fails the temporary file is removed and `path` keeps
    /// its previous content.
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let io = |source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let meta = serde_json::to_vec(&self.meta).map_err(|e| CheckpointError::Metadata {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + meta.len() + self.model.len() + 64);
        bytes.extend_from_slice(MAGIC);
        for section in [&meta[..], &self.model[..], &self.optim[..]] {
            bytes.extend_from_slice(&(section.len() as u64).to_le_bytes());
            bytes.extend_from_slice(section);
        }
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());

        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let written = write_synced(&tmp, &bytes).and_then(|()| fs::rename(&tmp, path));
        if let Err(source) = written {
            // Best effort: a half-written temporary file must not pile up next to the
            // checkpoints (the target itself is untouched).
            let _ = fs::remove_file(&tmp);
            return Err(io(source));
        }
        sync_parent_dir(path).map_err(io)?;
        Ok(())
    }

    /// Reads and verifies a checkpoint.
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|source| CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let p = || path.to_path_buf();
        if !bytes.starts_with(MAGIC) {
            return Err(CheckpointError::BadMagic(p()));
        }
        let mut at = MAGIC.len();
        let mut sections = Vec::with_capacity(3);
        for _ in 0..3 {
            let len_bytes = bytes
                .get(at..at + 8)
                .ok_or_else(|| CheckpointError::Truncated(p()))?;
            let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes")) as usize;
            at += 8;
            let end = at
                .checked_add(len)
                .ok_or_else(|| CheckpointError::Corrupt(p()))?;
            let section = bytes
                .get(at..end)
                .ok_or_else(|| CheckpointError::Truncated(p()))?;
            sections.push(section.to_vec());
            at = end;
        }
        let crc_bytes = bytes
            .get(at..at + 4)
            .ok_or_else(|| CheckpointError::Truncated(p()))?;
        if bytes.len() != at + 4 {
            return Err(CheckpointError::Corrupt(p()));
        }
        let crc = u32::from_le_bytes(crc_bytes.try_into().expect("4 bytes"));
        if crc != crc32fast::hash(&bytes[..at]) {
            return Err(CheckpointError::Corrupt(p()));
        }
        let optim = sections.pop().expect("3 sections");
        let model = sections.pop().expect("3 sections");
        let meta = serde_json::from_slice(&sections[0]).map_err(|e| CheckpointError::Metadata {
            path: p(),
            message: e.to_string(),
        })?;
        Ok(Self { meta, model, optim })
    }
}

/// Creates `path` with `bytes` and flushes it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Flushes the directory entry of `path` (the rename that just replaced it) to disk. Unix only:
/// elsewhere directories cannot be opened for syncing and this does nothing.
fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last.ckpt");
        let ckpt = CheckpointFile {
            meta: serde_json::json!({"step": 7}),
            model: vec![1, 2, 3, 4],
            optim: vec![9; 100],
        };
        ckpt.save(&path).unwrap();
        assert_eq!(CheckpointFile::load(&path).unwrap(), ckpt);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
        let err = CheckpointFile::load(&path).unwrap_err();
        assert!(matches!(err, CheckpointError::Truncated(_)), "{err}");
        assert!(err.to_string().contains("last.ckpt"));

        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 12] ^= 0xff;
        fs::write(&path, &flipped).unwrap();
        assert!(matches!(
            CheckpointFile::load(&path),
            Err(CheckpointError::Corrupt(_))
        ));

        fs::write(&path, b"hello").unwrap();
        assert!(matches!(
            CheckpointFile::load(&path),
            Err(CheckpointError::BadMagic(_))
        ));
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_the_old_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last.ckpt");
        let ckpt = CheckpointFile {
            meta: serde_json::json!({"step": 1}),
            model: vec![1],
            optim: vec![],
        };
        ckpt.save(&path).unwrap();
        // The rename fails: the target is now a non-empty directory.
        let target = dir.path().join("blocked.ckpt");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"x").unwrap();
        let err = ckpt.save(&target).unwrap_err();
        assert!(err.to_string().contains("blocked.ckpt"), "{err}");
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["blocked.ckpt", "last.ckpt"],
            "no temporary file left"
        );
        assert_eq!(CheckpointFile::load(&path).unwrap(), ckpt);
    }
}
