//! Every encoder behind one configuration enum and one module type.
//!
//! Each encoder has its own configuration ([`GumbelTreeLstmConfig`], [`LstmEncoderConfig`],
//! [`R2d2Config`], [`SpinnConfig`], [`TransformerSentenceEncoderConfig`]); [`EncoderConfig`] is
//! the choice among them, serialised with a `model` tag so a checkpoint records which one it
//! holds. [`EncoderKind`] is the command-line name of an encoder (a model, and for the recurrent,
//! SPINN and Transformer models a cell, variant or gate); [`EncoderConfig::kind`] reads it from
//! the configuration, never from a built module.
//!
//! To add an encoder: a variant in [`EncoderKind`], a variant in [`EncoderConfig`] (with its arms
//! in [`EncoderConfig::kind`] and [`EncoderConfig::init`]), a variant in [`Encoder`], and a line
//! in the `dispatch!` macro. `docs/architecture.md` walks through it.

use arbor_cells::ArborBackend;
use arbor_cells::CellKind;
use burn::prelude::*;

use crate::{
    ClassifierInput, Decisions, EncoderInput, EncoderOutput, GumbelTreeLstm, GumbelTreeLstmConfig,
    LeafKind, LstmEncoder, LstmEncoderConfig, Pooling, R2d2, R2d2Config, SentenceEncoder, Spinn,
    SpinnConfig, SpinnVariant,
};
use crate::{TransformerSentenceEncoder, TransformerSentenceEncoderConfig};

/// Word-embedding scale of the Transformer encoders when the user gives none: `N(0, 1)`, the
/// scale of their sinusoidal position encodings (PyTorch's `nn.Embedding`); see
/// [`EncoderKind::embed_init_std`].
pub const TRANSFORMER_EMBED_INIT_STD: f64 = 1.0;

/// The sentence encoders arbor provides, by their command-line (and serde) names.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum EncoderKind {
    /// [`GumbelTreeLstm`].
    Gumbel,
    /// [`LstmEncoder`] with LSTM cells.
    Lstm,
    /// [`LstmEncoder`] with ON-LSTM cells.
    OnLstm,
    /// [`LstmEncoder`] with FastTrees cells.
    #[serde(rename = "fasttrees")]
    #[strum(serialize = "fasttrees")]
    FastTrees,
    /// [`LstmEncoder`] with Faster FastTrees cells.
    #[serde(rename = "faster-fasttrees")]
    #[strum(serialize = "faster-fasttrees")]
    FasterFastTrees,
    /// [`LstmEncoder`] with Conv FastTrees cells.
    #[serde(rename = "conv-fasttrees")]
    #[strum(serialize = "conv-fasttrees")]
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
    #[strum(serialize = "transformer-fasttrees")]
    TransformerFastTrees,
}

arbor_cells::value_enum_names!(EncoderKind, "encoder");

impl EncoderKind {
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
    /// from syntactic distances; the Gumbel Tree-LSTM: in evaluation mode).
    pub fn induces_trees(self) -> bool {
        match self {
            EncoderKind::Gumbel
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees
            | EncoderKind::R2d2
            | EncoderKind::Spinn
            | EncoderKind::TransformerFastTrees => true,
            EncoderKind::Lstm
            | EncoderKind::SpinnPiNt
            | EncoderKind::SpinnPi
            | EncoderKind::Transformer => false,
        }
    }

    /// The SPINN variant of the SPINN kinds.
    pub fn spinn_variant(self) -> Option<SpinnVariant> {
        match self {
            EncoderKind::SpinnPiNt => Some(SpinnVariant::PiNt),
            EncoderKind::SpinnPi => Some(SpinnVariant::Pi),
            EncoderKind::Spinn => Some(SpinnVariant::Full),
            EncoderKind::Gumbel
            | EncoderKind::Lstm
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees
            | EncoderKind::R2d2
            | EncoderKind::Transformer
            | EncoderKind::TransformerFastTrees => None,
        }
    }

