//! R2D2's differentiable CKY chart with pruned tree induction (docs/models.md §4; Hu et al. 2021,
//! eq. 1–5 and Algorithms 1–2), built on the device.
//!
//! In training, nothing in [`Chart::build`] reads a tensor back to the host (docs/r2d2.md, "The
//! chart on the device"; evaluation reads the merge positions, see below):
//!
//! - The CKY rows up to `m + 1` tokens have a structure the host knows from the lengths alone;
//!   their children are gathered with uploaded indices.
//! - The pruned steps keep a *table* of the chart's top rows over the current terminals:
//!   slot `(b, s, l)` holds the cell of sentence `b` that spans terminals `s..=s + l`
//!   (`l ≤ m`): its vector `e`, `log p̃`, `log p`, and its splits (token positions and
//!   un-noised `log p̃_ijk`). FIND (Algorithm 2) runs as tensor operations over that table, the
//!   merge is one gather that drops the merged terminal's slot, and the missing top-row cells
//!   are composed for *every* position they could take (`min(m + 1, a' − m)` per sentence for
//!   `a'` terminals; the ones that fall outside the sentence are computed and discarded), so
//!   the shapes never depend on the data. Evaluation reads the merge positions back (one small
//!   read per step) and composes exactly the new cells, unless built with
//!   [`Chart::build_without_reads`].
//! - Every composed cell is also recorded (its span, splits, scores and choice, as tensors), and
//!   the longest cell starting and ending at each position is kept on the device for the roots
//!   and the LM contexts.
//!
//! What needs the host (trees, merges, a cell's splits) reads those records once, at first use
//! ([`Chart::trees`] and the other inspection methods).

use arbor_cells::ArborBackend;
use std::cell::OnceCell;
use std::collections::HashMap;

use arbor_cells::{argmax_select, st_gumbel_softmax};
use arbor_data::tree::BinaryTree;
use burn::prelude::*;
use burn::tensor::{IndexingUpdateOp, TensorData};

use super::composition::Compose;
use crate::Decisions;

/// Clamp inside the logarithms of the bigram score (docs/models.md §4, FIND step 2).
const SCORE_EPS: f64 = 1e-9;

/// Score of a missing split or an excluded candidate (below any real score).
const NEG: f32 = -1e30;

/// How the chart is built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartConfig {
    /// Pruning window `m` (≥ 1): cells span at most `m + 1` current terminals.
    pub window: usize,
    /// Pruned tree induction (`false`: exhaustive CKY, `O(n³)` compositions).
    pub pruning: bool,
    /// Gumbel-softmax temperature τ in training mode.
    pub tau: f64,
}

/// How a tree is read off a built chart (docs/r2d2.md, "Tree recovery"). Both start at the
/// root and follow, in every cell, the best-ranked split (un-noised `log p̃_ijk`, recorded when
/// the cell was composed) that the rule allows; with word-piece input both also require a span
/// covering several words to be split at a word boundary. They differ only on cells that pruned
/// induction left stale: cells composed before a later merge, whose best split may cut the
/// merged terminal.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum TreeRule {
    /// The R2D2 reference's (`ChartTable.get_token_tree`, and `ChartModelWrapper` for word-level
    /// trees, StructuredLM_RTDT at `6edf2ac`): every cell's best split as ranked when it was
    /// composed, even one that cuts a terminal merged later. The default of imported
    /// checkpoints.
    Reference,
    /// arbor's: the best split that cuts no merged terminal strictly inside the cell, the rule
    /// FIND walks the chart with, so every merged terminal is a constituent of the tree. The
    /// default of arbor-trained checkpoints and of [`Chart::trees`].
    #[default]
    Arbor,
}

/// Counters of one chart construction: the work done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChartStats {
    /// Number of `(left, right)` pairs composed (one per split of every computed cell). In
    /// training a pruned step composes `min(m + 1, a' − m)` top-row cells per unfinished
    /// sentence (`a'` terminals after the merge), `m` splits each, although between 1 and
    /// that many are new (the rest are discarded): the step's shape may not depend on which
    /// pair FIND picks. Evaluation composes only the new ones.
    pub compositions: u64,
    /// Number of calls to the composition function (batched steps).
    pub calls: u64,
    /// Number of pruning merges.
    pub merges: u64,
}

impl ChartStats {
    /// Adds another run's counters.
    pub fn add(&mut self, other: &ChartStats) {
        self.compositions += other.compositions;
        self.calls += other.calls;
        self.merges += other.merges;
    }
}

/// Host-side record of one chart cell (the host view, read at first use).
#[derive(Debug, Clone)]
struct CellMeta {
    /// Row of `e_ij` in [`Chart::vectors`].
    row: usize,
    /// Split points `k` (the left child is `(i, k)`), best un-noised `log p̃_ijk` first.
    splits: Vec<usize>,
    /// The split the selection `α` picked (eq. 2): the best one at evaluation, a Gumbel-noised
    /// one in training.
    chosen: usize,
    /// `log p_ij = Σ_k α_k log p_ijk` (eq. 5); `α` is one-hot in the forward pass, so this is
    /// `log p` of the chosen split.
    log_p: f64,
}

/// The host view of one sentence's chart.
#[derive(Debug, Clone)]
struct SentenceChart {
    n: usize,
    cells: HashMap<(usize, usize), CellMeta>,
    /// Spans merged into terminals by pruning, in merge order.
    merged: Vec<(usize, usize)>,
    /// Word index of every position (word-piece input), when pieces of a word stay together.
    word_of: Option<Vec<usize>>,
    /// For each position `j`, the longest computed cell ending at `j`: `(length, row)`.
    longest_ending: Vec<(usize, usize)>,
    /// For each position `i`, the longest computed cell starting at `i`: `(length, row)`.
    longest_starting: Vec<(usize, usize)>,
}

impl SentenceChart {
    fn add_cell(&mut self, span: (usize, usize), meta: CellMeta) {
        let len = span.1 - span.0 + 1;
        if len > self.longest_ending[span.1].0 {
            self.longest_ending[span.1] = (len, meta.row);
        }
        if len > self.longest_starting[span.0].0 {
            self.longest_starting[span.0] = (len, meta.row);
        }
        self.cells.insert(span, meta);
    }

    /// Whether `rule` allows splitting `span` after `k` in tree recovery: (word-piece input) a
    /// span covering several words is split at a word boundary, and, under
    /// [`TreeRule::Arbor`], no merged terminal strictly inside the span is cut.
    fn split_allowed(&self, span: (usize, usize), k: usize, rule: TreeRule) -> bool {
        let words_ok = match &self.word_of {
            None => true,
            Some(w) => w[span.0] == w[span.1] || w[k] != w[k + 1],
        };
        let cuts = match rule {
            TreeRule::Reference => false,
            TreeRule::Arbor => self
                .merged
                .iter()
                .any(|&(a, b)| a >= span.0 && b <= span.1 && (a, b) != span && a <= k && k < b),
        };
        words_ok && !cuts
    }

