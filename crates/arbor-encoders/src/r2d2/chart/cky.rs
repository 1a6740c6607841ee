//! The exhaustive CKY rows: every span of up to `top + 1` tokens (`top` = `m` with pruning),
//! composed row by row (eq. 1–5). Their structure is known on the host from the lengths alone,
//! so their children are gathered with uploaded indices.

use arbor_cells::ArborBackend;
use burn::prelude::*;

use super::choice::choose;
use super::ops::{index_tensor, ints};
use super::{Chart, ChartConfig};
use crate::r2d2::composition::Compose;
use crate::Decisions;

/// The cells `(sentence, first token)` of one CKY row.
type RowJobs = Vec<(usize, usize)>;

/// The row in [`Chart::vectors`] of every CKY cell: `[b][l][i]` for sentence `b`'s cell over
/// tokens `i..=i + l` (level 0 is the leaves).
pub(super) type CkyRows = Vec<Vec<Vec<usize>>>;

impl<B: ArborBackend> Chart<B> {
    /// Composes CKY rows `1..=top` of every sentence long enough, one call per row, and points
    /// the longest cells at each position at the highest row's. Returns the row of every CKY
    /// cell.
    pub(super) fn cky<C: Compose<B>>(
        &mut self,
        compose: &C,
        top: usize,
        config: &ChartConfig,
        decisions: &mut Decisions<'_>,
    ) -> CkyRows {
        let device = self.leaves.device();
        let time = self.time;
        let leaf_rows = self.lengths.len() * time;
        // Row of the CKY cell (b, i, l) spanning tokens i..=i+l; level 0 is the leaves.
        let mut cky_row: CkyRows = self
            .lengths
            .iter()
            .enumerate()
            .map(|(b, &n)| vec![(0..n).map(|i| b * time + i).collect()])
            .collect();
        for l in 1..=top {
            let jobs: RowJobs = self
                .lengths
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > l)
                .flat_map(|(b, &n)| (0..n - l).map(move |i| (b, i)))
                .collect();
            let first = self.rows();
            self.cky_row(compose, &jobs, l, &cky_row, config, decisions);
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
        self.longest_end = ints(longest_end, [leaf_rows], &device);
        self.longest_start = ints(longest_start, [leaf_rows], &device);
        cky_row
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
}
