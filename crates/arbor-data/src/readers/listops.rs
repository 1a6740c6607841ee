//! ListOps (Nangia & Bowman 2018): nested list operations over digits, ten classes.
//!
//! An expression is a digit `0`–`9` or an operator applied to 2–5 arguments:
//! `[MAX 2 9 [MIN 4 7 ] 0 ]` = 9. The operators are `[MIN`, `[MAX`, `[MED` (the median,
//! truncated to an integer: the mean of the two middle values, rounded down, for an even count)
//! and `[SM` (the sum modulo 10). The closing `]` is a token of its own.
//!
//! **File format** (as the paper's data is distributed): one example per line,
//! `label<TAB>expression`, where the expression is either
//! - the *bracketed* binary form, in which each operator's list folds to the left, operator
//!   first and `]` last: `[MAX 2 9 ]` is `( ( ( [MAX 2 ) 9 ) ] )`; the gold tree comes from the
//!   brackets; or
//! - the *flat* token form (brackets stripped): `[MAX 2 9 ]`, with no gold tree.
//!
//! A header line `Source<TAB>Target` (the Long Range Arena copy, expression first) is also
//! understood: the columns are then read the other way round.
//!
//! [`ListOpsExpr`] evaluates expressions and writes both forms; [`ListOpsGenerator`] draws new
//! data with the paper's procedure (seeded).

use std::io::BufRead;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::error::{DataError, Loaded, ReadOptions, RecordError};
use crate::io::{open, read_lines, LineOutcome};
use crate::tree::BinaryTree;

/// The four ListOps operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListOp {
    /// `[MIN`: the smallest argument.
    Min,
    /// `[MAX`: the largest argument.
    Max,
    /// `[MED`: the median, truncated to an integer.
    Med,
    /// `[SM`: the sum modulo 10.
    SumMod,
}

impl ListOp {
    /// All operators, in the order the generator draws from.
    pub const ALL: [ListOp; 4] = [ListOp::Min, ListOp::Max, ListOp::Med, ListOp::SumMod];

    /// The opening token, e.g. `[MAX`.
    pub fn token(self) -> &'static str {
        match self {
            ListOp::Min => "[MIN",
            ListOp::Max => "[MAX",
            ListOp::Med => "[MED",
            ListOp::SumMod => "[SM",
        }
    }

    /// The operator an opening token stands for.
    pub fn from_token(token: &str) -> Option<ListOp> {
        ListOp::ALL.into_iter().find(|op| op.token() == token)
    }

    /// Applies the operator to its arguments' values (digits 0–9).
    ///
    /// # Panics
    /// If `args` is empty (an expression always has at least one argument).
    pub fn apply(self, args: &[u8]) -> u8 {
        assert!(!args.is_empty(), "a ListOps operator needs arguments");
        match self {
            ListOp::Min => *args.iter().min().expect("non-empty"),
            ListOp::Max => *args.iter().max().expect("non-empty"),
            ListOp::Med => {
                let mut v = args.to_vec();
                v.sort_unstable();
                let n = v.len();
                if !n.is_multiple_of(2) {
                    v[n / 2]
                } else {
                    ((u32::from(v[n / 2 - 1]) + u32::from(v[n / 2])) / 2) as u8
                }
            }
            ListOp::SumMod => (args.iter().map(|&a| u32::from(a)).sum::<u32>() % 10) as u8,
        }
    }
}

/// The closing token of every operator's list.
pub const CLOSE: &str = "]";

/// A ListOps expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListOpsExpr {
    /// A digit 0–9.
    Digit(u8),
    /// An operator and its arguments.
    Op(ListOp, Vec<ListOpsExpr>),
}

impl ListOpsExpr {
    /// The value, 0–9 (the class label).
    pub fn value(&self) -> u8 {
        match self {
            ListOpsExpr::Digit(d) => *d,
            ListOpsExpr::Op(op, args) => {
                let v: Vec<u8> = args.iter().map(ListOpsExpr::value).collect();
                op.apply(&v)
            }
        }
    }

    /// Nesting depth: 0 for a digit, 1 for an operator over digits, and so on.
    pub fn depth(&self) -> usize {
        match self {
            ListOpsExpr::Digit(_) => 0,
            ListOpsExpr::Op(_, args) => 1 + args.iter().map(ListOpsExpr::depth).max().unwrap_or(0),
        }
    }

