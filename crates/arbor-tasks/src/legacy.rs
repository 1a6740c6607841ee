//! Reading checkpoints written before each encoder had its own configuration.
//!
//! Until then an encoder was stored as one flat record of every model's fields with a `kind`
//! (`{"kind": "gumbel", "d_input": 100, "d_hidden": 100, "leaf": "lstm", "n_layers": 1, ...}`),
//! and R2D2's language model as a flat record of its Transformer fields. These readers map such
//! records onto today's configurations with the rules the old code built the models with, so the
//! weights of an old checkpoint load into the same modules.

use arbor_cells::CellKind;
use arbor_encoders::r2d2::{CompositionConfig, RoleEmbeddings};
use arbor_encoders::{
    ClassifierInput, EncoderConfig, EncoderKind, GumbelTreeLstmConfig, LeafKind, LstmEncoderConfig,
    Pooling, R2d2Config, R2d2LmConfig, SpinnConfig, TransformerPooling,
    TransformerSentenceEncoderConfig,
};
use serde::Deserialize;

fn one() -> usize {
    1
}
fn one_f() -> f64 {
    1.0
}
fn four() -> usize {
    4
}
fn yes() -> bool {
    true
}
fn d_model_default() -> usize {
    128
}
fn two() -> usize {
    2
}

/// The flat encoder record of checkpoint format 1.
#[derive(Debug, Deserialize)]
pub(crate) struct FlatEncoderConfig {
    kind: EncoderKind,
    d_input: usize,
    d_hidden: usize,
    #[serde(default)]
    leaf: LeafKind,
    #[serde(default = "one")]
    n_layers: usize,
    #[serde(default)]
    dropout: f64,
    #[serde(default = "one_f")]
    tau: f64,
    #[serde(default)]
    chunk_size: usize,
    #[serde(default = "four")]
    window: usize,
    #[serde(default)]
    pooling: Pooling,
    #[serde(default)]
    tracking_dim: usize,
    #[serde(default = "one_f")]
    transition_weight: f64,
    #[serde(default)]
    n_heads: usize,
    #[serde(default)]
    d_ff: usize,
    #[serde(default)]
    transformer_pooling: Option<TransformerPooling>,
}

impl FlatEncoderConfig {
    /// The heads the old code used: `n_heads` when it divides the width, else the largest
    /// divisor of the width that is at most `max(n_heads, 4)`.
    fn heads(&self) -> usize {
        let d = self.d_hidden;
        if self.n_heads > 0 && d.is_multiple_of(self.n_heads) {
            return self.n_heads;
        }
        (1..=self.n_heads.max(4).min(d.max(1)))
            .rev()
            .find(|h| d.is_multiple_of(*h))
            .unwrap_or(1)
    }

    /// Today's configuration of the same encoder.
    pub(crate) fn into_config(self) -> EncoderConfig {
        let (d_in, d) = (self.d_input, self.d_hidden);
        match self.kind {
            EncoderKind::Gumbel => GumbelTreeLstmConfig::new(d_in, d)
                .with_leaf(self.leaf)
                .with_tau(self.tau)
                .into(),
            EncoderKind::R2d2 => R2d2Config::new(
                d_in,
                CompositionConfig::new(d)
                    .with_n_layers(self.n_layers)
                    .with_n_heads(self.heads())
                    .with_role_embeddings(RoleEmbeddings::Shared),
            )
            .with_window(self.window)
            .with_tau(self.tau)
            .into(),
            EncoderKind::SpinnPiNt | EncoderKind::SpinnPi | EncoderKind::Spinn => {
                SpinnConfig::new(d_in, d)
                    .with_variant(self.kind.spinn_variant().unwrap_or_default())
                    .with_d_tracking(self.tracking_dim)
                    .with_transition_weight(self.transition_weight)
                    // Those models' transition classifiers read the tracking h only.
                    .with_classifier_input(Some(ClassifierInput::Hidden))
                    .into()
            }
            EncoderKind::Transformer | EncoderKind::TransformerFastTrees => {
                let stack = arbor_blocks_stack(&self);
                TransformerSentenceEncoderConfig::new(stack)
                    .with_pooling(self.transformer_pooling.unwrap_or(TransformerPooling::Mean))
                    .into()
            }
            EncoderKind::Lstm
            | EncoderKind::OnLstm
            | EncoderKind::FastTrees
            | EncoderKind::FasterFastTrees
            | EncoderKind::ConvFastTrees => LstmEncoderConfig::new(d_in, d)
                .with_n_layers(self.n_layers)
                .with_dropout(self.dropout)
                .with_cell(self.kind.cell().unwrap_or(CellKind::Lstm))
                .with_chunk_size(self.chunk_size)
                .with_pooling(self.pooling)
                .into(),
        }
    }
}

