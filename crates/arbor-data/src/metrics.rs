//! Evaluation metrics: accuracy (whole-split counts), grouped accuracy, perplexity,
//! pseudo-perplexity and unsupervised parsing F1 with the standard baselines.
//!
//! # Parsing F1 conventions
//!
//! For one sentence of `n` words, a tree's span set is the set of its constituents
//! ([`Span`], half-open) that cover **at least 2 words**, **deduplicated** (unary chains give one
//! span). Then:
//!
//! * [`F1Convention::Sentence`] (compound-PCFG, Kim et al. 2019): the whole-sentence span
//!   `(0, n)` is removed from both sets; per sentence `P = |pred ∩ gold| / |pred|`,
//!   `R = |pred ∩ gold| / |gold|`, `F1 = 2PR/(P+R)` (0 when `P + R = 0`); **empty gold ⇒ R = 1**;
//!   **empty prediction ⇒ P = 1 if gold is empty too, else P = 0** (so F1 is 1 when both are
//!   empty, as in the compound-PCFG script, and 0 when only the prediction is empty). The score
//!   is the mean over sentences.
//! * [`F1Convention::Corpus`]: same sets, true/false positives and false negatives summed over
//!   the corpus, then `F1 = 2PR/(P+R)`.
//! * [`F1Convention::Evalb`]: like `Corpus` but the whole-sentence span is kept, as EVALB does
//!   (unlabelled) and as the ON-LSTM / FastTrees papers report.
//! * [`F1Convention::PhraseGrammar`]: exactly what ON-LSTM's `test_phrase_grammar.py`
//!   (yikangshen/Ordered-Neurons) prints as "Mean F1": its `get_brackets` adds a span for each
//!   child of a node, never the root's, so the whole-sentence span is excluded; per-sentence F1
//!   with the same empty-set rules as `Sentence`; the mean is over **every** sentence, so one
//!   that has no span at all (fewer than 2 words) scores 1 and counts.
//!
//! The other conventions skip sentences with fewer than 2 words (counted in
//! [`ParsingF1::skipped`]), as compound-PCFG's evaluation skips length-1 sentences.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display, Write as _};

use rand::SeedableRng;

use crate::tree::{BinaryTree, Span};

/// Exact accuracy over a whole split: add every batch, read `correct / total` at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accuracy {
    /// Correct predictions so far.
    pub correct: u64,
    /// Predictions so far.
    pub total: u64,
}

impl Accuracy {
    /// Adds counts from one batch.
    pub fn add_counts(&mut self, correct: u64, total: u64) {
        self.correct += correct;
        self.total += total;
    }

    /// Adds one prediction.
    pub fn add(&mut self, is_correct: bool) {
        self.add_counts(is_correct as u64, 1);
    }

    /// Adds a batch of predictions against targets (compares up to the shorter length).
    pub fn add_batch<T: PartialEq>(&mut self, predicted: &[T], gold: &[T]) {
        for (p, g) in predicted.iter().zip(gold) {
            self.add(p == g);
        }
    }

    /// Adds another accumulator.
    pub fn merge(&mut self, other: &Accuracy) {
        self.add_counts(other.correct, other.total);
    }

    /// `correct / total` in [0, 1]; 0 when empty.
    pub fn value(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }

    /// Accuracy in percent.
    pub fn percent(&self) -> f64 {
        100.0 * self.value()
    }
}

impl Display for Accuracy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2}% ({}/{})",
            self.percent(),
            self.correct,
            self.total
        )
    }
}

/// Accuracy per group (e.g. per number of logic operators), plus the overall accuracy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedAccuracy<K: Ord> {
    /// Per-group accumulators.
    pub groups: BTreeMap<K, Accuracy>,
}

