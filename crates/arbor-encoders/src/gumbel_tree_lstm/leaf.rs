//! How Gumbel Tree-LSTM turns each word into a leaf state `(h, c)`: an affine map, a
//! left-to-right LSTM, or a bidirectional one.

use arbor_cells::ArborBackend;
use arbor_cells::{LstmCell, LstmState};
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::TensorData;

/// How Gumbel Tree-LSTM turns each word into a leaf state `(h, c)`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum LeafKind {
    /// One affine map `x → [h; c]` per word (eq. 6): leaves see only their own word.
    Affine,
    /// A left-to-right LSTM over the words (eq. 9), keeping both `h` and `c` at every
    /// position: leaf `i` sees words `0..=i`. The better variant in the paper.
    #[default]
    Lstm,
    /// A left-to-right and a right-to-left LSTM over the words, each `D/2` wide (`D` even); leaf
    /// `i` is `h = [h→_i; h←_i]`, `c = [c→_i; c←_i]`, where the right-to-left LSTM starts at
    /// each sentence's own last word (the release's bidirectional leaf RNN).
    BiLstm,
}

arbor_cells::value_enum_names!(LeafKind, "leaf kind");

/// The two LSTM cells of the bidirectional leaf ([`LeafKind::BiLstm`]), each `D/2` wide.
#[derive(Module, Debug)]
pub struct BiLstmLeaf<B: Backend> {
    /// The left-to-right cell (gate order `i, f, g, o`, see [`LstmCell`]).
    pub forward_cell: LstmCell<B>,
    /// The right-to-left cell, run over each sentence reversed within its own length.
    pub backward_cell: LstmCell<B>,
}

/// The leaf transformation of a [`GumbelTreeLstm`](super::GumbelTreeLstm).
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Leaf<B: Backend> {
    /// `x → [h; c]`: a `Linear(d_input, 2D)` whose output is split into `h` and `c`.
    Affine(Linear<B>),
    /// A left-to-right LSTM cell (gate order `i, f, g, o`, see [`LstmCell`]).
    Lstm(LstmCell<B>),
    /// A left-to-right and a right-to-left LSTM cell, `D/2` wide each.
    BiLstm(BiLstmLeaf<B>),
}

/// Every step's state of `cell` run left to right from zeros over `x`.
///
/// # Shapes
/// - `x`: `[batch, n, d_input]`
/// - output `h`, `c`: `[batch, n, H]`
fn run_leaf_cell<B: ArborBackend>(cell: &LstmCell<B>, x: Tensor<B, 3>) -> LstmState<B, 3> {
    // The whole sequence as one op (the weights packed once, one backward node); no lengths:
    // the padding runs too, as the reference's leaf LSTM does, and the encoder ignores it.
    cell.sequence_states(x, None, &[])
}

/// Reverses every sentence within its own length, leaving the padding where it is: position
/// `j < len` takes position `len − 1 − j`, position `j ≥ len` stays. The map is its own inverse.
///
/// # Shapes
/// - `x`: `[batch, n, d]`, `lengths[b] ≤ n`
/// - output: `[batch, n, d]`
fn reverse_within_lengths<B: ArborBackend>(x: Tensor<B, 3>, lengths: &[usize]) -> Tensor<B, 3> {
    let [batch, n, d] = x.dims();
    let rows: Vec<i64> = (0..batch)
        .flat_map(|b| {
            let len = lengths.get(b).copied().unwrap_or(n).min(n);
            (0..n).map(move |j| (b * n + if j < len { len - 1 - j } else { j }) as i64)
        })
        .collect();
    let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [batch * n]), &x.device());
    x.reshape([batch * n, d])
        .select(0, rows)
        .reshape([batch, n, d])
}

impl<B: ArborBackend> Leaf<B> {
    /// The leaf state of every position.
    ///
    /// Real leaves never see padding (which is at the end): an affine leaf sees its word, a
    /// leaf-LSTM leaf `i` words `0..=i`, and a bidirectional leaf `i` words `0..=i` (left to
    /// right) and `i..len` (right to left, from the sentence's own last word). Leaves at padded
    /// positions hold values that the layers never let reach a real node.
    ///
    /// # Shapes
    /// - `x`: `[batch, n, d_input]`
    /// - `lengths`: `batch` entries `≤ n` (read by the bidirectional leaf only)
    /// - output `h`, `c`: `[batch, n, D]`
    pub fn forward(&self, x: Tensor<B, 3>, lengths: &[usize]) -> LstmState<B, 3> {
        match self {
            Leaf::Affine(linear) => LstmState::split(arbor_cells::linear_rows(linear, x)),
            Leaf::Lstm(cell) => run_leaf_cell(cell, x),
            Leaf::BiLstm(cells) => {
                let fw = run_leaf_cell(&cells.forward_cell, x.clone());
                let bw = run_leaf_cell(&cells.backward_cell, reverse_within_lengths(x, lengths));
                LstmState::new(
                    Tensor::cat(vec![fw.h, reverse_within_lengths(bw.h, lengths)], 2),
                    Tensor::cat(vec![fw.c, reverse_within_lengths(bw.c, lengths)], 2),
                )
            }
        }
    }
}