    /// The tree below `span`, following each cell's best split that `rule` allows.
    fn tree(&self, span: (usize, usize), rule: TreeRule) -> BinaryTree {
        if span.0 == span.1 {
            return BinaryTree::Leaf(span.0);
        }
        let Some(cell) = self.cells.get(&span) else {
            // Unreachable for cells the chart built; stay total anyway.
            return shifted_right_branching(span);
        };
        let k = cell
            .splits
            .iter()
            .copied()
            .find(|&k| self.split_allowed(span, k, rule))
            .unwrap_or(cell.splits[0]);
        BinaryTree::node(
            self.tree((span.0, k), rule),
            self.tree((k + 1, span.1), rule),
        )
    }
}

fn shifted_right_branching(span: (usize, usize)) -> BinaryTree {
    let mut t = BinaryTree::Leaf(span.1);
    for i in (span.0..span.1).rev() {
        t = BinaryTree::node(BinaryTree::Leaf(i), t);
    }
    t
}

/// Row indices as an index tensor.
pub(super) fn index_tensor<B: ArborBackend>(
    rows: &[usize],
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    ints(
        rows.iter().map(|&r| r as i64).collect(),
        [rows.len()],
        device,
    )
}

/// An integer tensor from host values.
fn ints<B: Backend, const D: usize>(
    v: Vec<i64>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// A boolean tensor from host values (made by a comparison: Flex stores booleans from data
/// in another dtype than those from comparisons, and will not combine the two).
fn bools<B: Backend, const D: usize>(
    v: Vec<bool>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Bool> {
    ints::<B, D>(v.into_iter().map(i64::from).collect(), shape, device).equal_elem(1)
}

/// `0, 1, …, n − 1` along `dim`, broadcast to `dims`.
fn iota<B: Backend, const D: usize>(
    dims: [usize; D],
    dim: usize,
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let mut shape = [1; D];
    shape[dim] = dims[dim];
    Tensor::<B, 1, Int>::arange(0..dims[dim] as i64, device)
        .reshape(shape)
        .expand(dims)
}

/// The index of the first maximum along `dim` (size 1 there), like the host's strict `>` scan.
fn first_argmax<B: Backend, const D: usize>(x: Tensor<B, D>, dim: usize) -> Tensor<B, D, Int> {
    let dims = x.dims();
    let device = x.device();
    let max = x.clone().max_dim(dim).expand(dims);
    let n = dims[dim] as i64;
    iota::<B, D>(dims, dim, &device)
        .mask_fill(x.equal(max).bool_not(), n)
        .min_dim(dim)
        // A NaN row has no maximum: take its first entry rather than an index out of range.
        .clamp(0, n - 1)
}

/// Composed cells: `e_ij` (`[cells, D]`), `log p̃_ij` and `log p_ij` (`[cells]`), with their
/// gradients.
#[derive(Debug)]
struct Cells<B: Backend> {
    e: Tensor<B, 2>,
    lpt: Tensor<B, 1>,
    lp: Tensor<B, 1>,
}

/// One batch of cells composed in one call, as recorded for the host view and the LM.
#[derive(Debug)]
struct Block<B: Backend> {
    /// Row of its first cell in [`Chart::vectors`].
    first: usize,
    cells: Cells<B>,
    /// `[cells, 5 + W]`: sentence, start, end, valid (0/1), index of the chosen split, split
    /// positions (−1 past the cell's splits).
    ints: Tensor<B, 2, Int>,
    /// `[cells, 1 + W]`: `log p_ij` (detached), un-noised `log p̃_ijk` ([`NEG`] past the splits).
    floats: Tensor<B, 2>,
}

/// What eq. 2–5 give for `c` cells of `k` splits each.
struct Chosen<B: Backend> {
    cells: Cells<B>,
    /// Un-noised `log p̃_ijk`, detached: `[c, k]`.
    scores: Tensor<B, 2>,
    /// Index of the split `α` picked: `[c]`.
    chosen: Tensor<B, 1, Int>,
    /// `log p_ijk` of the chosen split, detached: `[c]`.
    lp_chosen: Tensor<B, 1>,
}

/// The device table of a sentence batch's top chart rows over the current terminals (see the
/// module docs). Slot `(b, s, l)` is row `(b·A + s)·(m + 1) + l`.
struct Table<B: Backend> {
    /// Current number of terminal slots `A` per sentence.
    width: usize,
    e: Tensor<B, 2>,
    lpt: Tensor<B, 1>,
    /// `log p` (detached), for FIND's bigram scores.
    lp: Tensor<B, 1>,
    /// Split scores `[slots, m]` (detached, [`NEG`] past a cell's splits).
    scores: Tensor<B, 2>,
    /// Split positions `[slots, m]` (−1 past a cell's splits).
    splits: Tensor<B, 2, Int>,
    /// First and last token position of every terminal: `[batch·A]`.
    start: Tensor<B, 1, Int>,
    end: Tensor<B, 1, Int>,
}

/// A built chart: every sentence's cells, trees, roots and LM contexts.
#[derive(Debug)]
pub struct Chart<B: Backend> {
    /// The leaf vectors: `[batch·time, D]`, rows `b·time + i`.
    leaves: Tensor<B, 2>,
    blocks: Vec<Block<B>>,
    /// Per pruned step: `[sentences merging, 3]` (sentence, first, last position of the merge).
    merged: Vec<Tensor<B, 2, Int>>,
    /// Per position `b·time + j`: row of the longest cell ending at `j`.
    longest_end: Tensor<B, 1, Int>,
    /// Per position `b·time + i`: row of the longest cell starting at `i`.
    longest_start: Tensor<B, 1, Int>,
    lengths: Vec<usize>,
    time: usize,
    /// Split columns of the records (`W`).
    width: usize,
    word_of: Option<Vec<Vec<usize>>>,
    /// The same on the device, for FIND.
    words: Option<WordFlags<B>>,
    /// The host view, read at first use.
    host: OnceCell<Vec<SentenceChart>>,
    /// Counters of this construction.
    pub stats: ChartStats,
}

/// The cells `(sentence, first token)` of one CKY row.
type RowJobs = Vec<(usize, usize)>;

/// Word-piece input on the device, per position `b·time + i`: the word index, and whether the
/// piece starts or ends its word (1/0).
#[derive(Debug)]
struct WordFlags<B: Backend> {
    word: Tensor<B, 1, Int>,
    starts: Tensor<B, 1, Int>,
    ends: Tensor<B, 1, Int>,
}

impl<B: Backend> WordFlags<B> {
    fn new(word_of: &[Vec<usize>], time: usize, device: &B::Device) -> Self {
        let rows = word_of.len() * time;
        let (mut word, mut starts, mut ends) =
            (vec![-1i64; rows], vec![0i64; rows], vec![0i64; rows]);
        for (b, w) in word_of.iter().enumerate() {
            let n = w.len();
            for i in 0..n {
                word[b * time + i] = w[i] as i64;
                starts[b * time + i] = i64::from(i == 0 || w[i - 1] != w[i]);
                ends[b * time + i] = i64::from(i + 1 == n || w[i + 1] != w[i]);
            }
        }
        WordFlags {
            word: ints(word, [rows], device),
            starts: ints(starts, [rows], device),
            ends: ints(ends, [rows], device),
        }
    }
}

impl<B: ArborBackend> Chart<B> {
    /// Builds the charts of a batch of sentences. In training ([`Decisions::Sample`]) nothing
    /// is read back from the device; evaluation reads each pruned step's merge positions (one
    /// small read per step) to compose only the new cells.
    ///
    /// Training mode ([`Decisions::Sample`]) selects each cell's split with straight-through
    /// Gumbel-softmax over `log p̃_ijk` (eq. 2); evaluation ([`Decisions::Argmax`]) takes the
    /// argmax. Either way the splits are ranked by their un-noised `log p̃_ijk`, and pruning and
    /// tree recovery use that ranking.
    ///
    /// `word_ids`, when given, holds the word index of every position of every sentence:
    /// pruning then never merges across a word boundary before both sides are whole words,
    /// and trees keep each word's pieces together.
    ///
    /// # Shapes
    /// - `leaves`: `[batch, time, D]`, the leaf vectors `e_ii`, padded at the end
    /// - `lengths`: `batch` entries, `1 ≤ len ≤ time`
    ///
    /// # Panics
    /// If `lengths` or `word_ids` do not match `leaves`, or `window` is 0.
    pub fn build<C: Compose<B>>(
        compose: &C,
        leaves: Tensor<B, 3>,
        lengths: &[usize],
        word_ids: Option<&[Vec<usize>]>,
        config: &ChartConfig,
        decisions: Decisions<'_>,
    ) -> Chart<B> {
        let exact = decisions.is_argmax();
        Self::build_with(compose, leaves, lengths, word_ids, config, decisions, exact)
    }

    /// [`Chart::build`], reading nothing back in evaluation either: every pruned step composes
    /// all the top-row cells the merge could create, as training does, instead of reading the
    /// merge positions to compose exactly the new ones. The chart is the same; on a GPU this
    /// trades a little composition work for no synchronisation per step.
    ///
    /// # Shapes
    /// - as [`Chart::build`]
    pub fn build_without_reads<C: Compose<B>>(
        compose: &C,
        leaves: Tensor<B, 3>,
        lengths: &[usize],
        word_ids: Option<&[Vec<usize>]>,
        config: &ChartConfig,
        decisions: Decisions<'_>,
    ) -> Chart<B> {
        Self::build_with(compose, leaves, lengths, word_ids, config, decisions, false)
    }

    /// `exact`: read the merge positions back at each pruned step and compose only the new
    /// cells.
    fn build_with<C: Compose<B>>(
        compose: &C,
        leaves: Tensor<B, 3>,
        lengths: &[usize],
        word_ids: Option<&[Vec<usize>]>,
        config: &ChartConfig,
        mut decisions: Decisions<'_>,
        exact: bool,
    ) -> Chart<B> {
        let [batch, time, d] = leaves.dims();
        assert_eq!(lengths.len(), batch, "one length per sentence");
        assert!(
            lengths.iter().all(|&n| (1..=time).contains(&n)),
            "every length must be in 1..={time}: {lengths:?}"
        );
        assert!(config.window >= 1, "the pruning window must be at least 1");
        if let Some(w) = word_ids {
            assert!(
                w.len() == batch && w.iter().zip(lengths).all(|(w, &n)| w.len() == n),
                "one word index per position"
            );
        }
        let device = leaves.device();
        let n_max = lengths.iter().copied().max().unwrap_or(1);
        // The highest CKY row (cells of `top + 1` tokens).
        let top = if config.pruning {
            config.window.min(n_max - 1)
        } else {
            n_max - 1
        };
        let width = top.max(1);
        let leaf_rows = batch * time;
        let mut chart = Chart {
            leaves: leaves.reshape([leaf_rows, d]),
            blocks: Vec::new(),
            merged: Vec::new(),
            longest_end: Tensor::zeros([leaf_rows], &device),
            longest_start: Tensor::zeros([leaf_rows], &device),
            lengths: lengths.to_vec(),
            time,
            width,
            word_of: word_ids.map(|w| w.to_vec()),
            words: word_ids.map(|w| WordFlags::new(w, time, &device)),
            host: OnceCell::new(),
            stats: ChartStats::default(),
        };
        // Row of the CKY cell (b, i, l) spanning tokens i..=i+l; level 0 is the leaves.
        let mut cky_row: Vec<Vec<Vec<usize>>> = lengths
            .iter()
            .enumerate()
            .map(|(b, &n)| vec![(0..n).map(|i| b * time + i).collect()])
            .collect();
        for l in 1..=top {
            let jobs: RowJobs = lengths
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > l)
                .flat_map(|(b, &n)| (0..n - l).map(move |i| (b, i)))
                .collect();
            let first = chart.rows();
            chart.cky_row(compose, &jobs, l, &cky_row, config, &mut decisions);
            for (t, &(b, _)) in jobs.iter().enumerate() {
                if cky_row[b].len() == l {
                    cky_row[b].push(Vec::new());
                }
                cky_row[b][l].push(first + t);
            }
        }
        // The longest cell at each position so far: the highest row's.
        let (mut longest_end, mut longest_start) = (vec![0i64; leaf_rows], vec![0i64; leaf_rows]);
        for (b, rows) in cky_row.iter().enumerate() {
            for (l, row) in rows.iter().enumerate() {
                for (i, &r) in row.iter().enumerate() {
                    longest_start[b * time + i] = r as i64;
                    longest_end[b * time + i + l] = r as i64;
                }
            }
        }
        chart.longest_end = ints(longest_end, [leaf_rows], &device);
        chart.longest_start = ints(longest_start, [leaf_rows], &device);
        if config.pruning && n_max > top + 1 {
            let mut table = chart.initial_table(&cky_row, n_max, top);
            for step in 0..n_max - top - 1 {
                table = chart.pruned_step(compose, table, step, config, &mut decisions, exact);
            }
        }
        chart
    }

    /// Number of rows of [`Chart::vectors`] so far.
    fn rows(&self) -> usize {
        self.blocks
            .last()
            .map_or(self.leaves.dims()[0], |b| b.first + b.cells.e.dims()[0])
    }

    /// Every vector row so far (`e`, `log p̃`) as two tensors.
    fn all_rows(&self) -> (Tensor<B, 2>, Tensor<B, 1>) {
        let device = self.leaves.device();
        let mut e = vec![self.leaves.clone()];
        let mut lpt = vec![Tensor::zeros([self.leaves.dims()[0]], &device)];
        for b in &self.blocks {
            e.push(b.cells.e.clone());
            lpt.push(b.cells.lpt.clone());
        }
        (Tensor::cat(e, 0), Tensor::cat(lpt, 0))
    }

    /// Composes CKY row `l` (cells of `l + 1` tokens, `l` splits each) of every sentence
    /// long enough, in one call; `jobs` are the cells `(sentence, start)`.
    fn cky_row<C: Compose<B>>(
        &mut self,
        compose: &C,
        jobs: &RowJobs,
        l: usize,
        cky_row: &[Vec<Vec<usize>>],
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
    ) {
        let device = self.leaves.device();
        let w = self.width;
        let c = jobs.len();
        let mut rows = Vec::with_capacity(2 * c * l);
        let mut right = Vec::with_capacity(c * l);
        let mut meta = Vec::with_capacity(c * (4 + w));
        let mut positions = Vec::with_capacity(c * w);
        for &(b, i) in jobs {
            for q in 0..l {
                rows.push(cky_row[b][q][i]);
                right.push(cky_row[b][l - 1 - q][i + q + 1]);
            }
            meta.extend([b as i64, i as i64, (i + l) as i64, 1]);
            positions.extend((0..w).map(|q| if q < l { (i + q) as i64 } else { -1 }));
        }
        rows.extend(right);
        let (all_e, all_lpt) = self.all_rows();
        let children = index_tensor::<B>(&rows, &device);
        let n = c * l;
        let out = choose(compose, all_e, all_lpt, children, [c, l], config, decisions);
        let ints = Tensor::cat(
            vec![
                ints::<B, 2>(meta, [c, 4], &device),
                out.chosen.clone().reshape([c, 1]),
                ints::<B, 2>(positions, [c, w], &device),
            ],
            1,
        );
        self.record(out, ints, n);
    }

    /// Appends a composed block to the records.
    fn record(&mut self, out: Chosen<B>, ints: Tensor<B, 2, Int>, compositions: usize) {
        let [c, k] = out.scores.dims();
        let device = out.cells.e.device();
        let mut floats = vec![out.lp_chosen.reshape([c, 1]), out.scores];
        if k < self.width {
            floats.push(Tensor::full([c, self.width - k], NEG, &device));
        }
        let first = self.rows();
        self.blocks.push(Block {
            first,
            cells: out.cells,
            ints,
            floats: Tensor::cat(floats, 1),
        });
        self.stats.compositions += compositions as u64;
        self.stats.calls += 1;
    }

    /// The table of every CKY cell up to row `top` (= `m`), over `n_max` terminal slots.
    fn initial_table(&self, cky_row: &[Vec<Vec<usize>>], n_max: usize, top: usize) -> Table<B> {
        let device = self.leaves.device();
        let (batch, l1) = (self.lengths.len(), top + 1);
        let slots = batch * n_max * l1;
        let mut rows = vec![0usize; slots];
        let mut splits = vec![-1i64; slots * top];
        for (b, cells) in cky_row.iter().enumerate() {
            for (l, row) in cells.iter().enumerate() {
                for (s, &r) in row.iter().enumerate() {
                    let slot = (b * n_max + s) * l1 + l;
                    rows[slot] = r;
                    for q in 0..l {
                        splits[slot * top + q] = (s + q) as i64;
                    }
                }
            }
        }
        let (all_e, all_lpt) = self.all_rows();
        let mut lp = vec![Tensor::zeros([self.leaves.dims()[0]], &device)];
        let mut scores = vec![Tensor::full([self.leaves.dims()[0], top], NEG, &device)];
        for b in &self.blocks {
            lp.push(
                b.floats
                    .clone()
                    .narrow(1, 0, 1)
                    .reshape([b.cells.e.dims()[0]]),
            );
            scores.push(b.floats.clone().narrow(1, 1, top));
        }
        let idx = index_tensor::<B>(&rows, &device);
        let terminals: Vec<i64> = (0..batch * n_max).map(|r| (r % n_max) as i64).collect();
        Table {
            width: n_max,
            e: all_e.select(0, idx.clone()),
            lpt: all_lpt.select(0, idx.clone()),
            lp: Tensor::cat(lp, 0).select(0, idx.clone()),
            scores: Tensor::cat(scores, 0).select(0, idx),
            splits: ints(splits, [slots, top], &device),
            start: ints(terminals.clone(), [batch * n_max], &device),
            end: ints(terminals, [batch * n_max], &device),
        }
    }

    /// One pruned step (Algorithm 1, lines 5–9) for every sentence with more than `m + 1`
    /// terminals: FIND, merge, compose the missing top-row cells, update the table.
    fn pruned_step<C: Compose<B>>(
        &mut self,
        compose: &C,
        t: Table<B>,
        step: usize,
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
        exact: bool,
    ) -> Table<B> {
        let device = self.leaves.device();
        let batch = self.lengths.len();
        let (m, a) = (self.width, t.width);
        let (l1, a2) = (m + 1, a - 1);
        // Host-known: which sentences merge at this step and how many terminals they have.
        let atoms: Vec<usize> = self.lengths.iter().map(|&n| n - step.min(n)).collect();
        let pending: Vec<usize> = (0..batch).filter(|&b| atoms[b] > m + 1).collect();
        let p = pending.len();
        // FIND (Algorithm 2): the bigram each sentence merges, as the slot `u` of its left
        // terminal.
        let u = self.find(&t, &atoms, &pending);

        // Merge: the terminals after the step, and the merged span of each merging sentence.
        let pend_idx = index_tensor::<B>(&pending, &device);
        let u_p = u.clone().select(0, pend_idx.clone());
        let base_p = ints::<B, 1>(
            pending.iter().map(|&b| (b * a) as i64).collect(),
            [p],
            &device,
        );
        let at = base_p.clone().add(u_p.clone().clamp(0, a as i64 - 2));
        self.merged.push(Tensor::cat(
            vec![
                ints::<B, 2>(pending.iter().map(|&b| b as i64).collect(), [p, 1], &device),
                t.start.clone().select(0, at.clone()).reshape([p, 1]),
                t.end.clone().select(0, at.add_scalar(1)).reshape([p, 1]),
            ],
            1,
        ));
        let grid2 = iota::<B, 2>([batch, a2], 1, &device);
        let base2 = iota::<B, 2>([batch, a2], 0, &device).mul_scalar(a as i64);
        let u2 = u.clone().reshape([batch, 1]).expand([batch, a2]);
        let start_src = base2
            .clone()
            .add(grid2.clone())
            .add(grid2.clone().greater(u2.clone()).int());
        let end_src = base2.add(grid2.clone()).add(grid2.greater_equal(u2).int());
        let start = t.start.clone().select(0, start_src.reshape([batch * a2]));
        let end = t.end.clone().select(0, end_src.reshape([batch * a2]));

        // The top-row cells over terminals s..=s+m that hold the new terminal, s in
        // [max(0, u − m), min(u, a' − m − 1)] for a' terminals after the merge: at most
        // k = min(m + 1, a' − m) of them, which the host knows. In training each sentence
        // composes k cells from s = max(0, u − m) on (those past the interval are discarded),
        // so that nothing is read back. Evaluation (`exact`) reads the merge positions (one
        // read per step; the trees read the chart anyway) and composes exactly the interval.
        // Children:
        // left (s, q), right (s + q + 1, m − 1 − q) after the merge, read from the old table.
        let k: Vec<usize> = match exact {
            false => pending
                .iter()
                .map(|&b| (m + 1).min(atoms[b] - 1 - m))
                .collect(),
            true => {
                let at: Vec<i64> = u_p
                    .clone()
                    .into_data()
                    .convert::<i64>()
                    .into_vec()
                    .unwrap_or_default();
                pending
                    .iter()
                    .zip(at.iter().chain(std::iter::repeat(&0)))
                    .map(|(&b, &u)| {
                        let u = (u.max(0) as usize).min(atoms[b] - 2);
                        let (lo, hi) = (u.saturating_sub(m), u.min(atoms[b] - 2 - m));
                        hi.saturating_sub(lo) + 1
                    })
                    .collect()
            }
        };
        let mut offset = vec![0i64; batch];
        let (mut cell_of, mut cell_j, mut cell_last) = (Vec::new(), Vec::new(), Vec::new());
        for (r, &b) in pending.iter().enumerate() {
            offset[b] = cell_of.len() as i64;
            for j in 0..k[r] {
                cell_of.push(r);
                cell_j.push(j as i64);
                cell_last.push((atoms[b] - 2 - m) as i64);
            }
        }
        let c = cell_of.len();
        let of_cell = index_tensor::<B>(&cell_of, &device);
        let u_c = u_p.clone().select(0, of_cell.clone());
        let lo = u_c.clone().sub_scalar(m as i64).clamp_min(0);
        let s_raw = lo.add(ints::<B, 1>(cell_j, [c], &device));
        let valid = s_raw
            .clone()
            .lower_equal(u_c.clone())
            .bool_and(s_raw.clone().lower_equal(ints(cell_last, [c], &device)));
        let s = s_raw.clamp(0, (a2 - 1 - m) as i64);
        let shape3 = [c, m];
        let s3 = s.clone().reshape([c, 1]).expand(shape3);
        let q3 = iota::<B, 2>(shape3, 1, &device);
        let u3 = u_c.reshape([c, 1]).expand(shape3);
        let base_c = base_p.clone().select(0, of_cell.clone());
        let b3 = base_c.clone().reshape([c, 1]).expand(shape3);
        let old_slot = |s: Tensor<B, 2, Int>, l: Tensor<B, 2, Int>| {
            slot_before_merge(b3.clone(), s, l, u3.clone(), l1)
                .0
                .reshape([c * m])
        };
        let left_idx = old_slot(s3.clone(), q3.clone());
        let right_idx = old_slot(
            s3.clone().add(q3.clone()).add_scalar(1),
            q3.neg().add_scalar(m as i64 - 1),
        );
        let children = Tensor::cat(vec![left_idx, right_idx], 0);
        let n = c * m;
        let out = choose(
            compose,
            t.e.clone(),
            t.lpt.clone(),
            children,
            [c, m],
            config,
            decisions,
        );
        // Spans and split positions of the new cells, in the terminals after the merge.
        let at_cell = base_c.div_scalar(a as i64).mul_scalar(a2 as i64).add(s);
        let cell_start = start.clone().select(0, at_cell.clone());
        let cell_end = end.clone().select(0, at_cell.clone().add_scalar(m as i64));
        let positions = end
            .clone()
            .select(
                0,
                at_cell
                    .reshape([c, 1])
                    .expand(shape3)
                    .add(iota::<B, 2>(shape3, 1, &device))
                    .reshape([n]),
            )
            .reshape([c, m]);
        let sentence: Vec<i64> = cell_of.iter().map(|&r| pending[r] as i64).collect();
        let sentence = ints::<B, 1>(sentence, [c], &device);
        let valid = valid.reshape([c]);
        let first = self.rows();
        // The longest cells: a new cell is longer than any earlier one ending (or starting)
        // where it does (its span only now became m + 1 terminals); cells outside the
        // sentence go to a spare slot.
        let spare = (batch * self.time) as i64;
        let at_token = |pos: Tensor<B, 1, Int>| {
            sentence
                .clone()
                .mul_scalar(self.time as i64)
                .add(pos)
                .mask_fill(valid.clone().bool_not(), spare)
        };
        let new_rows = Tensor::<B, 1, Int>::arange(first as i64..(first + c) as i64, &device);
        self.longest_end = longest(
            self.longest_end.clone(),
            at_token(cell_end.clone()),
            new_rows.clone(),
        );
        self.longest_start = longest(
            self.longest_start.clone(),
            at_token(cell_start.clone()),
            new_rows,
        );

        // The table after the merge: slot (b, s, l) takes the old cell over the same terminals
        // (s ≤ u ≤ s + l: the old row l + 1 at s; after u: the old slot s + 1), or a new cell.
        let shape3 = [batch, a2, l1];
        let s3 = iota::<B, 3>(shape3, 1, &device);
        let l3 = iota::<B, 3>(shape3, 2, &device);
        let b3 = iota::<B, 3>(shape3, 0, &device).mul_scalar(a as i64);
        let u3 = u.reshape([batch, 1, 1]).expand(shape3);
        let (old, contains) = slot_before_merge(b3, s3.clone(), l3.clone(), u3.clone(), l1);
        let slots = (batch * a * l1) as i64;
        // Sentence b's cell for slot s is its (s − max(0, u − m))-th; slots past the sentence
        // hold anything, but in range.
        let mut most = vec![0i64; batch];
        for (r, &b) in pending.iter().enumerate() {
            most[b] = k[r] as i64 - 1;
        }
        let per_sentence = |v: Vec<i64>| {
            ints::<B, 1>(v, [batch], &device)
                .reshape([batch, 1, 1])
                .expand(shape3)
        };
        let lo3 = u3.clone().sub_scalar(m as i64).clamp_min(0);
        let new_cell = s3
            .sub(lo3)
            .clamp_min(0)
            .min_pair(per_sentence(most))
            .add(per_sentence(offset))
            .add_scalar(slots);
        let is_new = contains.clone().bool_and(l3.clone().equal_elem(m as i64));
        let src = old.clone().mask_where(is_new.clone(), new_cell.clone());
        // A merged terminal's log p̃ is a constant (Algorithm 1): read it from a detached copy.
        let is_atom = contains.bool_and(l3.equal_elem(0));
        let lpt_src = old
            .add_scalar(slots)
            .mask_where(is_atom.bool_not(), src.clone())
            .mask_where(is_new, new_cell.clone().add_scalar(slots));
        let src = src.reshape([batch * a2 * l1]);
        let lpt_src = lpt_src.reshape([batch * a2 * l1]);
        let table = Table {
            width: a2,
            e: Tensor::cat(vec![t.e, out.cells.e.clone()], 0).select(0, src.clone()),
            lpt: Tensor::cat(
                vec![t.lpt.clone(), t.lpt.detach(), out.cells.lpt.clone()],
                0,
            )
            .select(0, lpt_src),
            lp: Tensor::cat(vec![t.lp, out.lp_chosen.clone()], 0).select(0, src.clone()),
            scores: Tensor::cat(vec![t.scores, out.scores.clone()], 0).select(0, src.clone()),
            splits: Tensor::cat(vec![t.splits, positions.clone()], 0).select(0, src),
            start,
            end,
        };
        let ints = Tensor::cat(
            vec![
                sentence.reshape([c, 1]),
                cell_start.reshape([c, 1]),
                cell_end.reshape([c, 1]),
                valid.int().reshape([c, 1]),
                out.chosen.clone().reshape([c, 1]),
                positions,
            ],
            1,
        );
        self.record(out, ints, n);
        self.stats.merges += p as u64;
        table
    }

    /// FIND (Algorithm 2) on the table, for every sentence: the slot `u` of the left terminal
    /// of the bigram to merge; past every slot for sentences that are not in `pending` (their
    /// table stays as it is).
    ///
    /// # Shapes
    /// - output: `[batch]`
    fn find(&self, t: &Table<B>, atoms: &[usize], pending: &[usize]) -> Tensor<B, 1, Int> {
        let device = self.leaves.device();
        let batch = self.lengths.len();
        let (m, a) = (self.width, t.width);
        let l1 = m + 1;
        // FIND 1: each cell's best split among the current terminal boundaries.
        let mut boundary = Vec::with_capacity(batch * a * m);
        for b in 0..batch {
            for s in 0..a {
                boundary.extend((0..m).map(|q| (b * a + (s + q).min(a - 1)) as i64));
            }
        }
        let shape5 = [batch, a, l1, m, m];
        let bpos = t
            .end
            .clone()
            .select(0, ints(boundary, [batch * a * m], &device))
            .reshape([batch, a, 1, m, 1])
            .expand(shape5);
        let split_pos = t
            .splits
            .clone()
            .reshape([batch, a, l1, 1, m])
            .expand(shape5);
        let split_score = t
            .scores
            .clone()
            .reshape([batch, a, l1, 1, m])
            .expand(shape5);
        let per_boundary = split_score
            .mask_fill(split_pos.equal(bpos).bool_not(), NEG)
            .max_dim(4)
            .reshape([batch, a, l1, m]);
        // Only boundaries q < l lie inside a cell of row l.
        let outside: Vec<bool> = (0..l1).flat_map(|l| (0..m).map(move |q| q >= l)).collect();
        let outside = bools::<B, 2>(outside, [l1, m], &device)
            .reshape([1, 1, l1, m])
            .expand([batch, a, l1, m]);
        let best = first_argmax(per_boundary.mask_fill(outside, NEG), 3).reshape([batch, a, l1]);
        // FIND 1: the bigrams the top-row cells' best trees use, walking down the rows.
        let mut top_valid = vec![0i64; batch * a];
        for &b in pending {
            for s in 0..atoms[b] - m {
                top_valid[b * a + s] = 1;
            }
        }
        let zeros = |cols: usize| Tensor::<B, 2, Int>::zeros([batch, cols], &device);
        let mut reached: Vec<Tensor<B, 2, Int>> = (0..l1).map(|_| zeros(a)).collect();
        reached[m] = ints(top_valid, [batch, a], &device);
        for l in (2..=m).rev() {
            let best_l = best.clone().narrow(2, l, 1).reshape([batch, a]);
            for q in 0..l {
                let hit = reached[l]
                    .clone()
                    .mul(best_l.clone().equal_elem(q as i64).int());
                if q > 0 {
                    reached[q] = reached[q].clone().max_pair(hit.clone());
                }
                let r = l - 1 - q;
                if r > 0 {
                    let shifted = Tensor::cat(vec![zeros(q + 1), hit.narrow(1, 0, a - q - 1)], 1);
                    reached[r] = reached[r].clone().max_pair(shifted);
                }
            }
        }
        let used = reached.swap_remove(1);
        // FIND 2: log p(bigram) + log(1 − p(left neighbour)) + log(1 − p(right neighbour)).
        let prob =
            t.lp.clone()
                .reshape([batch, a, l1])
                .narrow(2, 1, 1)
                .reshape([batch, a])
                .exp();
        let own = prob.clone().clamp_min(SCORE_EPS).log();
        let not = prob.neg().add_scalar(1.0).clamp_min(SCORE_EPS).log();
        let zero_col = Tensor::<B, 2>::zeros([batch, 1], &device);
        let left = Tensor::cat(vec![zero_col.clone(), not.clone().narrow(1, 0, a - 1)], 1);
        let right = Tensor::cat(vec![not.narrow(1, 1, a - 1), zero_col], 1);
        let (mut valid_u, mut has_right) = (vec![false; batch * a], vec![false; batch * a]);
        for &b in pending {
            for u in 0..atoms[b] - 1 {
                valid_u[b * a + u] = true;
                has_right[b * a + u] = u + 2 < atoms[b];
            }
        }
        let valid_u = bools::<B, 2>(valid_u, [batch, a], &device);
        let right = right.mask_fill(
            bools::<B, 2>(has_right, [batch, a], &device).bool_not(),
            0.0,
        );
        let score = own.add(left).add(right);
        // Candidates: used and whole-word bigrams, else whole-word ones, else any.
        let tier = match &self.words {
            Some(words) => {
                let allowed = self.word_allowed(words, t, a).int();
                allowed.clone().add(allowed.mul(used))
            }
            None => used.add_scalar(1),
        };
        let tier = tier.mask_fill(valid_u.clone().bool_not(), -1);
        let best_tier = tier.clone().max_dim(1).expand([batch, a]);
        let candidate = tier.equal(best_tier).bool_and(valid_u);
        let u = first_argmax(score.mask_fill(candidate.bool_not(), NEG), 1).reshape([batch]);
        // Sentences that are done merge nowhere: `u` past every slot keeps their table as it is.
        let done: Vec<bool> = atoms.iter().map(|&n| n <= m + 1).collect();
        let big = (a + m + 2) as i64;
        u.mask_fill(bools::<B, 1>(done, [batch], &device), big)
    }

    /// Whether merging each bigram `(u, u + 1)` of the table's terminals respects word
    /// boundaries: inside one word, or whole words on both sides.
    ///
    /// # Shapes
    /// - output: `[batch, A]`
    fn word_allowed(&self, words: &WordFlags<B>, t: &Table<B>, a: usize) -> Tensor<B, 2, Bool> {
        let device = self.leaves.device();
        let batch = self.lengths.len();
        let time = self.time;
        let base = iota::<B, 2>([batch, a], 0, &device);
        let next: Vec<i64> = (0..batch * a)
            .map(|r| (r / a * a + (r % a + 1).min(a - 1)) as i64)
            .collect();
        let token = |pos: Tensor<B, 1, Int>| {
            base.clone()
                .mul_scalar(time as i64)
                .reshape([batch * a])
                .add(pos)
        };
        let i = token(t.start.clone());
        let j = token(t.end.clone().select(0, ints(next, [batch * a], &device)));
        let same = words
            .word
            .clone()
            .select(0, i.clone())
            .equal(words.word.clone().select(0, j.clone()));
        let whole = words
            .starts
            .clone()
            .select(0, i)
            .mul(words.ends.clone().select(0, j))
            .equal_elem(1);
        same.bool_or(whole).reshape([batch, a])
    }

    /// The host view: every cell's span, ranked splits, choice and `log p`, and the merges,
    /// read from the device once.
    fn host(&self) -> &[SentenceChart] {
        self.host.get_or_init(|| {
            let time = self.time;
            let mut sentences: Vec<SentenceChart> = self
                .lengths
                .iter()
                .enumerate()
                .map(|(b, &n)| SentenceChart {
                    n,
                    cells: HashMap::new(),
                    merged: Vec::new(),
                    word_of: self.word_of.as_ref().map(|w| w[b].clone()),
                    longest_ending: (0..n).map(|i| (1, b * time + i)).collect(),
                    longest_starting: (0..n).map(|i| (1, b * time + i)).collect(),
                })
                .collect();
            if self.blocks.is_empty() {
                return sentences;
            }
            let w = self.width;
            let read_ints = |t: Vec<Tensor<B, 2, Int>>| -> Vec<i64> {
                Tensor::cat(t, 0)
                    .into_data()
                    .convert::<i64>()
                    .into_vec()
                    .unwrap_or_default()
            };
            let ints = read_ints(self.blocks.iter().map(|b| b.ints.clone()).collect());
            let floats: Vec<f64> =
                Tensor::cat(self.blocks.iter().map(|b| b.floats.clone()).collect(), 0)
                    .into_data()
                    .convert::<f64>()
                    .into_vec()
                    .unwrap_or_default();
            let first = self.blocks[0].first;
            for (c, (int, float)) in ints
                .chunks_exact(5 + w)
                .zip(floats.chunks_exact(1 + w))
                .enumerate()
            {
                let [b, start, end, valid, chosen] = [0, 1, 2, 3, 4].map(|x| int[x] as usize);
                if valid == 0 || b >= sentences.len() {
                    continue;
                }
                let positions: Vec<usize> = int[5..]
                    .iter()
                    .take_while(|&&p| p >= 0)
                    .map(|&p| p as usize)
                    .collect();
                let scores = &float[1..];
                let mut order: Vec<usize> = (0..positions.len()).collect();
                order.sort_by(|&x, &y| scores[y].total_cmp(&scores[x]).then(x.cmp(&y)));
                let meta = CellMeta {
                    row: first + c,
                    splits: order.iter().map(|&o| positions[o]).collect(),
                    chosen: positions[chosen.min(positions.len() - 1)],
                    log_p: float[0],
                };
                sentences[b].add_cell((start, end), meta);
            }
            if !self.merged.is_empty() {
                for span in read_ints(self.merged.clone()).chunks_exact(3) {
                    if let Some(s) = sentences.get_mut(span[0] as usize) {
                        s.merged.push((span[1] as usize, span[2] as usize));
                    }
                }
            }
            sentences
        })
    }

    /// Every cell vector: the leaves (rows `b·time + i`), then the cells in the order they
    /// were composed (including those a pruned step computed outside its sentence), with the
    /// rows of [`Chart::root_rows`] and [`Chart::context_rows`].
    ///
    /// # Shapes
    /// - output: `[rows, D]`
    pub fn vectors(&self) -> Tensor<B, 2> {
        let mut all = vec![self.leaves.clone()];
        all.extend(self.blocks.iter().map(|b| b.cells.e.clone()));
        Tensor::cat(all, 0)
    }

    /// The row of each sentence's root `e_0(n−1)` (a one-token sentence: its leaf). Reads the
    /// host view.
    pub fn root_rows(&self) -> Vec<usize> {
        self.host()
            .iter()
            .map(|s| s.longest_starting[0].1)
            .collect()
    }

    /// The root vectors, gathered on the device.
    ///
    /// # Shapes
    /// - output: `[batch, D]`
    pub fn roots(&self) -> Tensor<B, 2> {
        let device = self.leaves.device();
        let at: Vec<usize> = (0..self.lengths.len()).map(|b| b * self.time).collect();
        let rows = self
            .longest_start
            .clone()
            .select(0, index_tensor::<B>(&at, &device));
        self.vectors().select(0, rows)
    }

    /// The LM contexts of every token (eq. 8), gathered on the device: for token `i`, the
    /// longest computed cell ending at `i − 1` and the longest starting at `i + 1`, or `bos` /
    /// `eos` at the sentence's edges. With pruning these cells need not span the whole prefix
    /// or suffix; cells dropped by pruning count too.
    ///
    /// # Shapes
    /// - `bos`, `eos`: `[1, D]`
    /// - output: `(left, right)`, each `[Σ lengths, D]`, sentence by sentence
    pub fn contexts(&self, bos: Tensor<B, 2>, eos: Tensor<B, 2>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let device = self.leaves.device();
        let all = self.vectors();
        let rows = all.dims()[0] as i64;
        let all = Tensor::cat(vec![all, bos, eos], 0);
        let (mut before, mut after, mut first, mut last) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (b, &n) in self.lengths.iter().enumerate() {
            for i in 0..n {
                before.push(b * self.time + i.max(1) - 1);
                after.push(b * self.time + (i + 1).min(n - 1));
                first.push(i == 0);
                last.push(i + 1 == n);
            }
        }
        let tokens = first.len();
        let left = self
            .longest_end
            .clone()
            .select(0, index_tensor::<B>(&before, &device))
            .mask_fill(bools::<B, 1>(first, [tokens], &device), rows);
        let right = self
            .longest_start
            .clone()
            .select(0, index_tensor::<B>(&after, &device))
            .mask_fill(bools::<B, 1>(last, [tokens], &device), rows + 1);
        (all.clone().select(0, left), all.select(0, right))
    }

    /// The rows of [`Chart::contexts`] in [`Chart::vectors`] (`None` at the sentence's edges).
    /// Reads the host view.
    pub fn context_rows(&self) -> Vec<Vec<(Option<usize>, Option<usize>)>> {
        self.host()
            .iter()
            .map(|s| {
                (0..s.n)
                    .map(|i| {
                        let left = (i > 0).then(|| s.longest_ending[i - 1].1);
                        let right = (i + 1 < s.n).then(|| s.longest_starting[i + 1].1);
                        (left, right)
                    })
                    .collect()
            })
            .collect()
    }

    /// Each sentence's tree under arbor's rule ([`TreeRule::Arbor`]): [`Chart::trees_with`].
    pub fn trees(&self) -> Vec<BinaryTree> {
        self.trees_with(TreeRule::Arbor)
    }

    /// Each sentence's tree, recovered from the root by following the best split of every cell
    /// that `rule` allows (leaves numbered `0..n`). Reads the host view.
    pub fn trees_with(&self, rule: TreeRule) -> Vec<BinaryTree> {
        self.host()
            .iter()
            .map(|s| s.tree((0, s.n - 1), rule))
            .collect()
    }

    /// The spans each sentence's pruning merged into terminals, in merge order (empty without
    /// pruning or for sentences of at most `m + 1` tokens). Reads the host view.
    pub fn merges(&self) -> Vec<Vec<(usize, usize)>> {
        self.host().iter().map(|s| s.merged.clone()).collect()
    }

    /// `log p_ij` of sentence `b`'s cell over `span` as the chart computed it (eq. 5:
    /// `Σ_k α_k log p_ijk` with the selection `α` of that cell; 0 for a leaf), or `None` when
    /// there is no such cell. Reads the host view.
    pub fn cell_log_p(&self, b: usize, span: (usize, usize)) -> Option<f64> {
        if span.0 == span.1 {
            return (span.0 < *self.lengths.get(b)?).then_some(0.0);
        }
        self.host().get(b)?.cells.get(&span).map(|c| c.log_p)
    }

    /// The same `log p_ij` of a cell of two or more tokens, as a tensor `[1]` that carries the
    /// gradient of the selection `α` (in training: of the soft α, so every split's `log p_ijk`
    /// gets one), or `None` when there is no such cell.
    pub fn cell_log_p_tensor(&self, b: usize, span: (usize, usize)) -> Option<Tensor<B, 1>> {
        let row = self.host().get(b)?.cells.get(&span)?.row;
        let block = self.blocks.iter().rev().find(|k| k.first <= row)?;
        let device = self.leaves.device();
        Some(
            block
                .cells
                .lp
                .clone()
                .select(0, index_tensor::<B>(&[row - block.first], &device)),
        )
    }

    /// The split points of sentence `b`'s cell over `span`: `(best, chosen)`, where `best` has
    /// the highest un-noised `log p̃_ijk` (tree recovery and pruning follow it) and `chosen` is
    /// the one the selection `α` picked (the same at evaluation; Gumbel-noised in training).
    pub fn splits(&self, b: usize, span: (usize, usize)) -> Option<(usize, usize)> {
        let cell = self.host().get(b)?.cells.get(&span)?;
        Some((cell.splits[0], cell.chosen))
    }

    /// Whether sentence `b` has a computed cell over `span`.
    pub fn has_cell(&self, b: usize, span: (usize, usize)) -> bool {
        span.0 == span.1 || self.host()[b].cells.contains_key(&span)
    }
}

/// Where slot `(b, s, l)` of the table after the merge of terminals `u` and `u + 1` was in the
/// table before it, as a row `(b·A + s_old)·(m + 1) + l_old` of the old table (`base` = `b·A`,
/// `l1` = `m + 1`): the old row `l + 1` at `s` when its terminals hold the merged one
/// (`s ≤ u ≤ s + l`; returned too, as `contains`; row `m + 1` is then a new cell, which the
/// caller places), the old slot `s + 1` after it, the same slot before it.
fn slot_before_merge<B: Backend, const D: usize>(
    base: Tensor<B, D, Int>,
    s: Tensor<B, D, Int>,
    l: Tensor<B, D, Int>,
    u: Tensor<B, D, Int>,
    l1: usize,
) -> (Tensor<B, D, Int>, Tensor<B, D, Bool>) {
    let contains = s
        .clone()
        .lower_equal(u.clone())
        .bool_and(u.clone().lower_equal(s.clone().add(l.clone())));
    let after = s.clone().greater(u).int();
    let row = base
        .add(s)
        .add(after)
        .mul_scalar(l1 as i64)
        .add(l)
        .add(contains.clone().int());
    (row, contains)
}

/// Replaces `rows[at]` by `new` (for `at` inside `rows`; `at == rows.len()` is a spare slot).
fn longest<B: Backend>(
    rows: Tensor<B, 1, Int>,
    at: Tensor<B, 1, Int>,
    new: Tensor<B, 1, Int>,
) -> Tensor<B, 1, Int> {
    let n = rows.dims()[0];
    let device = rows.device();
    let empty = Tensor::<B, 1, Int>::zeros([n + 1], &device);
    let hit = empty
        .clone()
        .scatter(
            0,
            at.clone(),
            Tensor::ones([at.dims()[0]], &device),
            IndexingUpdateOp::Add,
        )
        .greater_elem(0);
    let value = empty.scatter(0, at, new, IndexingUpdateOp::Add);
    Tensor::cat(vec![rows, Tensor::zeros([1], &device)], 0)
        .mask_where(hit, value)
        .narrow(0, 0, n)
}

/// Composes `c` cells of `k` splits each (eq. 1–5). `children` are rows of `e` and `lpt`: the
/// left child of every split, cell by cell, then the right ones in the same order.
///
/// # Shapes
/// - `e`: `[rows, D]`; `lpt`: `[rows]`; `children`: `[2·c·k]`
fn choose<B: ArborBackend, C: Compose<B>>(
    compose: &C,
    e: Tensor<B, 2>,
    lpt: Tensor<B, 1>,
    children: Tensor<B, 1, Int>,
    [c, k]: [usize; 2],
    config: &ChartConfig,
    decisions: &mut Decisions<'_>,
) -> Chosen<B> {
    let n = c * k;
    let e = e.select(0, children.clone());
    let lpt = lpt.select(0, children);
    let (left, right) = (e.clone().narrow(0, 0, n), e.narrow(0, n, n));
    let (lpt_left, lpt_right) = (lpt.clone().narrow(0, 0, n), lpt.narrow(0, n, n));
    let device = left.device();
    let d = left.dims()[1];
    let composed = compose.compose(left, right);
    // eq. 1: log p̃_ijk = log p_ijk + log p̃_ik + log p̃_(k+1)j.
    let lpt_k = composed
        .log_p
        .clone()
        .add(lpt_left)
        .add(lpt_right)
        .reshape([c, k]);
    let scores = lpt_k.clone().detach();
    let log_p = composed.log_p.reshape([c, k]);
    if k == 1 {
        return Chosen {
            cells: Cells {
                e: composed.repr,
                lpt: lpt_k.reshape([c]),
                lp: log_p.clone().reshape([c]),
            },
            scores,
            chosen: Tensor::zeros([c], &device),
            lp_chosen: log_p.detach().reshape([c]),
        };
    }
    // eq. 2–5.
    let sel = match decisions {
        Decisions::Sample(sampler) => {
            let noise = sampler.sample::<B, 2>([c, k], &device);
            let tau = sampler.temperature_or(config.tau);
            st_gumbel_softmax(lpt_k.clone(), None, tau, Some(noise))
        }
        Decisions::Argmax => argmax_select(lpt_k.clone(), None),
    };
    let alpha = sel.hard;
    let e = composed
        .repr
        .reshape([c, k, d])
        .mul(alpha.clone().reshape([c, k, 1]))
        .sum_dim(1)
        .reshape([c, d]);
    let lp_chosen = log_p
        .clone()
        .detach()
        .gather(1, sel.index.clone().reshape([c, 1]))
        .reshape([c]);
    // log p_ij = Σ_k α_k log p_ijk: in training the soft α's gradient reaches every split's
    // score, as in the reference.
    let lp = log_p.mul(alpha.clone()).sum_dim(1).reshape([c]);
    let lpt = lpt_k.mul(alpha).sum_dim(1).reshape([c]);
    Chosen {
        cells: Cells { e, lpt, lp },
        scores,
        chosen: sel.index,
        lp_chosen,
    }
}
