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
    pub fn from_checkpoint(meta: &serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(meta["task"].clone())
            .map_err(|e| format!("checkpoint has no usable model metadata: {e}"))
    }
}
