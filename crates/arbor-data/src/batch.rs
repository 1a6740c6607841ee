//! Burn-free batching: length-bucketed index batches, padded id matrices with lengths and masks,
//! and transition sequences padded at the end with no-op SKIP steps.
//!
//! All matrices are row-major `[batch, time]` `Vec`s; model crates turn them into tensors.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::tree::Transition;

/// How [`make_batches`] groups examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most examples per batch (≥ 1).
    pub batch_size: usize,
    /// Optional cap on padded tokens per batch: `batch.len() × longest ≤ max_tokens`. An example
    /// longer than the cap gets a batch of its own.
    pub max_tokens: Option<usize>,
    /// Group examples of similar length (sort by length before cutting batches).
    pub bucket: bool,
    /// Shuffle examples before bucketing (so equal lengths mix) and shuffle the batch order.
    pub shuffle: bool,
    /// Seed of the shuffles; combined with the epoch number.
    pub seed: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            batch_size: 32,
            max_tokens: None,
            bucket: true,
            shuffle: true,
            seed: 0,
        }
    }
}

/// Splits example indices `0..lengths.len()` into batches.
///
/// With `shuffle`, indices are shuffled with a generator seeded from `(seed, epoch)`; with
/// `bucket`, they are then stably sorted by length; batches are cut greedily in that order
/// (respecting `batch_size` and `max_tokens`), and with `shuffle` the batch order is shuffled
/// too. Deterministic for a given `(lengths, config, epoch)`. Every index appears exactly once.
pub fn make_batches(lengths: &[usize], config: &BatchConfig, epoch: u64) -> Vec<Vec<usize>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        config.seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    if config.shuffle {
        order.shuffle(&mut rng);
    }
    if config.bucket {
        order.sort_by_key(|&i| lengths[i]);
    }
    let size = config.batch_size.max(1);
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut cur_max = 0usize;
    for i in order {
        let len = lengths[i];
        let new_max = cur_max.max(len);
        let fits_tokens = config
            .max_tokens
            .is_none_or(|m| new_max * (cur.len() + 1) <= m);
        if !cur.is_empty() && (cur.len() >= size || !fits_tokens) {
            batches.push(std::mem::take(&mut cur));
            cur_max = 0;
        }
        cur_max = cur_max.max(len);
        cur.push(i);
    }
    if !cur.is_empty() {
        batches.push(cur);
    }
    if config.shuffle {
        batches.shuffle(&mut rng);
    }
    batches
}

/// A padded batch of id sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddedIds {
    /// `[batch, max_len]` row-major ids, padded with the pad id at the end of each row.
    pub ids: Vec<u32>,
    /// `[batch, max_len]` row-major: `true` for real tokens, `false` for padding.
    pub mask: Vec<bool>,
    /// Real length of each row.
    pub lengths: Vec<usize>,
    /// Number of rows.
    pub batch: usize,
    /// Row width (the longest length; 0 for an empty batch).
    pub max_len: usize,
}

impl PaddedIds {
    /// Row `b` of the id matrix.
    pub fn row(&self, b: usize) -> &[u32] {
        &self.ids[b * self.max_len..(b + 1) * self.max_len]
    }
}

/// Pads sequences at the end with `pad` to the longest length.
pub fn pad_ids<S: AsRef<[u32]>>(seqs: &[S], pad: u32) -> PaddedIds {
    let lengths: Vec<usize> = seqs.iter().map(|s| s.as_ref().len()).collect();
    let max_len = lengths.iter().copied().max().unwrap_or(0);
    let mut ids = Vec::with_capacity(seqs.len() * max_len);
    let mut mask = Vec::with_capacity(seqs.len() * max_len);
    for s in seqs {
        let s = s.as_ref();
        ids.extend_from_slice(s);
        ids.extend(std::iter::repeat_n(pad, max_len - s.len()));
        mask.extend(std::iter::repeat_n(true, s.len()));
        mask.extend(std::iter::repeat_n(false, max_len - s.len()));
    }
    PaddedIds {
        ids,
        mask,
        lengths,
        batch: seqs.len(),
        max_len,
    }
}

/// Selects `indices` of `seqs` and pads them: the usual way to materialise a batch from
/// [`make_batches`].
pub fn gather_padded<S: AsRef<[u32]>>(seqs: &[S], indices: &[usize], pad: u32) -> PaddedIds {
    let picked: Vec<&[u32]> = indices.iter().map(|&i| seqs[i].as_ref()).collect();
    pad_ids(&picked, pad)
}

