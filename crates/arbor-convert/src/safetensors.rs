//! Any arbor checkpoint to safetensors plus a JSON configuration, and back.
//!
//! `model.safetensors` holds every parameter under its Burn path (`encoder.leaf.weight`, enum
//! variants left out) in `f32`, in Burn's own layout (a `Linear` weight is `[in, out]`, the
//! transpose of PyTorch's). `config.json` holds the checkpoint's whole metadata, so that the
//! pair rebuilds the same checkpoint: the same configuration, vocabulary and labels, and
//! bit-identical weights.

use std::path::{Path, PathBuf};

use burn::backend::Flex;
use burn_store::{ModuleSnapshot, SafetensorsStore};

use crate::model::with_model;
use crate::{save_checkpoint, CheckpointModel, ConvertError};

/// The `format` field of `config.json`.
pub const FORMAT: &str = "arbor-safetensors/1";
/// The weights file in an export directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The configuration file in an export directory.
pub const CONFIG_FILE: &str = "config.json";

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The safetensors file.
    pub weights: PathBuf,
    /// The JSON configuration.
    pub config: PathBuf,
    /// Which model (`classifier`, `r2d2`, `rnn-lm`).
    pub model: &'static str,
    /// How many tensors were written.
    pub tensors: usize,
}

fn load_meta(
    checkpoint: &Path,
) -> Result<(arbor_train::CheckpointFile, CheckpointModel), ConvertError> {
    let file = arbor_train::CheckpointFile::load(checkpoint)?;
    let kind =
        CheckpointModel::from_meta(&file.meta).map_err(|e| ConvertError::file(checkpoint, e))?;
    Ok((file, kind))
}

/// Exports the arbor checkpoint `checkpoint` to `out_dir/model.safetensors` and
/// `out_dir/config.json` (the directory is created).
///
/// # Errors
/// When the checkpoint cannot be read or rebuilt, or the files cannot be written.
pub fn export_safetensors(checkpoint: &Path, out_dir: &Path) -> Result<Exported, ConvertError> {
    let (file, kind) = load_meta(checkpoint)?;
    std::fs::create_dir_all(out_dir).map_err(|e| ConvertError::file(out_dir, e))?;
    let weights = out_dir.join(WEIGHTS_FILE);
    let config = out_dir.join(CONFIG_FILE);
    let device = Default::default();
    let tensors = with_model!(&kind, Flex, &device, |model| {
        let (model, _) = arbor_train::load_model::<Flex, _>(model, checkpoint, &device)?;
        write_weights::<_>(&model, &weights, kind.name())?
    });
    let json = serde_json::json!({
        "format": FORMAT,
        "model": kind.name(),
        "meta": file.meta,
    });
    let text = serde_json::to_string_pretty(&json).expect("JSON values always serialise");
    write_atomically(&config, text.as_bytes())?;
    Ok(Exported {
        weights,
        config,
        model: kind.name(),
        tensors,
    })
}

fn write_weights<M: burn::module::Module<Flex>>(
    model: &M,
    path: &Path,
    kind: &str,
) -> Result<usize, ConvertError> {
    let tmp = path.with_extension("safetensors.tmp");
    let mut store = SafetensorsStore::from_file(&tmp)
        .skip_enum_variants(true)
        .overwrite(true)
        .metadata("arbor_model", kind);
    model
        .save_into(&mut store)
        .map_err(|e| ConvertError::file(path, format!("cannot write safetensors: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| ConvertError::file(path, e))?;
    Ok(super::parameters::<Flex, M>(model).len())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ConvertError> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes).map_err(|e| ConvertError::file(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ConvertError::file(path, e))
}

/// Rebuilds an arbor checkpoint at `out` from an export: `config` (the JSON configuration) and
/// `weights` (the safetensors file). Every parameter of the model the configuration describes
/// must be in the file with its shape, and every tensor of the file must be a parameter.
///
/// # Errors
/// When a file cannot be read, the configuration describes no arbor model, or the tensors do
/// not fit it (all mismatches listed).
pub fn import_safetensors(weights: &Path, config: &Path, out: &Path) -> Result<(), ConvertError> {
    let text = std::fs::read_to_string(config).map_err(|e| ConvertError::file(config, e))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ConvertError::file(config, format!("not JSON: {e}")))?;
    if json["format"] != FORMAT {
        return Err(ConvertError::file(
            config,
            format!(
                "not an arbor export configuration (`format` is {}, expected \"{FORMAT}\")",
                json["format"]
            ),
        ));
    }
    let meta = json["meta"].clone();
    let kind = CheckpointModel::from_meta(&meta).map_err(|e| ConvertError::file(config, e))?;
    if !weights.exists() {
        return Err(ConvertError::file(weights, "no such file"));
    }
    let device = Default::default();
    with_model!(&kind, Flex, &device, |model| {
        let mut model = model;
        let mut store = SafetensorsStore::from_file(weights)
            .skip_enum_variants(true)
            .allow_partial(true)
            .validate(false);
        let result = model.load_from(&mut store).map_err(|e| {
            ConvertError::file(weights, format!("not a readable safetensors file: {e}"))
        })?;
        let mut problems: Vec<String> = result
            .missing
            .iter()
            .map(|(p, _)| format!("missing tensor `{p}`"))
            .collect();
        problems.extend(
            result
                .unused
                .iter()
                .map(|p| format!("unexpected tensor `{p}`")),
        );
        problems.extend(result.errors.iter().map(|e| format!("{e:?}")));
        if !problems.is_empty() {
            return Err(ConvertError::Layout {
                path: weights.to_path_buf(),
                layout: format!("arbor {}", kind.name()),
                problems,
            });
        }
        save_checkpoint::<Flex, _>(&model, meta.clone(), out)
    })
}

/// [`import_safetensors`] for an export directory (`dir/model.safetensors`, `dir/config.json`).
///
/// # Errors
/// As [`import_safetensors`].
pub fn import_export_dir(dir: &Path, out: &Path) -> Result<(), ConvertError> {
    import_safetensors(&dir.join(WEIGHTS_FILE), &dir.join(CONFIG_FILE), out)
}
