//! R2D2's differentiable CKY chart with pruned tree induction (docs/models.md §4; Hu et al. 2021,
//! eq. 1–5 and Algorithms 1–2), built on the device.
//!
//! In training on a device (CUDA), nothing in [`Chart::build`] reads a tensor back to the host
//! (docs/r2d2.md, "The chart on the device"; evaluation, and training on the CPU backends,
//! read the merge positions, see below):
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
//!   [`Chart::build_without_reads`]; so does training where the tensors live in host memory
//!   (`ArborBackend::HOST_MEMORY`), as the read then waits for no device.
//! - Every composed cell is also recorded (its span, splits, scores and choice, as tensors), and
//!   the longest cell starting and ending at each position is kept on the device for the roots
//!   and the LM contexts.
//!
//! What needs the host (trees, merges, a cell's splits) reads those records once, at first use
//! ([`Chart::trees`] and the other inspection methods).
//!
//! The submodules: `cky` (the exhaustive rows), `table` (the device table and FIND), `prune`
//! (one pruned step), `choice` (eq. 1–5: a cell's composition and split selection), `readout`
//! (vectors, roots, LM contexts, and the host view: trees, merges, cells) and `ops` (small
//! tensor helpers).

use arbor_cells::ArborBackend;
use std::cell::OnceCell;

use burn::prelude::*;

use super::composition::Compose;
use crate::Decisions;

mod choice;
mod cky;
mod ops;
mod prune;
mod readout;
mod table;

pub(super) use ops::index_tensor;

use choice::Chosen;
use readout::SentenceChart;
use table::WordFlags;

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
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
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

arbor_cells::value_enum_names!(TreeRule, "tree rule");

/// Counters of one chart construction: the work done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChartStats {
    /// Number of `(left, right)` pairs composed (one per split of every computed cell). In
    /// training on a device (and with [`Chart::build_without_reads`]) a pruned step composes
    /// `min(m + 1, a' − m)` top-row cells per unfinished sentence (`a'` terminals after the
    /// merge), `m` splits each, although between 1 and that many are new (the rest are
    /// discarded): the step's shape may not depend on which pair FIND picks. Evaluation, and
    /// training on the CPU backends, compose only the new ones.
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

impl<B: ArborBackend> Chart<B> {
    /// Builds the charts of a batch of sentences. Evaluation reads each pruned step's merge
    /// positions (one small read per step) to compose only the new cells; so does training on
    /// a backend whose tensors live in host memory ([`ArborBackend::HOST_MEMORY`]: the CPU
    /// backends, where the read is a copy of one integer per merging sentence). In training on
    /// any other backend (CUDA) nothing is read back from the device: each pruned step
    /// composes every top-row cell the merge could create and discards those it did not
    /// ([`Chart::build_without_reads`]). The chart is the same either way.
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
        let exact = decisions.is_argmax() || B::HOST_MEMORY;
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
        // The exhaustive rows up to `top`, then (with pruning) one pruned step per merge.
        let cky_row = chart.cky(compose, top, config, &mut decisions);
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
}
