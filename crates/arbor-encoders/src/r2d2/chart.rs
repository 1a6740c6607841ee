//! R2D2's differentiable CKY chart with pruned tree induction (docs/models.md §4; Hu et al. 2021,
//! eq. 1–5 and Algorithms 1–2).
//!
//! Cells are addressed by their span `(i, j)` of original token positions (inclusive). The
//! host keeps the chart's structure (which cells exist, their ranked splits, the current
//! terminals); the cells' vectors `e_ij` and `log p̃_ij` are rows of one growing tensor store.
//! Every step composes *all* pending cells of *all* sentences of the batch, with every split,
//! in one call to the composition function.

use arbor_cells::ArborBackend;
use std::collections::HashMap;

use arbor_cells::{argmax_select, st_gumbel_softmax};
use arbor_data::tree::BinaryTree;
use burn::prelude::*;
use burn::tensor::TensorData;

use super::composition::Compose;
use crate::Decisions;

/// Clamp inside the logarithms of the bigram score (docs/models.md §4, FIND step 2).
const SCORE_EPS: f64 = 1e-9;

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

/// Counters of one chart construction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChartStats {
    /// Number of `(left, right)` pairs composed (one per split of every computed cell).
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

/// Host-side record of one chart cell.
#[derive(Debug, Clone)]
struct CellMeta {
    /// Row of `e_ij` in the store.
    e_row: usize,
    /// Row of `log p̃_ij` in the store (a detached copy once the cell became a terminal).
    lpt_row: usize,
    /// Split points `k` (the left child is `(i, k)`), best un-noised `log p̃_ijk` first.
    splits: Vec<usize>,
    /// The split the selection `α` picked (eq. 2): the best one at evaluation, a Gumbel-noised
    /// one in training.
    chosen: usize,
    /// `log p_ij = Σ_k α_k log p_ijk` (eq. 5), as FIND scores it. `α` is one-hot in the forward
    /// pass, so this is `log p` of the chosen split.
    log_p: f64,
}

/// The chart of one sentence.
#[derive(Debug, Clone)]
struct SentenceChart {
    n: usize,
    cells: HashMap<(usize, usize), CellMeta>,
    /// Current terminals, as spans of original positions, left to right.
    atoms: Vec<(usize, usize)>,
    /// Spans merged into terminals by pruning, in merge order.
    merged: Vec<(usize, usize)>,
    /// Word index of every position (word-piece input), when pieces of a word stay together.
    word_of: Option<Vec<usize>>,
    /// For each position `j`, the longest computed cell ending at `j`: `(length, e_row)`.
    longest_ending: Vec<(usize, usize)>,
    /// For each position `i`, the longest computed cell starting at `i`: `(length, e_row)`.
    longest_starting: Vec<(usize, usize)>,
}

impl SentenceChart {
    fn add_cell(&mut self, span: (usize, usize), meta: CellMeta) {
        let len = span.1 - span.0 + 1;
        if len > self.longest_ending[span.1].0 {
            self.longest_ending[span.1] = (len, meta.e_row);
        }
        if len > self.longest_starting[span.0].0 {
            self.longest_starting[span.0] = (len, meta.e_row);
        }
        self.cells.insert(span, meta);
    }

    /// Whether merging `span` respects word boundaries: inside one word, or whole words.
    fn word_allowed(&self, span: (usize, usize)) -> bool {
        match &self.word_of {
            None => true,
            Some(w) => {
                let (i, j) = span;
                w[i] == w[j]
                    || ((i == 0 || w[i - 1] != w[i]) && (j + 1 == self.n || w[j + 1] != w[j]))
            }
        }
    }

    /// Whether splitting `span` after `k` is allowed for tree recovery: no merged terminal
    /// strictly inside the span is cut, and (word-piece input) a span covering several words
    /// is split at a word boundary.
    fn split_allowed(&self, span: (usize, usize), k: usize) -> bool {
        let cuts = self
            .merged
            .iter()
            .any(|&(a, b)| a >= span.0 && b <= span.1 && (a, b) != span && a <= k && k < b);
        let words_ok = match &self.word_of {
            None => true,
            Some(w) => w[span.0] == w[span.1] || w[k] != w[k + 1],
        };
        !cuts && words_ok
    }

