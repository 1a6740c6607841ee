//! Matrix products against a right-hand side packed once and used for many products: the
//! recurrent weight of a sequence op, multiplied by every step's state, and the Gumbel
//! Tree-LSTM's composition weight, multiplied by each layer's new nodes (`ops::argmax_tree`'s
//! `Halves`).
//!
//! Why not the `gemm` crate, which every other product here goes through: `gemm` 0.19 packs both
//! operands into its own panels at every call and offers no way to keep a packed operand, so a
//! recurrent product `h_{t−1}·U` repacks `U` (`[512, 2048]`: 4 MiB) at each of a sequence's
//! steps. This module packs it once per sequence and runs a register-blocked kernel (six rows by
//! sixteen columns, BLIS's layout) straight from the left operand's own memory. On the 2-core
//! Zen 3 VM, `[128, 512]·[512, 2048]` ran at 181 GFLOP/s against `gemm`'s 160, and the backward
//! pass's `[128, 2048]·[2048, 512]` at 161 against 109 (docs/kernels.md, "Packed products").
//!
//! # Layout
//! The `k × n` right-hand side is cut into panels of [`NR`] columns (the last one zero-padded);
//! panel `j` holds, for every `kk` in `0..k`, its [`NR`] values of row `kk` contiguously, so the
//! kernel reads one panel as a stream of `k` rows of [`NR`] values. A product walks `k` in blocks
//! of [`KC`] (a block of one panel is 16 KiB: it stays in the L1 cache while every strip of
//! [`MR`] left-hand rows is multiplied by it; the 512-bit kernel reads two panels' blocks,
//! 32 KiB, which is all of a 32 KiB L1 such as AMD Zen 4's: a `KC` of 128 there measured 3%
//! faster on one thread and level on two, docs/log/bench.md, the Zen 4 table without a
//! warm-up) and the rows in blocks of [`MC`] (one block of the left operand, `MC × KC` values,
//! stays in L2).

use crate::ops::linear::host::{last_index, product_has_work};
use crate::par::GRAIN;

/// Columns per panel: two 8-lane vectors.
pub(crate) const NR: usize = 16;
/// Left-hand rows per kernel call: six rows of two vectors are twelve accumulator registers.
const MR: usize = 6;
/// Depth of one pass of the kernel over a panel.
const KC: usize = 256;
/// Left-hand rows per block.
const MC: usize = 144;
/// Products with fewer multiply-adds than this per parallel task are not split further.
pub(crate) const TASK_WORK: usize = 64 * GRAIN;