impl<K: Ord> Default for GroupedAccuracy<K> {
    fn default() -> Self {
        GroupedAccuracy {
            groups: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone + Display> GroupedAccuracy<K> {
    /// Adds one prediction to `group`.
    pub fn add(&mut self, group: K, is_correct: bool) {
        self.groups.entry(group).or_default().add(is_correct);
    }

    /// The accumulator of `group`, if any prediction was added to it.
    pub fn get(&self, group: &K) -> Option<&Accuracy> {
        self.groups.get(group)
    }

    /// All groups together.
    pub fn overall(&self) -> Accuracy {
        let mut a = Accuracy::default();
        self.groups.values().for_each(|g| a.merge(g));
        a
    }

    /// A plain-text table with one row per group and a total row:
    ///
    /// ```text
    /// group  correct  total  accuracy
    /// 1          9     10    90.00
    /// ```
    pub fn table(&self, group_name: &str) -> String {
        let mut s = String::new();
        let w = group_name.len().max(5);
        let _ = writeln!(
            s,
            "{group_name:<w$}  {:>9}  {:>9}  {:>8}",
            "correct", "total", "acc%"
        );
        for (k, a) in &self.groups {
            let _ = writeln!(
                s,
                "{:<w$}  {:>9}  {:>9}  {:>8.2}",
                k.to_string(),
                a.correct,
                a.total,
                a.percent()
            );
        }
        let o = self.overall();
        let _ = writeln!(
            s,
            "{:<w$}  {:>9}  {:>9}  {:>8.2}",
            "all",
            o.correct,
            o.total,
            o.percent()
        );
        s
    }
}

/// Perplexity from summed negative log-likelihood (natural log) and a token count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Perplexity {
    /// Σ NLL in nats.
    pub nll_sum: f64,
    /// Number of predicted tokens.
    pub tokens: u64,
}

impl Perplexity {
    /// Adds a batch's summed NLL and its token count.
    pub fn add(&mut self, nll_sum: f64, tokens: u64) {
        self.nll_sum += nll_sum;
        self.tokens += tokens;
    }

    /// Mean NLL per token (nats).
    pub fn mean_nll(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.nll_sum / self.tokens as f64
        }
    }

    /// `exp(Σ NLL / Σ tokens)`.
    pub fn value(&self) -> f64 {
        self.mean_nll().exp()
    }
}

/// Pseudo-perplexity (Salazar et al. 2020), accumulated sentence by sentence.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PseudoPerplexity {
    /// Corpus Σ NLL.
    pub nll_sum: f64,
    /// Corpus Σ tokens.
    pub tokens: u64,
    /// Σ over sentences of the sentence's mean NLL.
    pub sentence_mean_sum: f64,
    /// Number of (non-empty) sentences.
    pub sentences: u64,
}

impl PseudoPerplexity {
    /// Adds one sentence from the NLL of each of its tokens (empty sentences are ignored).
    pub fn add_sentence(&mut self, token_nll: &[f64]) {
        if token_nll.is_empty() {
            return;
        }
        let s: f64 = token_nll.iter().sum();
        self.nll_sum += s;
        self.tokens += token_nll.len() as u64;
        self.sentence_mean_sum += s / token_nll.len() as f64;
        self.sentences += 1;
    }

    /// Corpus PPPL: `exp(Σ NLL / Σ tokens)`.
    pub fn corpus_pppl(&self) -> f64 {
        if self.tokens == 0 {
            return 1.0;
        }
        (self.nll_sum / self.tokens as f64).exp()
    }

    /// Mean over sentences of the per-sentence mean NLL (not exponentiated): what R2D2's
    /// released script prints.
    pub fn mean_sentence_nll(&self) -> f64 {
        if self.sentences == 0 {
            0.0
        } else {
            self.sentence_mean_sum / self.sentences as f64
        }
    }
}

/// Which parsing-F1 convention a number uses (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum F1Convention {
    /// Sentence-level mean, whole-sentence span excluded (compound PCFG).
    Sentence,
    /// Corpus-level (summed counts), whole-sentence span excluded.
    Corpus,
    /// Corpus-level, whole-sentence span included (EVALB-style; ON-LSTM / FastTrees papers).
    Evalb,
    /// ON-LSTM's `test_phrase_grammar.py`: sentence-level mean, whole-sentence span excluded,
    /// every sentence counted (one without spans scores 1).
    PhraseGrammar,
}

impl F1Convention {
    /// All conventions.
    pub const ALL: [F1Convention; 4] = [
        F1Convention::Sentence,
        F1Convention::Corpus,
        F1Convention::Evalb,
        F1Convention::PhraseGrammar,
    ];