    /// The word-embedding scale (standard deviation of `N(0, σ²)`) this encoder wants when the
    /// user gives none, or `None` for the program's own default (its reference code's). The
    /// Transformers want [`TRANSFORMER_EMBED_INIT_STD`]: at `sst`/`snli`'s 0.01 their sinusoidal
    /// position encodings are a hundred times larger than the words, and SST-2 training stayed
    /// at the majority class (docs/init.md).
    pub fn embed_init_std(self) -> Option<f64> {
        match self {
            EncoderKind::Transformer | EncoderKind::TransformerFastTrees => {
                Some(TRANSFORMER_EMBED_INIT_STD)
            }
            EncoderKind::Gumbel
            | EncoderKind::Lstm
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees
            | EncoderKind::R2d2
            | EncoderKind::SpinnPiNt
            | EncoderKind::SpinnPi
            | EncoderKind::Spinn => None,
        }
    }

    /// Whether the encoder needs gold transitions in [`EncoderInput::transitions`] (the SPINN
    /// kinds: always in training; PI-NT and PI also at evaluation).
    pub fn needs_transitions(self) -> bool {
        self.spinn_variant().is_some()
    }

    /// Whether the encoder has stacked layers ([`EncoderOptions::n_layers`] above 1 means
    /// something): the recurrent stacks, the Transformers and R2D2's composition function.
    pub fn stacks_layers(self) -> bool {
        match self {
            EncoderKind::Lstm
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees
            | EncoderKind::R2d2
            | EncoderKind::Transformer
            | EncoderKind::TransformerFastTrees => true,
            EncoderKind::Gumbel
            | EncoderKind::SpinnPiNt
            | EncoderKind::SpinnPi
            | EncoderKind::Spinn => false,
        }
    }
}

/// What a program chooses about its encoder, without a command-line parser: the programs fill it
/// from their flags and [`EncoderOptions::config`] is the one place the choices reach the
/// models' nested configurations. A choice the kind has no use for is ignored (the programs
/// refuse such flags first, e.g. `--layers 2` for Gumbel, with [`EncoderKind::stacks_layers`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderOptions {
    /// Which encoder.
    pub kind: EncoderKind,
    /// Width of the word embeddings it reads.
    pub d_input: usize,
    /// Width of its states and sentence vector.
    pub d_hidden: usize,
    /// Stacked layers (recurrent stacks, Transformers, R2D2's composition function).
    pub n_layers: usize,
    /// Attention heads (Transformers, R2D2); `None`: [`arbor_blocks::default_heads`].
    pub n_heads: Option<usize>,
    /// Feed-forward width of the Transformers; `None`: `4·d_hidden`.
    pub d_ff: Option<usize>,
    /// Gumbel Tree-LSTM's leaves.
    pub leaf: LeafKind,
    /// Gumbel Tree-LSTM: intra-attention over every node instead of the root.
    pub intra_attention: bool,
    /// Sentence vector of the recurrent stacks.
    pub pooling: Pooling,
    /// Full SPINN: what the transition classifier reads; `None`: the configuration's default.
    pub transition_input: Option<ClassifierInput>,
}

impl EncoderOptions {
    /// Encoder `kind` from `d_input`-wide embeddings to `d_hidden`-wide sentence vectors, with
    /// every other choice at its default (one layer, the default heads and feed-forward width,
    /// LSTM leaves without intra-attention, last-state pooling).
    pub fn new(kind: EncoderKind, d_input: usize, d_hidden: usize) -> Self {
        Self {
            kind,
            d_input,
            d_hidden,
            n_layers: 1,
            n_heads: None,
            d_ff: None,
            leaf: LeafKind::default(),
            intra_attention: false,
            pooling: Pooling::default(),
            transition_input: None,
        }
    }

    /// The encoder configuration: [`EncoderConfig::of_kind`]'s defaults with these choices
    /// applied to the models they concern.
    pub fn config(&self) -> EncoderConfig {
        let base = EncoderConfig::of_kind(self.kind, self.d_input, self.d_hidden)
            .with_layers(self.n_layers);
        match base {
            EncoderConfig::Gumbel(c) => c
                .with_leaf(self.leaf)
                .with_intra_attention(Some(self.intra_attention))
                .into(),
            EncoderConfig::Recurrent(c) => c.with_pooling(self.pooling).into(),
            EncoderConfig::Transformer(mut c) => {
                if let Some(heads) = self.n_heads {
                    c.stack.n_heads = heads;
                }
                if let Some(d_ff) = self.d_ff {
                    c.stack.d_ff = d_ff;
                }
                c.into()
            }
            EncoderConfig::R2d2(mut c) => {
                if let Some(heads) = self.n_heads {
                    c.composition.n_heads = heads;
                }
                c.into()
            }
            EncoderConfig::Spinn(c) => match self.transition_input {
                Some(input) => c.with_classifier_input(Some(input)).into(),
                None => c.into(),
            },
        }
    }
}

