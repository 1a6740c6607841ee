//! The host side of SPINN's thin stack (Bowman et al. 2016, §3.1; docs/models.md §3): the per-example
//! queue of row pointers, the validity rule, and checks of given transition sequences.
//!
//! The stack *contents* live on the device as one array of written rows (see
//! [`Spinn`](super::Spinn)); step `t` (1-based) writes row `t` of every example that SHIFTs or
//! REDUCEs. What an example's stack holds is only the list of row numbers in its
//! [`PointerQueue`]. This module is
//! pure bookkeeping, used by the encoder and by [`trace`], so the pointer arithmetic can be
//! tested on its own.

use arbor_data::tree::Transition;

use super::SpinnError;

/// One example's thin-stack bookkeeping: which rows are live on its stack (bottom first) and
/// how many words it has shifted from its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointerQueue {
    queue: Vec<usize>,
    shifted: usize,
    n_words: usize,
    steps: usize,
}

/// What one step reads, as row and word indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Row of the stack top (the *right* child of a REDUCE), if the stack has one item.
    pub top: Option<usize>,
    /// Row of the item under the top (the *left* child), if the stack has two items.
    pub second: Option<usize>,
    /// Word index of the buffer top, if the buffer is not empty.
    pub buffer: Option<usize>,
}

impl PointerQueue {
    /// An empty stack over a buffer of `n_words` words.
    pub fn new(n_words: usize) -> Self {
        Self {
            queue: Vec::with_capacity(n_words),
            shifted: 0,
            n_words,
            steps: 0,
        }
    }

    /// The live row pointers, bottom of the stack first.
    pub fn queue(&self) -> &[usize] {
        &self.queue
    }

    /// Number of items on the stack.
    pub fn stack_len(&self) -> usize {
        self.queue.len()
    }

    /// Number of words left in the buffer.
    pub fn buffer_len(&self) -> usize {
        self.n_words - self.shifted
    }

    /// Whether the sentence is complete: every word shifted and one item left (the root).
    pub fn is_done(&self) -> bool {
        self.shifted == self.n_words && self.queue.len() == 1
    }

    /// The rows and word the next step reads.
    pub fn reads(&self) -> Reads {
        let n = self.queue.len();
        Reads {
            top: n.checked_sub(1).map(|i| self.queue[i]),
            second: n.checked_sub(2).map(|i| self.queue[i]),
            buffer: (self.shifted < self.n_words).then_some(self.shifted),
        }
    }

    /// Whether `op` is legal now: SHIFT needs a non-empty buffer, REDUCE two stack items, SKIP
    /// a finished sentence.
    pub fn allows(&self, op: Transition) -> bool {
        match op {
            Transition::Shift => self.shifted < self.n_words,
            Transition::Reduce => self.queue.len() >= 2,
            Transition::Skip => self.is_done(),
        }
    }

    /// The validity rule of full SPINN at evaluation (docs/models.md §3): a finished sentence skips;
    /// with fewer than two stack items SHIFT is forced; with an empty buffer REDUCE is forced;
    /// otherwise the classifier's `wanted` SHIFT or REDUCE is taken.
    pub fn enforce(&self, wanted: Transition) -> Transition {
        if self.is_done() {
            Transition::Skip
        } else if self.queue.len() < 2 {
            Transition::Shift
        } else if self.shifted == self.n_words {
            Transition::Reduce
        } else if wanted == Transition::Skip {
            Transition::Shift
        } else {
            wanted
        }
    }

    /// Applies `op` as step `row` (1-based; the row the step writes): SHIFT pushes `row`, REDUCE
    /// pops two pointers and pushes `row`, SKIP does nothing.
    ///
    /// # Errors
    /// A message when `op` is not legal now (the queue is then unchanged).
    pub fn apply(&mut self, row: usize, op: Transition) -> Result<(), String> {
        if !self.allows(op) && op != Transition::Skip {
            return Err(match op {
                Transition::Shift => format!(
                    "SHIFT with an empty buffer (all {} words already shifted)",
                    self.n_words
                ),
                _ => format!("REDUCE with {} item(s) on the stack", self.queue.len()),
            });
        }
        match op {
            Transition::Shift => {
                self.queue.push(row);
                self.shifted += 1;
            }
            Transition::Reduce => {
                self.queue.truncate(self.queue.len() - 2);
                self.queue.push(row);
            }
            Transition::Skip => {
                if !self.is_done() {
                    return Err(format!(
                        "SKIP before the sentence is complete ({} of {} words shifted, {} \
                         item(s) on the stack)",
                        self.shifted,
                        self.n_words,
                        self.queue.len()
                    ));
                }
                return Ok(());
            }
        }
        self.steps += 1;
        Ok(())
    }
}

