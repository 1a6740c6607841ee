//! The checkout's commit as the records write it. One file for the library (the commit a
//! benchmark ran in, [`crate::system::git_commit`]) and for `build.rs` (the commit the binary
//! is built from), which includes it with `#[path]`: a build script cannot use its own crate.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir` (the current directory when `None`): its trimmed output, or `None` when
/// git is missing or fails.
pub fn git(dir: Option<&Path>, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new("git");
    if let Some(dir) = dir {
        cmd.arg("-C").arg(dir);
    }
    let out = cmd.args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `git rev-parse --short HEAD` in `dir`, with `-dirty` when `git status` lists changes to
/// tracked files; `unknown` outside a repository.
pub fn described_commit(dir: Option<&Path>) -> String {
    match git(dir, &["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        None => "unknown".to_string(),
    }
}
