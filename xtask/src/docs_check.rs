//! `cargo xtask docs --check`: the Rust names the docs cite in backticks exist in the code.
//!
//! Two forms are checked in `README.md` and `docs/*.md` (the dated logs under `docs/log/`, if
//! any, record the past and are left alone):
//! - `Type::member` (also `Type::member()`) where `Type` is a struct, enum, trait or type alias
//!   defined in the workspace: `member` must be defined somewhere in the workspace as a
//!   function, constant, enum variant or field. (A name defined elsewhere — `Arc::make_mut`,
//!   a backend's `B::sync` — is not arbor's to check.)
//! - `arbor_crate::…::name`: `name` must be defined in the workspace (any item, module, variant
//!   or field).
//!
//! It also fails when `README.md` does not name a file of `docs/` (its list of docs).
//!
//! The check is by name, not by resolution: `Type::member` passes when some item of the
//! workspace is called `member`, so it catches names that were renamed or removed, not a member
//! cited on the wrong type. A name a doc cites on purpose without it existing (a walk-through's
//! `EncoderKind::Foo`) is listed in the doc in a comment `<!-- docs-check: allow NAME -->`.
//!
//! Hand-written (a tokenizer over lines) rather than `syn`: the check needs only which names are
//! defined, and `syn` with full parsing would be xtask's largest dependency for that.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Names defined in the workspace's Rust sources.
#[derive(Debug, Default)]
pub struct Definitions {
    /// Structs, enums, traits and type aliases.
    pub types: BTreeSet<String>,
    /// What `Type::member` can name: functions, constants, statics, enum variants and fields.
    pub members: BTreeSet<String>,
    /// Everything a path can end in: the members, the types, modules and macros.
    pub names: BTreeSet<String>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier at the start of `s`, if any.
fn ident(s: &str) -> Option<&str> {
    let s = s.strip_prefix("r#").unwrap_or(s);
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    (end > 0 && s.starts_with(is_ident_start)).then(|| &s[..end])
}

impl Definitions {
    /// Adds the names `source` (one Rust file) defines.
    ///
    /// A line-by-line scan: item keywords, and a name that starts a line followed by `,`, `(`,
    /// `{`, `:` or `=` (variants and fields, and also a few statements, which only makes the
    /// check more lenient).
    pub fn add_source(&mut self, source: &str) {
        for line in source.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            // Items after their keyword, anywhere on the line.
            let words: Vec<&str> = trimmed
                .split(|c: char| c.is_whitespace() || c == '(' || c == '<')
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                let Some(name) = ident(pair[1]) else { continue };
                match pair[0] {
                    "struct" | "enum" | "trait" | "type" | "union" => {
                        self.types.insert(name.to_string());
                        self.names.insert(name.to_string());
                    }
                    "fn" | "const" | "static" => {
                        self.members.insert(name.to_string());
                        self.names.insert(name.to_string());
                    }
                    "mod" | "macro_rules!" => {
                        self.names.insert(name.to_string());
                    }
                    _ => {}
                }
            }
            // Variants and fields: a line that starts with a name followed by `,`, `(`, `{`,
            // `:` or ` =` (after an optional `pub`/`pub(crate)`).
            let rest = trimmed
                .strip_prefix("pub(crate) ")
                .or_else(|| trimmed.strip_prefix("pub(super) "))
                .or_else(|| trimmed.strip_prefix("pub "))
                .unwrap_or(trimmed);
            if let Some(name) = ident(rest) {
                let after = rest[name.len()..].trim_start();
                if after.is_empty()
                    || after.starts_with([',', '(', '{', ':', '='])
                        && !after.starts_with("::")
                        && !after.starts_with("==")
                {
                    self.members.insert(name.to_string());
                    self.names.insert(name.to_string());
                }
            }
            // `use … as name` re-exports.
            if let Some(i) = trimmed.find(" as ") {
                if let Some(name) = ident(&trimmed[i + 4..]) {
                    self.names.insert(name.to_string());
                }
            }
        }
    }

    /// Reads every `.rs` file under `dirs` (skipping `target` folders).
    pub fn read(dirs: &[PathBuf]) -> Result<Self> {
        let mut defs = Definitions::default();
        let mut stack: Vec<PathBuf> = dirs.to_vec();
        while let Some(dir) = stack.pop() {
            if !dir.exists() {
                continue;
            }
            for entry in
                std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
            {
                let path = entry?.path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "target") {
                        stack.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    defs.add_source(&text);
                }
            }
        }
        Ok(defs)
    }
}

