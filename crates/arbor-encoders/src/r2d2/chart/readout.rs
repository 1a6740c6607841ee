//! Reading a built chart: the cell vectors, roots and LM contexts, gathered on the device; and
//! the host view (every cell's span, ranked splits, choice and `log p`, and the merges), read
//! from the device once, at first use, for the trees and the other inspection methods.

use arbor_cells::ArborBackend;
use std::collections::HashMap;

use arbor_data::tree::BinaryTree;
use burn::prelude::*;

use super::ops::{bools, index_tensor};
use super::{Chart, TreeRule};

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
pub(super) struct SentenceChart {
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

impl<B: ArborBackend> Chart<B> {
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
