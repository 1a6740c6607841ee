//! One pruned step on the device table (Algorithm 1, lines 5–9): FIND picks each sentence's
//! bigram (`Chart::find`, in `table`), the merge drops its right terminal's slot, the top-row cells that
//! hold the new terminal are composed, and the table is rebuilt over the terminals after the
//! merge. The shapes depend on the lengths only, unless the merge positions are read back
//! (evaluation, and training on the CPU backends; see the module docs of `chart`).

use arbor_cells::ArborBackend;
use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;

use super::choice::{choose, Chosen};
use super::ops::{index_tensor, ints, iota};
use super::table::Table;
use super::{Chart, ChartConfig};
use crate::r2d2::composition::Compose;
use crate::Decisions;

/// What one pruned step knows on the host: its sizes, from the lengths alone, and how many
/// cells each merging sentence composes.
struct Step {
    /// Sentences in the batch.
    batch: usize,
    /// The pruning window `m`: the table holds rows `0..=m`.
    m: usize,
    /// Terminal slots per sentence before the merge (`A`; `A − 1` after it).
    a: usize,
    /// Every sentence's number of terminals before the merge.
    atoms: Vec<usize>,
    /// The sentences that merge at this step: those with more than `m + 1` terminals.
    pending: Vec<usize>,
    /// How many top-row cells each merging sentence composes (`new_cell_counts`).
    k: Vec<usize>,
}

/// The merge of one pruned step, on the device.
struct Merge<B: Backend> {
    /// The slot `u` of the merged bigram's left terminal, per merging sentence: `[p]`.
    u_p: Tensor<B, 1, Int>,
    /// `b·A` of every merging sentence `b`: `[p]`.
    base_p: Tensor<B, 1, Int>,
    /// First and last token position of every terminal after the merge: `[batch·(A − 1)]`.
    start: Tensor<B, 1, Int>,
    end: Tensor<B, 1, Int>,
}

/// The top-row cells a pruned step composed, before they are placed.
struct NewCells<B: Backend> {
    /// The composition and choice of every cell (`[c, m]` splits).
    out: Chosen<B>,
    /// The merging sentence (index into `pending`) of every cell.
    cell_of: Vec<usize>,
    /// Per sentence, the index of its first cell (0 for sentences that do not merge).
    offset: Vec<i64>,
    /// Each cell's first terminal after the merge, clamped into the table: `[c]`.
    s: Tensor<B, 1, Int>,
    /// `b·A` of each cell's sentence: `[c]`.
    base_c: Tensor<B, 1, Int>,
    /// Whether each cell lies inside its sentence and holds the new terminal: `[c]`.
    valid: Tensor<B, 1, Bool>,
}

/// Where the new cells lie, in token positions, as recorded.
struct NewSpans<B: Backend> {
    /// Each cell's sentence: `[c]`.
    sentence: Tensor<B, 1, Int>,
    /// Each cell's first and last token position: `[c]`.
    cell_start: Tensor<B, 1, Int>,
    cell_end: Tensor<B, 1, Int>,
    /// Each cell's split positions (the last token of every left child): `[c, m]`.
    positions: Tensor<B, 2, Int>,
    /// As in [`NewCells::valid`], `[c]`.
    valid: Tensor<B, 1, Bool>,
}

impl<B: ArborBackend> Chart<B> {
    /// One pruned step (Algorithm 1, lines 5–9) for every sentence with more than `m + 1`
    /// terminals: FIND, merge, compose the missing top-row cells, update the table.
    pub(super) fn pruned_step<C: Compose<B>>(
        &mut self,
        compose: &C,
        t: Table<B>,
        step: usize,
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
        exact: bool,
    ) -> Table<B> {
        let batch = self.lengths.len();
        let (m, a) = (self.width, t.width);
        // Host-known: which sentences merge at this step and how many terminals they have.
        let atoms: Vec<usize> = self.lengths.iter().map(|&n| n - step.min(n)).collect();
        let pending: Vec<usize> = (0..batch).filter(|&b| atoms[b] > m + 1).collect();
        // FIND (Algorithm 2): the bigram each sentence merges, as the slot `u` of its left
        // terminal.
        let u = self.find(&t, &atoms, &pending);
        let merge = self.merge(&t, &u, &pending);
        let k = Self::new_cell_counts(&merge.u_p, m, &atoms, &pending, exact);
        let step = Step {
            batch,
            m,
            a,
            atoms,
            pending,
            k,
        };
        let NewCells {
            out,
            cell_of,
            offset,
            s,
            base_c,
            valid,
        } = self.compose_new_cells(compose, &t, &merge, &step, config, decisions);
        let spans = self.place_new_cells(&merge, &step, &cell_of, s, base_c, valid);
        let table = Self::table_after_merge(t, u, merge, &out, &spans.positions, &step, offset);
        let (c, n) = (cell_of.len(), cell_of.len() * m);
        let ints = Tensor::cat(
            vec![
                spans.sentence.reshape([c, 1]),
                spans.cell_start.reshape([c, 1]),
                spans.cell_end.reshape([c, 1]),
                spans.valid.int().reshape([c, 1]),
                out.chosen.clone().reshape([c, 1]),
                spans.positions,
            ],
            1,
        );
        self.record(out, ints, n);
        self.stats.merges += step.pending.len() as u64;
        table
    }