/// A batch of transition sequences padded at the end with SKIP.
///
/// Unlike the original SPINN code, which left-padded with SHIFTs of padding tokens, SKIP steps
/// neither read nor write, so a sentence gives the same result alone or in any batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddedTransitions {
    /// `[batch, max_steps]` row-major transitions.
    pub transitions: Vec<Transition>,
    /// The same as ids (SHIFT 0, REDUCE 1, SKIP 2).
    pub ids: Vec<u8>,
    /// Real number of steps of each row (`2n − 1` for `n` words).
    pub steps: Vec<usize>,
    /// Number of rows.
    pub batch: usize,
    /// Row width.
    pub max_steps: usize,
}

impl PaddedTransitions {
    /// Transition of row `b` at step `t`.
    pub fn at(&self, b: usize, t: usize) -> Transition {
        self.transitions[b * self.max_steps + t]
    }
}

/// Pads transition sequences at the end with SKIP to the longest.
pub fn pad_transitions<S: AsRef<[Transition]>>(seqs: &[S]) -> PaddedTransitions {
    let steps: Vec<usize> = seqs.iter().map(|s| s.as_ref().len()).collect();
    let max_steps = steps.iter().copied().max().unwrap_or(0);
    let mut transitions = Vec::with_capacity(seqs.len() * max_steps);
    for s in seqs {
        let s = s.as_ref();
        transitions.extend_from_slice(s);
        transitions.extend(std::iter::repeat_n(Transition::Skip, max_steps - s.len()));
    }
    let ids = transitions.iter().map(|t| t.id()).collect();
    PaddedTransitions {
        transitions,
        ids,
        steps,
        batch: seqs.len(),
        max_steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{validate_transitions, BinaryTree};

    #[test]
    fn padding() {
        let p = pad_ids(&[vec![5u32, 6, 7], vec![8]], 0);
        assert_eq!((p.batch, p.max_len), (2, 3));
        assert_eq!(p.ids, vec![5, 6, 7, 8, 0, 0]);
        assert_eq!(p.mask, vec![true, true, true, true, false, false]);
        assert_eq!(p.lengths, vec![3, 1]);
        assert_eq!(p.row(1), [8, 0, 0]);
        let g = gather_padded(&[vec![1u32], vec![2, 3]], &[1, 0], 9);
        assert_eq!(g.ids, vec![2, 3, 1, 9]);
        assert_eq!(pad_ids::<Vec<u32>>(&[], 0).max_len, 0);
    }

    #[test]
    fn skip_padding_at_the_end() {
        let a = BinaryTree::right_branching(3).unwrap().to_transitions();
        let b = BinaryTree::right_branching(1).unwrap().to_transitions();
        let p = pad_transitions(&[a, b]);
        assert_eq!(p.max_steps, 5);
        assert_eq!(p.steps, vec![5, 1]);
        assert_eq!(p.ids, vec![0, 0, 0, 1, 1, 0, 2, 2, 2, 2]);
        assert_eq!(p.at(1, 0), Transition::Shift);
        assert_eq!(validate_transitions(&p.transitions[5..]), Ok(1));
    }

    #[test]
    fn bucketing() {
        let lengths = [5, 1, 9, 3, 5, 2, 8, 1, 7, 4];
        let cfg = BatchConfig {
            batch_size: 3,
            ..Default::default()
        };
        let b = make_batches(&lengths, &cfg, 0);
        assert_eq!(b, make_batches(&lengths, &cfg, 0));
        assert_ne!(b, make_batches(&lengths, &cfg, 1));
        let mut all: Vec<usize> = b.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(b.iter().all(|x| x.len() <= 3));
        assert_eq!(b.len(), 4);
        // Bucketed: each batch's lengths are a contiguous block of the sorted lengths.
        let mut sorted_batches: Vec<Vec<usize>> = b
            .iter()
            .map(|x| x.iter().map(|&i| lengths[i]).collect())
            .collect();
        sorted_batches.iter_mut().for_each(|x| x.sort());
        sorted_batches.sort();
        let flat: Vec<usize> = sorted_batches.concat();
        let mut sorted = lengths.to_vec();
        sorted.sort();
        assert_eq!(flat, sorted);
        // Token cap: longest × count ≤ 10 (a 12-long example alone).
        let cfg = BatchConfig {
            batch_size: 100,
            max_tokens: Some(10),
            shuffle: false,
            ..cfg
        };
        let b = make_batches(&[2, 2, 2, 2, 2, 2, 12, 3, 3], &cfg, 0);
        assert_eq!(b, vec![vec![0, 1, 2, 3, 4], vec![5, 7, 8], vec![6]]);
        let cfg = BatchConfig {
            batch_size: 2,
            bucket: false,
            shuffle: false,
            ..cfg
        };
        assert_eq!(make_batches(&[3, 1, 2], &cfg, 0), vec![vec![0, 1], vec![2]]);
    }
}