    /// Short name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            F1Convention::Sentence => "sentence",
            F1Convention::Corpus => "corpus",
            F1Convention::Evalb => "evalb",
            F1Convention::PhraseGrammar => "phrase-grammar",
        }
    }

    /// Whether the whole-sentence span is counted.
    pub fn includes_root(self) -> bool {
        match self {
            F1Convention::Evalb => true,
            F1Convention::Sentence | F1Convention::Corpus | F1Convention::PhraseGrammar => false,
        }
    }
}

/// The span set a convention scores: spans of ≥ 2 words inside `0..n`, deduplicated, with the
/// whole-sentence span `(0, n)` removed unless `include_root`.
pub fn span_set(spans: &[Span], n: usize, include_root: bool) -> BTreeSet<Span> {
    spans
        .iter()
        .copied()
        .filter(|s| s.len() >= 2 && s.end <= n && (include_root || *s != Span::new(0, n)))
        .collect()
}

/// True positives, false positives, false negatives of one sentence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanCounts {
    /// Predicted spans also in gold.
    pub tp: u64,
    /// Predicted spans not in gold.
    pub fp: u64,
    /// Gold spans not predicted.
    pub fn_: u64,
}

impl SpanCounts {
    /// Counts for two span sets.
    pub fn of(pred: &BTreeSet<Span>, gold: &BTreeSet<Span>) -> Self {
        let tp = pred.intersection(gold).count() as u64;
        SpanCounts {
            tp,
            fp: pred.len() as u64 - tp,
            fn_: gold.len() as u64 - tp,
        }
    }

    /// Corpus-style F1 of summed counts: 1 when both sets are empty, 0 when only one is.
    pub fn f1(&self) -> f64 {
        let (np, ng) = (self.tp + self.fp, self.tp + self.fn_);
        if np == 0 && ng == 0 {
            return 1.0;
        }
        if np == 0 || ng == 0 || self.tp == 0 {
            return 0.0;
        }
        let p = self.tp as f64 / np as f64;
        let r = self.tp as f64 / ng as f64;
        2.0 * p * r / (p + r)
    }
}

/// Sentence-level F1 of one sentence under the compound-PCFG rules (see the module docs).
pub fn sentence_f1(pred: &[Span], gold: &[Span], n: usize, include_root: bool) -> f64 {
    let p = span_set(pred, n, include_root);
    let g = span_set(gold, n, include_root);
    let overlap = p.intersection(&g).count() as f64;
    let recall = if g.is_empty() {
        1.0
    } else {
        overlap / g.len() as f64
    };
    let precision = if p.is_empty() {
        if g.is_empty() {
            1.0
        } else {
            0.0
        }
    } else {
        overlap / p.len() as f64
    };
    if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    }
}

/// Accumulates parsing F1 under every convention at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ParsingF1 {
    /// Sentences scored (n ≥ 2).
    pub sentences: u64,
    /// Sentences skipped because they have fewer than 2 words.
    pub skipped: u64,
    /// Σ sentence F1, whole-sentence span excluded.
    pub sentence_sum: f64,
    /// Summed counts, whole-sentence span excluded.
    pub counts: SpanCounts,
    /// Summed counts, whole-sentence span included.
    pub counts_root: SpanCounts,
}

impl ParsingF1 {
    /// Adds one sentence of `n` words from predicted and gold spans (any spans; the
    /// conventions' filtering is applied here).
    pub fn add(&mut self, pred: &[Span], gold: &[Span], n: usize) {
        if n < 2 {
            self.skipped += 1;
            return;
        }
        self.sentences += 1;
        self.sentence_sum += sentence_f1(pred, gold, n, false);
        for (root, c) in [(false, &mut self.counts), (true, &mut self.counts_root)] {
            let s = SpanCounts::of(&span_set(pred, n, root), &span_set(gold, n, root));
            c.tp += s.tp;
            c.fp += s.fp;
            c.fn_ += s.fn_;
        }
    }