    /// The merge: records each merging sentence's merged span, and gives the terminals after
    /// it (the merged bigram `(u, u + 1)` becomes one terminal; a sentence that does not merge,
    /// whose `u` lies past every slot, only drops its last slot).
    fn merge(&mut self, t: &Table<B>, u: &Tensor<B, 1, Int>, pending: &[usize]) -> Merge<B> {
        let device = self.leaves.device();
        let (batch, a) = (self.lengths.len(), t.width);
        let (a2, p) = (a - 1, pending.len());
        let pend_idx = index_tensor::<B>(pending, &device);
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
        Merge {
            u_p,
            base_p,
            start,
            end,
        }
    }

    /// How many top-row cells each merging sentence composes.
    ///
    /// The top-row cells over terminals s..=s+m that hold the new terminal, s in
    /// [max(0, u − m), min(u, a' − m − 1)] for a' terminals after the merge: at most
    /// k = min(m + 1, a' − m) of them, which the host knows. Without `exact` (training on a
    /// device) each sentence composes k cells from s = max(0, u − m) on (those past the
    /// interval are discarded), so that nothing is read back. With `exact` (evaluation, and
    /// training on the CPU backends) it reads the merge positions (one read per step; the
    /// trees read the chart anyway) and composes exactly the interval.
    fn new_cell_counts(
        u_p: &Tensor<B, 1, Int>,
        m: usize,
        atoms: &[usize],
        pending: &[usize],
        exact: bool,
    ) -> Vec<usize> {
        match exact {
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
        }
    }

    /// Composes the new top-row cells, `k[r]` for the `r`-th merging sentence from slot
    /// max(0, u − m) on. Children: left (s, q), right (s + q + 1, m − 1 − q) after the merge,
    /// read from the old table.
    fn compose_new_cells<C: Compose<B>>(
        &self,
        compose: &C,
        t: &Table<B>,
        merge: &Merge<B>,
        step: &Step,
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
    ) -> NewCells<B> {
        let device = self.leaves.device();
        let (batch, m, atoms, pending, k) =
            (step.batch, step.m, &step.atoms, &step.pending, &step.k);
        let (l1, a2) = (m + 1, step.a - 1);
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
        let u_c = merge.u_p.clone().select(0, of_cell.clone());
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
        let base_c = merge.base_p.clone().select(0, of_cell.clone());
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
        let out = choose(
            compose,
            t.e.clone(),
            t.lpt.clone(),
            children,
            [c, m],
            config,
            decisions,
        );
        NewCells {
            out,
            cell_of,
            offset,
            s,
            base_c,
            valid,
        }
    }

    /// The spans and split positions of the new cells, in the terminals after the merge; and
    /// the longest cells at each position, which they update.
    fn place_new_cells(
        &mut self,
        merge: &Merge<B>,
        step: &Step,
        cell_of: &[usize],
        s: Tensor<B, 1, Int>,
        base_c: Tensor<B, 1, Int>,
        valid: Tensor<B, 1, Bool>,
    ) -> NewSpans<B> {
        let device = self.leaves.device();
        let (batch, m, a) = (step.batch, step.m, step.a);
        let a2 = a - 1;
        let (start, end) = (&merge.start, &merge.end);
        let c = cell_of.len();
        let n = c * m;
        let shape3 = [c, m];
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
        let sentence: Vec<i64> = cell_of.iter().map(|&r| step.pending[r] as i64).collect();
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
        NewSpans {
            sentence,
            cell_start,
            cell_end,
            positions,
            valid,
        }
    }

    /// The table after the merge: slot (b, s, l) takes the old cell over the same terminals
    /// (s ≤ u ≤ s + l: the old row l + 1 at s; after u: the old slot s + 1), or a new cell.
    fn table_after_merge(
        t: Table<B>,
        u: Tensor<B, 1, Int>,
        merge: Merge<B>,
        out: &Chosen<B>,
        positions: &Tensor<B, 2, Int>,
        step: &Step,
        offset: Vec<i64>,
    ) -> Table<B> {
        let device = u.device();
        let (batch, m, a) = (step.batch, step.m, step.a);
        let (l1, a2) = (m + 1, a - 1);
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
        for (r, &b) in step.pending.iter().enumerate() {
            most[b] = step.k[r] as i64 - 1;
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
        Table {
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
            start: merge.start,
            end: merge.end,
        }
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
