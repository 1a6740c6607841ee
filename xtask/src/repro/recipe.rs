//! Recipes: the TOML files of `repro/` (format in `repro/README.md`), read and checked, their
//! flags rendered as command-line words, found by name or path, and listed (`--list`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// Program flags that `repro` sets itself, so a recipe may not.
pub const RESERVED_FLAGS: [&str; 4] = ["out", "seed", "resume", "device"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    description: String,
    program: String,
    #[serde(default)]
    command: Option<String>,
    metric: String,
    #[serde(default = "default_seeds")]
    seeds: Vec<u64>,
    #[serde(default)]
    flags: toml::Table,
    paper: Paper,
}

fn default_seeds() -> Vec<u64> {
    vec![0]
}

/// What the paper reports for a recipe.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Paper {
    /// The paper's accuracy as a fraction in [0, 1], where it has one.
    pub accuracy: Option<f64>,
    /// Where the number comes from (paper, table).
    pub source: String,
    /// Free text.
    pub note: Option<String>,
}

/// A checked recipe: one program, its flags, the seeds, and the paper's number.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The recipe name (the file stem).
    pub name: String,
    /// The file it was read from.
    pub path: PathBuf,
    /// One line saying what is reproduced.
    pub description: String,
    /// The example program of the `arbor` package (`logic`, `sst`…).
    pub program: String,
    /// A subcommand of the program, written before the flags (`train` for `listops`).
    pub command: Option<String>,
    /// The split of `result.json` whose accuracy is compared with the paper.
    pub metric: String,
    /// The seeds a plain run uses.
    pub seeds: Vec<u64>,
    /// The program's flags (`key = value` → `--key value`).
    pub flags: toml::Table,
    /// The paper's number.
    pub paper: Paper,
}

impl Recipe {
    /// Reads and checks the recipe in `path`; errors name `path`.
    pub fn load(path: &Path) -> Result<Recipe> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("could not read recipe {}", path.display()))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .with_context(|| format!("{}: the file name is not a recipe name", path.display()))?;
        Recipe::parse(name, path, &text)
    }

    /// Parses and checks the recipe text `text` of the file `path` named `name`.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Recipe> {
        let file = path.display();
        let raw: RecipeFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim().replace('`', "'");
            match line {
                Some(line) => anyhow::anyhow!("{file}: line {line}: {message}"),
                None => anyhow::anyhow!("{file}: {message}"),
            }
        })?;
        ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{file}: the recipe name '{name}' may only have letters, digits, '-', '_' and '.'"
        );
        ensure!(
            !raw.description.trim().is_empty(),
            "{file}: description is empty"
        );
        ensure!(
            !raw.program.is_empty()
                && raw
                    .program
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{file}: program '{}' is not an example name (logic, sst, snli, listops, ptb_lm, r2d2)",
            raw.program
        );
        if let Some(c) = &raw.command {
            ensure!(
                c.starts_with(|c: char| c.is_ascii_lowercase())
                    && c.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{file}: command '{c}' is not a subcommand name (lowercase letters and '-')"
            );
        }
        ensure!(!raw.metric.trim().is_empty(), "{file}: metric is empty");
        ensure!(!raw.seeds.is_empty(), "{file}: seeds is empty");
        for (i, s) in raw.seeds.iter().enumerate() {
            ensure!(
                !raw.seeds[..i].contains(s),
                "{file}: seed {s} is listed twice"
            );
        }
        if let Some(a) = raw.paper.accuracy {
            ensure!(
                a.is_finite() && (0.0..=1.0).contains(&a),
                "{file}: paper.accuracy {a} must be a fraction in [0, 1]"
            );
        }
        ensure!(
            !raw.paper.source.trim().is_empty(),
            "{file}: paper.source is empty"
        );
        render_flags(&raw.flags, &[]).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        Ok(Recipe {
            name: name.to_string(),
            path: path.to_path_buf(),
            description: raw.description.trim().to_string(),
            program: raw.program,
            command: raw.command,
            metric: raw.metric.trim().to_string(),
            seeds: raw.seeds,
            flags: raw.flags,
            paper: raw.paper,
        })
    }

    /// The value of flag `key` as a string, where it is a string.
    pub(super) fn flag_str(&self, key: &str) -> Option<&str> {
        self.flags.get(key).and_then(toml::Value::as_str)
    }
}

/// The command-line words of one flag value (`None`: a value that is not a flag value).
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(_) => Some(value.to_string()),
        _ => None,
    }
}