/// The backticked Rust paths of `text` (`a::b`, `a::b()`), with their line numbers, less the
/// ones an `<!-- docs-check: allow NAME -->` comment allows.
pub fn cited_paths(text: &str) -> Vec<(usize, String)> {
    let allowed: BTreeSet<&str> = text
        .match_indices("<!-- docs-check: allow ")
        .filter_map(|(i, m)| {
            let rest = &text[i + m.len()..];
            rest.find(" -->").map(|end| rest[..end].trim())
        })
        .collect();
    let mut out = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for (k, span) in line.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if k % 2 == 0 {
                continue;
            }
            let path = span.strip_suffix("()").unwrap_or(span);
            let segments: Vec<&str> = path.split("::").collect();
            if segments.len() < 2
                || segments
                    .iter()
                    .any(|s| ident(s).is_none_or(|i| i.len() != s.len()))
            {
                continue;
            }
            if !allowed.contains(path) {
                out.push((n + 1, path.to_string()));
            }
        }
    }
    out
}

/// Why `path` is not found in `defs`, or `None` when it is (or is not arbor's to check).
pub fn missing(path: &str, defs: &Definitions) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let last = segments[segments.len() - 1];
    if segments[0].starts_with("arbor_") || segments[0] == "arbor" {
        return (!defs.names.contains(last))
            .then(|| format!("`{last}` is defined nowhere in the workspace"));
    }
    let owner = segments[segments.len() - 2];
    // One capital letter is a generic parameter (`B::sync`), not a type of ours.
    if owner.len() == 1 || !defs.types.contains(owner) {
        return None;
    }
    (!defs.members.contains(last)).then(|| {
        format!(
            "`{owner}` is arbor's, but no function, constant, variant or field is called `{last}`"
        )
    })
}

/// The docs the check reads: `README.md` and `docs/*.md`.
fn doc_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs).with_context(|| format!("reading {}", docs.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Checks every doc; fails listing each cited name that does not exist.
pub fn run(root: &Path) -> Result<()> {
    let defs = Definitions::read(&[
        root.join("crates"),
        root.join("src"),
        root.join("xtask"),
        root.join("examples"),
        root.join("tests"),
    ])?;
    let mut problems = Vec::new();
    let mut checked = 0;
    let readme_path = root.join("README.md");
    let mut readme = String::new();
    let files = doc_files(root)?;
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (line, path) in cited_paths(&text) {
            checked += 1;
            if let Some(why) = missing(&path, &defs) {
                let shown = file
                    .strip_prefix(root)
                    .unwrap_or(file)
                    .display()
                    .to_string();
                problems.push(format!("{shown}:{line}: `{path}`: {why}"));
            }
        }
        if *file == readme_path {
            readme = text;
        }
    }
    // The README lists every doc.
    for file in files.iter().filter(|f| **f != readme_path) {
        if let Some(name) = file.file_name().and_then(|n| n.to_str()) {
            if !readme.contains(&format!("docs/{name}")) {
                problems.push(format!("README.md: docs/{name} is not in the list of docs"));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problems in the docs ({checked} cited Rust names checked):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    println!("docs: {checked} cited Rust names checked, all exist");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs() -> Definitions {
        let mut d = Definitions::default();
        d.add_source(
            "pub enum EncoderKind {\n    Lstm,\n    Gumbel(u8),\n}\n\
             pub struct Chart {\n    pub splits: Vec<u8>,\n}\n\
             impl Chart {\n    pub fn build(&self) {}\n    const MAX: usize = 3;\n}\n\
             pub mod device;\npub mod transformer;\n",
        );
        d
    }

    #[test]
    fn names_defined_in_rust_sources_are_found() {
        let d = defs();
        assert!(d.types.contains("EncoderKind") && d.types.contains("Chart"));
        for n in ["Lstm", "Gumbel", "build", "MAX", "device", "splits"] {
            assert!(d.names.contains(n), "{n}");
        }
        assert_eq!(missing("EncoderKind::Lstm", &d), None);
        assert_eq!(missing("Chart::build", &d), None);
        // Not arbor's type: not checked.
        assert_eq!(missing("Arc::make_mut", &d), None);
        // A removed member of an arbor type, and a missing item of an arbor crate.
        // A module of that name does not make it a member.
        assert!(missing("Chart::transformer", &d).is_some());
        assert_eq!(missing("B::sync", &d), None);
        assert!(missing("arbor_train::device::DeviceList", &d).is_some());
        assert_eq!(missing("arbor_train::device", &d), None);
    }

    #[test]
    fn cited_paths_skip_code_fences_prose_and_allowed_names() {
        let text = "See `Chart::build()` and `a b::c`, `x`.\n```\n`Chart::gone`\n```\n\
                    A walk-through adds `EncoderKind::Foo`.\n\
                    <!-- docs-check: allow EncoderKind::Foo -->\n`EncoderKind::Bar`\n";
        let cited = cited_paths(text);
        assert_eq!(
            cited,
            vec![
                (1, "Chart::build".to_string()),
                (7, "EncoderKind::Bar".to_string())
            ]
        );
    }
}
