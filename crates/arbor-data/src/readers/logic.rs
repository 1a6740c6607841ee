//! Propositional-logic inference data (Bowman et al. 2015).
//!
//! Each line is `relation<TAB>left<TAB>right`. Relations are the seven of natural logic,
//! `< > = ^ | v #`; formulas are fully bracketed binary trees over variables `a`–`f` and the
//! operators `not`, `and`, `or` (which are leaves of the tree too: `( not c )`,
//! `( d ( and e ) )`). The operator count of a pair is the larger of the two formulas' counts,
//! which is the number in the data file names (`train3` holds pairs with 3 operators).
//!
//! A formula has two token sequences. [`Formula::tokens`] are the leaves (what an encoder that
//! follows the gold tree reads, beside its transitions); [`Formula::bracketed`] is the formula
//! as written, brackets included, which is what the ON-LSTM/FastTrees reference feeds every
//! sequence model (`proplog.py` in yikangshen/Ordered-Neurons' `propositional_logic` branch and
//! billptw/FastTrees: `p1.split()`, with `(` and `)` in its vocabulary). Without the brackets
//! most formulas are ambiguous: `not e or not c` is both `( not ( e ( or ( not c ) ) ) )` and
//! `( ( not e ) ( or ( not c ) ) )`, whose relations to a third formula differ.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::{DataError, Loaded, ReadOptions, RecordError};
use crate::io::{open, read_lines, LineOutcome};
use crate::tree::BinaryTree;

/// The seven natural-logic relations, with class ids in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Relation {
    /// `<` forward entailment (id 0).
    Forward,
    /// `>` reverse entailment (id 1).
    Reverse,
    /// `=` equivalence (id 2).
    Equivalent,
    /// `^` negation (id 3).
    Negation,
    /// `|` alternation (id 4).
    Alternation,
    /// `v` cover (id 5).
    Cover,
    /// `#` independence (id 6).
    Independent,
}

impl Relation {
    /// All relations in id order.
    pub const ALL: [Relation; 7] = [
        Relation::Forward,
        Relation::Reverse,
        Relation::Equivalent,
        Relation::Negation,
        Relation::Alternation,
        Relation::Cover,
        Relation::Independent,
    ];

    /// Class id 0–6.
    pub fn id(self) -> usize {
        self as usize
    }

    /// The symbol used in the files.
    pub fn symbol(self) -> &'static str {
        ["<", ">", "=", "^", "|", "v", "#"][self as usize]
    }

    /// Parses a symbol.
    pub fn from_symbol(s: &str) -> Option<Self> {
        Relation::ALL.into_iter().find(|r| r.symbol() == s)
    }
}

/// The operator words.
pub const OPERATORS: [&str; 3] = ["not", "and", "or"];

/// One formula: its tokens (variables and operators), as written with its brackets, and its
/// binary tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Formula {
    /// Leaves, left to right.
    pub tokens: Vec<String>,
    /// The formula as written: every bracket and leaf, left to right (`( not c )` is
    /// `["(", "not", "c", ")"]`).
    pub bracketed: Vec<String>,
    /// The bracketing.
    pub tree: BinaryTree,
}

impl Formula {
    /// Number of operator tokens (`not`, `and`, `or`).
    pub fn operators(&self) -> usize {
        self.tokens
            .iter()
            .filter(|t| OPERATORS.contains(&t.as_str()))
            .count()
    }
}

/// One labelled pair of formulas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicPair {
    /// The relation between left and right.
    pub relation: Relation,
    /// Left formula.
    pub left: Formula,
    /// Right formula.
    pub right: Formula,
    /// max(operators(left), operators(right)).
    pub operators: usize,
}

fn formula(s: &str) -> Result<Formula, RecordError> {
    if s.trim().is_empty() {
        return Err(RecordError::EmptySentence);
    }
    let (tree, tokens) = BinaryTree::parse(s)?;
    Ok(Formula {
        tokens,
        bracketed: bracket_tokens(s),
        tree,
    })
}

/// The tokens of a formula as written: brackets split off their neighbours (`(not` is `(`,
/// `not`), every other run of non-space characters one token.
pub fn bracket_tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in s.split_whitespace() {
        let mut rest = word;
        while !rest.is_empty() {
            let cut = rest.find(['(', ')']).unwrap_or(rest.len());
            if cut == 0 {
                out.push(rest[..1].to_string());
                rest = &rest[1..];
            } else {
                out.push(rest[..cut].to_string());
                rest = &rest[cut..];
            }
        }
    }
    out
}