    /// The flat tokens, e.g. `[MAX 2 9 [MIN 4 7 ] 0 ]`.
    pub fn tokens(&self) -> Vec<String> {
        fn go(e: &ListOpsExpr, out: &mut Vec<String>) {
            match e {
                ListOpsExpr::Digit(d) => out.push(d.to_string()),
                ListOpsExpr::Op(op, args) => {
                    out.push(op.token().to_string());
                    for a in args {
                        go(a, out);
                    }
                    out.push(CLOSE.to_string());
                }
            }
        }
        let mut out = Vec::new();
        go(self, &mut out);
        out
    }

    /// The bracketed binary form of the paper's files: each list folds to the left, operator
    /// first and `]` last, e.g. `( ( ( [MAX 2 ) 9 ) ] )`.
    pub fn to_bracketed(&self) -> String {
        match self {
            ListOpsExpr::Digit(d) => d.to_string(),
            ListOpsExpr::Op(op, args) => {
                let mut acc = op.token().to_string();
                for a in args {
                    acc = format!("( {acc} {} )", a.to_bracketed());
                }
                format!("( {acc} {CLOSE} )")
            }
        }
    }

    /// Parses the flat token form (`[MAX 2 9 ]`).
    ///
    /// # Errors
    /// An unknown token, an operator without arguments, an unclosed list, a stray `]` or
    /// tokens after the expression.
    pub fn parse_tokens<S: AsRef<str>>(tokens: &[S]) -> Result<ListOpsExpr, String> {
        let mut stack: Vec<(ListOp, Vec<ListOpsExpr>)> = Vec::new();
        let mut done: Option<ListOpsExpr> = None;
        for (i, t) in tokens.iter().enumerate() {
            let t = t.as_ref();
            if done.is_some() {
                return Err(format!(
                    "token {} ({t:?}) after the end of the expression",
                    i + 1
                ));
            }
            let finished = if let Some(op) = ListOp::from_token(t) {
                stack.push((op, Vec::new()));
                None
            } else if t == CLOSE {
                let (op, args) = stack
                    .pop()
                    .ok_or_else(|| format!("token {}: `]` closes no list", i + 1))?;
                if args.is_empty() {
                    return Err(format!("token {}: {} has no arguments", i + 1, op.token()));
                }
                Some(ListOpsExpr::Op(op, args))
            } else {
                match t.parse::<u8>() {
                    Ok(d) if d <= 9 && t.len() == 1 => Some(ListOpsExpr::Digit(d)),
                    _ => {
                        return Err(format!(
                            "token {} ({t:?}) is not a digit, an operator ([MIN [MAX [MED [SM) \
                             or `]`",
                            i + 1
                        ))
                    }
                }
            };
            if let Some(e) = finished {
                match stack.last_mut() {
                    Some((_, args)) => args.push(e),
                    None => done = Some(e),
                }
            }
        }
        if let Some((op, _)) = stack.last() {
            return Err(format!("{} list is not closed with `]`", op.token()));
        }
        done.ok_or_else(|| "empty expression".to_string())
    }
}

/// One ListOps example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOpsExample {
    /// The class, 0–9.
    pub label: u8,
    /// Flat tokens (brackets stripped).
    pub tokens: Vec<String>,
    /// The gold binary tree over `tokens`, when the line was in the bracketed form.
    pub tree: Option<BinaryTree>,
    /// Nesting depth of the expression.
    pub depth: usize,
}

/// Parses the expression column (bracketed or flat) and checks it is a well-formed expression.
pub fn parse_listops_expression(
    text: &str,
) -> Result<(Vec<String>, Option<BinaryTree>, ListOpsExpr), RecordError> {
    if text.trim().is_empty() {
        return Err(RecordError::EmptySentence);
    }
    let (tokens, tree) = if text.contains('(') || text.contains(')') {
        let (tree, tokens) = BinaryTree::parse(text)?;
        (tokens, Some(tree))
    } else {
        let tokens = crate::io::tokens(text);
        // A one-token expression (a bare digit, as the released test file has) is its own
        // bracketed form: its gold tree is the single leaf.
        let tree = (tokens.len() == 1).then_some(BinaryTree::Leaf(0));
        (tokens, tree)
    };
    let expr = ListOpsExpr::parse_tokens(&tokens).map_err(RecordError::Other)?;
    Ok((tokens, tree, expr))
}

