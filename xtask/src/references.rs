//! `cargo xtask references`: the authors' repositories that `--versus pytorch` times beside the
//! twins (`crates/arbor-bench/pytorch/authors.py`), extracted at pinned commits.
//!
//! The pins are in `crates/arbor-bench/pytorch/references.json` (the one place they are
//! written; `authors.py` reads the same file). Each commit is taken from a git repository (a
//! bare clone made under `target/references-git/`, or with `--mirror DIR` a local mirror such as
//! `DIR/OWNER+NAME/repo`), `git archive`d (only the listed paths, when the pin lists some) into a
//! fresh folder beside the destination, which then replaces `runs/reference/FOLDER` (git-ignored)
//! and gets a `.arbor-pin` file holding the commit. A folder whose pin already matches is left
//! as it is; a folder without a pin (extracted by hand) is replaced only with `--force`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The file, relative to the workspace root, that pins the references.
pub const PINS: &str = "crates/arbor-bench/pytorch/references.json";
/// The file in each extracted folder that records its commit.
pub const PIN_FILE: &str = ".arbor-pin";

/// Arguments of `cargo xtask references`.
#[derive(clap::Args, Debug)]
pub struct ReferencesArgs {
    /// Where the folders go (default `runs/reference` of the workspace, where `authors.py`
    /// looks unless `$ARBOR_REFERENCE_DIR` says otherwise).
    #[arg(long)]
    pub into: Option<PathBuf>,
    /// A folder of local git mirrors (`DIR/OWNER+NAME/repo`, `DIR/OWNER+NAME.git` or
    /// `DIR/NAME.git`) to take the commits from instead of cloning from GitHub.
    #[arg(long)]
    pub mirror: Option<PathBuf>,
    /// Replace folders that have no `.arbor-pin` or another commit's.
    #[arg(long)]
    pub force: bool,
}

/// One pinned repository.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Reference {
    /// Folder name under the destination.
    pub folder: String,
    /// `owner/name` on GitHub.
    pub repository: String,
    /// The full commit hash.
    pub commit: String,
    /// Paths to extract (all of the commit when empty).
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Deserialize)]
struct PinsFile {
    references: Vec<Reference>,
}

/// Reads and checks the pins file.
///
/// # Errors
/// When it cannot be read or parsed, or a pin is malformed (naming the file and the entry).
pub fn read_pins(path: &Path) -> Result<Vec<Reference>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pins: PinsFile =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for r in &pins.references {
        let ok_commit = r.commit.len() == 40 && r.commit.chars().all(|c| c.is_ascii_hexdigit());
        let ok_folder = !r.folder.is_empty()
            && r.folder
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !r.folder.starts_with('.');
        let ok_repo = r.repository.split('/').count() == 2;
        if !(ok_commit && ok_folder && ok_repo) {
            bail!(
                "{}: entry `{}` ({}) needs a plain folder name, `owner/name` and a 40-digit commit",
                path.display(),
                r.folder,
                r.repository
            );
        }
    }
    Ok(pins.references)
}

/// What happened to one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The folder already held the pinned commit.
    UpToDate,
    /// The folder was (re)written.
    Extracted,
}

/// The commit recorded in `folder/.arbor-pin`, if any.
pub fn pinned_commit(folder: &Path) -> Option<String> {
    std::fs::read_to_string(folder.join(PIN_FILE))
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
}

/// A git directory under `mirror` that holds `r`'s commit.
fn find_mirror(mirror: &Path, r: &Reference) -> Result<PathBuf> {
    let key = r.repository.replace('/', "+");
    let name = r.repository.split('/').nth(1).unwrap_or(&r.repository);
    let candidates = [
        mirror.join(&key).join("repo").join(".git"),
        mirror.join(&key).join("repo"),
        mirror.join(format!("{key}.git")),
        mirror.join(format!("{name}.git")),
    ];
    for c in &candidates {
        if c.is_dir() && has_commit(c, &r.commit) {
            return Ok(c.clone());
        }
    }
    bail!(
        "no git mirror under {} holds {}@{} (looked for {})",
        mirror.display(),
        r.repository,
        &r.commit[..7],
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn has_commit(git_dir: &Path, commit: &str) -> bool {
    Command::new("git")
        .arg(format!("--git-dir={}", git_dir.display()))
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A bare clone of `r` from GitHub under `cache`, fetched again when it lacks the commit.
fn clone_from_github(cache: &Path, r: &Reference) -> Result<PathBuf> {
    let dir = cache.join(format!("{}.git", r.repository.replace('/', "+")));
    let url = format!("https://github.com/{}.git", r.repository);
    if !dir.is_dir() {
        std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
        let status = Command::new("git")
            .args(["clone", "--bare", "--quiet", &url])
            .arg(&dir)
            .status()
            .context("running git (is it installed?)")?;
        if !status.success() {
            bail!("`git clone --bare {url}` failed ({status}); without network, pass --mirror DIR");
        }
    }
    if !has_commit(&dir, &r.commit) {
        let status = Command::new("git")
            .arg(format!("--git-dir={}", dir.display()))
            .args(["fetch", "--quiet", "origin", &r.commit])
            .status()
            .context("running git")?;
        if !status.success() || !has_commit(&dir, &r.commit) {
            bail!("{url} has no commit {}", r.commit);
        }
    }
    Ok(dir)
}

/// Extracts `r` from `git_dir` into `into/r.folder`, unless it already holds the pin.
///
/// # Errors
/// When the folder exists without the pin and `force` is off (naming `--force`), or git/tar
/// fail.
pub fn extract(git_dir: &Path, r: &Reference, into: &Path, force: bool) -> Result<Outcome> {
    let dest = into.join(&r.folder);
    if dest.exists() {
        match pinned_commit(&dest) {
            Some(c) if c == r.commit => return Ok(Outcome::UpToDate),
            found if !force => bail!(
                "{} exists and holds {} instead of the pinned {}: pass --force to replace it",
                dest.display(),
                found.map_or("no .arbor-pin".to_string(), |c| format!("commit {c}")),
                r.commit
            ),
            _ => {}
        }
    }
    std::fs::create_dir_all(into).with_context(|| format!("creating {}", into.display()))?;
    let fresh = into.join(format!(".{}.part", r.folder));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
    let mut archive = Command::new("git")
        .arg(format!("--git-dir={}", git_dir.display()))
        .args(["archive", "--format=tar", &r.commit])
        .args(&r.paths)
        .stdout(Stdio::piped())
        .spawn()
        .context("running git archive")?;
    let tar_input = archive.stdout.take().context("git archive's output")?;
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&fresh)
        .stdin(tar_input)
        .status()
        .context("running tar")?;
    let archived = archive.wait().context("waiting for git archive")?;
    if !archived.success() || !tar.success() {
        let _ = std::fs::remove_dir_all(&fresh);
        bail!(
            "extracting {}@{} from {} failed (git archive: {archived}, tar: {tar})",
            r.repository,
            r.commit,
            git_dir.display()
        );
    }
    std::fs::write(
        fresh.join(PIN_FILE),
        format!("{} {}\n", r.commit, r.repository),
    )?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).with_context(|| format!("removing {}", dest.display()))?;
    }
    std::fs::rename(&fresh, &dest).with_context(|| format!("moving into {}", dest.display()))?;
    Ok(Outcome::Extracted)
}

