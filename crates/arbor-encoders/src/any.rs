//! Every encoder behind one configuration and one module type.
//!
//! To add an encoder: a variant in [`EncoderKind`] (with its name in [`EncoderKind::name`] and
//! [`EncoderKind::ALL`]), a variant in [`Encoder`], an arm in [`EncoderConfig::init`], and a
//! line in the `dispatch!` macro.

use std::fmt;
use std::str::FromStr;

use arbor_cells::CellKind;
use burn::prelude::*;

use crate::Pooling;
use crate::{
    Decisions, EncoderInput, EncoderOutput, GumbelTreeLstm, GumbelTreeLstmConfig, LeafKind,
    LstmEncoder, LstmEncoderConfig, R2d2, R2d2Config, SentenceEncoder, Spinn, SpinnConfig,
    SpinnVariant,
};
use crate::{TransformerPooling, TransformerSentenceEncoder, TransformerSentenceEncoderConfig};
use arbor_blocks::TransformerEncoderConfig;

/// The sentence encoders arbor provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EncoderKind {
    /// [`GumbelTreeLstm`].
    Gumbel,
    /// [`LstmEncoder`] with LSTM cells.
    Lstm,
    /// [`LstmEncoder`] with ON-LSTM cells.
    OnLstm,
    /// [`LstmEncoder`] with FastTrees cells.
    #[serde(rename = "fasttrees")]
    FastTrees,
    /// [`LstmEncoder`] with Faster FastTrees cells.
    #[serde(rename = "faster-fasttrees")]
    FasterFastTrees,
    /// [`LstmEncoder`] with Conv FastTrees cells.
    #[serde(rename = "conv-fasttrees")]
    ConvFastTrees,
    /// [`R2d2`]: pruned differentiable CKY with a recursive Transformer.
    R2d2,
    /// [`Spinn`] without tracking (SPINN-PI-NT): follows given trees.
    SpinnPiNt,
    /// [`Spinn`] with a tracking LSTM (SPINN-PI): follows given trees.
    SpinnPi,
    /// Full [`Spinn`]: tracking and a transition classifier; parses on its own at evaluation.
    Spinn,
    /// [`TransformerSentenceEncoder`] without gates.
    Transformer,
    /// [`TransformerSentenceEncoder`] with a FastTrees gate after self-attention in every layer.
    #[serde(rename = "transformer-fasttrees")]
    TransformerFastTrees,
}

impl EncoderKind {
    /// Every kind, in a fixed order.
    pub const ALL: [EncoderKind; 12] = [
        EncoderKind::Gumbel,
        EncoderKind::Lstm,
        EncoderKind::OnLstm,
        EncoderKind::FastTrees,
        EncoderKind::FasterFastTrees,
        EncoderKind::ConvFastTrees,
        EncoderKind::R2d2,
        EncoderKind::SpinnPiNt,
        EncoderKind::SpinnPi,
        EncoderKind::Spinn,
        EncoderKind::Transformer,
        EncoderKind::TransformerFastTrees,
    ];