/// Parses one `label<TAB>expression` line (`expression_first` for the `Source<TAB>Target`
/// layout). The label must be a digit; with `check_labels` it must also equal the
/// expression's value.
pub fn parse_listops_line(
    line: &str,
    expression_first: bool,
    check_labels: bool,
) -> Result<ListOpsExample, RecordError> {
    let cols: Vec<&str> = line.split('\t').collect();
    if cols.len() != 2 {
        return Err(RecordError::ColumnCount {
            expected: 2,
            found: cols.len(),
        });
    }
    let (label_text, expr_text) = if expression_first {
        (cols[1].trim(), cols[0])
    } else {
        (cols[0].trim(), cols[1])
    };
    let label = match label_text.parse::<u8>() {
        Ok(l) if l <= 9 => l,
        _ => return Err(RecordError::UnknownLabel(label_text.into())),
    };
    let (tokens, tree, expr) = parse_listops_expression(expr_text)?;
    if check_labels && expr.value() != label {
        return Err(RecordError::Other(format!(
            "label {label} but the expression evaluates to {}",
            expr.value()
        )));
    }
    Ok(ListOpsExample {
        label,
        tokens,
        tree,
        depth: expr.depth(),
    })
}

/// Reads a ListOps TSV file; see the module docs for the format. Blank lines and a header line
/// are filtered. Labels are not checked against the expressions (use [`parse_listops`] with
/// `check_labels` for that).
pub fn read_listops(
    path: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<ListOpsExample>, DataError> {
    let path = path.as_ref();
    parse_listops(open(path)?, path, opts, false)
}

/// Reads ListOps data from any reader; `name` appears in errors. With `check_labels`, a line
/// whose label differs from its expression's value is malformed.
pub fn parse_listops<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
    check_labels: bool,
) -> Result<Loaded<ListOpsExample>, DataError> {
    let mut expression_first = false;
    read_lines(reader, name.as_ref(), opts, |line_no, line| {
        if line.trim().is_empty() {
            return Ok(LineOutcome::Filtered);
        }
        if line_no == 1 {
            let head: Vec<&str> = line.split('\t').map(str::trim).collect();
            if head == ["Source", "Target"] {
                expression_first = true;
                return Ok(LineOutcome::Filtered);
            }
            if head == ["Target", "Source"] {
                return Ok(LineOutcome::Filtered);
            }
        }
        let example = parse_listops_line(line, expression_first, check_labels)?;
        opts.check_tokens(example.tokens.len())?;
        Ok(LineOutcome::Record(example))
    })
}

/// Draws ListOps expressions the way the released data was made (nyu-mll/spinn, branch
/// `listops-release`, `python/spinn/data/listops/make_data.py`): a node at depth `d` (the root has
/// depth 1) is an operator with probability `p_operator` (0.25, the script's `VALUE_P`) when
/// `d < max_depth` (20, its `MAX_DEPTH`), otherwise a digit drawn uniformly from 0–9; an operator
/// is drawn uniformly from the four and gets 2–5 arguments, uniformly. So an expression nests at
/// most `max_depth − 1` operators. Duplicates are redrawn (the script keeps a set). The script has
/// no length limit, and neither do the defaults here: the lengths follow from the procedure
/// (the released `test_d20s.tsv`: mean 42.8 flat tokens, median 16, max 939, 10.7% over 100; a
/// test pins the generated statistics). `min_tokens`/`max_tokens` redraw expressions outside a
/// window, for experiments on shorter data; a root digit is a one-token expression, and since
/// duplicates are redrawn at most ten of them appear, as in the released files.
#[derive(Debug, Clone, PartialEq)]
pub struct ListOpsGenerator {
    /// Probability that a node (above the depth cap) is an operator.
    pub p_operator: f64,
    /// Fewest arguments of an operator.
    pub min_args: usize,
    /// Most arguments of an operator.
    pub max_args: usize,
    /// Depth cap, counting the root as depth 1: nodes at this depth are digits.
    pub max_depth: usize,
    /// Shortest expression kept, in flat tokens.
    pub min_tokens: usize,
    /// Longest expression kept, in flat tokens (`None`: no limit, as in the reference).
    pub max_tokens: Option<usize>,
}