    /// F1 in [0, 1] under `conv` (0 when no sentence was added).
    pub fn f1(&self, conv: F1Convention) -> f64 {
        let mean = |sum: f64, count: u64| if count == 0 { 0.0 } else { sum / count as f64 };
        match conv {
            F1Convention::Sentence => mean(self.sentence_sum, self.sentences),
            // A sentence without spans has empty gold and predicted sets: F1 1 in the script.
            F1Convention::PhraseGrammar => mean(
                self.sentence_sum + self.skipped as f64,
                self.sentences + self.skipped,
            ),
            F1Convention::Corpus | F1Convention::Evalb if self.sentences == 0 => 0.0,
            F1Convention::Corpus => self.counts.f1(),
            F1Convention::Evalb => self.counts_root.f1(),
        }
    }

    /// F1 in percent under `conv`.
    pub fn percent(&self, conv: F1Convention) -> f64 {
        100.0 * self.f1(conv)
    }
}

/// A trivial baseline tree family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    /// `((((w0 w1) w2) w3) ...)`.
    LeftBranching,
    /// `(w0 (w1 (w2 ...)))`.
    RightBranching,
    /// Split at the middle recursively ([`BinaryTree::balanced`]).
    Balanced,
    /// Uniform random adjacent merges ([`BinaryTree::random`]) with this seed.
    Random(u64),
}

impl Baseline {
    /// Display name.
    pub fn name(self) -> String {
        match self {
            Baseline::LeftBranching => "left-branching".into(),
            Baseline::RightBranching => "right-branching".into(),
            Baseline::Balanced => "balanced".into(),
            Baseline::Random(seed) => format!("random (seed {seed})"),
        }
    }
}

