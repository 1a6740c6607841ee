//! Fixtures shared by this crate's integration tests.

use arbor_data::tree::Transition;
use arbor_tasks::ClassifyData;

/// `n` sentences of 2 to `max_len` tokens (ids 2..=5, drawn by an LCG from `seed`), labelled by
/// whether token 2 occurs, with left-branching gold transitions (for SPINN).
pub fn sentences(n: usize, max_len: usize, seed: u64) -> ClassifyData {
    let mut s = seed;
    let mut next = |m: u64| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) % m
    };
    let mut d = ClassifyData::default();
    let mut transitions = Vec::new();
    for _ in 0..n {
        let len = 2 + next(max_len as u64 - 1) as usize;
        let sent: Vec<u32> = (0..len).map(|_| 2 + next(4) as u32).collect();
        d.labels.push(usize::from(sent.contains(&2)));
        d.sentences.push(sent);
        let mut t = vec![Transition::Shift];
        for _ in 1..len {
            t.extend([Transition::Shift, Transition::Reduce]);
        }
        transitions.push(t);
    }
    d.transitions = Some(transitions);
    d
}
