//! Stamps the commit the `arbor-bench` binary is built from into it (`ARBOR_BUILD_COMMIT`), so a
//! record says which code was timed even when an older binary runs in a newer checkout (the
//! checkout's own commit is recorded beside it at run time).
//!
//! Hand-written rather than through a crate such as `vergen`: two `git` calls (`src/git.rs`,
//! shared with the run-time record), and the reruns below are what decide that the stamp stays
//! true.

use std::path::Path;

#[path = "src/git.rs"]
mod git;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Rerun when any workspace source changes (a directory is scanned recursively), so the
    // `-dirty` mark follows uncommitted edits, and when a commit or checkout moves `HEAD`.
    for p in ["crates", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for p in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git::git(Some(&root), &["rev-parse", "--git-path", p]) {
            let path = if Path::new(&path).is_absolute() {
                Path::new(&path).to_path_buf()
            } else {
                root.join(path)
            };
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let commit = git::described_commit(Some(&root));
    println!("cargo:rustc-env=ARBOR_BUILD_COMMIT={commit}");
}