    /// The kind's command-line (and serde) name: `gumbel`, `lstm`, `on-lstm`, `fasttrees`,
    /// `faster-fasttrees`, `conv-fasttrees`, `r2d2`, `spinn-pi-nt`, `spinn-pi`, `spinn`,
    /// `transformer`, `transformer-fasttrees`.
    pub fn name(self) -> &'static str {
        match self {
            EncoderKind::Gumbel => "gumbel",
            EncoderKind::R2d2 => "r2d2",
            EncoderKind::SpinnPiNt | EncoderKind::SpinnPi | EncoderKind::Spinn => {
                self.spinn_variant().map_or("spinn", SpinnVariant::name)
            }
            EncoderKind::Transformer => "transformer",
            EncoderKind::TransformerFastTrees => "transformer-fasttrees",
            other => other.cell().map_or("gumbel", CellKind::name),
        }
    }

    /// The recurrent cell of the recurrent kinds.
    pub fn cell(self) -> Option<CellKind> {
        match self {
            EncoderKind::Gumbel
            | EncoderKind::R2d2
            | EncoderKind::SpinnPiNt
            | EncoderKind::SpinnPi
            | EncoderKind::Spinn
            | EncoderKind::Transformer
            | EncoderKind::TransformerFastTrees => None,
            EncoderKind::Lstm => Some(CellKind::Lstm),
            EncoderKind::OnLstm => Some(CellKind::OnLstm),
            EncoderKind::FastTrees => Some(CellKind::FastTrees),
            EncoderKind::FasterFastTrees => Some(CellKind::FasterFastTrees),
            EncoderKind::ConvFastTrees => Some(CellKind::ConvFastTrees),
        }
    }

    /// Whether the encoder induces a tree of its own and returns it in
    /// [`EncoderOutput::trees`] (the cumax cells and the gated Transformer: in evaluation mode,
    /// from syntactic distances).
    pub fn induces_trees(self) -> bool {
        !matches!(
            self,
            EncoderKind::Lstm
                | EncoderKind::SpinnPiNt
                | EncoderKind::SpinnPi
                | EncoderKind::Transformer
        )
    }

    /// The SPINN variant of the SPINN kinds.
    pub fn spinn_variant(self) -> Option<SpinnVariant> {
        match self {
            EncoderKind::SpinnPiNt => Some(SpinnVariant::PiNt),
            EncoderKind::SpinnPi => Some(SpinnVariant::Pi),
            EncoderKind::Spinn => Some(SpinnVariant::Full),
            _ => None,
        }
    }

    /// Whether the encoder needs gold transitions in [`EncoderInput::transitions`] (the SPINN
    /// kinds: always in training; PI-NT and PI also at evaluation).
    pub fn needs_transitions(self) -> bool {
        self.spinn_variant().is_some()
    }
}

impl fmt::Display for EncoderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EncoderKind {
    type Err = String;