    /// The tree below `span`, following each cell's best allowed split.
    fn tree(&self, span: (usize, usize)) -> BinaryTree {
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
            .find(|&k| self.split_allowed(span, k))
            .unwrap_or(cell.splits[0]);
        BinaryTree::node(self.tree((span.0, k)), self.tree((k + 1, span.1)))
    }

    /// FIND (Algorithm 2): the bigram of current terminals to merge next, as the index `u` of
    /// its left terminal.
    fn find(&self, window: usize) -> usize {
        let a = self.atoms.len();
        let mut atom_at_start = HashMap::new();
        for (t, &(s, _)) in self.atoms.iter().enumerate() {
            atom_at_start.insert(s, t);
        }
        let mut atom_at_end = HashMap::new();
        for (t, &(_, e)) in self.atoms.iter().enumerate() {
            atom_at_end.insert(e, t);
        }
        // 1. The bigrams used by the best trees of the top-row cells.
        let mut used = vec![false; a.saturating_sub(1)];
        let mut stack: Vec<(usize, usize)> = (0..a - window)
            .map(|s| (self.atoms[s].0, self.atoms[s + window].1))
            .collect();
        while let Some(span) = stack.pop() {
            let (first, last) = (atom_at_start[&span.0], atom_at_end[&span.1]);
            match last - first {
                0 => {}
                1 => used[first] = true,
                _ => {
                    let cell = &self.cells[&span];
                    let k = cell
                        .splits
                        .iter()
                        .copied()
                        .find(|k| atom_at_end.contains_key(k))
                        .unwrap_or(cell.splits[0]);
                    stack.push((span.0, k));
                    stack.push((k + 1, span.1));
                }
            }
        }
        // 2. Score: log p(bigram) + log(1 − p(left neighbour)) + log(1 − p(right neighbour)).
        let p = |u: usize| {
            self.cells[&(self.atoms[u].0, self.atoms[u + 1].1)]
                .log_p
                .exp()
        };
        let score = |u: usize| {
            let mut s = p(u).max(SCORE_EPS).ln();
            if u > 0 {
                s += (1.0 - p(u - 1)).max(SCORE_EPS).ln();
            }
            if u + 2 < a {
                s += (1.0 - p(u + 1)).max(SCORE_EPS).ln();
            }
            s
        };
        let allowed = |u: usize| self.word_allowed((self.atoms[u].0, self.atoms[u + 1].1));
        let best = |candidates: &mut dyn Iterator<Item = usize>| {
            let mut best: Option<(usize, f64)> = None;
            for u in candidates {
                let s = score(u);
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((u, s));
                }
            }
            best.map(|(u, _)| u)
        };
        best(&mut (0..a - 1).filter(|&u| used[u] && allowed(u)))
            .or_else(|| best(&mut (0..a - 1).filter(|&u| allowed(u))))
            .or_else(|| best(&mut (0..a - 1)))
            .unwrap_or(0)
    }

    /// Merges terminals `u` and `u + 1` and returns the top-row cells that are now missing,
    /// as `(span, splits)`.
    fn merge(&mut self, u: usize, window: usize) -> Vec<((usize, usize), Vec<usize>)> {
        let span = (self.atoms[u].0, self.atoms[u + 1].1);
        self.atoms.splice(u..u + 2, [span]);
        self.merged.push(span);
        let a = self.atoms.len();
        let mut missing = Vec::new();
        if a > window {
            for s in u.saturating_sub(window)..=u.min(a - window - 1) {
                let cell = (self.atoms[s].0, self.atoms[s + window].1);
                let splits = self.atoms[s..s + window].iter().map(|t| t.1).collect();
                missing.push((cell, splits));
            }
        }
        missing
    }
}

fn shifted_right_branching(span: (usize, usize)) -> BinaryTree {
    let mut t = BinaryTree::Leaf(span.1);
    for i in (span.0..span.1).rev() {
        t = BinaryTree::node(BinaryTree::Leaf(i), t);
    }
    t
}

