use std::path::{Path, PathBuf};

use arbor_cells::ArborBackend;
use arbor_encoders::{Encoder, EncoderConfig};
use arbor_heads::{
    NliClassifier, NliClassifierConfig, SentenceClassifier, SentenceClassifierConfig,
    TokenEmbedding, TokenEmbeddingConfig,
};
use arbor_train::{CheckpointError, CheckpointFile};
use burn::module::Module;
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

/// A classifier of either kind, as [`ModelConfig::init`] builds it.
#[derive(Debug)]
pub enum ClassifierModel<B: ArborBackend> {
    /// A pair classifier ([`ModelConfig::Nli`]).
    Nli(NliClassifier<B, Encoder<B>>),
    /// A single-sentence classifier ([`ModelConfig::Classify`]).
    Classify(SentenceClassifier<B, Encoder<B>>),
}

/// One kind of classifier a [`ClassifierModel`] may be: the pair classifier or the sentence
/// classifier, each over arbor's [`Encoder`].
pub trait ClassifierKind<B: ArborBackend>: Sized {
    /// The kind's name in messages: `a pair classifier`, `a sentence classifier`.
    const NAME: &'static str;

    /// The model when it is of this kind (`None`: it is of the other kind).
    fn from_model(model: ClassifierModel<B>) -> Option<Self>;
}

impl<B: ArborBackend> ClassifierKind<B> for NliClassifier<B, Encoder<B>> {
    const NAME: &'static str = "a pair classifier";

    fn from_model(model: ClassifierModel<B>) -> Option<Self> {
        match model {
            ClassifierModel::Nli(m) => Some(m),
            ClassifierModel::Classify(_) => None,
        }
    }
}

impl<B: ArborBackend> ClassifierKind<B> for SentenceClassifier<B, Encoder<B>> {
    const NAME: &'static str = "a sentence classifier";

    fn from_model(model: ClassifierModel<B>) -> Option<Self> {
        match model {
            ClassifierModel::Classify(m) => Some(m),
            ClassifierModel::Nli(_) => None,
        }
    }
}

impl<B: ArborBackend> ClassifierModel<B> {
    /// The model's kind in messages ([`ClassifierKind::NAME`]).
    pub fn name(&self) -> &'static str {
        match self {
            ClassifierModel::Nli(_) => <NliClassifier<B, Encoder<B>> as ClassifierKind<B>>::NAME,
            ClassifierModel::Classify(_) => {
                <SentenceClassifier<B, Encoder<B>> as ClassifierKind<B>>::NAME
            }
        }
    }

    /// The model as kind `M`, or which kind it is instead.
    ///
    /// # Errors
    /// [`WrongKind`] when the model is of the other kind.
    pub fn into_kind<M: ClassifierKind<B>>(self) -> Result<M, WrongKind> {
        let found = self.name();
        M::from_model(self).ok_or(WrongKind {
            found,
            wanted: M::NAME,
        })
    }
}

/// A classifier of one kind where the other was wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("holds {found}, not {wanted}")]
pub struct WrongKind {
    /// The kind there is ([`ClassifierKind::NAME`]).
    pub found: &'static str,
    /// The kind wanted.
    pub wanted: &'static str,
}

impl ModelConfig {
    /// Builds the classifier this configuration describes, freshly initialised (to be trained,
    /// or to receive a checkpoint's weights: see [`load_classifier`]).
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> ClassifierModel<B> {
        let encoder = self.encoder().init::<B>(device);
        self.build(encoder, self.embedding().init::<B>(device), device)
    }

    /// [`ModelConfig::init`] over a word embedding built by the caller (pretrained vectors,
    /// zeroed special rows) in place of a fresh one of [`ModelConfig::embedding`]'s.
    pub fn init_with_embedding<B: ArborBackend>(
        &self,
        embedding: TokenEmbedding<B>,
        device: &B::Device,
    ) -> ClassifierModel<B> {
        self.build(self.encoder().init::<B>(device), embedding, device)
    }

    /// The head of this configuration over `encoder` and `embedding`.
    fn build<B: ArborBackend>(
        &self,
        encoder: Encoder<B>,
        embedding: TokenEmbedding<B>,
        device: &B::Device,
    ) -> ClassifierModel<B> {
        match self {
            ModelConfig::Nli { head, .. } => {
                ClassifierModel::Nli(head.init(encoder, embedding, device))
            }
            ModelConfig::Classify { head, .. } => {
                ClassifierModel::Classify(head.init(encoder, embedding, device))
            }
        }
    }

    /// The word embedding's configuration.
    pub fn embedding(&self) -> &TokenEmbeddingConfig {
        match self {
            ModelConfig::Nli { embedding, .. } | ModelConfig::Classify { embedding, .. } => {
                embedding
            }
        }
    }

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

impl ModelMeta {
    /// The model metadata stored in the checkpoint file at `path`.
    ///
    /// # Errors
    /// When the file cannot be read ([`LoadError::Checkpoint`]) or holds no arbor classifier
    /// metadata ([`LoadError::Meta`]).
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        Self::of_file(&CheckpointFile::load(path)?, path)
    }

    /// The model metadata of a checkpoint file already read from `path`.
    fn of_file(file: &CheckpointFile, path: &Path) -> Result<Self, LoadError> {
        ModelMeta::from_checkpoint(&file.meta).map_err(|message| LoadError::Meta {
            path: path.to_path_buf(),
            message,
        })
    }
}