/// A `k × n` right-hand side in the kernel's panel layout (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct PackedRhs {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedRhs {
    /// Packs the `k × n` matrix whose element `(kk, j)` is `rhs[kk·rs + j·cs]`.
    ///
    /// # Panics
    /// When the strides would read outside `rhs`.
    pub(crate) fn new(rhs: &[f32], k: usize, n: usize, (rs, cs): (usize, usize)) -> Self {
        if k > 0 && n > 0 {
            assert!(
                rhs.len() > last_index(k, rs, n, cs),
                "PackedRhs: rhs too short"
            );
        }
        let mut packed = Self::zeros(k, n);
        if cs == 1 {
            // Rows contiguous: every column, as one run per panel.
            packed.pack_columns(rhs, rs, &(0..n).collect::<Vec<_>>());
        } else {
            // Columns contiguous (a transposed matrix) or any other strides: walk each column
            // down, so the reads are sequential when `rs` is 1.
            for col in 0..n {
                let (j, c) = (col / NR, col % NR);
                for kk in 0..k {
                    packed.data[(j * k + kk) * NR + c] = rhs[kk * rs + col * cs];
                }
            }
        }
        packed
    }

    /// A `k × n` right-hand side of zeros, to be filled by [`PackedRhs::pack_columns`]: the
    /// memory allocated by the thread that will own it, the packing done by any thread.
    pub(crate) fn zeros(k: usize, n: usize) -> Self {
        Self {
            k,
            n,
            data: vec![0f32; n.div_ceil(NR) * k * NR],
        }
    }

    /// Whether every value is finite (the panels' padding is zeros).
    pub(crate) fn all_finite(&self) -> bool {
        crate::lanes::all_finite(&self.data)
    }

    /// Packs into `self` (`k × columns.len()`, from [`PackedRhs::zeros`]) the matrix whose
    /// column `j` is column `columns[j]` of the row-major `rhs` (row stride `rs`): a selection
    /// of another matrix's columns, packed without copying them out first.
    ///
    /// # Panics
    /// When `columns` does not hold `self`'s `n` columns, or a column would read outside `rhs`.
    pub(crate) fn pack_columns(&mut self, rhs: &[f32], rs: usize, columns: &[usize]) {
        let (k, n) = (self.k, self.n);
        assert_eq!(columns.len(), n, "PackedRhs::pack_columns: {n} columns");
        if let (Some(&last), true) = (columns.iter().max(), k > 0) {
            assert!(
                rhs.len() > (k - 1) * rs + last,
                "PackedRhs::pack_columns: rhs too short"
            );
        }
        if k == 0 {
            return;
        }
        // Each panel's columns as runs of consecutive source columns (`(offset in the panel,
        // first source column, length)`): a selection of whole gates is a few runs a panel,
        // so each row's piece of a run is one copy, not one scattered write per value (which
        // took four times as long on a part of the in256 LSTM's `U`).
        let mut runs = Vec::with_capacity(NR);
        for (panel, data) in columns.chunks(NR).zip(self.data.chunks_exact_mut(k * NR)) {
            runs.clear();
            let mut c = 0;
            while c < panel.len() {
                let len = 1 + panel[c + 1..]
                    .iter()
                    .zip(panel[c]..)
                    .take_while(|&(&col, prev)| col == prev + 1)
                    .count();
                runs.push((c, panel[c], len));
                c += len;
            }
            // The panel is `k` rows of `NR` values, written in order.
            for (kk, out) in data.as_chunks_mut::<NR>().0.iter_mut().enumerate() {
                let row = &rhs[kk * rs..];
                if let [(0, col, NR)] = runs[..] {
                    // A whole panel in one run: a copy of known length (no `memmove` call).
                    out.copy_from_slice(&row[col..col + NR]);
                    continue;
                }
                for &(at, col, len) in &runs {
                    out[at..at + len].copy_from_slice(&row[col..col + len]);
                }
            }
        }
    }

    /// `dst (+)= lhs·self` for `m` rows: `dst` is `m × n` with row stride `dst_rs` (columns
    /// contiguous), `lhs` is `m × k` with element `(r, kk)` at `lhs[r·l_rs + kk·l_cs]`. With
    /// `accumulate` the product is added to `dst`, else it overwrites it. Runs on rayon's pool
    /// when the product is large enough to be worth splitting (by column panels, then by row
    /// blocks); every element of `dst` is summed in the same order whatever the split.
    ///
    /// # Panics
    /// When a stride or length would let the product read or write outside a slice.
    pub(crate) fn product(
        &self,
        m: usize,
        dst: &mut [f32],
        dst_rs: usize,
        accumulate: bool,
        lhs: &[f32],
        lhs_strides: (usize, usize),
    ) {
        let split = crate::par::parallel();
        self.product_on(split, m, dst, dst_rs, accumulate, lhs, lhs_strides);
    }

    /// [`PackedRhs::product`], split across rayon's pool only with `split`: `false` for a
    /// caller that already runs one task per thread (the sequence ops' row tasks, the
    /// attention's groups), where a split would only add joins.
    ///
    /// # Panics
    /// As [`PackedRhs::product`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn product_on(
        &self,
        split: bool,
        m: usize,
        dst: &mut [f32],
        dst_rs: usize,
        accumulate: bool,
        lhs: &[f32],
        lhs_strides: (usize, usize),
    ) {
        let start = if accumulate { Start::Dst } else { Start::Zero };
        self.product_from(split, m, dst, dst_rs, start, lhs, lhs_strides);
    }

    /// [`PackedRhs::product_on`] from `start`: with [`Start::Row`], `dst = row + lhs·self` for
    /// every row (a bias), the row loaded into the kernel's accumulators rather than written
    /// into `dst` before the product and read back by it.
    ///
    /// # Panics
    /// As [`PackedRhs::product`], and when a start row does not hold `n` values.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn product_from(
        &self,
        split: bool,
        m: usize,
        dst: &mut [f32],
        dst_rs: usize,
        start: Start<'_>,
        lhs: &[f32],
        (l_rs, l_cs): (usize, usize),
    ) {
        let (k, n) = (self.k, self.n);
        const OP: &str = "PackedRhs::product";
        // Tasks write disjoint column ranges of each row: rows must not overlap.
        assert!(m == 0 || n == 0 || dst_rs >= n, "{OP}: dst too short");
        if let Start::Row(row) = start {
            assert_eq!(row.len(), n, "{OP}: the start row must hold {n} values");
        }
        let accumulate = matches!(start, Start::Dst);
        if !product_has_work(OP, (m, n, k), dst, dst_rs, accumulate) {
            if let (Start::Row(row), 0) = (start, k) {
                for r in 0..m {
                    dst[r * dst_rs..r * dst_rs + n].copy_from_slice(row);
                }
            }
            return;
        }
        assert!(
            lhs.len() > last_index(m, l_rs, k, l_cs),
            "{OP}: lhs too short"
        );
        let job = Job {
            packed: self,
            lhs,
            l_rs,
            l_cs,
            dst: Dst(dst.as_mut_ptr()),
            dst_rs,
            start,
            kernel: Kernel::detect(),
        };
        if split {
            job.split(0..m, 0..n.div_ceil(NR));
        } else {
            // SAFETY: the whole product, whose extent was checked against the slices above.
            unsafe { job.block(0..m, 0..n.div_ceil(NR)) }
        }
    }
}

