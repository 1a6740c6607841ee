//! SHIFT/REDUCE(/SKIP) transitions: ids, rendering and validation.

use crate::error::TreeError;

/// One step of a shift-reduce linearisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Push the next buffer word onto the stack (id 0).
    Shift,
    /// Pop the top two stack items (the top is the right child) and push their parent (id 1).
    Reduce,
    /// No-op padding step at the end of a sequence: neither reads nor writes (id 2).
    Skip,
}

impl Transition {
    /// Integer id: SHIFT 0, REDUCE 1, SKIP 2.
    pub fn id(self) -> u8 {
        match self {
            Transition::Shift => 0,
            Transition::Reduce => 1,
            Transition::Skip => 2,
        }
    }

    /// The transition with id 0, 1 or 2.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(Transition::Shift),
            1 => Some(Transition::Reduce),
            2 => Some(Transition::Skip),
            _ => None,
        }
    }

    /// One-letter form: `S`, `R` or `_`.
    pub fn letter(self) -> char {
        match self {
            Transition::Shift => 'S',
            Transition::Reduce => 'R',
            Transition::Skip => '_',
        }
    }
}

/// Renders transitions as `S S R ...`.
pub fn transitions_to_string(ts: &[Transition]) -> String {
    let mut s = String::with_capacity(ts.len() * 2);
    for (i, t) in ts.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push(t.letter());
    }
    s
}

/// Checks a transition sequence and returns the number of words it builds a tree over.
///
/// Valid means: a REDUCE always finds at least two stack items, the sequence ends with exactly
/// one item on the stack, it contains at least one SHIFT, and SKIPs only occur after the last
/// SHIFT/REDUCE (trailing padding). A valid unpadded sequence over `n` words has `2n − 1` steps.
pub fn validate_transitions(ts: &[Transition]) -> Result<usize, TreeError> {
    let mut depth = 0usize;
    let mut words = 0usize;
    let mut seen_skip = false;
    for (i, t) in ts.iter().enumerate() {
        match t {
            Transition::Skip => seen_skip = true,
            _ if seen_skip => {
                return Err(TreeError::Transitions(format!(
                    "step {i}: {t:?} after SKIP padding"
                )))
            }
            Transition::Shift => {
                depth += 1;
                words += 1;
            }
            Transition::Reduce => {
                if depth < 2 {
                    return Err(TreeError::Transitions(format!(
                        "step {i}: REDUCE with {depth} item(s) on the stack"
                    )));
                }
                depth -= 1;
            }
        }
    }
    if words == 0 {
        return Err(TreeError::Transitions("no SHIFT".into()));
    }
    if depth != 1 {
        return Err(TreeError::Transitions(format!(
            "{depth} items left on the stack at the end"
        )));
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use crate::tree::*;

    use Transition::{Reduce as R, Shift as S};

    #[test]
    fn transition_validation() {
        assert_eq!(validate_transitions(&[S, S, R]), Ok(2));
        assert_eq!(
            validate_transitions(&[S, S, R, Transition::Skip, Transition::Skip]),
            Ok(2)
        );
        assert!(validate_transitions(&[S, R]).is_err());
        assert!(validate_transitions(&[S, S]).is_err());
        assert!(validate_transitions(&[]).is_err());
        assert!(validate_transitions(&[S, Transition::Skip, S, R]).is_err());
        assert!(BinaryTree::from_transitions(&[S, R, S]).is_err());
    }
}
