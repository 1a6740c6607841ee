//! SNLI 1.0 jsonl (the official release layout).
//!
//! Each line is a JSON object with `gold_label`, `sentence1`, `sentence2` and, when present,
//! `sentence{1,2}_binary_parse` / `sentence{1,2}_parse` and `pairID`. Records whose gold label is
//! `-` (no annotator majority) are filtered out, as every SNLI paper does. Tokens come from the
//! binary parse when there is one (so they match its leaves), else from whitespace-splitting the
//! sentence.

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use crate::error::{DataError, Loaded, ReadOptions, RecordError};
use crate::io::{open, read_lines, tokens, LineOutcome};
use crate::tree::{BinaryTree, Transition};

/// The three SNLI labels; ids follow SPINN's `LABEL_MAP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NliLabel {
    /// `entailment` (id 0).
    Entailment,
    /// `neutral` (id 1).
    Neutral,
    /// `contradiction` (id 2).
    Contradiction,
}

impl NliLabel {
    /// All labels in id order.
    pub const ALL: [NliLabel; 3] = [
        NliLabel::Entailment,
        NliLabel::Neutral,
        NliLabel::Contradiction,
    ];

    /// Class id 0, 1 or 2.
    pub fn id(self) -> usize {
        self as usize
    }

    /// The label's name in the SNLI files.
    pub fn name(self) -> &'static str {
        match self {
            NliLabel::Entailment => "entailment",
            NliLabel::Neutral => "neutral",
            NliLabel::Contradiction => "contradiction",
        }
    }

    /// Parses a label name.
    pub fn from_name(s: &str) -> Option<Self> {
        NliLabel::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// One sentence of a pair: tokens plus the binary parse when the file has one.
#[derive(Debug, Clone, PartialEq)]
pub struct SnliSentence {
    /// Tokens (the parse's leaves when there is a parse).
    pub tokens: Vec<String>,
    /// The binary parse over `tokens`.
    pub tree: Option<BinaryTree>,
}

impl SnliSentence {
    /// SHIFT/REDUCE transitions of the parse (`2n − 1` steps).
    pub fn transitions(&self) -> Option<Vec<Transition>> {
        self.tree.as_ref().map(BinaryTree::to_transitions)
    }
}

/// One labelled SNLI pair.
#[derive(Debug, Clone, PartialEq)]
pub struct SnliPair {
    /// Gold label.
    pub label: NliLabel,
    /// `sentence1`.
    pub premise: SnliSentence,
    /// `sentence2`.
    pub hypothesis: SnliSentence,
    /// `pairID` when present.
    pub pair_id: Option<String>,
}

impl SnliPair {
    /// Whether both sentences carry a binary parse.
    pub fn has_parses(&self) -> bool {
        self.premise.tree.is_some() && self.hypothesis.tree.is_some()
    }
}

/// A sample of SNLI 1.0 built into arbor (2,523 pairs with binary parses, from the dev split;
/// CC BY-SA 4.0, see `crates/arbor-data/data/SNLI-SAMPLE.md`), gzip-compressed jsonl: the
/// default the `snli` program trains on when the corpus is absent and cannot be downloaded. A
/// smoke test, not a benchmark. [`snli_sample`] reads it.
pub const SNLI_SAMPLE_JSONL_GZ: &[u8] = include_bytes!("../../data/snli_sample.jsonl.gz");

/// The built-in SNLI sample ([`SNLI_SAMPLE_JSONL_GZ`]), decompressed and parsed.
pub fn snli_sample() -> Result<Vec<SnliPair>, DataError> {
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(SNLI_SAMPLE_JSONL_GZ));
    parse_snli(reader, "<built-in SNLI sample>", ReadOptions::strict()).map(|l| l.records)
}

/// Reads an SNLI jsonl file.
pub fn read_snli(path: impl AsRef<Path>, opts: ReadOptions) -> Result<Loaded<SnliPair>, DataError> {
    let path = path.as_ref();
    parse_snli(open(path)?, path, opts)
}

/// Reads SNLI jsonl from any reader; `name` appears in errors.
pub fn parse_snli<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<Loaded<SnliPair>, DataError> {
    read_lines(reader, name.as_ref(), opts, |_, line| {
        let out = parse_line(line)?;
        if let LineOutcome::Record(p) = &out {
            opts.check_tokens(p.premise.tokens.len().max(p.hypothesis.tokens.len()))?;
        }
        Ok(out)
    })
}