/// Configuration of any [`Encoder`]: one model's own configuration.
///
/// Serialised as that configuration with a `model` tag, e.g.
/// `{"model": "gumbel", "d_input": 300, "d_hidden": 300, "leaf": "lstm", ...}`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "model", rename_all = "kebab-case")]
#[allow(clippy::large_enum_variant)]
pub enum EncoderConfig {
    /// The Gumbel Tree-LSTM.
    Gumbel(GumbelTreeLstmConfig),
    /// A recurrent stack (LSTM or a cumax cell).
    Recurrent(LstmEncoderConfig),
    /// R2D2 as a sentence encoder.
    R2d2(R2d2Config),
    /// SPINN (any variant).
    Spinn(SpinnConfig),
    /// A Transformer encoder, with or without FastTrees gates.
    Transformer(TransformerSentenceEncoderConfig),
}

impl EncoderConfig {
    /// The encoder's command-line kind, read from the configuration.
    pub fn kind(&self) -> EncoderKind {
        match self {
            EncoderConfig::Gumbel(_) => EncoderKind::Gumbel,
            EncoderConfig::R2d2(_) => EncoderKind::R2d2,
            EncoderConfig::Recurrent(c) => match c.cell {
                CellKind::Lstm => EncoderKind::Lstm,
                CellKind::OnLstm => EncoderKind::OnLstm,
                CellKind::FastTrees => EncoderKind::FastTrees,
                CellKind::FasterFastTrees => EncoderKind::FasterFastTrees,
                CellKind::ConvFastTrees => EncoderKind::ConvFastTrees,
            },
            EncoderConfig::Spinn(c) => match c.variant {
                SpinnVariant::PiNt => EncoderKind::SpinnPiNt,
                SpinnVariant::Pi => EncoderKind::SpinnPi,
                SpinnVariant::Full => EncoderKind::Spinn,
            },
            EncoderConfig::Transformer(c) if c.stack.fasttrees => EncoderKind::TransformerFastTrees,
            EncoderConfig::Transformer(_) => EncoderKind::Transformer,
        }
    }

    /// Width of the sentence vector.
    pub fn d_output(&self) -> usize {
        match self {
            EncoderConfig::Gumbel(c) => c.d_hidden,
            EncoderConfig::Recurrent(c) => c.d_hidden,
            EncoderConfig::R2d2(c) => c.composition.d_model,
            EncoderConfig::Spinn(c) => c.d_hidden,
            EncoderConfig::Transformer(c) => c.stack.d_model,
        }
    }

    /// Estimated memory, in bytes, that one sentence of `len` tokens takes in a training step
    /// on a CPU backend: the activations the backward pass keeps and the gradients through
    /// them, at the model's own asymptotic cost (docs/encoders.md, "Memory of a training
    /// step"). The constants were fitted to the peak resident memory of `listops train`
    /// (flex, width 128, batches of 8 expressions of 100–400 tokens): they say whether a batch
    /// can fit, not what it will take to the megabyte.
    ///
    /// - Gumbel Tree-LSTM: every step composes every adjacent pair, `n²/2` candidate
    ///   compositions kept for the backward pass: `21·n²·d`.
    /// - R2D2: `n·(m+1)²` compositions with pruning (window `m`), `n³/6` without, each a
    ///   Transformer pass over a few `d`-wide rows: `350·d·layers` per composition.
    /// - SPINN: one shift or reduce per token, `128·n·d`.
    /// - Recurrent stacks: `48·n·d` per layer.
    /// - Transformers: attention maps `16·heads·n²` and the feed-forward rows `16·n·(d_ff+8d)`,
    ///   per layer.
    pub fn training_bytes(&self, len: usize) -> f64 {
        let n = len as f64;
        match self {
            EncoderConfig::Gumbel(c) => 21.0 * n * n * c.d_hidden as f64,
            EncoderConfig::R2d2(c) => {
                let m = c.window as f64;
                let compositions = if c.pruning {
                    n * (m + 1.0) * (m + 1.0)
                } else {
                    n * n * n / 6.0
                };
                let d = c.composition.d_model as f64;
                compositions * 350.0 * d * c.composition.n_layers as f64
            }
            EncoderConfig::Spinn(c) => 128.0 * n * c.d_hidden as f64,
            EncoderConfig::Recurrent(c) => 48.0 * n * c.d_hidden as f64 * c.n_layers as f64,
            EncoderConfig::Transformer(c) => {
                let s = &c.stack;
                let (d, heads) = (s.d_model as f64, s.n_heads as f64);
                let per_layer = 16.0 * heads * n * n + 16.0 * n * (s.d_ff as f64 + 8.0 * d);
                per_layer * s.n_layers as f64
            }
        }
    }