    /// Parses a name as printed by [`EncoderKind::name`]; case and `_`/`-` are not significant.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        EncoderKind::ALL
            .into_iter()
            .find(|k| k.name() == key)
            .ok_or_else(|| {
                let names: Vec<_> = EncoderKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown encoder `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Configuration of any [`Encoder`]. Fields a kind does not use are ignored by it.
#[derive(Config, Debug)]
pub struct EncoderConfig {
    /// Which encoder.
    pub kind: EncoderKind,
    /// Width of the word embeddings.
    pub d_input: usize,
    /// Hidden width (the sentence vector's width for every current kind).
    pub d_hidden: usize,
    /// Gumbel Tree-LSTM: how words become leaves.
    #[config(default = "LeafKind::Lstm")]
    pub leaf: LeafKind,
    /// LSTM and Transformer: number of stacked layers.
    #[config(default = 1)]
    pub n_layers: usize,
    /// LSTM: dropout between stacked layers; Transformer: dropout on the input and inside
    /// every layer (attention scores, residual branches, feed-forward network). (Gumbel Tree-LSTM has none inside the encoder;
    /// as in the released code, dropout on embeddings and classifier belongs to the task
    /// model.)
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Gumbel Tree-LSTM: Gumbel-softmax temperature τ.
    #[config(default = 1.0)]
    pub tau: f64,
    /// ON-LSTM/FastTrees: neurons per master-gate chunk (0: the largest divisor of `d_hidden`
    /// that is at most 10).
    #[config(default = 0)]
    pub chunk_size: usize,
    /// R2D2: pruning window `m`.
    #[config(default = 4)]
    pub window: usize,
    /// LSTM/cumax encoders: how the sentence vector is pooled from the top layer.
    #[config(default = "Pooling::Last")]
    pub pooling: Pooling,
    /// SPINN-PI and full SPINN: width of the tracking LSTM (0: `d_hidden`).
    #[config(default = 0)]
    pub tracking_dim: usize,
    /// Full SPINN: weight `α` of the transition loss.
    #[config(default = 1.0)]
    pub transition_weight: f64,
    /// Transformer and R2D2's composition function: attention heads (0: the largest divisor
    /// of `d_hidden` that is at most 4).
    #[config(default = 0)]
    pub n_heads: usize,
    /// Transformer: inner width of the feed-forward networks (0: `4 · d_hidden`).
    #[config(default = 0)]
    pub d_ff: usize,
    /// Transformer: pooling of the top layer's outputs over real tokens.
    #[config(default = "TransformerPooling::Mean")]
    pub transformer_pooling: TransformerPooling,
}

impl EncoderConfig {
    /// Builds the configured encoder on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Encoder<B> {
        match self.kind {
            EncoderKind::Gumbel => Encoder::Gumbel(
                GumbelTreeLstmConfig::new(self.d_input, self.d_hidden)
                    .with_leaf(self.leaf)
                    .with_tau(self.tau)
                    .init(device),
            ),
            EncoderKind::R2d2 => Encoder::R2d2(
                R2d2Config::new(self.d_input, self.d_hidden)
                    .with_window(self.window)
                    .with_n_layers(self.n_layers)
                    .with_n_heads(self.resolved_heads())
                    .with_tau(self.tau)
                    .init(device),
            ),
            EncoderKind::SpinnPiNt | EncoderKind::SpinnPi | EncoderKind::Spinn => Encoder::Spinn(
                SpinnConfig::new(self.d_input, self.d_hidden)
                    .with_variant(self.kind.spinn_variant().unwrap_or_default())
                    .with_d_tracking(self.tracking_dim)
                    .with_transition_weight(self.transition_weight)
                    .init(device),
            ),
            EncoderKind::Transformer | EncoderKind::TransformerFastTrees => {
                Encoder::Transformer(self.transformer().init(device))
            }
            other => Encoder::Lstm(
                LstmEncoderConfig::new(self.d_input, self.d_hidden)
                    .with_n_layers(self.n_layers)
                    .with_dropout(self.dropout)
                    .with_cell(other.cell().unwrap_or(CellKind::Lstm))
                    .with_chunk_size(self.chunk_size)
                    .with_pooling(self.pooling)
                    .init(device),
            ),
        }
    }
}

impl EncoderConfig {
    /// The Transformer encoder this configuration describes (for the Transformer kinds):
    /// `n_layers` layers of width `d_hidden`, dropout `dropout`, sinusoidal positions, and for
    /// `transformer-fasttrees` position-wise FastTrees gates with chunks of `chunk_size`.
    pub fn transformer(&self) -> TransformerSentenceEncoderConfig {
        let d = self.d_hidden;
        let n_heads = self.resolved_heads();
        let stack = TransformerEncoderConfig::new(self.d_input, d)
            .with_n_heads(n_heads)
            .with_d_ff(if self.d_ff == 0 { 4 * d } else { self.d_ff })
            .with_n_layers(self.n_layers)
            .with_dropout(self.dropout)
            .with_fasttrees(self.kind == EncoderKind::TransformerFastTrees)
            .with_chunk_size(match self.chunk_size {
                0 => crate::default_chunk_size(d),
                c => c,
            });
        TransformerSentenceEncoderConfig::new(stack).with_pooling(self.transformer_pooling)
    }

    /// The attention heads the Transformer kinds use: `n_heads`, or when it is 0 (or does not
    /// divide `d_hidden`) the largest divisor of `d_hidden` that is at most `max(n_heads, 4)`.
    pub fn resolved_heads(&self) -> usize {
        let d = self.d_hidden;
        if self.n_heads > 0 && d.is_multiple_of(self.n_heads) {
            return self.n_heads;
        }
        (1..=self.n_heads.max(4).min(d.max(1)))
            .rev()
            .find(|h| d.is_multiple_of(*h))
            .unwrap_or(1)
    }
}

/// Any of the sentence encoders, as one module type.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Encoder<B: Backend> {
    /// Gumbel Tree-LSTM.
    Gumbel(GumbelTreeLstm<B>),
    /// A recurrent stack (LSTM or a cumax cell).
    Lstm(LstmEncoder<B>),
    /// R2D2.
    R2d2(R2d2<B>),
    /// SPINN (any variant).
    Spinn(Spinn<B>),
    /// A Transformer encoder, with or without FastTrees gates.
    Transformer(TransformerSentenceEncoder<B>),
}

macro_rules! dispatch {
    ($self:ident, $enc:ident => $e:expr) => {
        match $self {
            Encoder::Gumbel($enc) => $e,
            Encoder::Lstm($enc) => $e,
            Encoder::R2d2($enc) => $e,
            Encoder::Spinn($enc) => $e,
            Encoder::Transformer($enc) => $e,
        }
    };
}

impl<B: Backend> Encoder<B> {
    /// Which encoder this is.
    pub fn kind(&self) -> EncoderKind {
        match self {
            Encoder::Gumbel(_) => EncoderKind::Gumbel,
            Encoder::R2d2(_) => EncoderKind::R2d2,
            Encoder::Lstm(e) => EncoderKind::ALL
                .into_iter()
                .find(|k| k.cell() == Some(e.cell()))
                .unwrap_or(EncoderKind::Lstm),
            Encoder::Spinn(s) => match s.variant() {
                SpinnVariant::PiNt => EncoderKind::SpinnPiNt,
                SpinnVariant::Pi => EncoderKind::SpinnPi,
                SpinnVariant::Full => EncoderKind::Spinn,
            },
            Encoder::Transformer(e) if e.stack.has_gates() => EncoderKind::TransformerFastTrees,
            Encoder::Transformer(_) => EncoderKind::Transformer,
        }
    }
}

impl<B: Backend> SentenceEncoder<B> for Encoder<B> {
    fn d_output(&self) -> usize {
        dispatch!(self, e => e.d_output())
    }

    fn encode(&self, input: EncoderInput<B>, decisions: Decisions<'_>) -> EncoderOutput<B> {
        dispatch!(self, e => e.encode(input, decisions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in EncoderKind::ALL {
            assert_eq!(kind.to_string().parse::<EncoderKind>(), Ok(kind));
            assert_eq!(kind.name().to_uppercase().parse::<EncoderKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
            assert_eq!(serde_json::from_str::<EncoderKind>(&json).unwrap(), kind);
        }
        assert_eq!("gumbel".parse(), Ok(EncoderKind::Gumbel));
        assert_eq!("lstm".parse(), Ok(EncoderKind::Lstm));
        let err = "spinn-x".parse::<EncoderKind>().unwrap_err();
        assert!(
            err.contains("spinn-x") && err.contains("gumbel, lstm, on-lstm"),
            "{err}"
        );
        for leaf in LeafKind::ALL {
            assert_eq!(leaf.to_string().parse::<LeafKind>(), Ok(leaf));
        }
        assert!("tree"
            .parse::<LeafKind>()
            .unwrap_err()
            .contains("affine, lstm"));
    }

    #[test]
    fn init_builds_every_kind_with_the_configured_width() {
        let device = Default::default();
        for kind in EncoderKind::ALL {
            for leaf in LeafKind::ALL {
                let config = EncoderConfig::new(kind, 3, 7)
                    .with_leaf(leaf)
                    .with_n_layers(2);
                let enc: Encoder<Flex> = config.init(&device);
                assert_eq!(enc.kind(), kind);
                assert_eq!(enc.d_output(), 7);
                let x = Tensor::<Flex, 3>::ones([2, 4, 3], &device);
                let out = enc.encode(EncoderInput::new(x, vec![4, 2]), Decisions::Argmax);
                assert_eq!(out.sentence.dims(), [2, 7]);
                assert_eq!(out.trees.is_some(), kind.induces_trees());
            }
        }
        let enc: Encoder<Flex> = EncoderConfig::new(EncoderKind::Gumbel, 3, 7).init(&device);
        let Encoder::Gumbel(g) = enc else {
            panic!("a Gumbel encoder")
        };
        assert!(
            matches!(g.leaf, crate::Leaf::Lstm(_)),
            "the leaf LSTM is the default"
        );
    }

    #[test]
    fn the_config_serialises_with_kebab_case_names() {
        let config = EncoderConfig::new(EncoderKind::Gumbel, 3, 7).with_leaf(LeafKind::Affine);
        let json = serde_json::to_string(&config).unwrap();
        assert!(
            json.contains("\"gumbel\"") && json.contains("\"affine\""),
            "{json}"
        );
        let back: EncoderConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(
            (back.kind, back.leaf, back.d_hidden),
            (config.kind, config.leaf, 7)
        );
    }
}
