//! One run per output folder.
//!
//! A training run owns its folder (`--out`): [`claim`] takes an exclusive lock on
//! `OUT/run.lock` (an OS file lock, so a killed run leaves no stale lock behind; the file names
//! the holder's pid, host and start time for the message a second run prints), and checks what
//! the folder already holds against how the run was asked to start:
//!
//! - a folder holding a run ([`RUN_FILES`]: a checkpoint or a non-empty metrics log) is refused
//!   unless the run resumes it (`--resume`) or replaces it (`--overwrite`, which deletes the
//!   run's files first, so no old `best.ckpt`, metrics or result survives into the new run);
//! - `--resume` with no `last.ckpt` to resume is refused;
//! - `--resume` with `--overwrite` is refused.
//!
//! The lock is held as long as the returned [`RunLock`] lives. A program that writes into the
//! folder before training (a vocabulary, say) claims it first and keeps the lock; the engine's
//! own claim in [`train`](crate::train) then finds the folder held by this process and goes on
//! (the claim is re-entrant within a process, and the checks ran at the first claim).
//!
//! `std::fs::File::try_lock` is the lock (no crate: the standard library has it since Rust
//! 1.89, with `flock` semantics on Unix and `LockFileEx` on Windows).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// The lock file inside an output folder.
pub const LOCK_FILE: &str = "run.lock";

/// The file a program writes its final result to (`result.json`), one of the run's files.
pub const RESULT_FILE: &str = "result.json";

/// The files that make up a run in its folder: what `--overwrite` deletes. A folder "holds a
/// run" when one of the first three exists (the metrics log only when not empty).
pub const RUN_FILES: &[&str] = &[
    "last.ckpt",
    "best.ckpt",
    "metrics.jsonl",
    "curves.svg",
    RESULT_FILE,
];

/// How a run means to use its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// A new run: the folder must not hold one.
    Fresh,
    /// Continue the run the folder holds (`--resume`): it must hold `last.ckpt`.
    Resume,
    /// Replace the run the folder holds, if any (`--overwrite`).
    Overwrite,
}

impl StartMode {
    /// The mode the two flags ask for; both at once is an error.
    pub fn from_flags(resume: bool, overwrite: bool) -> Result<Self, OutDirError> {
        match (resume, overwrite) {
            (false, false) => Ok(Self::Fresh),
            (true, false) => Ok(Self::Resume),
            (false, true) => Ok(Self::Overwrite),
            (true, true) => Err(OutDirError::Conflict),
        }
    }
}

/// Why a run may not use its output folder.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// Another process holds the folder's lock.
    #[error(
        "{dir} is in use by another run ({holder}); wait for it to finish, or train into another \
         --out (the lock is {lock})",
        dir = dir.display(),
        lock = lock.display()
    )]
    Busy {
        /// The output folder.
        dir: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The folder holds a run and neither `--resume` nor `--overwrite` was given.
    #[error(
        "{dir} already holds a run ({found}); pass --resume to continue it or --overwrite to \
         replace it, or train into another --out",
        dir = dir.display()
    )]
    HoldsRun {
        /// The output folder.
        dir: PathBuf,
        /// The run's files found there.
        found: String,
    },
    /// `--resume` with no `last.ckpt`.
    #[error(
        "--resume: {dir} holds no last.ckpt to resume from{}; drop --resume to start a new run{}",
        if found.is_empty() { String::new() } else { format!(" (it holds {found})") },
        if found.is_empty() { "" } else { " with --overwrite" },
        dir = dir.display()
    )]
    NothingToResume {
        /// The output folder.
        dir: PathBuf,
        /// The run's other files found there (empty: none).
        found: String,
    },
    /// `--resume` and `--overwrite` together.
    #[error("--resume and --overwrite contradict each other: continue the run or replace it")]
    Conflict,
    /// The folder or one of its files could not be read, created or removed.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The held lock of an output folder; released when the last clone of it is dropped (or the
/// process ends, however it ends).
#[derive(Debug, Clone)]
pub struct RunLock {
    held: Arc<Held>,
}

#[derive(Debug)]
struct Held {
    /// The locked file (the lock lives as long as this handle).
    _file: File,
    /// The canonical folder, the key in [`HELD`].
    dir: PathBuf,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = HELD.lock() {
            held.remove(&self.dir);
        }
    }
}

impl RunLock {
    /// The output folder this lock holds.
    pub fn dir(&self) -> &Path {
        &self.held.dir
    }
}

/// The folders this process holds, so a second claim from the same process shares the lock
/// (an OS file lock taken twice by one process through two handles would refuse itself).
static HELD: Mutex<BTreeMap<PathBuf, Weak<Held>>> = Mutex::new(BTreeMap::new());