    /// Checks the model's settings (its own `validate`).
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        match self {
            EncoderConfig::Gumbel(c) => c.validate(),
            EncoderConfig::Recurrent(c) => c.validate(),
            EncoderConfig::R2d2(c) => c.validate(),
            EncoderConfig::Spinn(c) => c.validate(),
            EncoderConfig::Transformer(c) => c.validate(),
        }
    }

    /// [`EncoderConfig::init`] after [`EncoderConfig::validate`]: an error instead of a panic.
    pub fn try_init<B: ArborBackend>(
        &self,
        device: &B::Device,
    ) -> Result<Encoder<B>, arbor_cells::ConfigError> {
        self.validate()?;
        Ok(self.init(device))
    }

    /// Builds the configured encoder on `device`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> Encoder<B> {
        match self {
            EncoderConfig::Gumbel(c) => Encoder::Gumbel(c.init(device)),
            EncoderConfig::Recurrent(c) => Encoder::Lstm(c.init(device)),
            EncoderConfig::R2d2(c) => Encoder::R2d2(c.init(device)),
            EncoderConfig::Spinn(c) => Encoder::Spinn(c.init(device)),
            EncoderConfig::Transformer(c) => Encoder::Transformer(c.init(device)),
        }
    }
}

impl EncoderConfig {
    /// The configuration of encoder `kind` from `d_input`-wide embeddings to `d_hidden`-wide
    /// sentence vectors, with arbor's defaults for a sentence encoder: the model's own
    /// configuration defaults, one layer, no dropout, and for the Transformers
    /// [`default_heads`](arbor_blocks::default_heads) heads, a `4·d_hidden` feed-forward width
    /// and [`default_chunk_size`](crate::default_chunk_size) gate chunks. Every program builds
    /// its encoder from here and then applies its flags.
    pub fn of_kind(kind: EncoderKind, d_input: usize, d_hidden: usize) -> Self {
        let heads = arbor_blocks::default_heads(d_hidden);
        match kind {
            EncoderKind::Gumbel => GumbelTreeLstmConfig::new(d_input, d_hidden).into(),
            EncoderKind::R2d2 => R2d2Config::new(
                d_input,
                crate::r2d2::CompositionConfig::new(d_hidden)
                    .with_n_layers(1)
                    .with_n_heads(heads),
            )
            .into(),
            EncoderKind::SpinnPiNt | EncoderKind::SpinnPi | EncoderKind::Spinn => {
                SpinnConfig::new(d_input, d_hidden)
                    .with_variant(kind.spinn_variant().unwrap_or_default())
                    .into()
            }
            EncoderKind::Transformer | EncoderKind::TransformerFastTrees => {
                TransformerSentenceEncoderConfig::new(
                    arbor_blocks::TransformerEncoderConfig::new(d_input, d_hidden)
                        .with_n_heads(heads)
                        .with_d_ff(4 * d_hidden)
                        .with_n_layers(1)
                        .with_dropout(0.0)
                        .with_fasttrees(kind == EncoderKind::TransformerFastTrees)
                        .with_chunk_size(crate::default_chunk_size(d_hidden)),
                )
                .into()
            }
            EncoderKind::Lstm
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees => LstmEncoderConfig::new(d_input, d_hidden)
                .with_cell(kind.cell().unwrap_or(CellKind::Lstm))
                .into(),
        }
    }