/// Scores a baseline against gold span lists given as `(n, spans)` per sentence. Random trees
/// draw from one `StdRng` seeded once, sentence after sentence, so results are deterministic.
pub fn baseline_f1(gold: &[(usize, Vec<Span>)], baseline: Baseline) -> ParsingF1 {
    let mut acc = ParsingF1::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(match baseline {
        Baseline::Random(s) => s,
        _ => 0,
    });
    for (n, g) in gold {
        let tree = match baseline {
            Baseline::LeftBranching => BinaryTree::left_branching(*n),
            Baseline::RightBranching => BinaryTree::right_branching(*n),
            Baseline::Balanced => BinaryTree::balanced(*n),
            Baseline::Random(_) => BinaryTree::random(*n, &mut rng),
        };
        let spans = tree.map(|t| t.spans()).unwrap_or_default();
        acc.add(&spans, g, *n);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Tree;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn accuracy_is_not_a_mean_of_batches() {
        let mut a = Accuracy::default();
        a.add_batch(&[1, 2, 3], &[1, 2, 0]); // 2/3
        a.add_batch(&[5], &[5]); // 1/1
        assert_eq!((a.correct, a.total), (3, 4));
        assert!(close(a.value(), 0.75)); // the mean of batch accuracies would be 0.8333
        assert_eq!(a.to_string(), "75.00% (3/4)");
        assert_eq!(Accuracy::default().value(), 0.0);
    }

    #[test]
    fn grouped() {
        let mut g = GroupedAccuracy::default();
        g.add(1usize, true);
        g.add(1, false);
        g.add(3, true);
        assert!(close(g.get(&1).unwrap().value(), 0.5));
        assert_eq!(g.overall().total, 3);
        let t = g.table("ops");
        assert_eq!(t.lines().count(), 4);
        assert!(t.lines().nth(1).unwrap().starts_with("1 "));
        assert!(t.contains("50.00"));
        assert!(t.lines().last().unwrap().contains("66.67"));
    }

    #[test]
    fn perplexities() {
        let mut p = Perplexity::default();
        p.add(2.0f64.ln() * 3.0, 3);
        assert!(close(p.value(), 2.0));
        let mut q = PseudoPerplexity::default();
        q.add_sentence(&[1.0, 3.0]); // mean 2
        q.add_sentence(&[4.0]); // mean 4
        q.add_sentence(&[]);
        assert!(close(q.mean_sentence_nll(), 3.0));
        assert!(close(q.corpus_pppl(), (8.0f64 / 3.0).exp()));
    }

    #[test]
    fn hand_computed_f1() {
        // gold ((a b) (c (d e))), pred right-branching (a (b (c (d e)))).
        let gold = Tree::parse("( ( a b ) ( c ( d e ) ) )").unwrap().spans();
        let pred = BinaryTree::right_branching(5).unwrap().spans();
        // Without root: gold {(0,2),(2,5),(3,5)}, pred {(1,5),(2,5),(3,5)} → 2/3.
        assert!(close(sentence_f1(&pred, &gold, 5, false), 2.0 / 3.0));
        // With root: 3 of 4 each → 0.75.
        assert!(close(sentence_f1(&pred, &gold, 5, true), 0.75));
        let mut acc = ParsingF1::default();
        acc.add(&pred, &gold, 5);
        // Second sentence: flat gold (S a b c) has no non-root span → recall 1; pred has one
        // span → precision 0 → F1 0. With root: {(0,3)} vs {(0,3),(1,3)} → P 1/2, R 1 → 2/3.
        let flat = Tree::parse("(S (X a) (X b) (X c))").unwrap().spans();
        let rb3 = BinaryTree::right_branching(3).unwrap().spans();
        acc.add(&rb3, &flat, 3);
        acc.add(&[], &[], 1); // skipped
        assert_eq!((acc.sentences, acc.skipped), (2, 1));
        assert!(close(
            acc.f1(F1Convention::Sentence),
            (2.0 / 3.0 + 0.0) / 2.0
        ));
        // test_phrase_grammar.py: the same per-sentence F1 as `Sentence` (its get_brackets
        // never adds the root's span), averaged over all three sentences, the one-word sentence
        // scoring 1 (both span sets empty).
        assert!(close(
            acc.f1(F1Convention::PhraseGrammar),
            (2.0 / 3.0 + 0.0 + 1.0) / 3.0
        ));
        // Corpus without root: tp 2, fp 1 + 1, fn 1 → P 2/4, R 2/3 → F1 = 4/7.
        assert_eq!(
            acc.counts,
            SpanCounts {
                tp: 2,
                fp: 2,
                fn_: 1
            }
        );
        assert!(close(acc.f1(F1Convention::Corpus), 4.0 / 7.0));
        // EVALB: tp 3 + 1, fp 1 + 1, fn 1 + 0 → P 4/6, R 4/5 → F1 = 8/11.
        assert!(close(acc.f1(F1Convention::Evalb), 8.0 / 11.0));
    }

    #[test]
    fn empty_set_rules() {
        // Two-word sentence: both sets empty without the root → 1.
        assert!(close(
            sentence_f1(&[Span::new(0, 2)], &[Span::new(0, 2)], 2, false),
            1.0
        ));
        // Empty prediction, non-empty gold → 0.
        assert!(close(sentence_f1(&[], &[Span::new(0, 2)], 3, false), 0.0));
        // Duplicates and length-1 spans ignored.
        let g = [
            Span::new(0, 2),
            Span::new(0, 2),
            Span::new(1, 2),
            Span::new(0, 3),
        ];
        assert!(close(sentence_f1(&[Span::new(0, 2)], &g, 3, false), 1.0));
        assert!(close(SpanCounts::default().f1(), 1.0));
    }

    #[test]
    fn baselines() {
        let gold = vec![(
            5usize,
            Tree::parse("( ( a b ) ( c ( d e ) ) )").unwrap().spans(),
        )];
        let r = baseline_f1(&gold, Baseline::RightBranching);
        assert!(close(r.f1(F1Convention::Sentence), 2.0 / 3.0));
        let l = baseline_f1(&gold, Baseline::LeftBranching);
        // left: (0,2),(0,3),(0,4) → only (0,2) matches → P 1/3 R 1/3.
        assert!(close(l.f1(F1Convention::Sentence), 1.0 / 3.0));
        let b = baseline_f1(&gold, Baseline::Balanced);
        // balanced 5: (0,2),(3,5),(2,5) → all match.
        assert!(close(b.f1(F1Convention::Sentence), 1.0));
        let x = baseline_f1(&gold, Baseline::Random(3));
        let y = baseline_f1(&gold, Baseline::Random(3));
        assert_eq!(x, y);
    }
}