/// What a product starts from, before its multiply-adds ([`PackedRhs::product_from`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Start<'a> {
    /// Zero: `dst = lhs·rhs`.
    Zero,
    /// `dst` as it is: `dst += lhs·rhs`.
    Dst,
    /// The same `n` values for every row (a bias): `dst = row + lhs·rhs`.
    Row(&'a [f32]),
}

/// How one kernel call's accumulators start: at zero, from the `dst` block they are added to
/// at the end, or from a row of [`NR`] (or `2·NR`) values shared by every row.
#[derive(Clone, Copy)]
enum Begin {
    Zero,
    Dst,
    Row(*const f32),
}

impl Begin {
    /// The same start for the block `cols` columns to the right.
    ///
    /// # Safety
    /// A row start must hold `cols` more values.
    unsafe fn right(self, cols: usize) -> Self {
        match self {
            Begin::Row(p) => Begin::Row(p.add(cols)),
            other => other,
        }
    }
}

/// The output pointer, shared by tasks that write disjoint blocks of it.
#[derive(Clone, Copy)]
struct Dst(*mut f32);
// SAFETY: tasks write disjoint (row range × panel range) blocks of the buffer (`Job::split`
// halves one range or the other), and the buffer outlives them (`rayon::join` returns first).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

/// Which compiled kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AVX2 + FMA intrinsics, chosen at run time.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F intrinsics on two panels at a time (32 columns), chosen at run time with the
    /// `x86-v4` feature ([`crate::isa::avx512`]); a panel left without a partner, and the last,
    /// partial one, go through the AVX2 kernel.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// Plain `f32` loops for any other CPU.
    Portable,
}

impl Kernel {
    /// Where [`Job::split`] cuts `panels` in two, or `None` when it cannot: near the middle,
    /// and for the 512-bit kernel an even number of panels after `panels.start`, so that every
    /// task but the one holding the product's last panel gets whole pairs. (Cut in the exact
    /// middle, the `[128, 400]·[400, 1600]` step of the in128-h400 LSTM left tasks of 3 panels,
    /// whose unpaired third went through the AVX2 kernel: 18.6% of that benchmark's samples
    /// on an Intel Xeon.)
    fn panel_mid(self, panels: std::ops::Range<usize>) -> Option<usize> {
        let mut mid = panels.start + panels.len() / 2;
        #[cfg(target_arch = "x86_64")]
        if self == Kernel::Avx512 && (mid - panels.start) % 2 == 1 {
            mid += 1;
        }
        (mid > panels.start && mid < panels.end).then_some(mid)
    }

    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::isa::avx512() {
                return Kernel::Avx512;
            }
            if crate::isa::avx2_fma() {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }
}

/// One product's operands, split across tasks by [`Job::split`].
struct Job<'a> {
    packed: &'a PackedRhs,
    lhs: &'a [f32],
    l_rs: usize,
    l_cs: usize,
    dst: Dst,
    dst_rs: usize,
    /// What `dst` starts from (a start row holds `n` values).
    start: Start<'a>,
    kernel: Kernel,
}

// SAFETY: see `Dst`; the other fields are shared references and plain values.
unsafe impl Sync for Job<'_> {}