/// Claims `dir` for one run started as `mode` (creating the folder): locks it and checks what it
/// holds, deleting the old run's files for [`StartMode::Overwrite`]. A folder this process
/// already holds is returned at once, unchecked.
///
/// # Errors
/// See [`OutDirError`]: another process holds the folder, it holds a run a fresh run would
/// mix with, there is nothing to resume, or the folder cannot be used.
pub fn claim(dir: &Path, mode: StartMode) -> Result<RunLock, OutDirError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OutDirError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let canonical = dir.canonicalize().map_err(io(dir))?;
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(live) = held.get(&canonical).and_then(Weak::upgrade) {
        return Ok(RunLock { held: live });
    }
    let lock_path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            // What the holder wrote; bounded, since the file is only a note.
            let _ = (&file).take(4096).read_to_string(&mut text);
            let holder = match text.trim() {
                "" => "its holder wrote nothing yet".to_string(),
                t => t.replace('\n', ", "),
            };
            return Err(OutDirError::Busy {
                dir: dir.to_path_buf(),
                holder,
                lock: lock_path,
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
    }
    check_contents(dir, mode)?;
    let note = format!(
        "pid {} on host {} since unix time {}\n",
        std::process::id(),
        host_name(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    file.set_len(0).map_err(io(&lock_path))?;
    file.rewind().map_err(io(&lock_path))?;
    file.write_all(note.as_bytes()).map_err(io(&lock_path))?;
    let live = Arc::new(Held {
        _file: file,
        dir: canonical.clone(),
    });
    held.insert(canonical, Arc::downgrade(&live));
    Ok(RunLock { held: live })
}

/// The run files `dir` holds (see [`RUN_FILES`]), by name.
pub fn run_files_in(dir: &Path) -> Vec<&'static str> {
    RUN_FILES
        .iter()
        .copied()
        .filter(|name| {
            let path = dir.join(name);
            match std::fs::metadata(&path) {
                Ok(m) if *name == "metrics.jsonl" => m.len() > 0,
                Ok(_) => true,
                Err(_) => false,
            }
        })
        .collect()
}

fn check_contents(dir: &Path, mode: StartMode) -> Result<(), OutDirError> {
    let found = run_files_in(dir);
    let holds_run = found
        .iter()
        .any(|f| matches!(*f, "last.ckpt" | "best.ckpt" | "metrics.jsonl"));
    match mode {
        StartMode::Fresh if holds_run => Err(OutDirError::HoldsRun {
            dir: dir.to_path_buf(),
            found: found.join(", "),
        }),
        StartMode::Fresh => Ok(()),
        StartMode::Resume if found.contains(&"last.ckpt") => Ok(()),
        StartMode::Resume => Err(OutDirError::NothingToResume {
            dir: dir.to_path_buf(),
            found: found.join(", "),
        }),
        StartMode::Overwrite => {
            for name in found {
                let path = dir.join(name);
                std::fs::remove_file(&path).map_err(|source| OutDirError::Io { path, source })?;
            }
            Ok(())
        }
    }
}

/// This machine's name for the lock note (`$HOSTNAME`, `/etc/hostname`, else `unknown`).
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// A new run's id: its start time and process, unique enough to tell two runs of one folder
/// apart in the metrics log and checkpoints.
pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{:x}-{:x}-{:x}",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_run_is_refused_where_a_run_is_and_resume_needs_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        drop(claim(&out, StartMode::Fresh).unwrap());
        // An empty metrics log is not a run; a written one is.
        std::fs::write(out.join("metrics.jsonl"), "").unwrap();
        drop(claim(&out, StartMode::Fresh).unwrap());
        let e = claim(&out, StartMode::Resume).unwrap_err().to_string();
        assert!(e.contains("--resume") && e.contains("no last.ckpt"), "{e}");
        std::fs::write(out.join("metrics.jsonl"), "{}\n").unwrap();
        let e = claim(&out, StartMode::Fresh).unwrap_err().to_string();
        assert!(
            e.contains("already holds a run (metrics.jsonl)")
                && e.contains("--resume")
                && e.contains("--overwrite"),
            "{e}"
        );
        let e = claim(&out, StartMode::Resume).unwrap_err().to_string();
        assert!(e.contains("with --overwrite"), "{e}");
        std::fs::write(out.join("last.ckpt"), "x").unwrap();
        drop(claim(&out, StartMode::Resume).unwrap());
        assert!(matches!(
            StartMode::from_flags(true, true),
            Err(OutDirError::Conflict)
        ));
    }

    #[test]
    fn overwrite_deletes_the_old_run_and_keeps_other_files() {
        let dir = tempfile::tempdir().unwrap();
        for name in RUN_FILES {
            std::fs::write(dir.path().join(name), "old").unwrap();
        }
        std::fs::write(dir.path().join("vocab.txt"), "a\nb\n").unwrap();
        drop(claim(dir.path(), StartMode::Overwrite).unwrap());
        assert!(run_files_in(dir.path()).is_empty());
        assert!(dir.path().join("vocab.txt").exists());
    }

    #[test]
    fn the_claim_is_reentrant_in_a_process_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim(dir.path(), StartMode::Fresh).unwrap();
        std::fs::write(dir.path().join("last.ckpt"), "x").unwrap();
        // Held by this process: shared, not checked again.
        let second = claim(dir.path(), StartMode::Fresh).unwrap();
        drop(first);
        drop(second);
        // Released: a fresh claim now sees the run.
        assert!(matches!(
            claim(dir.path(), StartMode::Fresh),
            Err(OutDirError::HoldsRun { .. })
        ));
        let note = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert!(
            note.starts_with(&format!("pid {} on host ", std::process::id())),
            "{note}"
        );
    }

    #[test]
    fn a_folder_locked_by_another_handle_is_busy_naming_the_holder() {
        // Another process's lock, as the OS sees it: a second handle holding the file lock.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, "pid 4242 on host elsewhere since unix time 1\n").unwrap();
        let other = File::options().read(true).write(true).open(&path).unwrap();
        other.lock().unwrap();
        let e = claim(dir.path(), StartMode::Fresh).unwrap_err().to_string();
        assert!(
            e.contains("in use by another run (pid 4242 on host elsewhere"),
            "{e}"
        );
        drop(other);
        claim(dir.path(), StartMode::Fresh).unwrap();
    }
}