fn sentence(obj: &serde_json::Map<String, Value>, which: u8) -> Result<SnliSentence, RecordError> {
    let key = format!("sentence{which}");
    let text = obj
        .get(&key)
        .and_then(Value::as_str)
        .ok_or_else(|| RecordError::MissingField(key.clone()))?;
    let parse_key = format!("sentence{which}_binary_parse");
    let parse = obj
        .get(&parse_key)
        .and_then(Value::as_str)
        .filter(|p| !p.trim().is_empty());
    let (tokens, tree) = match parse {
        Some(p) => {
            let (tree, words) = BinaryTree::parse(p)?;
            (words, Some(tree))
        }
        None => (tokens(text), None),
    };
    if tokens.is_empty() {
        return Err(RecordError::EmptySentence);
    }
    Ok(SnliSentence { tokens, tree })
}

fn parse_line(line: &str) -> Result<LineOutcome<SnliPair>, RecordError> {
    if line.trim().is_empty() {
        return Ok(LineOutcome::Filtered);
    }
    let value: Value = serde_json::from_str(line).map_err(|e| RecordError::Json(e.to_string()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| RecordError::Json("not an object".into()))?;
    let gold = obj
        .get("gold_label")
        .and_then(Value::as_str)
        .ok_or_else(|| RecordError::MissingField("gold_label".into()))?;
    if gold == "-" {
        return Ok(LineOutcome::Filtered);
    }
    let label = NliLabel::from_name(gold).ok_or_else(|| RecordError::UnknownLabel(gold.into()))?;
    let premise = sentence(obj, 1)?;
    let hypothesis = sentence(obj, 2)?;
    let pair_id = obj
        .get("pairID")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(LineOutcome::Record(SnliPair {
        label,
        premise,
        hypothesis,
        pair_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::transitions_to_string;

    #[test]
    fn the_built_in_sample_decompresses_to_its_2523_parsed_pairs() {
        let pairs = snli_sample().unwrap();
        assert_eq!(pairs.len(), 2523);
        assert!(pairs.iter().all(SnliPair::has_parses));
        assert!(
            SNLI_SAMPLE_JSONL_GZ.len() < 200 * 1024,
            "the sample is stored gzipped"
        );
    }

    const GOOD: &str = r#"{"gold_label": "neutral", "sentence1": "the cat sat down", "sentence2": "A cat.", "pairID": "x1", "sentence1_binary_parse": "( ( the cat ) ( sat down ) )", "sentence2_binary_parse": "( ( A cat ) . )"}
{"gold_label": "-", "sentence1": "a", "sentence2": "b"}
{"gold_label": "contradiction", "sentence1": "No parse here .", "sentence2": "Nor here"}
"#;

    #[test]
    fn reads_pairs() {
        let l = parse_snli(GOOD.as_bytes(), "mem.jsonl", ReadOptions::strict()).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l.filtered, 1);
        let p = &l.records[0];
        assert_eq!(p.label, NliLabel::Neutral);
        assert_eq!(p.label.id(), 1);
        assert!(p.has_parses());
        assert_eq!(
            transitions_to_string(&p.premise.transitions().unwrap()),
            "S S R S S R R"
        );
        assert_eq!(p.hypothesis.tokens, ["A", "cat", "."]);
        let q = &l.records[1];
        assert!(!q.has_parses());
        assert_eq!(q.premise.tokens, ["No", "parse", "here", "."]);
        assert_eq!(q.pair_id, None);
    }

    #[test]
    fn bad_records() {
        let bad = "{\"gold_label\": \"maybe\", \"sentence1\": \"a\", \"sentence2\": \"b\"}\n\
                   {\"gold_label\": \"neutral\", \"sentence1\": \"a\"}\n\
                   not json\n\
                   {\"gold_label\": \"neutral\", \"sentence1\": \" \", \"sentence2\": \"b\"}\n\
                   {\"gold_label\": \"neutral\", \"sentence1\": \"a\", \"sentence2\": \"b\", \"sentence1_binary_parse\": \"( a\"}\n";
        let e = parse_snli(bad.as_bytes(), "bad.jsonl", ReadOptions::strict()).unwrap_err();
        assert_eq!(e.to_string(), "bad.jsonl:1: unknown label \"maybe\"");
        let l = parse_snli(bad.as_bytes(), "bad.jsonl", ReadOptions::lenient()).unwrap();
        assert_eq!((l.len(), l.skipped), (0, 5));
        assert_eq!(
            l.errors[1],
            "bad.jsonl:2: missing or non-string field \"sentence2\""
        );
        assert!(l.errors[2].starts_with("bad.jsonl:3: invalid JSON"));
        assert_eq!(l.errors[3], "bad.jsonl:4: empty sentence");
        assert!(l.errors[4].starts_with("bad.jsonl:5: unbalanced bracket"));
        let utf = b"\xff\xfe\n";
        let e = parse_snli(&utf[..], "u.jsonl", ReadOptions::strict()).unwrap_err();
        assert_eq!(e.to_string(), "u.jsonl:1: invalid UTF-8");
    }
}
