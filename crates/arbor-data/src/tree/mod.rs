//! Trees: binary trees over token positions, labelled n-ary treebank trees, bracketed strings,
//! SHIFT/REDUCE transitions, spans, treebank preprocessing and rendering.
//!
//! # Conventions
//!
//! * **Spans** are half-open: [`Span`] `{ start, end }` covers the words `start..end` (start
//!   inclusive, end exclusive), so a sentence of `n` words has the whole-sentence span
//!   `(0, n)` and a single word `i` would be `(i, i + 1)`.
//! * **Transitions**: each word is a SHIFT, each binary node (its closing bracket) a REDUCE, in
//!   post-order; `n` words give `2n − 1` transitions. SKIP is a no-op used only as padding at the
//!   end of a sequence.
//! * **Unary brackets**: in unlabelled input, `( word )` and `( ( a b ) )` are the same node as
//!   their only child. Labelled unaries such as `(NP (NN x))` are kept until
//!   [`Tree::collapse_unary`].

mod binary;
mod labelled;
mod parser;
mod pieces;
mod preprocess;
mod render;
mod span;
mod transitions;

pub use binary::{Binarization, BinaryTree};
pub use labelled::Tree;
pub use parser::{BracketStyle, MAX_DEPTH};
pub use pieces::{spans_to_pieces, PieceBranching};
pub use preprocess::{is_punctuation_tag, DigitNorm, TextNorm, TreePrep, PUNCTUATION_TAGS};
pub use span::Span;
pub use transitions::{transitions_to_string, validate_transitions, Transition};
