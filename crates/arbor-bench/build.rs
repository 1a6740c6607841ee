//! Stamps the commit the `arbor-bench` binary is built from into it (`ARBOR_BUILD_COMMIT`), so a
//! record says which code was timed even when an older binary runs in a newer checkout (the
//! checkout's own commit is recorded beside it at run time).
//!
//! Hand-written rather than through a crate such as `vergen`: two `git` calls, and the reruns
//! below are what decide that the stamp stays true.

use std::path::Path;
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Rerun when any workspace source changes (a directory is scanned recursively), so the
    // `-dirty` mark follows uncommitted edits, and when a commit or checkout moves `HEAD`.
    for p in ["crates", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for p in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git(&root, &["rev-parse", "--git-path", p]) {
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
    let commit = match git(&root, &["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&root, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=ARBOR_BUILD_COMMIT={commit}");
}