impl Default for ListOpsGenerator {
    fn default() -> Self {
        ListOpsGenerator {
            p_operator: 0.25,
            min_args: 2,
            max_args: 5,
            max_depth: 20,
            min_tokens: 1,
            max_tokens: None,
        }
    }
}

impl ListOpsGenerator {
    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the setting that is out of range.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..1.0).contains(&self.p_operator) {
            return Err(format!(
                "the operator probability must be in [0, 1), not {}",
                self.p_operator
            ));
        }
        if self.min_args == 0 || self.min_args > self.max_args {
            return Err(format!(
                "argument counts must satisfy 1 ≤ min ≤ max (got {}..={})",
                self.min_args, self.max_args
            ));
        }
        if self.max_depth == 0 {
            return Err("the depth cap must be at least 1 (the root's depth)".into());
        }
        if let Some(max) = self.max_tokens {
            if self.min_tokens > max || max == 0 {
                return Err(format!(
                    "lengths must satisfy min ≤ max and max ≥ 1 (got {}..={max})",
                    self.min_tokens
                ));
            }
            if max < 3 && self.min_tokens > 1 {
                return Err(format!(
                    "no expression has between {} and {max} tokens",
                    self.min_tokens
                ));
            }
        }
        Ok(())
    }

    fn draw(&self, rng: &mut StdRng, depth: usize) -> ListOpsExpr {
        if depth < self.max_depth && rng.random::<f64>() < self.p_operator {
            let op = ListOp::ALL[rng.random_range(0..ListOp::ALL.len())];
            let n = rng.random_range(self.min_args..=self.max_args);
            ListOpsExpr::Op(op, (0..n).map(|_| self.draw(rng, depth + 1)).collect())
        } else {
            ListOpsExpr::Digit(rng.random_range(0..10u8))
        }
    }

    /// `n` distinct expressions (distinct also from every expression in `exclude`, e.g. the
    /// training set when drawing a test set), seeded.
    ///
    /// # Errors
    /// Invalid settings, or no new expression found in `1000·n + 10000` draws (the length
    /// window is too narrow for `n` distinct expressions).
    pub fn generate(
        &self,
        n: usize,
        seed: u64,
        exclude: &std::collections::HashSet<ListOpsExpr>,
    ) -> Result<Vec<ListOpsExpr>, String> {
        self.check()?;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(n);
        let budget = 1000 * n as u64 + 10_000;
        let mut draws = 0u64;
        while out.len() < n {
            draws += 1;
            if draws > budget {
                return Err(format!(
                    "found only {} distinct expressions of {}–{} tokens in {budget} draws",
                    out.len(),
                    self.min_tokens,
                    self.max_tokens.map_or("any".to_string(), |m| m.to_string())
                ));
            }
            // Drawing from the root (depth 1) with the node rule; a root digit is one token and
            // is redrawn whenever `min_tokens > 1`.
            let e = self.draw(&mut rng, 1);
            let len = e.tokens().len();
            if len < self.min_tokens || self.max_tokens.is_some_and(|m| len > m) {
                continue;
            }
            if exclude.contains(&e) || !seen.insert(e.clone()) {
                continue;
            }
            out.push(e);
        }
        Ok(out)
    }
}

/// Length statistics of a ListOps file or sample, in flat tokens (brackets `[MAX` and `]`
/// counted, the parentheses of the bracketed form not), for comparing generated data with a
/// released file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthStats {
    /// Expressions.
    pub n: usize,
    /// Mean length.
    pub mean: f64,
    /// Median length (the lower middle one for an even count).
    pub median: usize,
    /// 90th percentile (nearest rank).
    pub p90: usize,
    /// Longest.
    pub max: usize,
    /// Share of expressions longer than 100 tokens.
    pub over_100: f64,
}

