//! Scoring files of predicted trees against a gold treebank (the library behind the
//! `arbor-parse-f1` command).
//!
//! Gold trees are preprocessed with a [`TreePrep`] (by default: function tags stripped,
//! punctuation and traces removed, unary chains collapsed), trees left empty are dropped, and an
//! optional maximum length keeps e.g. WSJ10. Predicted trees are unlabelled bracketings, one per
//! line, over the *preprocessed* gold words; the prediction file has either one line per gold
//! tree in the file (lines for dropped trees are ignored) or one line per kept sentence.

use std::path::Path;

use crate::error::{DataError, ReadOptions, RecordError};
use crate::io::{open, read_lines, LineOutcome};
use crate::metrics::{baseline_f1, Baseline, F1Convention, ParsingF1};
use crate::tree::{Span, Tree, TreePrep};

/// One gold sentence after preprocessing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldSentence {
    /// 1-based line of the tree in the gold file (= its index + 1).
    pub line: usize,
    /// Words after preprocessing.
    pub words: Vec<String>,
    /// Constituent spans (all internal nodes, deduplicated).
    pub spans: Vec<Span>,
}

/// The gold sentences that are scored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GoldSet {
    /// Kept sentences in file order.
    pub sentences: Vec<GoldSentence>,
    /// Trees in the gold file.
    pub total_trees: usize,
    /// Trees with no word left after preprocessing.
    pub dropped_empty: usize,
    /// Trees longer than the maximum length.
    pub dropped_long: usize,
}

impl GoldSet {
    /// `(n, spans)` pairs for [`baseline_f1`].
    pub fn span_lists(&self) -> Vec<(usize, Vec<Span>)> {
        self.sentences
            .iter()
            .map(|s| (s.words.len(), s.spans.clone()))
            .collect()
    }
}

/// Preprocesses gold trees; `max_len` keeps sentences of at most that many words (after
/// preprocessing).
pub fn prepare_gold(trees: &[Tree], prep: &TreePrep, max_len: Option<usize>) -> GoldSet {
    let mut g = GoldSet {
        total_trees: trees.len(),
        ..GoldSet::default()
    };
    for (i, t) in trees.iter().enumerate() {
        let Some(p) = prep.apply(t) else {
            g.dropped_empty += 1;
            continue;
        };
        let words: Vec<String> = p.words().into_iter().map(str::to_string).collect();
        if max_len.is_some_and(|m| words.len() > m) {
            g.dropped_long += 1;
            continue;
        }
        g.sentences.push(GoldSentence {
            line: i + 1,
            words,
            spans: p.spans(),
        });
    }
    g
}

/// Reads a gold treebank file and preprocesses it.
pub fn load_gold(
    path: impl AsRef<Path>,
    prep: &TreePrep,
    max_len: Option<usize>,
) -> Result<GoldSet, DataError> {
    let trees = crate::readers::read_treebank(path, ReadOptions::strict())?;
    Ok(prepare_gold(&trees.records, prep, max_len))
}

/// Reads predicted trees aligned with `gold` (see the module docs) and returns their spans, one
/// list per gold sentence. Errors name the file and line: unparsable tree, wrong number of
/// lines, wrong number of words.
pub fn read_predictions(
    path: impl AsRef<Path>,
    gold: &GoldSet,
) -> Result<Vec<Vec<Span>>, DataError> {
    let path = path.as_ref();
    let lines = read_lines(open(path)?, path, ReadOptions::strict(), |_, line| {
        if line.trim().is_empty() {
            return Err(RecordError::EmptySentence);
        }
        let t = Tree::parse(line)?;
        Ok(LineOutcome::Record((t.num_leaves(), t.spans())))
    })?
    .records;
    let by_file_line = if lines.len() == gold.total_trees {
        true
    } else if lines.len() == gold.sentences.len() {
        false
    } else {
        return Err(DataError::Invalid(format!(
            "{}: {} predicted trees, but the gold file has {} trees ({} after preprocessing and \
             length filtering); predictions must be aligned line by line with either",
            path.display(),
            lines.len(),
            gold.total_trees,
            gold.sentences.len()
        )));
    };
    let mut out = Vec::with_capacity(gold.sentences.len());
    for (k, g) in gold.sentences.iter().enumerate() {
        let idx = if by_file_line { g.line - 1 } else { k };
        let (n, spans) = &lines[idx];
        if *n != g.words.len() {
            return Err(DataError::record(
                path,
                idx + 1,
                RecordError::Other(format!(
                    "predicted tree has {n} words but gold tree {} has {} after preprocessing",
                    g.line,
                    g.words.len()
                )),
            ));
        }
        out.push(spans.clone());
    }
    Ok(out)
}

/// Scores predicted span lists against the gold set.
pub fn score(gold: &GoldSet, predictions: &[Vec<Span>]) -> ParsingF1 {
    let mut acc = ParsingF1::default();
    for (g, p) in gold.sentences.iter().zip(predictions) {
        acc.add(p, &g.spans, g.words.len());
    }
    acc
}