/// Why [`load_classifier`] could not rebuild a classifier from a checkpoint file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read, or its weights do not fit the model its metadata describes
    /// (transparent: the checkpoint error's own message).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The file holds no usable classifier metadata.
    #[error("{}: {message}", path.display())]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file holds the other kind of classifier.
    #[error("{} {kind}", path.display())]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// Which kind it holds, and which was wanted.
        kind: WrongKind,
    },
}

/// Rebuilds the classifier of kind `M` that the checkpoint file at `path` holds: reads the
/// file once, builds the model its metadata describes ([`ModelConfig::init`]) and loads the
/// weights ([`arbor_train::load_model_from`]). Returns the model and its metadata.
///
/// # Errors
/// When the file cannot be read, holds no classifier metadata, holds the other kind of
/// classifier (the error names the file and both kinds), or its weights do not fit.
pub fn load_classifier<B: ArborBackend, M: ClassifierKind<B> + Module<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<(M, ModelMeta), LoadError> {
    // One read of the file: the metadata builds the model, the record fills it.
    let file = CheckpointFile::load(path)?;
    let meta = ModelMeta::of_file(&file, path)?;
    let model = meta
        .model
        .init::<B>(device)
        .into_kind::<M>()
        .map_err(|kind| LoadError::WrongKind {
            path: path.to_path_buf(),
            kind,
        })?;
    let (model, _) = arbor_train::load_model_from(model, file, path, device)?;
    Ok((model, meta))
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

    /// Writes `model` with `meta` as a model-only checkpoint, as the engine and the importers do.
    fn save<M: Module<burn::backend::Flex>>(model: &M, meta: &ModelMeta, path: &Path) {
        use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
        let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
        let bytes =
            Recorder::<burn::backend::Flex>::record(&rec, model.clone().into_record(), ()).unwrap();
        CheckpointFile {
            meta: serde_json::json!({ "task": meta }),
            model: bytes,
            optim: Vec::new(),
        }
        .save(path)
        .unwrap();
    }

    #[test]
    fn a_checkpoint_rebuilds_its_classifier_and_refuses_the_other_kind() {
        type B = burn::backend::Flex;
        let device = Default::default();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sentence.ckpt");
        let meta = ModelMeta {
            model: classifier(EncoderKind::Lstm),
            vocab: (0..20).map(|i| format!("w{i}")).collect(),
            labels: (0..10).map(|i| i.to_string()).collect(),
            lowercase: true,
            case_fallback: false,
        };
        let ClassifierModel::Classify(model) = meta.model.init::<B>(&device) else {
            panic!("a sentence-classifier configuration builds a sentence classifier")
        };
        let weights = |m: &SentenceClassifier<B, Encoder<B>>| {
            m.embedding
                .embedding
                .weight
                .val()
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        };
        // Read first: a lazily initialised parameter takes its value when first read.
        let saved = weights(&model);
        save(&model, &meta, &path);
        let (back, read) =
            load_classifier::<B, SentenceClassifier<B, Encoder<B>>>(&path, &device).unwrap();
        assert_eq!(read.vocab, meta.vocab);
        assert!(weights(&back) == saved, "the weights come back");
        let err = load_classifier::<B, NliClassifier<B, Encoder<B>>>(&path, &device).unwrap_err();
        assert!(matches!(err, LoadError::WrongKind { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("sentence.ckpt")
                && err.contains("holds a sentence classifier, not a pair classifier"),
            "{err}"
        );
    }

    /// Every encoder kind goes through configuration, init, a checkpoint and back: the loaded
    /// classifier's configuration names the same kind and its weights are the saved ones.
    #[test]
    fn every_encoder_kind_round_trips_through_a_checkpoint() {
        use arbor_cells::names::VariantArray;
        type B = burn::backend::Flex;
        let device = Default::default();
        let dir = tempfile::tempdir().unwrap();
        for &kind in EncoderKind::VARIANTS {
            let path = dir.path().join(format!("{kind}.ckpt"));
            let meta = ModelMeta {
                model: ModelConfig::Classify {
                    embedding: TokenEmbeddingConfig::new(12, 16),
                    encoder: EncoderConfig::of_kind(kind, 16, 16),
                    head: SentenceClassifierConfig::new(16).with_n_classes(3),
                },
                vocab: (0..12).map(|i| format!("w{i}")).collect(),
                labels: (0..3).map(|i| i.to_string()).collect(),
                lowercase: false,
                case_fallback: false,
            };
            let ClassifierModel::Classify(model) = meta.model.init::<B>(&device) else {
                panic!("{kind}: a sentence classifier")
            };
            // Every float parameter's values, in visiting order (read first: a lazily
            // initialised parameter takes its value when first read).
            let params = |m: &SentenceClassifier<B, Encoder<B>>| {
                struct Values(Vec<f32>);
                impl burn::module::ModuleVisitor<B> for Values {
                    fn visit_float<const D: usize>(
                        &mut self,
                        param: &burn::module::Param<burn::tensor::Tensor<B, D>>,
                    ) {
                        self.0
                            .extend(param.val().into_data().to_vec::<f32>().unwrap());
                    }
                }
                let mut values = Values(Vec::new());
                m.visit(&mut values);
                values.0
            };
            let saved = params(&model);
            save(&model, &meta, &path);
            let (back, read) =
                load_classifier::<B, SentenceClassifier<B, Encoder<B>>>(&path, &device)
                    .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let ModelConfig::Classify { encoder, .. } = &read.model else {
                panic!("{kind}: a sentence-classifier configuration")
            };
            assert_eq!(encoder.kind(), kind);
            assert!(params(&back) == saved, "{kind}: the weights come back");
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