/// One line of a thin-stack trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// The step (1-based).
    pub t: usize,
    /// The transition taken.
    pub op: Transition,
    /// The row written (`t`), or `None` for SKIP.
    pub written: Option<usize>,
    /// What the written row holds: `Some(w)` for the shifted word `w`, `None` for a reduction
    /// (or SKIP).
    pub word: Option<usize>,
    /// The live pointer queue after the step, bottom first.
    pub queue: Vec<usize>,
}

/// The thin-stack trace of one sentence's transitions (the same bookkeeping the encoder uses).
///
/// ```
/// use arbor_data::tree::Transition::{Reduce as R, Shift as S};
/// let trace = arbor_encoders::spinn::trace(&[S, S, S, R, R]).unwrap();
/// assert_eq!(trace[3].queue, vec![1, 4]); // after t=4: (sat down) written at row 4
/// assert_eq!(trace[4].queue, vec![5]);
/// ```
///
/// # Errors
/// [`SpinnError::Transitions`] if the sequence is malformed (see [`check_transitions`]).
pub fn trace(transitions: &[Transition]) -> Result<Vec<TraceStep>, SpinnError> {
    let n_words = transitions
        .iter()
        .filter(|t| **t == Transition::Shift)
        .count();
    check_transitions(0, n_words, transitions)?;
    let mut q = PointerQueue::new(n_words);
    let mut out = Vec::with_capacity(transitions.len());
    for (i, &op) in transitions.iter().enumerate() {
        let t = i + 1;
        let word = (op == Transition::Shift)
            .then(|| q.reads().buffer)
            .flatten();
        q.apply(t, op).map_err(|message| SpinnError::Transitions {
            sentence: 0,
            message: format!("step {t}: {message}"),
        })?;
        out.push(TraceStep {
            t,
            op,
            written: (op != Transition::Skip).then_some(t),
            word,
            queue: q.queue().to_vec(),
        });
    }
    Ok(out)
}

/// Checks the given transitions of sentence number `sentence` (used in error messages) with
/// `n_words` words: exactly `2·n_words − 1` SHIFT/REDUCE steps, optionally followed by SKIP
/// padding; REDUCE only with two stack items, SHIFT only from a non-empty buffer, one item left
/// at the end.
///
/// # Errors
/// [`SpinnError::Transitions`] naming the sentence, the step and the problem.
pub fn check_transitions(
    sentence: usize,
    n_words: usize,
    transitions: &[Transition],
) -> Result<(), SpinnError> {
    let err = |message: String| SpinnError::Transitions { sentence, message };
    if n_words == 0 {
        return Err(err("a sentence needs at least one word".into()));
    }
    let real = transitions
        .iter()
        .filter(|t| **t != Transition::Skip)
        .count();
    if real != 2 * n_words - 1 {
        return Err(err(format!(
            "{real} SHIFT/REDUCE steps for {n_words} word(s); expected {}",
            2 * n_words - 1
        )));
    }
    let mut q = PointerQueue::new(n_words);
    for (i, &op) in transitions.iter().enumerate() {
        q.apply(i + 1, op)
            .map_err(|m| err(format!("step {}: {m}", i + 1)))?;
    }
    if !q.is_done() {
        return Err(err(format!(
            "{} items left on the stack at the end; expected 1",
            q.stack_len()
        )));
    }
    Ok(())
}

/// Checks a batch's transitions against its lengths (one sequence per sentence) with
/// [`check_transitions`]; the apps call this before training.
///
/// # Errors
/// The first problem found, naming the sentence.
pub fn check_batch_transitions(
    lengths: &[usize],
    transitions: &[Vec<Transition>],
) -> Result<(), SpinnError> {
    if lengths.len() != transitions.len() {
        return Err(SpinnError::Count {
            sentences: lengths.len(),
            sequences: transitions.len(),
        });
    }
    for (i, (&n, ts)) in lengths.iter().zip(transitions).enumerate() {
        check_transitions(i, n, ts)?;
    }
    Ok(())
}

/// A valid sequence for `n_words` words that follows `given` wherever it is legal: the
/// validity rule replaces illegal steps, missing steps are filled in (SHIFT while words remain,
/// then REDUCE), and extra steps are dropped. A valid `given` comes back unchanged (without SKIP
/// padding). [`Spinn`](super::Spinn)'s infallible `encode` uses this on malformed input.
pub fn repair_transitions(n_words: usize, given: &[Transition]) -> Vec<Transition> {
    let n_words = n_words.max(1);
    let mut q = PointerQueue::new(n_words);
    let mut out = Vec::with_capacity(2 * n_words - 1);
    let mut given = given.iter().copied().filter(|t| *t != Transition::Skip);
    while !q.is_done() {
        let op = q.enforce(given.next().unwrap_or(Transition::Shift));
        let _ = q.apply(out.len() + 1, op);
        out.push(op);
    }
    out
}