/// Parses one `relation<TAB>left<TAB>right` line.
pub fn parse_logic_line(line: &str) -> Result<LogicPair, RecordError> {
    let cols: Vec<&str> = line.split('\t').collect();
    if cols.len() != 3 {
        return Err(RecordError::ColumnCount {
            expected: 3,
            found: cols.len(),
        });
    }
    let rel = cols[0].trim();
    let relation =
        Relation::from_symbol(rel).ok_or_else(|| RecordError::UnknownLabel(rel.into()))?;
    let left = formula(cols[1])?;
    let right = formula(cols[2])?;
    let operators = left.operators().max(right.operators());
    Ok(LogicPair {
        relation,
        left,
        right,
        operators,
    })
}

/// Reads one logic data file (blank lines are filtered).
pub fn read_logic(
    path: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<LogicPair>, DataError> {
    let path = path.as_ref();
    parse_logic(open(path)?, path, opts)
}

/// Reads logic data from any reader; `name` appears in errors.
pub fn parse_logic<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<LogicPair>, DataError> {
    read_lines(reader, name.as_ref(), opts, |_, line| {
        if line.trim().is_empty() {
            return Ok(LineOutcome::Filtered);
        }
        let pair = parse_logic_line(line)?;
        // The bracketed form is the longest input a model may be fed.
        opts.check_tokens(pair.left.bracketed.len().max(pair.right.bracketed.len()))?;
        Ok(LineOutcome::Record(pair))
    })
}

/// The files of a logic data directory: `train0..trainK` and `test0..testK`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogicData {
    /// Training pairs from every `trainK` file, in file order (`train0` first).
    pub train: Vec<LogicPair>,
    /// Test pairs from every `testK` file, in file order.
    pub test: Vec<LogicPair>,
    /// `(K, path, count)` of each file read, train files then test files.
    pub files: Vec<(usize, PathBuf, usize)>,
    /// Malformed lines skipped in all files.
    pub skipped: usize,
}

/// Reads every `train<K>` and `test<K>` file of `dir` (K = 0, 1, …). Each series must be
/// complete: `train0` must exist, and a number missing below the highest present one
/// (`train3` absent while `train4` is there), or a series entry that is not a regular file (a
/// directory, a FIFO), is an error naming it, never a silent stop that would train on part of
/// the data.
pub fn read_logic_dir(dir: impl AsRef<Path>, opts: ReadOptions) -> Result<LogicData, DataError> {
    let dir = dir.as_ref();
    let mut data = LogicData::default();
    let no_data = || {
        DataError::Missing(format!(
            "no logic data: expected {} (files train0..train6, test0..test6; see \
             datasets/README.md)",
            dir.join("train0").display()
        ))
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_data()),
        Err(source) => {
            return Err(DataError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    // The highest K of each series present in the folder (any kind of entry).
    let mut highest: [Option<usize>; 2] = [None, None];
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        for (i, prefix) in ["train", "test"].into_iter().enumerate() {
            let number = name
                .strip_prefix(prefix)
                .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|k| k.parse::<usize>().ok());
            if let Some(k) = number {
                highest[i] = Some(highest[i].map_or(k, |h| h.max(k)));
            }
        }
    }
    for (i, (prefix, is_train)) in [("train", true), ("test", false)].into_iter().enumerate() {
        let Some(last) = highest[i] else {
            if is_train {
                return Err(no_data());
            }
            continue;
        };
        for k in 0..=last {
            let path = dir.join(format!("{prefix}{k}"));
            if !path.is_file() {
                let what = if path.exists() {
                    "is not a regular file"
                } else {
                    "is missing"
                };
                return Err(DataError::Missing(format!(
                    "{} {what}, but the series goes on to {prefix}{last}: the logic files \
                     {prefix}0..{prefix}{last} must all be there (reading on would silently \
                     leave some out)",
                    path.display()
                )));
            }
            let loaded = read_logic(&path, opts)?;
            data.skipped += loaded.skipped;
            data.files.push((k, path, loaded.len()));
            if is_train {
                data.train.extend(loaded.records);
            } else {
                data.test.extend(loaded.records);
            }
        }
    }
    Ok(data)
}