/// `cargo xtask references`.
pub fn run(root: &Path, args: &ReferencesArgs) -> Result<()> {
    let pins = read_pins(&root.join(PINS))?;
    let into = args
        .into
        .clone()
        .unwrap_or_else(|| root.join("runs").join("reference"));
    for r in &pins {
        let git_dir = match &args.mirror {
            Some(m) => find_mirror(m, r)?,
            None => clone_from_github(&root.join("target").join("references-git"), r)?,
        };
        let outcome = extract(&git_dir, r, &into, args.force)?;
        let what = match outcome {
            Outcome::UpToDate => "up to date",
            Outcome::Extracted => "extracted",
        };
        println!(
            "{}@{} -> {}: {what}",
            r.repository,
            &r.commit[..7],
            into.join(&r.folder).display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c"])
            .arg("commit.gpgsign=false")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn the_workspace_pins_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let pins = read_pins(&root.join(PINS)).unwrap();
        let folders: Vec<&str> = pins.iter().map(|r| r.folder.as_str()).collect();
        assert_eq!(
            folders,
            ["unsupervised-treelstm", "FastTrees", "StructuredLM_RTDT"]
        );
    }

    #[test]
    fn malformed_pins_are_refused_naming_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        std::fs::write(
            &path,
            r#"{"references": [{"folder": "../x", "repository": "a/b", "commit": "123"}]}"#,
        )
        .unwrap();
        let err = format!("{:#}", read_pins(&path).unwrap_err());
        assert!(err.contains("../x") && err.contains("40-digit"), "{err}");
    }

    #[test]
    fn extracts_the_pinned_commit_once_and_refuses_unpinned_folders() {
        if Command::new("git").arg("--version").output().is_err() {
            eprintln!("skipped: no git");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("src");
        std::fs::create_dir_all(repo.join("model")).unwrap();
        git(&repo, &["init", "--quiet"]);
        std::fs::write(repo.join("model/a.py"), "A = 1\n").unwrap();
        std::fs::write(repo.join("data.txt"), "big\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "--quiet", "-m", "one"]);
        let first = git(&repo, &["rev-parse", "HEAD"]);
        std::fs::write(repo.join("model/a.py"), "A = 2\n").unwrap();
        git(&repo, &["commit", "--quiet", "-am", "two"]);
        let mirror = tmp.path().join("mirror");
        std::fs::create_dir_all(mirror.join("o+r")).unwrap();
        std::fs::rename(&repo, mirror.join("o+r/repo")).unwrap();
        let r = Reference {
            folder: "r".into(),
            repository: "o/r".into(),
            commit: first.clone(),
            paths: vec!["model".into()],
        };
        let git_dir = find_mirror(&mirror, &r).unwrap();
        let into = tmp.path().join("into");
        assert_eq!(
            extract(&git_dir, &r, &into, false).unwrap(),
            Outcome::Extracted
        );
        // The pinned commit's content, only the listed paths, and the pin.
        assert_eq!(
            std::fs::read_to_string(into.join("r/model/a.py")).unwrap(),
            "A = 1\n"
        );
        assert!(!into.join("r/data.txt").exists());
        assert_eq!(pinned_commit(&into.join("r")), Some(first.clone()));
        assert_eq!(
            extract(&git_dir, &r, &into, false).unwrap(),
            Outcome::UpToDate
        );
        // A folder extracted by hand (no pin) is replaced only with --force.
        std::fs::remove_file(into.join("r").join(PIN_FILE)).unwrap();
        let err = extract(&git_dir, &r, &into, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert_eq!(
            extract(&git_dir, &r, &into, true).unwrap(),
            Outcome::Extracted
        );
        // A commit the mirror lacks is named.
        let missing = Reference {
            commit: "0".repeat(40),
            ..r
        };
        let err = find_mirror(&mirror, &missing).unwrap_err().to_string();
        assert!(err.contains("o/r@0000000"), "{err}");
    }
}
