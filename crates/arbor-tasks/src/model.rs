use arbor_encoders::EncoderConfig;
use arbor_heads::{NliClassifierConfig, SentenceClassifierConfig, TokenEmbeddingConfig};
use serde::{Deserialize, Serialize};

/// The head of a model: what its checkpoint needs to rebuild it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "lowercase")]
pub enum ModelConfig {
    /// A pair classifier.
    Nli {
        /// Word embeddings.
        embedding: TokenEmbeddingConfig,
        /// The shared encoder.
        encoder: EncoderConfig,
        /// The classifier.
        head: NliClassifierConfig,
    },
    /// A single-sentence classifier.
    Classify {
        /// Word embeddings.
        embedding: TokenEmbeddingConfig,
        /// The encoder.
        encoder: EncoderConfig,
        /// The classifier.
        head: SentenceClassifierConfig,
    },
}

/// Everything stored with a checkpoint besides the weights: the model configuration, the
/// vocabulary and the label names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelMeta {
    /// How to rebuild the model.
    pub model: ModelConfig,
    /// The vocabulary, id order.
    pub vocab: Vec<String>,
    /// Label names, id order.
    pub labels: Vec<String>,
    /// Whether input words are lower-cased before lookup.
    pub lowercase: bool,
    /// Whether a word missing from the vocabulary is looked up lower-cased, then upper-cased,
    /// before `<unk>` (the SPINN port's lookup, for its imported vocabularies;
    /// `Vocab::id_case_fallback`). Absent in older checkpoints: off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub case_fallback: bool,
}

impl ModelConfig {
    /// The encoder's configuration.
    pub fn encoder(&self) -> &EncoderConfig {
        match self {
            ModelConfig::Nli { encoder, .. } | ModelConfig::Classify { encoder, .. } => encoder,
        }
    }
}

impl ModelMeta {
    /// Reads the metadata back from a checkpoint's JSON (`meta["task"]`).
    ///
    /// Checkpoints written before each encoder had its own configuration (a flat encoder
    /// record with a `kind`) are read too: their encoder is mapped onto today's configuration
    /// of the same model (see `arbor-tasks/src/legacy.rs`).
    pub fn from_checkpoint(meta: &serde_json::Value) -> Result<Self, String> {
        let mut task = meta["task"].clone();
        if let Some(encoder) = task.get_mut("model").and_then(|m| m.get_mut("encoder")) {
            if crate::legacy::is_flat_encoder(encoder) {
                let flat: crate::legacy::FlatEncoderConfig =
                    serde_json::from_value(encoder.clone()).map_err(|e| {
                        format!("checkpoint has an unreadable format-1 encoder record: {e}")
                    })?;
                *encoder = serde_json::to_value(flat.into_config()).map_err(|e| e.to_string())?;
            }
            if encoder.get("model").and_then(|m| m.as_str()) == Some("r2d2") {
                crate::legacy::r2d2_shared_roles_if_unset(encoder);
            }
        }
        serde_json::from_value(task)
            .map_err(|e| format!("checkpoint has no usable model metadata: {e}"))
    }
}