    /// Sets the number of stacked layers of the models that have them (the recurrent stacks,
    /// the Transformers, R2D2's composition function); the others are returned unchanged.
    pub fn with_layers(self, n_layers: usize) -> Self {
        match self {
            EncoderConfig::Recurrent(c) => c.with_n_layers(n_layers).into(),
            EncoderConfig::R2d2(mut c) => {
                c.composition.n_layers = n_layers;
                c.into()
            }
            EncoderConfig::Transformer(mut c) => {
                c.stack.n_layers = n_layers;
                c.into()
            }
            EncoderConfig::Gumbel(_) | EncoderConfig::Spinn(_) => self,
        }
    }
}

impl From<GumbelTreeLstmConfig> for EncoderConfig {
    fn from(c: GumbelTreeLstmConfig) -> Self {
        EncoderConfig::Gumbel(c)
    }
}

impl From<LstmEncoderConfig> for EncoderConfig {
    fn from(c: LstmEncoderConfig) -> Self {
        EncoderConfig::Recurrent(c)
    }
}

impl From<R2d2Config> for EncoderConfig {
    fn from(c: R2d2Config) -> Self {
        EncoderConfig::R2d2(c)
    }
}

impl From<SpinnConfig> for EncoderConfig {
    fn from(c: SpinnConfig) -> Self {
        EncoderConfig::Spinn(c)
    }
}