fn arbor_blocks_stack(c: &FlatEncoderConfig) -> arbor_blocks::TransformerEncoderConfig {
    let d = c.d_hidden;
    arbor_blocks::TransformerEncoderConfig::new(c.d_input, d)
        .with_n_heads(c.heads())
        .with_d_ff(if c.d_ff == 0 { 4 * d } else { c.d_ff })
        .with_n_layers(c.n_layers)
        .with_dropout(c.dropout)
        .with_fasttrees(c.kind == EncoderKind::TransformerFastTrees)
        .with_chunk_size(match c.chunk_size {
            0 => arbor_encoders::default_chunk_size(d),
            k => k,
        })
}

/// R2D2 records written before role embeddings could be per layer: a composition record
/// without `role_embeddings` had one role table shared by all layers, so it gets
/// `"shared"` (today's default is one table per layer, which would not fit its weights).
/// `encoder` is an R2D2 encoder record (`{"model": "r2d2", ..., "composition": {...}}` or
/// the LM's nested encoder); other records are left alone.
pub(crate) fn r2d2_shared_roles_if_unset(encoder: &mut serde_json::Value) {
    if let Some(composition) = encoder
        .get_mut("composition")
        .and_then(|c| c.as_object_mut())
    {
        composition
            .entry("role_embeddings")
            .or_insert_with(|| serde_json::json!("shared"));
    }
}

/// Whether a stored encoder record is the flat format-1 one.
pub(crate) fn is_flat_encoder(value: &serde_json::Value) -> bool {
    value.get("kind").is_some() && value.get("model").is_none()
}

/// The flat R2D2 language-model record of checkpoint format 1.
#[derive(Debug, Deserialize)]
pub(crate) struct FlatR2d2LmConfig {
    vocab_size: usize,
    #[serde(default = "d_model_default")]
    d_model: usize,
    #[serde(default = "two")]
    n_layers: usize,
    #[serde(default = "four")]
    n_heads: usize,
    #[serde(default)]
    d_ff: usize,
    #[serde(default = "four")]
    window: usize,
    #[serde(default = "yes")]
    pruning: bool,
    #[serde(default = "one_f")]
    tau: f64,
}

impl FlatR2d2LmConfig {
    /// Today's configuration of the same model.
    pub(crate) fn into_config(self) -> R2d2LmConfig {
        let d = self.d_model;
        R2d2LmConfig::new(self.vocab_size).with_encoder(
            R2d2Config::new(
                d,
                CompositionConfig::new(d)
                    .with_n_layers(self.n_layers)
                    .with_n_heads(self.n_heads)
                    .with_d_ff(self.d_ff)
                    .with_role_embeddings(RoleEmbeddings::Shared),
            )
            .with_window(self.window)
            .with_pruning(self.pruning)
            .with_tau(self.tau),
        )
    }
}

#[cfg(test)]
mod tests {
    use arbor_cells::names::VariantArray;
    use serde_json::json;

    use crate::{ModelConfig, ModelMeta, R2d2Meta};
    use arbor_encoders::r2d2::{CompositionConfig, RoleEmbeddings};
    use arbor_encoders::{EncoderConfig, EncoderKind, R2d2Config, R2d2LmConfig};

    /// A classification checkpoint's metadata as format 1 wrote it.
    fn format1(kind: EncoderKind) -> serde_json::Value {
        json!({"task": {
            "model": {
                "task": "classify",
                "embedding": {"n_tokens": 4, "d_embed": 6, "init_std": 1.0},
                "encoder": {
                    "kind": kind, "d_input": 6, "d_hidden": 12, "leaf": "affine",
                    "n_layers": 2, "dropout": 0.0, "tau": 1.0, "chunk_size": 0, "window": 3,
                    "pooling": "max", "tracking_dim": 5, "transition_weight": 1.0,
                    "n_heads": 0, "d_ff": 0, "transformer_pooling": "first"
                },
                "head": {"d_mlp": 8, "n_classes": 2, "n_mlp_hidden": 1, "dropout": 0.1,
                         "batch_norm": false}
            },
            "vocab": ["<pad>", "<unk>", "a", "b"],
            "labels": ["no", "yes"],
            "lowercase": false
        }})
    }

