//! The device table of the chart's top rows over the current terminals (see the module docs of
//! `chart`), and FIND (Algorithm 2) on it: the bigram each sentence merges next.

use arbor_cells::ArborBackend;
use burn::prelude::*;

use super::ops::{bools, first_argmax, index_tensor, ints, iota};
use super::{Chart, NEG, SCORE_EPS};

/// The device table of a sentence batch's top chart rows over the current terminals (see the
/// module docs). Slot `(b, s, l)` is row `(b·A + s)·(m + 1) + l`.
pub(super) struct Table<B: Backend> {
    /// Current number of terminal slots `A` per sentence.
    pub(super) width: usize,
    pub(super) e: Tensor<B, 2>,
    pub(super) lpt: Tensor<B, 1>,
    /// `log p` (detached), for FIND's bigram scores.
    pub(super) lp: Tensor<B, 1>,
    /// Split scores `[slots, m]` (detached, [`NEG`] past a cell's splits).
    pub(super) scores: Tensor<B, 2>,
    /// Split positions `[slots, m]` (−1 past a cell's splits).
    pub(super) splits: Tensor<B, 2, Int>,
    /// First and last token position of every terminal: `[batch·A]`.
    pub(super) start: Tensor<B, 1, Int>,
    pub(super) end: Tensor<B, 1, Int>,
}

/// Word-piece input on the device, per position `b·time + i`: the word index, and whether the
/// piece starts or ends its word (1/0).
#[derive(Debug)]
pub(super) struct WordFlags<B: Backend> {
    word: Tensor<B, 1, Int>,
    starts: Tensor<B, 1, Int>,
    ends: Tensor<B, 1, Int>,
}

impl<B: Backend> WordFlags<B> {
    pub(super) fn new(word_of: &[Vec<usize>], time: usize, device: &B::Device) -> Self {
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
    /// The table of every CKY cell up to row `top` (= `m`), over `n_max` terminal slots.
    pub(super) fn initial_table(
        &self,
        cky_row: &[Vec<Vec<usize>>],
        n_max: usize,
        top: usize,
    ) -> Table<B> {
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

    /// FIND (Algorithm 2) on the table, for every sentence: the slot `u` of the left terminal
    /// of the bigram to merge; past every slot for sentences that are not in `pending` (their
    /// table stays as it is).
    ///
    /// # Shapes
    /// - output: `[batch]`
    pub(super) fn find(
        &self,
        t: &Table<B>,
        atoms: &[usize],
        pending: &[usize],
    ) -> Tensor<B, 1, Int> {
        let device = self.leaves.device();
        let batch = self.lengths.len();
        let (m, a) = (self.width, t.width);
        let l1 = m + 1;
        // FIND 1: the bigrams the top-row cells' best trees use.
        let used = self.used_bigrams(t, atoms, pending);
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

    /// FIND 1 on the table, for every sentence: which bigrams `(u, u + 1)` of its terminals
    /// the best trees of its valid top-row cells use (1/0). Each cell's best split is taken
    /// among the current terminal boundaries, walking down the rows from the top one.
    ///
    /// # Shapes
    /// - output: `[batch, A]`
    fn used_bigrams(&self, t: &Table<B>, atoms: &[usize], pending: &[usize]) -> Tensor<B, 2, Int> {
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
        reached.swap_remove(1)
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
}
