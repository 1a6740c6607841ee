//! The configuration of a [`GumbelTreeLstm`] and the settings of a built one that hold no
//! weights.

use arbor_cells::ArborBackend;
use arbor_cells::{BinaryTreeLstmConfig, LstmCellConfig};
use burn::module::Initializer;
use burn::nn::LinearConfig;
use burn::prelude::*;

use super::{BiLstmLeaf, GumbelTreeLstm, Leaf, LeafKind};

/// Configuration of a [`GumbelTreeLstm`].
#[derive(Config, Debug)]
pub struct GumbelTreeLstmConfig {
    /// Width of the word embeddings.
    pub d_input: usize,
    /// Width `D` of every node's `h` and `c`.
    pub d_hidden: usize,
    /// How words become leaves.
    #[config(default = "LeafKind::Lstm")]
    pub leaf: LeafKind,
    /// Gumbel-softmax temperature τ used in training mode.
    #[config(default = 1.0)]
    pub tau: f64,
    /// Standard deviation of the normal initialisation of the query vector `q` (the released
    /// code uses 0.01).
    #[config(default = 0.01)]
    pub query_std: f64,
    /// Intra-attention over the tree's nodes (the release's `intra_attention`): the sentence
    /// vector is an attention-weighted mix of the `h` of every leaf and every parent instead of
    /// the root `h` (docs/models.md §2). `None` (configurations written before this option) and
    /// `Some(false)`: the root `h`.
    pub intra_attention: Option<bool>,
}

/// The settings of a built [`GumbelTreeLstm`] that hold no weights.
///
/// They are one field of the module so that a new setting never changes the layout of the
/// module's record (a constant field records as one empty entry whatever its type), and
/// checkpoints written before the setting existed still load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GumbelSettings {
    /// Gumbel-softmax temperature τ.
    pub tau: f64,
    /// Whether the sentence vector is the intra-attention mix of the tree's nodes (else the
    /// root `h`).
    pub intra_attention: bool,
}

impl GumbelTreeLstmConfig {
    /// Checks the settings: positive widths (an even `d_hidden` for the bidirectional leaf,
    /// whose directions are `d_hidden / 2` wide each), a positive temperature and query scale.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, positive};
        at_least_one("d_input", self.d_input)?;
        at_least_one("d_hidden", self.d_hidden)?;
        if self.leaf == LeafKind::BiLstm && !self.d_hidden.is_multiple_of(2) {
            return Err(arbor_cells::ConfigError::new(
                "d_hidden",
                self.d_hidden,
                "must be even for the bi-lstm leaf (each direction is d_hidden / 2 wide)",
            ));
        }
        positive("tau", self.tau)?;
        positive("query_std", self.query_std)
    }

    /// Whether the sentence vector is the intra-attention mix of the tree's nodes.
    pub fn uses_intra_attention(&self) -> bool {
        self.intra_attention.unwrap_or(false)
    }

    /// Builds the encoder on `device`.
    ///
    /// # Panics
    /// If `d_hidden` or `d_input` is 0, `d_hidden` is odd with the bidirectional leaf, or `tau`
    /// is not positive.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> GumbelTreeLstm<B> {
        assert!(
            self.d_input > 0 && self.d_hidden > 0,
            "widths must be positive"
        );
        assert!(self.tau > 0.0, "the temperature must be positive");
        let d = self.d_hidden;
        // The reference's leaf LSTMs start their forget gates at 1 (docs/init.md).
        let leaf_cell = |width: usize| {
            LstmCellConfig::new(self.d_input, width)
                .with_forget_bias(Some(1.0))
                .init(device)
        };
        let leaf = match self.leaf {
            LeafKind::Affine => Leaf::Affine(LinearConfig::new(self.d_input, 2 * d).init(device)),
            LeafKind::Lstm => Leaf::Lstm(leaf_cell(d)),
            LeafKind::BiLstm => {
                assert!(
                    d.is_multiple_of(2),
                    "the bi-lstm leaf needs an even d_hidden, got {d}"
                );
                Leaf::BiLstm(BiLstmLeaf {
                    forward_cell: leaf_cell(d / 2),
                    backward_cell: leaf_cell(d / 2),
                })
            }
        };
        let query = Initializer::Normal {
            mean: 0.0,
            std: self.query_std,
        }
        .init([d], device);
        GumbelTreeLstm {
            leaf,
            composition: BinaryTreeLstmConfig::new(d).init(device),
            query,
            d_hidden: d,
            settings: GumbelSettings {
                tau: self.tau,
                intra_attention: self.uses_intra_attention(),
            },
        }
    }
}