impl LengthStats {
    /// The statistics of `lengths`; `None` when it is empty.
    pub fn of(lengths: &[usize]) -> Option<LengthStats> {
        if lengths.is_empty() {
            return None;
        }
        let mut v = lengths.to_vec();
        v.sort_unstable();
        let n = v.len();
        let rank = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(LengthStats {
            n,
            mean: v.iter().sum::<usize>() as f64 / n as f64,
            median: v[(n - 1) / 2],
            p90: rank(0.9),
            max: v[n - 1],
            over_100: v.iter().filter(|&&l| l > 100).count() as f64 / n as f64,
        })
    }
}

impl std::fmt::Display for LengthStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "length mean {:.1}, median {}, 90th percentile {}, max {} tokens; {:.1}% over 100",
            self.mean,
            self.median,
            self.p90,
            self.max,
            100.0 * self.over_100
        )
    }
}

/// One line of the bracketed file format for `e`: `label<TAB>bracketed`.
pub fn to_listops_line(e: &ListOpsExpr) -> String {
    format!("{}\t{}", e.value(), e.to_bracketed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(s: &str) -> ListOpsExpr {
        let toks: Vec<&str> = s.split_whitespace().collect();
        ListOpsExpr::parse_tokens(&toks).unwrap()
    }

    #[test]
    fn operators_evaluate_as_the_paper_defines_them() {
        assert_eq!(flat("[MAX 2 9 [MIN 4 7 ] 0 ]").value(), 9);
        assert_eq!(flat("[MIN 2 9 [MIN 4 7 ] 0 ]").value(), 0);
        assert_eq!(flat("[SM 5 6 7 ]").value(), 8);
        // Median of an odd count is the middle value; of an even count the truncated mean of
        // the two middle values.
        assert_eq!(flat("[MED 9 1 5 ]").value(), 5);
        assert_eq!(flat("[MED 1 2 ]").value(), 1);
        assert_eq!(flat("[MED 3 8 0 9 ]").value(), 5);
        assert_eq!(flat("7").value(), 7);
    }

    #[test]
    fn bracketed_form_folds_each_list_to_the_left() {
        let e = flat("[MAX 2 9 ]");
        assert_eq!(e.to_bracketed(), "( ( ( [MAX 2 ) 9 ) ] )");
        let nested = flat("[SM [MIN 1 2 ] 3 ]");
        assert_eq!(
            nested.to_bracketed(),
            "( ( ( [SM ( ( ( [MIN 1 ) 2 ) ] ) ) 3 ) ] )"
        );
        let line = to_listops_line(&nested);
        let ex = parse_listops_line(&line, false, true).unwrap();
        assert_eq!(ex.tokens, nested.tokens());
        assert_eq!(ex.label, 4);
        assert_eq!(ex.depth, 2);
        let tree = ex.tree.unwrap();
        assert_eq!(tree.to_bracketed(&ex.tokens), nested.to_bracketed());
    }

    #[test]
    fn a_bare_digit_is_an_expression_with_a_one_leaf_tree() {
        let (tokens, tree, expr) = parse_listops_expression("9").unwrap();
        assert_eq!(tokens, ["9"]);
        assert_eq!(expr.value(), 9);
        let tree = tree.expect("a one-token expression has its gold tree");
        assert_eq!(tree.num_leaves(), 1);
        assert_eq!(tree.to_transitions().len(), 1);
        // A longer flat line still has none.
        assert!(parse_listops_expression("[MAX 2 9 ]").unwrap().1.is_none());
    }

    #[test]
    fn flat_lines_and_the_lra_header_are_read() {
        let text = "Source\tTarget\n[MAX 2 9 ]\t9\n\n[MIN 3 [SM 4 5 ] ]\t3\n";
        let loaded = parse_listops(text.as_bytes(), "mem", ReadOptions::strict(), true).unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.filtered, 2);
        assert!(loaded.records.iter().all(|r| r.tree.is_none()));
        assert_eq!(loaded.records[1].depth, 2);
    }

    #[test]
    fn malformed_lines_name_the_line_and_the_problem() {
        let cases = [
            ("9\t[MAX 2 9\n", "not closed"),
            ("9\t[MAX 2 9 ] ]\n", "after the end"),
            ("12\t[MAX 2 9 ]\n", "unknown label"),
            ("9\t[MAX ]\n", "no arguments"),
            ("9\t[MAX 2 x ]\n", "not a digit"),
            ("9\t( ( [MAX 2 ) 9 ) ] )\n", ""),
            ("5\t[MAX 2 9 ]\n", "evaluates to 9"),
            ("9 [MAX 2 9 ]\n", "column"),
        ];
        for (text, want) in cases {
            let err = parse_listops(
                format!("2\t[MIN 2 3 ]\n{text}").as_bytes(),
                "data.tsv",
                ReadOptions::strict(),
                true,
            )
            .unwrap_err()
            .to_string();
            assert!(err.starts_with("data.tsv:2:"), "{text:?}: {err}");
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let lenient = parse_listops(
            "9\t[MAX 2 9\n9\t[MAX 2 9 ]\n".as_bytes(),
            "data.tsv",
            ReadOptions::lenient(),
            false,
        )
        .unwrap();
        assert_eq!((lenient.len(), lenient.skipped), (1, 1));
    }

    #[test]
    fn generator_is_seeded_distinct_and_within_bounds() {
        let g = ListOpsGenerator {
            min_tokens: 2,
            max_tokens: Some(40),
            ..Default::default()
        };
        let none = Default::default();
        let a = g.generate(300, 7, &none).unwrap();
        assert_eq!(a, g.generate(300, 7, &none).unwrap());
        assert_ne!(a, g.generate(300, 8, &none).unwrap());
        let set: std::collections::HashSet<_> = a.iter().cloned().collect();
        assert_eq!(set.len(), 300);
        for e in &a {
            let n = e.tokens().len();
            assert!((2..=40).contains(&n), "{n} tokens");
            assert!(e.depth() < 20);
            // Every line it writes reads back with a matching label.
            let ex = parse_listops_line(&to_listops_line(e), false, true).unwrap();
            assert_eq!(ex.label, e.value());
        }
        let b = g.generate(100, 9, &set).unwrap();
        assert!(b.iter().all(|e| !set.contains(e)));
        // Operators appear with roughly equal frequency, and all four do.
        let roots: Vec<_> = a
            .iter()
            .filter_map(|e| match e {
                ListOpsExpr::Op(op, _) => Some(*op),
                ListOpsExpr::Digit(_) => None,
            })
            .collect();
        for op in ListOp::ALL {
            assert!(roots.iter().filter(|&&r| r == op).count() > 40, "{op:?}");
        }
        assert!(ListOpsGenerator {
            min_tokens: 50,
            max_tokens: Some(10),
            ..Default::default()
        }
        .generate(1, 0, &none)
        .is_err());
    }

    #[test]
    fn default_generator_matches_the_released_files_length_distribution() {
        // Released test_d20s.tsv (10,000 lines): mean 42.8, median 16, 90th percentile 106,
        // max 939 flat tokens, 10.7% over 100, operator depth up to 19, one bare digit.
        let g = ListOpsGenerator::default();
        let a = g.generate(6000, 11, &Default::default()).unwrap();
        let lengths: Vec<usize> = a.iter().map(|e| e.tokens().len()).collect();
        let s = LengthStats::of(&lengths).unwrap();
        assert!((33.0..=55.0).contains(&s.mean), "{s}");
        assert!((12..=21).contains(&s.median), "{s}");
        assert!((80..=135).contains(&s.p90), "{s}");
        assert!(s.max > 400, "{s}");
        assert!((0.07..=0.15).contains(&s.over_100), "{s}");
        assert!(a.iter().all(|e| e.depth() <= 19));
        assert!(a.iter().any(|e| e.depth() >= 12));
        let digits = a
            .iter()
            .filter(|e| matches!(e, ListOpsExpr::Digit(_)))
            .count();
        assert!((1..=10).contains(&digits), "{digits} bare digits");
    }

    #[test]
    fn length_stats_by_hand() {
        let s = LengthStats::of(&[1, 5, 3, 200, 7, 150, 9, 11, 13, 2]).unwrap();
        // sorted: 1 2 3 5 7 9 11 13 150 200
        assert_eq!((s.n, s.median, s.p90, s.max), (10, 7, 150, 200));
        assert!((s.mean - 40.1).abs() < 1e-9);
        assert!((s.over_100 - 0.2).abs() < 1e-12);
        assert_eq!(
            s.to_string(),
            "length mean 40.1, median 7, 90th percentile 150, max 200 tokens; 20.0% over 100"
        );
        assert!(LengthStats::of(&[]).is_none());
    }
}