impl Job<'_> {
    /// Runs rows × panels, halving the larger side (in work) across `rayon::join` until a task
    /// is under [`TASK_WORK`] multiply-adds.
    fn split(&self, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
        let work = rows.len() * panels.len() * NR * self.packed.k;
        if work >= 2 * TASK_WORK {
            match self.kernel.panel_mid(panels.clone()) {
                Some(mid) if panels.len() * NR >= rows.len() => {
                    rayon::join(
                        || self.split(rows.clone(), panels.start..mid),
                        || self.split(rows.clone(), mid..panels.end),
                    );
                    return;
                }
                _ if rows.len() > MR => {
                    // Halve the rows on a multiple of MR, so strips stay whole.
                    let mid = rows.start + (rows.len() / 2).div_ceil(MR) * MR;
                    rayon::join(
                        || self.split(rows.start..mid, panels.clone()),
                        || self.split(mid..rows.end, panels.clone()),
                    );
                    return;
                }
                _ => {}
            }
        }
        // SAFETY: the ranges lie inside the product's `m` rows and `n` columns, whose extent
        // `PackedRhs::product` checked against the slices; no other task writes this block.
        unsafe { self.block(rows, panels) }
    }

    /// One task's block, serially.
    ///
    /// # Safety
    /// `rows` and `panels` must lie inside the product, and no other thread may touch this
    /// block of `dst` meanwhile.
    unsafe fn block(&self, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
        let (k, n) = (self.packed.k, self.packed.n);
        let mut r0 = rows.start;
        while r0 < rows.end {
            let r1 = (r0 + MC).min(rows.end);
            let mut j = panels.start;
            while j < panels.end {
                let cols = (n - j * NR).min(NR);
                // Two whole panels side by side for the 512-bit kernel.
                #[cfg(target_arch = "x86_64")]
                let pair = self.kernel == Kernel::Avx512 && j + 1 < panels.end && (j + 2) * NR <= n;
                #[cfg(not(target_arch = "x86_64"))]
                let pair = false;
                let mut k0 = 0;
                while k0 < k {
                    let kc = KC.min(k - k0);
                    let begin = match self.start {
                        Start::Dst => Begin::Dst,
                        _ if k0 > 0 => Begin::Dst,
                        Start::Row(row) => Begin::Row(row.as_ptr().add(j * NR)),
                        Start::Zero => Begin::Zero,
                    };
                    let b = self.packed.data.as_ptr().add((j * k + k0) * NR);
                    // The block the strips after these read (the same panels' next depth
                    // block, else the next panels' first), fetched into L2 a slice per strip.
                    let (nj, nk0) = if k0 + kc < k {
                        (j, k0 + kc)
                    } else {
                        (j + if pair { 2 } else { 1 }, 0)
                    };
                    let next = (nj < panels.end).then(|| {
                        let panels = if nj + 1 < panels.end { 2 } else { 1 };
                        (
                            self.packed.data.as_ptr().add((nj * k + nk0) * NR),
                            KC.min(k - nk0),
                            panels,
                        )
                    });
                    let mut i = r0;
                    while i < r1 {
                        let r = strip_rows(r1 - i);
                        if let Some((nb, nkc, np)) = next {
                            // This strip's share of the next block, in proportion to its rows.
                            let share = |row: usize| (row - r0) * nkc / (r1 - r0);
                            for p in 0..np {
                                for kk in share(i)..share(i + r) {
                                    prefetch(nb.add(p * k * NR + kk * NR));
                                }
                            }
                        }
                        let a = self.lhs.as_ptr().add(i * self.l_rs + k0 * self.l_cs);
                        let c = self.dst.0.add(i * self.dst_rs + j * NR);
                        if pair {
                            // The next panel's block of the same depth starts `k` rows on.
                            self.strip_pair(r, kc, a, (b, b.add(k * NR)), c, begin);
                        } else if cols == NR {
                            self.strip(r, kc, a, b, c, self.dst_rs, begin);
                        } else {
                            // The last, partial panel: into a full-width scratch block, which
                            // starts from `dst`'s or the start row's `cols` values.
                            let mut tmp = [0f32; MR * NR];
                            let from = match begin {
                                Begin::Zero => None,
                                Begin::Dst => Some((c as *const f32, self.dst_rs)),
                                Begin::Row(p) => Some((p, 0)),
                            };
                            if let Some((p, rs)) = from {
                                for rr in 0..r {
                                    for cc in 0..cols {
                                        tmp[rr * NR + cc] = *p.add(rr * rs + cc);
                                    }
                                }
                            }
                            let begin = if from.is_some() {
                                Begin::Dst
                            } else {
                                Begin::Zero
                            };
                            self.strip(r, kc, a, b, tmp.as_mut_ptr(), NR, begin);
                            for rr in 0..r {
                                for cc in 0..cols {
                                    *c.add(rr * self.dst_rs + cc) = tmp[rr * NR + cc];
                                }
                            }
                        }
                        i += r;
                    }
                    k0 += kc;
                }
                j += if pair { 2 } else { 1 };
            }
            r0 = r1;
        }
    }

    /// `r ≤ MR` rows of one panel over `kc` steps.
    ///
    /// # Safety
    /// `a` must address `r` rows of `kc` values (strides `l_rs`, `l_cs`), `b` `kc` rows of
    /// [`NR`] values, `c` `r` rows of [`NR`] writable values (stride `c_rs`), a row start
    /// [`NR`] values.
    #[allow(clippy::too_many_arguments)]
    unsafe fn strip(
        &self,
        r: usize,
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        c_rs: usize,
        begin: Begin,
    ) {
        let s = (self.l_rs, self.l_cs);
        match self.kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 | Kernel::Avx512 => match r {
                6 => avx2::kernel::<6>(kc, a, s, b, c, c_rs, begin),
                5 => avx2::kernel::<5>(kc, a, s, b, c, c_rs, begin),
                4 => avx2::kernel::<4>(kc, a, s, b, c, c_rs, begin),
                3 => avx2::kernel::<3>(kc, a, s, b, c, c_rs, begin),
                2 => avx2::kernel::<2>(kc, a, s, b, c, c_rs, begin),
                _ => avx2::kernel::<1>(kc, a, s, b, c, c_rs, begin),
            },
            Kernel::Portable => match r {
                6 => portable::<6>(kc, a, s, b, c, c_rs, begin),
                5 => portable::<5>(kc, a, s, b, c, c_rs, begin),
                4 => portable::<4>(kc, a, s, b, c, c_rs, begin),
                3 => portable::<3>(kc, a, s, b, c, c_rs, begin),
                2 => portable::<2>(kc, a, s, b, c, c_rs, begin),
                _ => portable::<1>(kc, a, s, b, c, c_rs, begin),
            },
        }
    }

    /// `r ≤ MR` rows of two adjacent whole panels (`2·NR` columns of `c`) over `kc` steps: the
    /// 512-bit kernel where it runs, else the one-panel kernel twice. Every element is the same
    /// chain of fused multiply-adds, in the same order, as in the AVX2 kernel, so the two give
    /// the same bits.
    ///
    /// # Safety
    /// As [`Job::strip`], with `b` the two panels' blocks and `c` `2·NR` columns wide (stride
    /// `dst_rs`); [`Kernel::Avx512`] only where the CPU has AVX-512F.
    unsafe fn strip_pair(
        &self,
        r: usize,
        kc: usize,
        a: *const f32,
        b: (*const f32, *const f32),
        c: *mut f32,
        begin: Begin,
    ) {
        let c_rs = self.dst_rs;
        #[cfg(target_arch = "x86_64")]
        if self.kernel == Kernel::Avx512 {
            let s = (self.l_rs, self.l_cs);
            match r {
                6 => avx512::pair::<6>(kc, a, s, b, c, c_rs, begin),
                5 => avx512::pair::<5>(kc, a, s, b, c, c_rs, begin),
                4 => avx512::pair::<4>(kc, a, s, b, c, c_rs, begin),
                3 => avx512::pair::<3>(kc, a, s, b, c, c_rs, begin),
                2 => avx512::pair::<2>(kc, a, s, b, c, c_rs, begin),
                _ => avx512::pair::<1>(kc, a, s, b, c, c_rs, begin),
            }
            return;
        }
        self.strip(r, kc, a, b.0, c, c_rs, begin);
        self.strip(r, kc, a, b.1, c.add(NR), c_rs, begin.right(NR));
    }
}