/// The flags of a recipe as command-line words, leaving out the keys in `skip`: `key = value`
/// becomes `--key value`, `true` becomes `--key`, `false` nothing, and an array repeats the flag
/// for each element. Errors name the flag.
pub fn render_flags(flags: &toml::Table, skip: &[&str]) -> Result<Vec<String>> {
    let mut words = Vec::new();
    for (key, value) in flags {
        ensure!(
            !key.is_empty()
                && !key.starts_with('-')
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "flag '{key}' does not look like a flag: use lowercase letters, digits and '-' \
             (without the leading '--')"
        );
        ensure!(
            !RESERVED_FLAGS.contains(&key.as_str()),
            "flag '{key}' is set by repro itself (the reserved flags are {}); remove it",
            RESERVED_FLAGS.join(", ")
        );
        if skip.contains(&key.as_str()) {
            continue;
        }
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => words.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    let Some(v) = scalar(item) else {
                        bail!(
                            "flag '{key}': the elements of an array must be strings or numbers, \
                             not {}",
                            item.type_str()
                        );
                    };
                    words.push(flag.clone());
                    words.push(v);
                }
            }
            other => {
                let Some(v) = scalar(other) else {
                    bail!(
                        "flag '{key}': a {} is not a flag value (use a string, number, boolean \
                         or array)",
                        other.type_str()
                    );
                };
                words.push(flag);
                words.push(v);
            }
        }
    }
    Ok(words)
}

/// Where the recipe named or pointed to by `arg` lives: a path when `arg` ends in `.toml` or has
/// a `/`, else `ROOT/repro/ARG.toml`.
pub fn recipe_path(root: &Path, arg: &str) -> PathBuf {
    if arg.ends_with(".toml") || arg.contains('/') || arg.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(arg)
    } else {
        root.join("repro").join(format!("{arg}.toml"))
    }
}

/// The recipe named or pointed to by `arg` (see [`recipe_path`]), read and checked; the error
/// for a missing file says how to list the recipes.
pub(super) fn find_recipe(root: &Path, arg: &str) -> Result<Recipe> {
    let path = recipe_path(root, arg);
    if !path.is_file() {
        if path.starts_with(root.join("repro")) {
            bail!(
                "no recipe '{arg}': {} does not exist (`cargo xtask repro --list` lists the \
                 recipes)",
                path.display()
            );
        }
        bail!("recipe {}: no such file", path.display());
    }
    Recipe::load(&path)
}