/// Deterministic seeded split: shuffles `items` with `seed` and moves `valid_fraction` of them
/// (rounded down) to the second list, e.g. `0.1` for the usual 90/10 train/validation split.
pub fn train_valid_split<T>(mut items: Vec<T>, valid_fraction: f64, seed: u64) -> (Vec<T>, Vec<T>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    items.shuffle(&mut rng);
    let frac = if valid_fraction.is_finite() {
        valid_fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let n_valid = (items.len() as f64 * frac).floor() as usize;
    let valid = items.split_off(items.len() - n_valid);
    (items, valid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::transitions_to_string;

    #[test]
    fn a_gap_or_a_non_file_in_a_series_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["train0", "train1", "train3", "test0"] {
            std::fs::write(dir.path().join(name), "=\ta\ta\n").unwrap();
        }
        let e = read_logic_dir(dir.path(), ReadOptions::strict())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train2 is missing") && e.contains("train0..train3"),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("train2")).unwrap();
        let e = read_logic_dir(dir.path(), ReadOptions::strict())
            .unwrap_err()
            .to_string();
        assert!(e.contains("train2 is not a regular file"), "{e}");
        std::fs::remove_dir(dir.path().join("train2")).unwrap();
        std::fs::write(dir.path().join("train2"), "#\ta\tb\n").unwrap();
        // Names that only start like the series are not part of it.
        std::fs::write(dir.path().join("train_notes"), "x").unwrap();
        std::fs::write(dir.path().join("test0.bak"), "x").unwrap();
        let d = read_logic_dir(dir.path(), ReadOptions::strict()).unwrap();
        assert_eq!((d.train.len(), d.test.len(), d.files.len()), (4, 1, 5));
    }

    #[test]
    fn parses_lines() {
        let p = parse_logic_line("|\t( not ( e ( or ( not c ) ) ) )\t( d ( and e ) )").unwrap();
        assert_eq!(p.relation, Relation::Alternation);
        assert_eq!(p.relation.id(), 4);
        assert_eq!(
            (p.left.operators(), p.right.operators(), p.operators),
            (3, 1, 3)
        );
        assert_eq!(
            transitions_to_string(&p.right.tree.to_transitions()),
            "S S S R R"
        );
        let q = parse_logic_line("#\td\t( not ( ( f ( or e ) ) ( and c ) ) )").unwrap();
        assert_eq!(q.left.tokens, ["d"]);
        assert_eq!(q.left.bracketed, ["d"]);
        assert_eq!(q.operators, 3);
        assert_eq!(
            q.right.bracketed.join(" "),
            "( not ( ( f ( or e ) ) ( and c ) ) )"
        );
        assert_eq!(p.left.bracketed.len(), 13);
    }

    #[test]
    fn brackets_are_tokens_even_without_spaces() {
        assert_eq!(
            bracket_tokens("(not (c))"),
            ["(", "not", "(", "c", ")", ")"]
        );
        assert_eq!(bracket_tokens("  a  "), ["a"]);
        // The two readings of `not e or not c` differ only in their brackets.
        let a = parse_logic_line("=\t( not ( e ( or ( not c ) ) ) )\ta").unwrap();
        let b = parse_logic_line("=\t( ( not e ) ( or ( not c ) ) )\ta").unwrap();
        assert_eq!(a.left.tokens, b.left.tokens);
        assert_ne!(a.left.bracketed, b.left.bracketed);
    }

    #[test]
    fn bad_lines() {
        assert_eq!(
            parse_logic_line("<\ta").unwrap_err(),
            RecordError::ColumnCount {
                expected: 3,
                found: 2
            }
        );
        assert_eq!(
            parse_logic_line("?\ta\tb").unwrap_err(),
            RecordError::UnknownLabel("?".into())
        );
        assert_eq!(
            parse_logic_line("<\t\tb").unwrap_err(),
            RecordError::EmptySentence
        );
        assert!(matches!(
            parse_logic_line("<\t( a b\tb"),
            Err(RecordError::Tree(_))
        ));
        assert!(matches!(
            parse_logic_line("<\t( a b c )\tb"),
            Err(RecordError::Tree(_))
        ));
    }

    #[test]
    fn directory_and_split() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train0"), "=\ta\ta\n<\ta\t( a ( or b ) )\n").unwrap();
        std::fs::write(dir.path().join("train1"), "^\ta\t( not a )\n").unwrap();
        std::fs::write(dir.path().join("test0"), "=\tb\tb\n").unwrap();
        let d = read_logic_dir(dir.path(), ReadOptions::strict()).unwrap();
        assert_eq!((d.train.len(), d.test.len(), d.files.len()), (3, 1, 3));
        assert_eq!(d.train[1].operators, 1);
        let (tr, va) = train_valid_split((0..100).collect::<Vec<_>>(), 0.1, 42);
        assert_eq!((tr.len(), va.len()), (90, 10));
        let (tr2, va2) = train_valid_split((0..100).collect::<Vec<_>>(), 0.1, 42);
        assert_eq!((tr, va), (tr2, va2));
        let mut all: Vec<i32> = train_valid_split((0..10).collect(), 0.3, 1).0;
        all.extend(train_valid_split((0..10).collect::<Vec<i32>>(), 0.3, 1).1);
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        let empty = tempfile::tempdir().unwrap();
        let e = read_logic_dir(empty.path(), ReadOptions::strict()).unwrap_err();
        assert!(e.to_string().contains("train0"));
    }
}