/// The rows of the next strip when `left` rows remain: [`MR`], except that the last `MR + 1`
/// to `MR + 3` rows go as two strips of at least 3 rows (8 = 4 + 4, not 6 + 2): a strip of one
/// or two rows keeps only two or four accumulators, too few to hide the multiply-add's latency,
/// and ran at half the rate of the others (the last strip of a 128-row product, 1.6% of its
/// rows, took 3% of the in256 LSTM's time).
fn strip_rows(left: usize) -> usize {
    if left > MR && left < MR + 4 {
        left.div_ceil(2)
    } else {
        MR.min(left)
    }
}

/// Asks the CPU to fetch the cache line holding `p` into L2 (nothing elsewhere than x86-64):
/// the next block of a packed panel, fetched while the current one is multiplied. Without it a
/// product whose packed operand is not in the cache (an LSTM step's weights, 3 MiB a thread)
/// ran at 80% of the rate it had when the operand stayed cached.
#[inline(always)]
fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The kernel in plain `f32` code (any CPU): `R` rows of accumulators [`NR`] wide.
///
/// # Safety
/// As [`Job::strip`].
unsafe fn portable<const R: usize>(
    kc: usize,
    a: *const f32,
    (l_rs, l_cs): (usize, usize),
    b: *const f32,
    c: *mut f32,
    c_rs: usize,
    begin: Begin,
) {
    let mut acc = [[0f32; NR]; R];
    if let Begin::Row(p) = begin {
        let row = std::slice::from_raw_parts(p, NR);
        for acc_row in acc.iter_mut() {
            acc_row.copy_from_slice(row);
        }
    }
    let load = matches!(begin, Begin::Dst);
    for kk in 0..kc {
        let bv = std::slice::from_raw_parts(b.add(kk * NR), NR);
        for (r, row) in acc.iter_mut().enumerate() {
            let av = *a.add(r * l_rs + kk * l_cs);
            for (x, &y) in row.iter_mut().zip(bv) {
                *x += av * y;
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        let out = std::slice::from_raw_parts_mut(c.add(r * c_rs), NR);
        for (o, &x) in out.iter_mut().zip(row) {
            *o = if load { *o + x } else { x };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Begin, NR};

    /// `R` rows × [`NR`] columns in twelve (at most) 8-lane accumulators: per step one broadcast
    /// of each row's left-hand value and two fused multiply-adds against the panel's row.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; the pointers as [`super::Job::strip`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn kernel<const R: usize>(
        kc: usize,
        a: *const f32,
        (l_rs, l_cs): (usize, usize),
        b: *const f32,
        c: *mut f32,
        c_rs: usize,
        begin: Begin,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        if let Begin::Row(p) = begin {
            let row = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))];
            acc = [row; R];
        }
        let load = matches!(begin, Begin::Dst);
        for kk in 0..kc {
            let b0 = _mm256_loadu_ps(b.add(kk * NR));
            let b1 = _mm256_loadu_ps(b.add(kk * NR + 8));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r * l_rs + kk * l_cs));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            let p = c.add(r * c_rs);
            let (mut x0, mut x1) = (row[0], row[1]);
            if load {
                x0 = _mm256_add_ps(_mm256_loadu_ps(p), x0);
                x1 = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), x1);
            }
            _mm256_storeu_ps(p, x0);
            _mm256_storeu_ps(p.add(8), x1);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Begin, NR};

    /// `R` rows × two panels (`2·NR` columns) in twelve (at most) 16-lane accumulators: per step
    /// one broadcast of each row's left-hand value and two fused multiply-adds, one per panel.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; the pointers as [`super::Job::strip_pair`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pair<const R: usize>(
        kc: usize,
        a: *const f32,
        (l_rs, l_cs): (usize, usize),
        (b0, b1): (*const f32, *const f32),
        c: *mut f32,
        c_rs: usize,
        begin: Begin,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        if let Begin::Row(p) = begin {
            let row = [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(NR))];
            acc = [row; R];
        }
        let load = matches!(begin, Begin::Dst);
        for kk in 0..kc {
            let x0 = _mm512_loadu_ps(b0.add(kk * NR));
            let x1 = _mm512_loadu_ps(b1.add(kk * NR));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(r * l_rs + kk * l_cs));
                row[0] = _mm512_fmadd_ps(av, x0, row[0]);
                row[1] = _mm512_fmadd_ps(av, x1, row[1]);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            let p = c.add(r * c_rs);
            let (mut y0, mut y1) = (row[0], row[1]);
            if load {
                y0 = _mm512_add_ps(_mm512_loadu_ps(p), y0);
                y1 = _mm512_add_ps(_mm512_loadu_ps(p.add(NR)), y1);
            }
            _mm512_storeu_ps(p, y0);
            _mm512_storeu_ps(p.add(NR), y1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fill;

    /// `lhs·rhs` in f64 from row-major operands.
    fn naive(m: usize, k: usize, n: usize, lhs: &[f32], rhs: &[f32]) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for r in 0..m {
            for kk in 0..k {
                for j in 0..n {
                    out[r * n + j] += lhs[r * k + kk] as f64 * rhs[kk * n + j] as f64;
                }
            }
        }
        out
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0f32; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    }

    /// Every shape class (rows not a multiple of MR or MC, widths not a multiple of NR, odd and
    /// even numbers of whole panels, depths over KC, large enough to be split across tasks),
    /// both strides of each operand, from zero, from `dst` (accumulating) and from a start row,
    /// on every kernel this CPU can run.
    #[test]
    fn products_match_a_naive_product_for_every_shape_stride_and_kernel() {
        let mut kernels = vec![Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if crate::isa::avx2_fma() {
                kernels.push(Kernel::Avx2);
            }
            if crate::isa::avx512() {
                kernels.push(Kernel::Avx512);
            }
        }
        let shapes = [
            (1, 1, 1),
            (5, 3, 17),
            (7, 300, 33),
            (13, 16, 16),
            (150, 257, 50),
            (128, 200, 512),
            (300, 40, 24),
            (9, 70, 48),
        ];
        for &(m, k, n) in &shapes {
            let lhs = fill(m * k, (m * 31 + k) as u64, 1.0);
            let rhs = fill(k * n, (n * 17 + k) as u64, 1.0);
            let start = fill(m * (n + 3), 5, 1.0);
            let bias = fill(n, 9, 1.0);
            let want = naive(m, k, n, &lhs, &rhs);
            let (lhs_t, rhs_t) = (transpose(&lhs, m, k), transpose(&rhs, k, n));
            for rhs_transposed in [false, true] {
                let packed = if rhs_transposed {
                    PackedRhs::new(&rhs_t, k, n, (1, k))
                } else {
                    PackedRhs::new(&rhs, k, n, (n, 1))
                };
                assert_eq!((packed.k, packed.n), (k, n));
                for lhs_transposed in [false, true] {
                    for begin in [Start::Zero, Start::Dst, Start::Row(&bias)] {
                        let mut avx2_bits: Option<Vec<f32>> = None;
                        for &kernel in &kernels {
                            // Row stride n + 3: the product must leave the gaps alone.
                            let mut dst = start.clone();
                            let (l, strides) = if lhs_transposed {
                                (&lhs_t, (1, m))
                            } else {
                                (&lhs, (k, 1))
                            };
                            let job = Job {
                                packed: &packed,
                                lhs: l,
                                l_rs: strides.0,
                                l_cs: strides.1,
                                dst: Dst(dst.as_mut_ptr()),
                                dst_rs: n + 3,
                                start: begin,
                                kernel,
                            };
                            job.split(0..m, 0..n.div_ceil(NR));
                            // The 512-bit kernel runs each element's chain of fused
                            // multiply-adds in the AVX2 kernel's order: the same bits.
                            #[cfg(target_arch = "x86_64")]
                            match kernel {
                                Kernel::Avx2 => avx2_bits = Some(dst.clone()),
                                Kernel::Avx512 => assert_eq!(
                                    avx2_bits.as_ref(),
                                    Some(&dst),
                                    "{m}x{k}x{n} lhs_t {lhs_transposed} rhs_t {rhs_transposed} \
                                     {begin:?}: AVX-512 differs from AVX2"
                                ),
                                Kernel::Portable => {}
                            }
                            for r in 0..m {
                                for j in 0..n + 3 {
                                    let at = r * (n + 3) + j;
                                    let got = dst[at] as f64;
                                    if j >= n {
                                        assert_eq!(dst[at], start[at], "gap overwritten");
                                        continue;
                                    }
                                    let base = match begin {
                                        Start::Zero => 0.0,
                                        Start::Dst => start[at] as f64,
                                        Start::Row(row) => row[j] as f64,
                                    };
                                    let w = want[r * n + j] + base;
                                    assert!(
                                        (got - w).abs() <= 1e-4 * (1.0 + w.abs()),
                                        "{kernel:?} {m}x{k}x{n} lhs_t {lhs_transposed} \
                                         rhs_t {rhs_transposed} {begin:?} ({r},{j}): \
                                         {got} vs {w}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The 512-bit kernel is chosen exactly where it runs: with the `x86-v4` feature on a CPU
    /// with AVX-512F (an emulated one in docs/kernels.md, "AVX-512 in arbor's own kernels").
    #[test]
    fn the_kernel_follows_the_cpu_and_the_feature() {
        #[cfg(target_arch = "x86_64")]
        {
            let cpu512 = std::arch::is_x86_feature_detected!("avx512f");
            let cpu256 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            let want = if cfg!(feature = "x86-v4") && cpu512 && cpu256 {
                Kernel::Avx512
            } else if cpu256 {
                Kernel::Avx2
            } else {
                Kernel::Portable
            };
            assert_eq!(Kernel::detect(), want);
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(Kernel::detect(), Kernel::Portable);
    }

    /// Cutting a product's panels again and again (as [`Job::split`] does down to its
    /// smallest tasks) leaves the 512-bit kernel only whole pairs, except in the one task that
    /// holds the last panel; the other kernels are cut in the middle.
    #[test]
    fn panel_cuts_keep_the_wide_kernels_pairs_whole() {
        fn leaves(
            kernel: Kernel,
            panels: std::ops::Range<usize>,
            out: &mut Vec<std::ops::Range<usize>>,
        ) {
            match kernel.panel_mid(panels.clone()) {
                Some(mid) => {
                    assert!(
                        panels.start < mid && mid < panels.end,
                        "{panels:?} cut at {mid}"
                    );
                    leaves(kernel, panels.start..mid, out);
                    leaves(kernel, mid..panels.end, out);
                }
                None => out.push(panels),
            }
        }
        for n in 1..=130 {
            let mut tasks = Vec::new();
            leaves(Kernel::Portable, 0..n, &mut tasks);
            assert_eq!(
                tasks.len(),
                n,
                "{n} panels: one per task when cut to the end"
            );
            #[cfg(target_arch = "x86_64")]
            {
                let mut tasks = Vec::new();
                leaves(Kernel::Avx512, 0..n, &mut tasks);
                let (last, rest) = tasks.split_last().expect("at least one task");
                assert_eq!(last.end, n);
                assert!(last.len() <= 3, "{n} panels: last task {last:?}");
                for t in rest {
                    assert_eq!((t.start % 2, t.len()), (0, 2), "{n} panels: task {t:?}");
                }
            }
        }
        assert_eq!(Kernel::Portable.panel_mid(0..7), Some(3));
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(Kernel::Avx512.panel_mid(0..100), Some(50));
            assert_eq!(Kernel::Avx512.panel_mid(0..50), Some(26));
            assert_eq!(Kernel::Avx512.panel_mid(26..50), Some(38));
            assert_eq!(Kernel::Avx2.panel_mid(0..50), Some(25));
        }
    }

    /// The public entry point in a one-thread pool (the product inline, one block) and in a
    /// two-thread pool (split into tasks): the same values, bit for bit, and the naive product's.
    #[test]
    fn one_and_two_threads_give_the_same_product() {
        let (m, k, n) = (150, 300, 200);
        let lhs = fill(m * k, 3, 1.0);
        let rhs = fill(k * n, 4, 1.0);
        let want = naive(m, k, n, &lhs, &rhs);
        let packed = PackedRhs::new(&rhs, k, n, (n, 1));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a local pool");
            let mut dst = vec![0f32; m * n];
            pool.install(|| packed.product(m, &mut dst, n, false, &lhs, (k, 1)));
            dst
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one, two);
        for (got, w) in one.iter().zip(&want) {
            assert!(
                (*got as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{got} vs {w}"
            );
        }
    }

    #[test]
    fn the_public_entry_point_writes_zeros_for_an_empty_depth_and_checks_its_slices() {
        let packed = PackedRhs::new(&[], 0, 3, (3, 1));
        let mut dst = vec![7f32; 6];
        packed.product(2, &mut dst, 3, false, &[], (0, 1));
        assert_eq!(dst, vec![0.0; 6]);
        let mut dst = vec![7f32; 6];
        packed.product(2, &mut dst, 3, true, &[], (0, 1));
        assert_eq!(dst, vec![7.0; 6]);
        let mut dst = vec![7f32; 6];
        let row = [1.0, 2.0, 3.0];
        packed.product_from(false, 2, &mut dst, 3, Start::Row(&row), &[], (0, 1));
        assert_eq!(dst, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let packed = PackedRhs::new(&[1.0, 2.0], 1, 2, (2, 1));
        let short = std::panic::catch_unwind(|| {
            let mut dst = vec![0f32; 3];
            packed.product(2, &mut dst, 2, false, &[1.0, 1.0], (1, 1));
        });
        assert!(short.is_err(), "a too-short dst must be refused");
        let wrong_row = std::panic::catch_unwind(|| {
            let mut dst = vec![0f32; 4];
            packed.product_from(
                false,
                2,
                &mut dst,
                2,
                Start::Row(&[1.0]),
                &[1.0, 1.0],
                (1, 1),
            );
        });
        assert!(
            wrong_row.is_err(),
            "a start row of the wrong width must be refused"
        );
    }

    /// A selection of columns packs as the matrix of those columns copied out first would,
    /// for selections within and across panels, repeated and out of order, and depths of one
    /// row and of more than `KC` rows.
    #[test]
    fn selected_columns_pack_as_the_copied_columns() {
        for (k, rs) in [(1usize, 40usize), (7, 40), (KC + 3, 37)] {
            let rhs = fill(k * rs, 3, 1.0);
            for columns in [
                vec![0usize, 1, 2],
                (0..rs).rev().collect::<Vec<_>>(),
                vec![
                    5, 5, 36, 0, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
                ],
                vec![],
            ] {
                let n = columns.len();
                let mut copied = vec![0f32; k * n];
                for kk in 0..k {
                    for (j, &col) in columns.iter().enumerate() {
                        copied[kk * n + j] = rhs[kk * rs + col];
                    }
                }
                let want = PackedRhs::new(&copied, k, n, (n, 1));
                let mut got = PackedRhs::zeros(k, n);
                got.pack_columns(&rhs, rs, &columns);
                assert_eq!((got.k, got.n), (want.k, want.n), "k {k}, {columns:?}");
                assert_eq!(got.data, want.data, "k {k}, {columns:?}");
            }
        }
    }

    /// The strips of a block cover its rows exactly, none wider than [`MR`], and none of one
    /// or two rows (too few accumulators to keep the multiply-adds busy) after a whole strip:
    /// 128 rows end in two strips of 4, not 6 and 2.
    #[test]
    fn strips_cover_the_rows_without_a_short_one_after_a_whole_one() {
        for rows in 1..=3 * MR + 3 {
            let mut strips = Vec::new();
            let mut left = rows;
            while left > 0 {
                let r = strip_rows(left);
                assert!((1..=MR).contains(&r), "{rows} rows: a strip of {r}");
                strips.push(r);
                left -= r;
            }
            if rows > MR {
                assert!(strips.iter().all(|&r| r >= 3), "{rows} rows: {strips:?}");
            }
        }
        let mut ends = Vec::new();
        let mut left = 128;
        while left > 0 {
            ends.push(strip_rows(left));
            left -= ends[ends.len() - 1];
        }
        assert_eq!(ends[ends.len() - 3..], [6, 4, 4]);
    }
}