/// One row of a baseline report.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineRow {
    /// Baseline name.
    pub name: String,
    /// F1 in percent per convention (for random: the mean over seeds).
    pub f1: Vec<(F1Convention, f64)>,
    /// Standard deviation over seeds (random only; population sd).
    pub sd: Option<Vec<f64>>,
}

/// Left-branching, right-branching, balanced and random (mean over `seeds`) baselines.
pub fn baselines(gold: &GoldSet, seeds: &[u64]) -> Vec<BaselineRow> {
    let lists = gold.span_lists();
    let mut rows = Vec::new();
    for b in [
        Baseline::LeftBranching,
        Baseline::RightBranching,
        Baseline::Balanced,
    ] {
        let acc = baseline_f1(&lists, b);
        rows.push(BaselineRow {
            name: b.name(),
            f1: F1Convention::ALL
                .iter()
                .map(|&c| (c, acc.percent(c)))
                .collect(),
            sd: None,
        });
    }
    if !seeds.is_empty() {
        let runs: Vec<ParsingF1> = seeds
            .iter()
            .map(|&s| baseline_f1(&lists, Baseline::Random(s)))
            .collect();
        let mut f1 = Vec::new();
        let mut sd = Vec::new();
        for &c in &F1Convention::ALL {
            let xs: Vec<f64> = runs.iter().map(|r| r.percent(c)).collect();
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
            f1.push((c, mean));
            sd.push(var.sqrt());
        }
        let name = if seeds.len() == 1 {
            format!("random (seed {})", seeds[0])
        } else {
            format!("random (mean of {} seeds)", seeds.len())
        };
        rows.push(BaselineRow {
            name,
            f1,
            sd: Some(sd),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gold() -> GoldSet {
        let trees: Vec<Tree> = [
            "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (PRP it)))) (. .)))",
            "(TOP (. .))",
            "(TOP (S (NP (NNP Mary)) (VP (VBD ran))))",
        ]
        .iter()
        .map(|s| Tree::parse(s).unwrap())
        .collect();
        prepare_gold(&trees, &TreePrep::evaluation(), None)
    }

    #[test]
    fn gold_preparation() {
        let g = gold();
        assert_eq!(
            (g.total_trees, g.sentences.len(), g.dropped_empty),
            (3, 2, 1)
        );
        assert_eq!(g.sentences[0].words, ["The", "cat", "sat", "on", "it"]);
        assert_eq!(
            g.sentences[0].spans,
            vec![
                Span::new(0, 2),
                Span::new(0, 5),
                Span::new(2, 5),
                Span::new(3, 5)
            ]
        );
        assert_eq!(g.sentences[1].line, 3);
        let short = prepare_gold(
            &[Tree::parse("(S (A a) (B b) (C c))").unwrap()],
            &TreePrep::evaluation(),
            Some(2),
        );
        assert_eq!((short.sentences.len(), short.dropped_long), (0, 1));
    }

    #[test]
    fn predictions_alignment_and_errors() {
        let g = gold();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pred.txt");
        // Aligned with all three gold trees; line 2 is ignored.
        std::fs::write(&p, "( ( The cat ) ( sat ( on it ) ) )\nx\n( Mary ran )\n").unwrap();
        let preds = read_predictions(&p, &g).unwrap();
        let acc = score(&g, &preds);
        assert_eq!(acc.f1(F1Convention::Sentence), 1.0);
        assert_eq!(acc.f1(F1Convention::Evalb), 1.0);
        // Aligned with the kept sentences only.
        std::fs::write(&p, "( The ( cat ( sat ( on it ) ) ) )\n( Mary ran )\n").unwrap();
        let acc = score(&g, &read_predictions(&p, &g).unwrap());
        // Sentence 1: gold {(0,2),(2,5),(3,5)} vs pred {(1,5),(2,5),(3,5)} → 2/3; sentence 2: 1.
        assert!((acc.f1(F1Convention::Sentence) - (2.0 / 3.0 + 1.0) / 2.0).abs() < 1e-12);
        std::fs::write(&p, "( a b )\n").unwrap();
        let e = read_predictions(&p, &g).unwrap_err().to_string();
        assert!(
            e.contains("1 predicted trees") && e.contains("3 trees"),
            "{e}"
        );
        std::fs::write(&p, "( a b )\n( Mary ran )\n").unwrap();
        let e = read_predictions(&p, &g).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "pred.txt:1: predicted tree has 2 words but gold tree 1 has 5 after preprocessing"
            ),
            "{e}"
        );
        std::fs::write(&p, "( a b\n( Mary ran )\n").unwrap();
        let e = read_predictions(&p, &g).unwrap_err().to_string();
        assert!(e.contains("pred.txt:1: unbalanced"), "{e}");
    }

    #[test]
    fn baseline_rows() {
        let rows = baselines(&gold(), &[0, 1]);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].name, "left-branching");
        assert!(rows[3].sd.is_some());
        // Right-branching on sentence 1: {(1,5),(2,5),(3,5)} vs gold → 2/3; sentence 2 → 1.
        let rb = rows[1]
            .f1
            .iter()
            .find(|(c, _)| *c == F1Convention::Sentence)
            .unwrap()
            .1;
        assert!((rb - 100.0 * (2.0 / 3.0 + 1.0) / 2.0).abs() < 1e-9);
    }
}