    #[test]
    fn format_1_encoder_records_map_onto_todays_configurations() {
        for &kind in EncoderKind::VARIANTS {
            let meta = ModelMeta::from_checkpoint(&format1(kind))
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let ModelConfig::Classify { encoder, .. } = &meta.model else {
                panic!("{kind}: a sentence classifier")
            };
            assert_eq!(encoder.kind(), kind);
            assert_eq!(encoder.d_output(), 12);
            match encoder {
                EncoderConfig::Gumbel(c) => assert_eq!(c.leaf, arbor_encoders::LeafKind::Affine),
                EncoderConfig::Recurrent(c) => {
                    assert_eq!((c.n_layers, c.pooling), (2, arbor_encoders::Pooling::Max))
                }
                EncoderConfig::R2d2(c) => assert_eq!(
                    (
                        c.window,
                        c.composition.n_layers,
                        c.composition.n_heads,
                        c.composition.role_embeddings
                    ),
                    (3, 2, 4, RoleEmbeddings::Shared)
                ),
                EncoderConfig::Spinn(c) => {
                    assert_eq!(c.d_tracking, 5);
                    assert_eq!(
                        c.transition_input(),
                        arbor_encoders::ClassifierInput::Hidden
                    );
                }
                EncoderConfig::Transformer(c) => assert_eq!(
                    (c.stack.n_heads, c.stack.d_ff, c.stack.chunk_size, c.pooling),
                    (4, 48, 6, arbor_encoders::TransformerPooling::First)
                ),
            }
            // Written back, it is today's format and reads back the same.
            let again = serde_json::to_value(&meta).unwrap();
            assert!(again["model"]["encoder"]["model"].is_string());
            let back = ModelMeta::from_checkpoint(&json!({ "task": again })).unwrap();
            assert_eq!(back.model.encoder().kind(), kind);
        }
        let mut broken = format1(EncoderKind::Lstm);
        broken["task"]["model"]["encoder"]["d_hidden"] = json!("wide");
        let err = ModelMeta::from_checkpoint(&broken).unwrap_err();
        assert!(err.contains("format-1"), "{err}");
    }

    #[test]
    fn format_1_r2d2_records_map_onto_todays_configuration() {
        let meta = json!({"task": {
            "model": {"vocab_size": 30, "d_model": 16, "n_layers": 3, "n_heads": 2,
                      "d_ff": 0, "window": 2, "pruning": false, "tau": 1.0},
            "vocab": ["[PAD]"]
        }});
        let meta = R2d2Meta::from_checkpoint(&meta).unwrap();
        let c = &meta.model.encoder;
        assert_eq!(
            (
                meta.model.d_model(),
                c.composition.n_layers,
                c.composition.n_heads
            ),
            (16, 3, 2)
        );
        assert_eq!((c.window, c.pruning), (2, false));
        assert_eq!(c.composition.role_embeddings, RoleEmbeddings::Shared);
    }

    /// Today's R2D2 LM metadata as JSON, with the composition's `role_embeddings` removed: what
    /// checkpoints written between the nested configurations and per-layer role tables hold.
    fn r2d2_meta_without_role_layout() -> serde_json::Value {
        let model = R2d2LmConfig::new(30).with_encoder(R2d2Config::new(
            16,
            CompositionConfig::new(16).with_n_layers(3).with_n_heads(2),
        ));
        let meta = R2d2Meta {
            model,
            vocab: vec!["[PAD]".into()],
            tree_rule: Default::default(),
        };
        let mut task = serde_json::to_value(&meta).unwrap();
        let composition = task["model"]["encoder"]["composition"]
            .as_object_mut()
            .unwrap();
        assert_eq!(
            composition.remove("role_embeddings"),
            Some(json!("per-layer"))
        );
        json!({ "task": task })
    }

    #[test]
    fn r2d2_records_without_a_role_layout_read_as_one_shared_table() {
        let old = r2d2_meta_without_role_layout();
        let meta = R2d2Meta::from_checkpoint(&old).unwrap();
        let c = &meta.model.encoder.composition;
        assert_eq!(c.role_embeddings, RoleEmbeddings::Shared);
        assert_eq!((c.n_layers, c.n_heads, meta.model.d_model()), (3, 2, 16));
        // The model it builds has the old layout: one [3, D] role table.
        let model = meta.model.init::<burn::backend::Flex>(&Default::default());
        assert_eq!(model.encoder.composition.roles.dims(), [3, 16]);
        // A record that says which layout it has keeps it.
        let mut explicit = old.clone();
        explicit["task"]["model"]["encoder"]["composition"]["role_embeddings"] = json!("per-layer");
        let meta = R2d2Meta::from_checkpoint(&explicit).unwrap();
        assert_eq!(
            meta.model.encoder.composition.role_embeddings,
            RoleEmbeddings::PerLayer
        );
        // The same for an R2D2 sentence encoder inside a classifier's metadata.
        let mut classifier = format1(EncoderKind::R2d2);
        let encoder = ModelMeta::from_checkpoint(&classifier)
            .unwrap()
            .model
            .encoder()
            .clone();
        let mut encoder = serde_json::to_value(&encoder).unwrap();
        encoder["composition"]
            .as_object_mut()
            .unwrap()
            .remove("role_embeddings");
        classifier["task"]["model"]["encoder"] = encoder;
        let meta = ModelMeta::from_checkpoint(&classifier).unwrap();
        let EncoderConfig::R2d2(c) = meta.model.encoder() else {
            panic!("an R2D2 encoder")
        };
        assert_eq!(c.composition.role_embeddings, RoleEmbeddings::Shared);
    }
}
