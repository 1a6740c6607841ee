//! Row-parallel execution of the CPU kernels on rayon's global pool (the pool Burn's `flex`
//! backend runs its matrix products on, so both sides share the same threads).
//!
//! Every kernel in [`cpu`](crate::cpu) is independent across the rows of its buffers, so a call
//! is cut into row ranges by recursive halving (`rayon::join`) until a range holds less than
//! [`GRAIN`] elements of work; each range runs the same kernel on its own slices. Results are
//! identical to the one-thread call: no row reads another row's output.

use std::ops::Range;

/// Elements of work below which a range is not split further (a `rayon::join` costs a few
/// microseconds; this much elementwise work costs tens).
pub(crate) const GRAIN: usize = 1 << 14;

/// Whether splitting can pay: rayon's pool (the current one, or the global one from a thread
/// outside any pool) has more than one thread. With one thread a `rayon::join` from outside the
/// pool only hands the work to the pool's thread and sleeps until it is done (a wake-up and a
/// context switch each way), so the kernels run their work inline instead.
pub(crate) fn parallel() -> bool {
    rayon::current_num_threads() > 1
}

/// One mutable output: its buffer and the number of elements each row owns in it.
pub(crate) type Out<'a> = (&'a mut [f32], usize);

/// Runs `f(rows, outputs)` over `0..rows`, cut into ranges in parallel; `row_cost` is the
/// elements of work in one row, and `outs` the output buffers with their row widths. `f` gets
/// each output's slice for its range.
pub(crate) fn rows<F>(rows: usize, row_cost: usize, outs: Vec<Out<'_>>, f: &F)
where
    F: Fn(Range<usize>, &mut [&mut [f32]]) + Sync,
{
    split(0..rows, row_cost.max(1), outs, f);
}

fn split<F>(range: Range<usize>, row_cost: usize, outs: Vec<Out<'_>>, f: &F)
where
    F: Fn(Range<usize>, &mut [&mut [f32]]) + Sync,
{
    let n = range.len();
    if n < 2 || n.saturating_mul(row_cost) < 2 * GRAIN || !parallel() {
        let mut slices: Vec<&mut [f32]> = outs.into_iter().map(|(s, _)| s).collect();
        f(range, &mut slices);
        return;
    }
    let mid = range.start + n / 2;
    let (left, right): (Vec<Out<'_>>, Vec<Out<'_>>) = outs
        .into_iter()
        .map(|(s, w)| {
            let (a, b) = s.split_at_mut((n / 2) * w);
            ((a, w), (b, w))
        })
        .unzip();
    rayon::join(
        || split(range.start..mid, row_cost, left, f),
        || split(mid..range.end, row_cost, right, f),
    );
}

/// Runs `f` over every element of `items`, cut into contiguous chunks in parallel by recursive
/// halving until a chunk's work (the sum of `cost` over its elements, in elements of work) is
/// under [`GRAIN`]. For work that is not one row per output, such as one sentence's share of a
/// layer, whose elements own disjoint mutable state.
pub(crate) fn items<T, C, F>(items: &mut [T], cost: &C, f: &F)
where
    T: Send,
    C: Fn(&T) -> usize + Sync,
    F: Fn(&mut [T]) + Sync,
{
    let total: usize = items.iter().map(cost).fold(0, usize::saturating_add);
    if items.len() < 2 || total < 2 * GRAIN || !parallel() {
        f(items);
        return;
    }
    let (left, right) = items.split_at_mut(items.len() / 2);
    rayon::join(
        || self::items(left, cost, f),
        || self::items(right, cost, f),
    );
}

/// Runs `f` on every task of `tasks` in parallel (recursive halving; inline for one task).
pub(crate) fn each<T: Clone + Sync, F: Fn(T) + Sync>(tasks: &[T], f: &F) {
    match tasks {
        [] => {}
        [one] => f(one.clone()),
        _ => {
            let (left, right) = tasks.split_at(tasks.len() / 2);
            rayon::join(|| each(left, f), || each(right, f));
        }
    }
}

/// A buffer that parallel tasks write disjoint parts of where those parts are not ranges that
/// `split_at_mut` could hand out: the sequence ops' output, which keeps each example's steps
/// together while each task holds a range of the examples in their longest-first order.
pub(crate) struct Disjoint<'a> {
    ptr: *mut f32,
    len: usize,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: `Disjoint` only hands out slices through `slice`, whose callers promise that no two
// tasks touch the same elements; the buffer itself is borrowed mutably for `'a`.
unsafe impl Send for Disjoint<'_> {}
unsafe impl Sync for Disjoint<'_> {}

impl<'a> Disjoint<'a> {
    pub(crate) fn new(buf: &'a mut [f32]) -> Self {
        Self {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _buf: std::marker::PhantomData,
        }
    }

    /// `buf[at..at + len]`.
    ///
    /// # Safety
    /// While the slice lives, no other slice from this buffer may overlap it.
    ///
    /// # Panics
    /// When the range is not inside the buffer.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, at: usize, len: usize) -> &'a mut [f32] {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "Disjoint::slice: {at}..{at}+{len} outside a buffer of {}",
            self.len
        );
        // SAFETY: inside the buffer (checked above), which lives for `'a`; the caller promises
        // that no other live slice overlaps this one.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }

    /// `&buf[at..at + len]`, to read.
    ///
    /// # Safety
    /// While the slice lives, no mutable slice from this buffer may overlap it.
    ///
    /// # Panics
    /// When the range is not inside the buffer.
    pub(crate) unsafe fn read(&self, at: usize, len: usize) -> &'a [f32] {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "Disjoint::read: {at}..{at}+{len} outside a buffer of {}",
            self.len
        );
        // SAFETY: inside the buffer (checked above), which lives for `'a`; the caller promises
        // that no live mutable slice overlaps this one.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), len) }
    }
}