/// The `.toml` files of `ROOT/repro`, sorted by name.
fn recipe_files(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("repro");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `--list`: every recipe in `ROOT/repro`, one per line. Fails after listing if one is invalid.
pub(super) fn list(root: &Path) -> Result<()> {
    let files = recipe_files(root)?;
    if files.is_empty() {
        println!("no recipes in {}", root.join("repro").display());
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut bad = 0;
    for path in &files {
        match Recipe::load(path) {
            Ok(r) => rows.push([
                r.name,
                r.program,
                r.paper
                    .accuracy
                    .map_or_else(|| "-".to_string(), |a| format!("{a:.4}")),
                r.paper.source,
                r.description,
            ]),
            Err(e) => {
                eprintln!("error: {e:#}");
                bad += 1;
            }
        }
    }
    let header = ["RECIPE", "PROGRAM", "PAPER", "SOURCE", "DESCRIPTION"];
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 4 {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    ensure!(bad == 0, "{bad} recipe(s) in repro/ could not be read");
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A valid recipe with flags of every kind (also the fixture of `running`'s tests).
    pub(in crate::repro) const GOOD: &str = r#"
description = "Gold-tree Tree-LSTM on propositional logic"
program = "logic"
metric = "test"
seeds = [0, 1]
[flags]
encoder = "spinn-pi-nt"
dim = 128
lr = 0.002
small = 2e-3
quiet = false
no-dropout = true
test = ["a/test5", "a/test6"]
max-minutes = 30
[paper]
accuracy = 0.9906
source = "Bowman et al. (2015), Table 3"
"#;

    /// [`Recipe::parse`] of `text` as the recipe `x` of `repro/x.toml`.
    pub(in crate::repro) fn parse(text: &str) -> Result<Recipe> {
        Recipe::parse("x", Path::new("repro/x.toml"), text)
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn a_good_recipe_parses() {
        let r = parse(GOOD).unwrap();
        assert_eq!(r.name, "x");
        assert_eq!(r.program, "logic");
        assert_eq!(r.metric, "test");
        assert_eq!(r.seeds, [0, 1]);
        assert_eq!(r.paper.accuracy, Some(0.9906));
        assert_eq!(r.paper.source, "Bowman et al. (2015), Table 3");
        assert_eq!(r.paper.note, None);
        assert_eq!(r.flag_str("encoder"), Some("spinn-pi-nt"));
        let minimal = "description = \"d\"\nprogram = \"sst\"\nmetric = \"test\"\n\
                       [paper]\nsource = \"s\"\n";
        let r = parse(minimal).unwrap();
        assert_eq!(r.seeds, [0]);
        assert!(r.flags.is_empty());
        assert_eq!(r.paper.accuracy, None);
    }

    #[test]
    fn bad_recipes_are_refused_with_the_file_and_the_problem() {
        let e = error(&GOOD.replace("[flags]", "[flgs]"));
        assert!(e.starts_with("repro/x.toml"), "{e}");
        assert!(e.contains("unknown field 'flgs'"), "{e}");
        let e = error(&GOOD.replace("0.9906", "97"));
        assert!(
            e.contains("repro/x.toml: paper.accuracy 97 must be a fraction in [0, 1]"),
            "{e}"
        );
        let e = error(&GOOD.replace("dim = 128", "seed = 3"));
        assert!(
            e.contains("repro/x.toml") && e.contains("flag 'seed'"),
            "{e}"
        );
        for reserved in RESERVED_FLAGS {
            let e = error(&GOOD.replace("dim = 128", &format!("{reserved} = \"v\"")));
            assert!(e.contains(&format!("flag '{reserved}'")), "{e}");
        }
        let e = error(&GOOD.replace("dim = 128", "Dim = 128"));
        assert!(e.contains("flag 'Dim' does not look like a flag"), "{e}");
        let e = error(&GOOD.replace("dim = 128", "\"--dim\" = 128"));
        assert!(e.contains("flag '--dim'"), "{e}");
        let e = error(&GOOD.replace("source = \"Bowman et al. (2015), Table 3\"", ""));
        assert!(e.contains("missing field 'source'"), "{e}");
        let e = error(&GOOD.replace("paper]", "paperz]"));
        assert!(e.contains("unknown field 'paperz'"), "{e}");
        let e = error(&GOOD.replace("seeds = [0, 1]", "seeds = [1, 1]"));
        assert!(e.contains("seed 1 is listed twice"), "{e}");
        let e = error(&GOOD.replace("dim = 128", "dim = { a = 1 }"));
        assert!(e.contains("flag 'dim'"), "{e}");
        let e = error(&GOOD.replace("program = \"logic\"", "program = \"../logic\""));
        assert!(e.contains("program '../logic'"), "{e}");
        let e = error("description = \"d\"\nprogram = \"sst\"\nmetric = \"test\"\n");
        assert!(e.contains("missing field 'paper'"), "{e}");
        let e = error("description = ");
        assert!(e.starts_with("repro/x.toml: line 1: "), "{e}");
    }

    #[test]
    fn flags_render_as_command_line_words() {
        let r = parse(GOOD).unwrap();
        let words = render_flags(&r.flags, &[]).unwrap();
        // Keys are sorted; false is left out, true is a bare flag, arrays repeat the flag, and
        // numbers are written so that the programs parse them back.
        assert_eq!(
            words,
            [
                "--dim",
                "128",
                "--encoder",
                "spinn-pi-nt",
                "--lr",
                "0.002",
                "--max-minutes",
                "30",
                "--no-dropout",
                "--small",
                "0.002",
                "--test",
                "a/test5",
                "--test",
                "a/test6",
            ]
        );
        let table: toml::Table = toml::from_str("lr = 1e-10\nx = 1.0\nbig = 3e20").unwrap();
        let words = render_flags(&table, &[]).unwrap();
        for pair in words.chunks(2) {
            let v: f64 = pair[1].parse().unwrap();
            let want = table[&pair[0][2..]].as_float().unwrap();
            assert_eq!(v, want, "{words:?}");
        }
        let skipped = render_flags(&r.flags, &["max-minutes", "test"]).unwrap();
        assert!(!skipped
            .iter()
            .any(|w| w == "--max-minutes" || w == "--test"));
        let bad: toml::Table = toml::from_str("x = [true]").unwrap();
        assert!(render_flags(&bad, &[]).is_err());
    }

    #[test]
    fn recipes_are_found_by_name_or_path() {
        let root = Path::new("/w");
        assert_eq!(
            recipe_path(root, "logic-gold"),
            Path::new("/w/repro/logic-gold.toml")
        );
        assert_eq!(recipe_path(root, "my.toml"), Path::new("my.toml"));
        assert_eq!(recipe_path(root, "a/b"), Path::new("a/b"));
        let e = find_recipe(root, "nope").unwrap_err().to_string();
        assert!(
            e.contains("no recipe 'nope'") && e.contains("--list"),
            "{e}"
        );
    }
}
