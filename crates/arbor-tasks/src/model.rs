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

    /// Estimated training-step memory of one example whose sentences have at most `len`
    /// tokens ([`EncoderConfig::training_bytes`]; a pair classifier encodes two sentences).
    pub fn training_bytes(&self, len: usize) -> f64 {
        match self {
            ModelConfig::Nli { encoder, .. } => 2.0 * encoder.training_bytes(len),
            ModelConfig::Classify { encoder, .. } => encoder.training_bytes(len),
        }
    }
}

/// Refuses a training run whose longest batch would not fit in `available` bytes: length-
/// bucketed batches put the `batch_size` longest examples together, each padded to the
/// longest, so that batch needs about `batch_size × model.training_bytes(longest)`. The
/// error says how much it needs, how much there is, and which flags bring it down.
///
/// # Errors
/// The explanation above, when the estimate exceeds `available`.
pub fn check_training_memory(
    model: &ModelConfig,
    lengths: &[usize],
    batch_size: usize,
    available: u64,
) -> Result<(), String> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let batch = batch_size.min(lengths.len());
    let need = batch as f64 * model.training_bytes(longest);
    if need <= available as f64 {
        return Ok(());
    }
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let encoder = model.encoder().kind();
    // The longest length whose full batch fits, for the message.
    let fits = (1..=longest)
        .rev()
        .find(|&n| batch as f64 * model.training_bytes(n) <= available as f64);
    let shorter = match fits {
        Some(n) => format!("training examples of at most {n} tokens"),
        None => "a smaller model".to_string(),
    };
    Err(format!(
        "the longest training batch ({batch} examples of up to {longest} tokens) would need about \
         {:.1} GiB for a {encoder} training step (an estimate), and {:.1} GiB of memory is \
         available: use a smaller --batch-size, or {shorter} (listops: --max-train-length), or \
         --skip-memory-check to try anyway",
        gib(need),
        gib(available as f64),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_encoders::EncoderKind;

    fn classifier(kind: EncoderKind) -> ModelConfig {
        ModelConfig::Classify {
            embedding: TokenEmbeddingConfig::new(20, 128),
            encoder: EncoderConfig::of_kind(kind, 128, 128),
            head: SentenceClassifierConfig::new(128).with_n_classes(10),
        }
    }

    #[test]
    fn a_batch_that_cannot_fit_is_refused_with_the_flags_that_help() {
        let gib = 1u64 << 30;
        // ListOps at the released lengths: the longest training expression has 1,137 tokens.
        let mut lengths = vec![20; 1000];
        lengths.extend([1137, 900, 800]);
        let gumbel = classifier(EncoderKind::Gumbel);
        let err = check_training_memory(&gumbel, &lengths, 64, 24 * gib).unwrap_err();
        for part in [
            "64 examples of up to 1137 tokens",
            "gumbel",
            "24.0 GiB",
            "--batch-size",
            "--max-train-length",
            "at most",
        ] {
            assert!(err.contains(part), "{part}: {err}");
        }
        // The length the message offers does fit.
        let n: usize = err
            .split("at most ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(check_training_memory(&gumbel, &[n; 64], 64, 24 * gib).is_ok());
        assert!(check_training_memory(&gumbel, &[n + 1; 64], 64, 24 * gib).is_err());
        // The recipes' filter (<= 50 tokens) fits; so does the LSTM at full length.
        assert!(check_training_memory(&gumbel, &[50; 64], 64, 24 * gib).is_ok());
        let lstm = classifier(EncoderKind::Lstm);
        assert!(check_training_memory(&lstm, &lengths, 64, 24 * gib).is_ok());
        // A pair classifier encodes two sentences per example.
        let nli = ModelConfig::Nli {
            embedding: TokenEmbeddingConfig::new(20, 128),
            encoder: EncoderConfig::of_kind(EncoderKind::Gumbel, 128, 128),
            head: NliClassifierConfig::new(20, 128, 128),
        };
        assert_eq!(nli.training_bytes(100), 2.0 * gumbel.training_bytes(100));
    }
}