/// `&buf[rows·width]`: the rows `r` of a row-major buffer whose rows are `width` long.
pub(crate) fn at<'a>(buf: &'a [f32], r: &Range<usize>, width: usize) -> &'a [f32] {
    &buf[r.start * width..r.end * width]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_visited_once_with_its_own_slices() {
        for &(n, cost) in &[
            (0usize, 1usize),
            (1, 1),
            (3, 1 << 20),
            (1000, 100),
            (4097, 17),
        ] {
            let mut a = vec![0f32; n * 3];
            let mut b = vec![0f32; n];
            rows(n, cost, vec![(&mut a, 3), (&mut b, 1)], &|r, o| {
                assert_eq!(o[0].len(), r.len() * 3);
                assert_eq!(o[1].len(), r.len());
                for (k, row) in r.clone().enumerate() {
                    for j in 0..3 {
                        o[0][k * 3 + j] += (row * 3 + j) as f32;
                    }
                    o[1][k] += row as f32;
                }
            });
            assert!(a.iter().enumerate().all(|(i, &v)| v == i as f32));
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }

    /// With one thread in the pool the work is not cut (a cut would only hand it to that
    /// thread); with two it is, and the rows are the same either way.
    #[test]
    fn one_thread_runs_the_whole_range_in_one_call_and_two_split_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        for (threads, want_calls) in [(1usize, 1usize), (2, 4)] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a local pool");
            let calls = AtomicUsize::new(0);
            let n = 4 * GRAIN;
            let mut a = vec![0f32; n];
            pool.install(|| {
                rows(n, 1, vec![(&mut a, 1)], &|r, o| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    for (k, row) in r.enumerate() {
                        o[0][k] = row as f32;
                    }
                })
            });
            assert_eq!(
                calls.load(Ordering::Relaxed),
                want_calls,
                "{threads} threads"
            );
            assert!(a.iter().enumerate().all(|(i, &v)| v == i as f32));
            let mut v = vec![0u32; n];
            calls.store(0, Ordering::Relaxed);
            pool.install(|| {
                items(&mut v, &|_| 1, &|chunk| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    chunk.iter_mut().for_each(|x| *x += 1);
                })
            });
            assert_eq!(
                calls.load(Ordering::Relaxed),
                want_calls,
                "{threads} threads"
            );
            assert!(v.iter().all(|&x| x == 1));
        }
    }

    #[test]
    fn every_item_is_visited_once() {
        for &(n, cost) in &[(0usize, 1usize), (1, 1 << 20), (7, 1 << 20), (1000, 100)] {
            let mut v: Vec<(usize, u32)> = (0..n).map(|i| (i, 0)).collect();
            items(&mut v, &|_| cost, &|chunk| {
                for (_, seen) in chunk.iter_mut() {
                    *seen += 1;
                }
            });
            assert!(v
                .iter()
                .enumerate()
                .all(|(i, &(j, seen))| i == j && seen == 1));
        }
    }
}