impl From<TransformerSentenceEncoderConfig> for EncoderConfig {
    fn from(c: TransformerSentenceEncoderConfig) -> Self {
        EncoderConfig::Transformer(c)
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

impl<B: ArborBackend> SentenceEncoder<B> for Encoder<B> {
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
    use crate::LeafKind;
    use arbor_cells::names::VariantArray;
    use burn::backend::Flex;

    /// The estimates grow at each model's own rate, and sit near what `listops train` measured
    /// (flex, width 128, batches of 8, peak resident memory less the ~30 MB a run starts with):
    /// Gumbel 106 / 426 MB and R2D2 255 / 437 MB per expression of 200 / 400 tokens.
    #[test]
    fn training_memory_grows_at_each_models_rate() {
        let of = |kind| EncoderConfig::of_kind(kind, 128, 128);
        let mb = |c: &EncoderConfig, n| c.training_bytes(n) / 1e6;
        let gumbel = of(EncoderKind::Gumbel);
        assert!((mb(&gumbel, 400) / mb(&gumbel, 200) - 4.0).abs() < 1e-9);
        assert!(
            (90.0..130.0).contains(&mb(&gumbel, 200)),
            "{}",
            mb(&gumbel, 200)
        );
        assert!(
            (350.0..500.0).contains(&mb(&gumbel, 400)),
            "{}",
            mb(&gumbel, 400)
        );
        let r2d2 = of(EncoderKind::R2d2);
        assert!((mb(&r2d2, 400) / mb(&r2d2, 200) - 2.0).abs() < 1e-9);
        assert!(
            (200.0..500.0).contains(&mb(&r2d2, 400)),
            "{}",
            mb(&r2d2, 400)
        );
        let EncoderConfig::R2d2(mut full) = r2d2.clone() else {
            unreachable!()
        };
        full.pruning = false;
        let full = EncoderConfig::R2d2(full);
        assert!((mb(&full, 400) / mb(&full, 200) - 8.0).abs() < 1e-9);
        // The sequential encoders are linear and small beside the chart-building ones.
        for kind in [
            EncoderKind::Lstm,
            EncoderKind::OnLstm,
            EncoderKind::SpinnPiNt,
        ] {
            let c = of(kind);
            assert!((mb(&c, 400) / mb(&c, 200) - 2.0).abs() < 1e-9, "{kind}");
            assert!(mb(&c, 400) < 10.0, "{kind}: {}", mb(&c, 400));
        }
        let t = of(EncoderKind::Transformer);
        assert!(mb(&t, 400) / mb(&t, 200) > 2.0 && mb(&t, 400) < 40.0);
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for &kind in EncoderKind::VARIANTS {
            assert_eq!(kind.to_string().parse::<EncoderKind>(), Ok(kind));
            assert_eq!(
                kind.to_string().to_uppercase().parse::<EncoderKind>(),
                Ok(kind)
            );
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<EncoderKind>(&json).unwrap(), kind);
        }
        assert_eq!("gumbel".parse(), Ok(EncoderKind::Gumbel));
        assert_eq!("lstm".parse(), Ok(EncoderKind::Lstm));
        let err = "spinn-x".parse::<EncoderKind>().unwrap_err();
        assert!(
            err.contains("spinn-x") && err.contains("gumbel, lstm, on-lstm"),
            "{err}"
        );
        for &leaf in LeafKind::VARIANTS {
            assert_eq!(leaf.to_string().parse::<LeafKind>(), Ok(leaf));
        }
        assert!("tree"
            .parse::<LeafKind>()
            .unwrap_err()
            .contains("affine, lstm"));
    }

    /// Every kind survives a checkpoint's configuration (serialised and read back), and the
    /// registry's properties agree with the configuration each kind builds.
    #[test]
    fn every_kind_round_trips_through_its_saved_config_and_its_properties_agree() {
        for &kind in EncoderKind::VARIANTS {
            let config = EncoderConfig::of_kind(kind, 5, 8);
            let json = serde_json::to_string(&config).unwrap();
            let back: EncoderConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(back.kind(), kind, "{json}");
            assert_eq!(
                kind.cell().is_some(),
                matches!(config, EncoderConfig::Recurrent(_)),
                "{kind}"
            );
            assert_eq!(
                kind.needs_transitions(),
                matches!(config, EncoderConfig::Spinn(_)),
                "{kind}"
            );
            assert_eq!(
                kind.embed_init_std().is_some(),
                matches!(config, EncoderConfig::Transformer(_)),
                "{kind}"
            );
        }
    }

    /// The kind's configuration with `leaf` for the Gumbel Tree-LSTM.
    fn config(kind: EncoderKind, leaf: LeafKind, d_in: usize, d: usize) -> EncoderConfig {
        match EncoderConfig::of_kind(kind, d_in, d).with_layers(2) {
            EncoderConfig::Gumbel(g) => g.with_leaf(leaf).into(),
            other => other,
        }
    }

    #[test]
    fn init_builds_every_kind_with_the_configured_width() {
        let device = Default::default();
        for &kind in EncoderKind::VARIANTS {
            for &leaf in LeafKind::VARIANTS {
                // The bidirectional leaf splits the width in two halves.
                let d = if leaf == LeafKind::BiLstm { 8 } else { 7 };
                let config = config(kind, leaf, 3, d);
                assert_eq!(config.kind(), kind);
                assert_eq!(config.d_output(), d);
                let enc: Encoder<Flex> = config.init(&device);
                assert_eq!(enc.d_output(), d);
                let x = Tensor::<Flex, 3>::ones([2, 4, 3], &device);
                let out = enc.encode(EncoderInput::new(x, vec![4, 2]), Decisions::Argmax);
                assert_eq!(out.sentence.dims(), [2, d]);
                assert_eq!(out.trees.is_some(), kind.induces_trees());
            }
        }
        let enc: Encoder<Flex> = EncoderConfig::of_kind(EncoderKind::Gumbel, 3, 7).init(&device);
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
        let config: EncoderConfig = GumbelTreeLstmConfig::new(3, 7)
            .with_leaf(LeafKind::Affine)
            .into();
        let json = serde_json::to_string(&config).unwrap();
        assert!(
            json.contains("\"gumbel\"") && json.contains("\"affine\""),
            "{json}"
        );
        let back: EncoderConfig = serde_json::from_str(&json).unwrap();
        let EncoderConfig::Gumbel(g) = &back else {
            panic!("a Gumbel configuration: {json}")
        };
        assert_eq!(
            (back.kind(), g.leaf, g.d_hidden),
            (config.kind(), LeafKind::Affine, 7)
        );
    }

    #[test]
    fn every_kind_round_trips_through_its_tagged_json() {
        for &kind in EncoderKind::VARIANTS {
            let config = EncoderConfig::of_kind(kind, 5, 8).with_layers(3);
            let json = serde_json::to_value(&config).unwrap();
            assert!(json["model"].is_string(), "{json}");
            let back: EncoderConfig = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(back.kind(), kind, "{json}");
            assert_eq!(serde_json::to_value(&back).unwrap(), json);
        }
    }
}
