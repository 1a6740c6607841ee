//! Which model a checkpoint holds, rebuilding it from the checkpoint's metadata, and writing a
//! converted model as an arbor checkpoint.

use std::path::Path;

use arbor_cells::ArborBackend;
use arbor_lm::RnnLmConfig;
use arbor_tasks::{ClassifierKind, ModelConfig, ModelMeta, R2d2Meta};
use arbor_train::CheckpointFile;
use burn::module::Module;
use burn::prelude::Backend;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};

use crate::ConvertError;

/// What an arbor checkpoint holds, read from its metadata (`meta["task"]`).
#[derive(Debug, Clone)]
pub enum CheckpointModel {
    /// A sentence-pair or single-sentence classifier (`snli`, `sst`, `logic`, `listops`).
    Classifier(ModelMeta),
    /// An R2D2 language model (`r2d2`).
    R2d2(R2d2Meta),
    /// A recurrent language model (`ptb_lm`) and its vocabulary.
    RnnLm {
        /// The model configuration.
        config: RnnLmConfig,
        /// The vocabulary, id order.
        vocab: Vec<String>,
    },
}

impl CheckpointModel {
    /// Recognises the model of a checkpoint from its metadata.
    ///
    /// # Errors
    /// When the metadata describes none of arbor's models.
    pub fn from_meta(meta: &serde_json::Value) -> Result<Self, String> {
        let task = &meta["task"];
        let model = &task["model"];
        if model.get("task").is_some() {
            return ModelMeta::from_checkpoint(meta).map(CheckpointModel::Classifier);
        }
        if model.get("encoder").is_some() || model.get("d_model").is_some() {
            return R2d2Meta::from_checkpoint(meta).map(CheckpointModel::R2d2);
        }
        if model.get("cell").is_some() {
            let config: RnnLmConfig = serde_json::from_value(model.clone())
                .map_err(|e| format!("unreadable language-model configuration: {e}"))?;
            let vocab: Vec<String> = serde_json::from_value(task["vocab"].clone())
                .map_err(|e| format!("language-model checkpoint without a vocabulary: {e}"))?;
            return Ok(CheckpointModel::RnnLm { config, vocab });
        }
        Err("the metadata describes no arbor model (no `task.model` of a known kind)".into())
    }

    /// A short name: `classifier`, `r2d2` or `rnn-lm`.
    pub fn name(&self) -> &'static str {
        match self {
            CheckpointModel::Classifier(_) => "classifier",
            CheckpointModel::R2d2(_) => "r2d2",
            CheckpointModel::RnnLm { .. } => "rnn-lm",
        }
    }
}

/// Runs `$body` with `$model` bound to the freshly initialised module that `$kind` (a
/// [`CheckpointModel`]) describes, on backend `$B` and `$device`; every arm evaluates to the
/// same type.
macro_rules! with_model {
    ($kind:expr, $B:ty, $device:expr, |$model:ident| $body:expr) => {{
        use $crate::CheckpointModel as __K;
        match $kind {
            __K::Classifier(meta) => match meta.model.init::<$B>($device) {
                arbor_tasks::ClassifierModel::Nli($model) => $body,
                arbor_tasks::ClassifierModel::Classify($model) => $body,
            },
            __K::R2d2(meta) => {
                let $model = meta.model.init::<$B>($device);
                $body
            }
            __K::RnnLm { config, .. } => {
                let $model = config.init::<$B>($device);
                $body
            }
        }
    }};
}

pub(crate) use with_model;

/// The classifier of kind `M` that `config` describes ([`ModelConfig::init`]), to receive
/// imported weights.
pub(crate) fn build_classifier<B: ArborBackend, M: ClassifierKind<B>>(
    config: &ModelConfig,
    device: &B::Device,
) -> Result<M, ConvertError> {
    config
        .init::<B>(device)
        .into_kind()
        .map_err(|e| ConvertError::Config(format!("the imported model {e}")))
}

/// The bytes of `model`'s record as arbor checkpoints store them.
pub fn record_bytes<B: Backend, M: Module<B>>(model: &M) -> Vec<u8> {
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    Recorder::<B>::record(&rec, model.clone().into_record(), ())
        .expect("in-memory recording cannot fail")
}

/// A converted model and the checkpoint metadata that lets arbor's programs rebuild it
/// (`meta["task"]`, as `--eval-only --checkpoint`, `--parse`, `r2d2` and `ptb_lm` read it).
#[derive(Debug, Clone)]
pub struct Imported<M> {
    /// The model with the imported weights.
    pub model: M,
    /// The checkpoint metadata: `task` (the model configuration, vocabulary, labels) and
    /// `imported` (where the weights came from).
    pub meta: serde_json::Value,
}

impl<M> Imported<M> {
    /// Writes the model as a model-only arbor checkpoint (atomically, like every checkpoint).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save<B: ArborBackend>(&self, path: &Path) -> Result<(), ConvertError>
    where
        M: Module<B>,
    {
        save_checkpoint::<B, M>(&self.model, self.meta.clone(), path)
    }
}

/// Writes `model` with `meta` as a model-only arbor checkpoint at `path`.
///
/// # Errors
/// When the file cannot be written.
pub fn save_checkpoint<B: Backend, M: Module<B>>(
    model: &M,
    meta: serde_json::Value,
    path: &Path,
) -> Result<(), ConvertError> {
    CheckpointFile {
        meta,
        model: record_bytes::<B, M>(model),
        optim: Vec::new(),
    }
    .save(path)?;
    Ok(())
}

/// The checkpoint metadata of an imported model: `task` plus an `imported` record naming the
/// source file and layout.
pub fn imported_meta(task: serde_json::Value, source: &Path, layout: &str) -> serde_json::Value {
    serde_json::json!({
        "task": task,
        "imported": {
            "layout": layout,
            "source": source.display().to_string(),
            "tool": concat!("arbor-convert ", env!("CARGO_PKG_VERSION")),
        },
    })
}

/// The parameter paths and shapes of the model `kind` describes (see [`crate::parameters`]).
pub fn model_parameters(
    kind: &CheckpointModel,
    device: &burn::tensor::Device<burn::backend::Flex>,
) -> std::collections::BTreeMap<String, Vec<usize>> {
    with_model!(kind, burn::backend::Flex, device, |model| {
        crate::parameters::<burn::backend::Flex, _>(&model)
    })
}