/// The growing store of cell vectors `e_ij`, `log p̃_ij` and `log p_ij`.
///
/// Rows are appended step by step and kept in chunks whose sizes at least halve from each
/// chunk to the next (a chunk is merged into its predecessor when that is less than twice its
/// size). So there are at most `log₂ rows + 1` chunks, every row is copied `O(log rows)` times
/// in all, and a gather touches only the chunks holding the rows it reads: a step costs what
/// it reads plus an amortised `O(log)` per row, instead of re-concatenating the whole store.
#[derive(Debug)]
struct Store<B: Backend> {
    /// The chunks, in row order.
    chunks: Vec<Chunk<B>>,
    rows: usize,
}

/// `(first row, e, log p̃, log p)` of one chunk of the [`Store`].
type Chunk<B> = (usize, Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1>);

impl<B: ArborBackend> Store<B> {
    fn new() -> Self {
        Store {
            chunks: Vec::new(),
            rows: 0,
        }
    }

    /// Appends rows of `e`, `log p̃` and `log p`; returns the index of the first.
    fn push(&mut self, e: Tensor<B, 2>, lpt: Tensor<B, 1>, lp: Tensor<B, 1>) -> usize {
        let first = self.rows;
        let n = e.dims()[0];
        self.rows += n;
        self.chunks.push((first, e, lpt, lp));
        while self.chunks.len() >= 2 {
            let last = self.chunks.len() - 1;
            let size = |c: &Chunk<B>| c.1.dims()[0];
            if size(&self.chunks[last - 1]) >= 2 * size(&self.chunks[last]) {
                break;
            }
            let (_, e2, l2, p2) = self.chunks.pop().unwrap_or_else(|| unreachable!());
            let (start, e1, l1, p1) = self.chunks.pop().unwrap_or_else(|| unreachable!());
            self.chunks.push((
                start,
                Tensor::cat(vec![e1, e2], 0),
                Tensor::cat(vec![l1, l2], 0),
                Tensor::cat(vec![p1, p2], 0),
            ));
        }
        first
    }

    /// The chunk holding `row`, and the row's index inside it.
    fn locate(&self, row: usize) -> (usize, usize) {
        let c = self.chunks.partition_point(|chunk| chunk.0 <= row) - 1;
        (c, row - self.chunks[c].0)
    }

    /// Rows `e_rows` of `e` and `lpt_rows` of `log p̃`, in the order given.
    fn gather(&self, e_rows: &[usize], lpt_rows: &[usize]) -> (Tensor<B, 2>, Tensor<B, 1>) {
        let e = self.gather_one(e_rows, |c| c.1.clone());
        let lpt = self.gather_one(lpt_rows, |c| c.2.clone());
        (e, lpt)
    }

    /// One `select` per chunk that holds any of `rows`, one `cat`, and one reordering
    /// `select` when the rows do not come chunk by chunk already.
    fn gather_one<const D: usize>(
        &self,
        rows: &[usize],
        part: impl Fn(&Chunk<B>) -> Tensor<B, D>,
    ) -> Tensor<B, D> {
        let device = self.chunks[0].1.device();
        let mut by_chunk: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.chunks.len()];
        for (slot, &row) in rows.iter().enumerate() {
            let (c, local) = self.locate(row);
            by_chunk[c].push((slot, local));
        }
        let mut pieces = Vec::new();
        let mut order = Vec::with_capacity(rows.len());
        for (c, wanted) in by_chunk.iter().enumerate() {
            if wanted.is_empty() {
                continue;
            }
            let local: Vec<usize> = wanted.iter().map(|w| w.1).collect();
            pieces.push(part(&self.chunks[c]).select(0, index_tensor::<B>(&local, &device)));
            order.extend(wanted.iter().map(|w| w.0));
        }
        let gathered = if pieces.len() == 1 {
            pieces.pop().unwrap_or_else(|| unreachable!())
        } else {
            Tensor::cat(pieces, 0)
        };
        if order.iter().enumerate().all(|(i, &slot)| i == slot) {
            return gathered;
        }
        // `order[p]` is the slot the p-th gathered row belongs to; invert it.
        let mut position = vec![0; rows.len()];
        for (p, &slot) in order.iter().enumerate() {
            position[slot] = p;
        }
        gathered.select(0, index_tensor::<B>(&position, &device))
    }

    /// Every cell vector so far, as one tensor.
    fn all_vectors(&self) -> Tensor<B, 2> {
        if self.chunks.len() == 1 {
            return self.chunks[0].1.clone();
        }
        Tensor::cat(self.chunks.iter().map(|c| c.1.clone()).collect(), 0)
    }
}

/// Row indices as an index tensor.
pub(super) fn index_tensor<B: ArborBackend>(
    rows: &[usize],
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    let v: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    Tensor::from_data(TensorData::new(v, [rows.len()]), device)
}

/// A cell to compute: sentence, span, and its split points.
type Job = (usize, (usize, usize), Vec<usize>);

/// A built chart: every sentence's cells, trees, roots and LM contexts.
#[derive(Debug)]
pub struct Chart<B: Backend> {
    store: Store<B>,
    sentences: Vec<SentenceChart>,
    /// Counters of this construction.
    pub stats: ChartStats,
}

impl<B: ArborBackend> Chart<B> {
    /// Builds the charts of a batch of sentences.
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
        mut decisions: Decisions<'_>,
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
        let mut store = Store::new();
        store.push(
            leaves.reshape([batch * time, d]),
            arbor_cells::kernels::zeros([batch * time], &device),
            arbor_cells::kernels::zeros([batch * time], &device),
        );
        let sentences = lengths
            .iter()
            .enumerate()
            .map(|(b, &n)| SentenceChart {
                n,
                cells: HashMap::new(),
                atoms: (0..n).map(|i| (i, i)).collect(),
                merged: Vec::new(),
                word_of: word_ids.map(|w| w[b].clone()),
                longest_ending: (0..n).map(|i| (1, b * time + i)).collect(),
                longest_starting: (0..n).map(|i| (1, b * time + i)).collect(),
            })
            .collect();
        let mut chart = Chart {
            store,
            sentences,
            stats: ChartStats::default(),
        };
        let leaf_row = |b: usize, i: usize| b * time + i;
        // Full CKY rows, up to spans of m + 1 tokens when pruning.
        let max_n = lengths.iter().copied().max().unwrap_or(1);
        for len in 2..=max_n {
            let mut jobs: Vec<Job> = Vec::new();
            for (b, &n) in lengths.iter().enumerate() {
                if n >= len && (!config.pruning || len <= config.window + 1) {
                    for i in 0..=n - len {
                        jobs.push((b, (i, i + len - 1), (i..i + len - 1).collect()));
                    }
                }
            }
            if jobs.is_empty() {
                break;
            }
            chart.compute(compose, jobs, &leaf_row, config, &mut decisions);
        }
        // Pruned steps: FIND, merge, fill the missing top-row cells.
        if config.pruning {
            loop {
                let pending: Vec<usize> = (0..batch)
                    .filter(|&b| chart.sentences[b].atoms.len() > config.window + 1)
                    .collect();
                if pending.is_empty() {
                    break;
                }
                let mut jobs: Vec<Job> = Vec::new();
                let mut merged_rows = Vec::new();
                for &b in &pending {
                    let s = &mut chart.sentences[b];
                    let u = s.find(config.window);
                    let span = (s.atoms[u].0, s.atoms[u + 1].1);
                    merged_rows.push((b, span, s.cells[&span].lpt_row));
                    for (cell, splits) in s.merge(u, config.window) {
                        jobs.push((b, cell, splits));
                    }
                    chart.stats.merges += 1;
                }
                // The new terminals' log p̃ become constants.
                let rows: Vec<usize> = merged_rows.iter().map(|r| r.2).collect();
                let detached = chart.store.gather_one(&rows, |c| c.2.clone()).detach();
                let first = chart.store.push(
                    arbor_cells::kernels::zeros([rows.len(), d], &device),
                    detached,
                    arbor_cells::kernels::zeros([rows.len()], &device),
                );
                for (t, (b, span, _)) in merged_rows.into_iter().enumerate() {
                    if let Some(cell) = chart.sentences[b].cells.get_mut(&span) {
                        cell.lpt_row = first + t;
                    }
                }
                chart.compute(compose, jobs, &leaf_row, config, &mut decisions);
            }
        }
        chart
    }

    /// Computes the cells `jobs` (all with the same number of splits) in one composition call.
    fn compute<C: Compose<B>>(
        &mut self,
        compose: &C,
        jobs: Vec<Job>,
        leaf_row: &dyn Fn(usize, usize) -> usize,
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
    ) {
        if jobs.is_empty() {
            return;
        }
        let c = jobs.len();
        let k = jobs[0].2.len();
        debug_assert!(jobs.iter().all(|j| j.2.len() == k));
        let rows_of = |b: usize, span: (usize, usize)| -> (usize, Option<usize>) {
            if span.0 == span.1 {
                (leaf_row(b, span.0), None)
            } else {
                let cell = &self.sentences[b].cells[&span];
                (cell.e_row, Some(cell.lpt_row))
            }
        };
        let (mut e_rows, mut lpt_rows) = (Vec::with_capacity(2 * c * k), Vec::new());
        let mut right = Vec::with_capacity(c * k);
        let mut right_lpt = Vec::new();
        for (b, span, splits) in &jobs {
            for &s in splits {
                let (el, ll) = rows_of(*b, (span.0, s));
                let (er, lr) = rows_of(*b, (s + 1, span.1));
                e_rows.push(el);
                right.push(er);
                lpt_rows.push(ll.unwrap_or(el));
                right_lpt.push(lr.unwrap_or(er));
            }
        }
        e_rows.extend(right);
        lpt_rows.extend(right_lpt);
        let (e, lpt) = self.store.gather(&e_rows, &lpt_rows);
        let device = e.device();
        let d = e.dims()[1];
        let n = c * k;
        let composed = compose.compose(e.clone().narrow(0, 0, n), e.narrow(0, n, n));
        // eq. 1: log p̃_ijk = log p_ijk + log p̃_ik + log p̃_(k+1)j.
        let lpt_k = composed
            .log_p
            .clone()
            .add(lpt.clone().narrow(0, 0, n))
            .add(lpt.narrow(0, n, n));
        let lpt_k = lpt_k.reshape([c, k]);
        let (e_new, lpt_new, lp_new, chosen) = if k == 1 {
            let lp = composed.log_p.clone();
            (composed.repr, lpt_k.clone().reshape([c]), lp, None)
        } else {
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
            // log p_ij = Σ_k α_k log p_ijk: in training the soft α's gradient reaches every
            // split's score, as in the reference.
            let lp = composed
                .log_p
                .clone()
                .reshape([c, k])
                .mul(alpha.clone())
                .sum_dim(1)
                .reshape([c]);
            let lpt = lpt_k.clone().mul(alpha).sum_dim(1).reshape([c]);
            (e, lpt, lp, Some(sel.index.float()))
        };
        // One read of everything the host needs: the un-noised log p̃_ijk (ranking), log p_ijk,
        // and the split α picked.
        let mut parts = vec![lpt_k.detach().reshape([n]), composed.log_p.detach()];
        parts.extend(chosen.map(|t| t.detach()));
        let host: Vec<f32> = Tensor::cat(parts, 0)
            .into_data()
            .convert::<f32>()
            .into_vec()
            .unwrap_or_default();
        let first = self.store.push(e_new, lpt_new, lp_new);
        for (t, (b, span, splits)) in jobs.into_iter().enumerate() {
            let scores = &host[t * k..(t + 1) * k];
            let mut order: Vec<usize> = (0..k).collect();
            order.sort_by(|&x, &y| scores[y].total_cmp(&scores[x]).then(x.cmp(&y)));
            let pick = if k == 1 {
                0
            } else {
                host.get(2 * n + t)
                    .map_or(order[0], |&i| (i as usize).min(k - 1))
            };
            let log_p = host.get(n + t * k + pick).copied().unwrap_or(0.0) as f64;
            let meta = CellMeta {
                e_row: first + t,
                lpt_row: first + t,
                splits: order.iter().map(|&o| splits[o]).collect(),
                chosen: splits[pick],
                log_p,
            };
            self.sentences[b].add_cell(span, meta);
        }
        self.stats.compositions += n as u64;
        self.stats.calls += 1;
    }

    /// Every cell vector so far, with the rows of [`Chart::root_rows`] and
    /// [`Chart::context_rows`].
    ///
    /// # Shapes
    /// - output: `[rows, D]`
    pub fn vectors(&self) -> Tensor<B, 2> {
        self.store.all_vectors()
    }

    /// The row of each sentence's root `e_0(n−1)` (a one-token sentence: its leaf).
    pub fn root_rows(&self) -> Vec<usize> {
        self.sentences
            .iter()
            .map(|s| s.longest_starting[0].1)
            .collect()
    }

    /// The root vectors.
    ///
    /// # Shapes
    /// - output: `[batch, D]`
    pub fn roots(&self) -> Tensor<B, 2> {
        self.store.gather_one(&self.root_rows(), |c| c.1.clone())
    }

    /// The LM contexts of every token (eq. 8): for token `i`, the row of the longest computed
    /// cell ending at `i − 1` and of the longest starting at `i + 1` (`None` at the sentence's
    /// edges, where `[BOS]`/`[EOS]` go). With pruning these cells need not span the whole
    /// prefix or suffix; cells dropped by pruning count too.
    pub fn context_rows(&self) -> Vec<Vec<(Option<usize>, Option<usize>)>> {
        self.sentences
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

    /// Each sentence's tree, recovered from the root by following the best allowed split of
    /// every cell (leaves numbered `0..n`).
    pub fn trees(&self) -> Vec<BinaryTree> {
        self.sentences
            .iter()
            .map(|s| s.tree((0, s.n - 1)))
            .collect()
    }

    /// The spans each sentence's pruning merged into terminals, in merge order (empty without
    /// pruning or for sentences of at most `m + 1` tokens).
    pub fn merges(&self) -> Vec<Vec<(usize, usize)>> {
        self.sentences.iter().map(|s| s.merged.clone()).collect()
    }

    /// `log p_ij` of sentence `b`'s cell over `span` as the chart computed it (eq. 5:
    /// `Σ_k α_k log p_ijk` with the selection `α` of that cell; 0 for a leaf), or `None` when
    /// there is no such cell.
    pub fn cell_log_p(&self, b: usize, span: (usize, usize)) -> Option<f64> {
        if span.0 == span.1 {
            return (span.0 < self.sentences.get(b)?.n).then_some(0.0);
        }
        self.sentences.get(b)?.cells.get(&span).map(|c| c.log_p)
    }

    /// The same `log p_ij` of a cell of two or more tokens, as a tensor `[1]` that carries the
    /// gradient of the selection `α` (in training: of the soft α, so every split's `log p_ijk`
    /// gets one), or `None` when there is no such cell.
    pub fn cell_log_p_tensor(&self, b: usize, span: (usize, usize)) -> Option<Tensor<B, 1>> {
        let row = self.sentences.get(b)?.cells.get(&span)?.e_row;
        Some(self.store.gather_one(&[row], |c| c.3.clone()))
    }

    /// The split points of sentence `b`'s cell over `span`: `(best, chosen)`, where `best` has
    /// the highest un-noised `log p̃_ijk` (tree recovery and pruning follow it) and `chosen` is
    /// the one the selection `α` picked (the same at evaluation; Gumbel-noised in training).
    pub fn splits(&self, b: usize, span: (usize, usize)) -> Option<(usize, usize)> {
        let cell = self.sentences.get(b)?.cells.get(&span)?;
        Some((cell.splits[0], cell.chosen))
    }

    /// Whether sentence `b` has a computed cell over `span`.
    pub fn has_cell(&self, b: usize, span: (usize, usize)) -> bool {
        span.0 == span.1 || self.sentences[b].cells.contains_key(&span)
    }
}
