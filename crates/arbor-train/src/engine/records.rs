//! A checkpoint's model record: written as bytes ([`model_bytes`]), read back into a model
//! whose parameters keep their shapes ([`load_weights`], [`load_model`]), Burn's decoding
//! panics caught as errors ([`decode_record`]).

use std::path::Path;

use burn::module::{ModuleVisitor, Param};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};

use crate::checkpoint::{CheckpointError, CheckpointFile};

/// The record of `model`, as the bytes a checkpoint stores.
pub(super) fn model_bytes<B: Backend, M: Module<B>>(model: &M) -> Vec<u8> {
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    Recorder::<B>::record(&rec, model.clone().into_record(), ())
        .expect("in-memory recording cannot fail")
}

/// Runs `decode`, Burn's decoding of a record, turning a panic into an error: Burn panics on
/// some malformed records (an invalid parameter id, for one), which a checkpoint with a valid
/// checksum can still hold when it was written by other code or altered on purpose, and its
/// derived enum modules panic on a record of another variant (a Gumbel run resumed with
/// `--encoder lstm`). The panic's message becomes the error's, and is not also printed by the
/// panic hook: see [`quiet_panics`].
pub(super) fn decode_record<R>(decode: impl FnOnce() -> Result<R, String>) -> Result<R, String> {
    quiet_panics(decode).unwrap_or_else(|why| Err(format!("malformed record: {why}")))
}

thread_local! {
    /// Whether a panic on this thread is being caught as an error (not printed).
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic on this thread as `Err(its message)` without the panic hook
/// printing it: a hook installed once passes every other panic (other threads, or this one
/// outside `f`) on to the hook that was there before it.
fn quiet_panics<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the decoder panicked".into())
    })
}

/// The shapes of `model`'s parameters, in visiting order (without initialising lazy ones).
fn param_shapes<B: Backend, M: Module<B>>(model: &M) -> Vec<Vec<usize>> {
    struct Shapes(Vec<Vec<usize>>);
    impl<B: Backend> ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
        fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
        fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
            self.0.push(param.lazy_shape().to_vec());
        }
    }
    let mut shapes = Shapes(Vec::new());
    model.visit(&mut shapes);
    shapes.0
}

/// `model` with the weights of the record `bytes`, refused unless every parameter keeps its
/// shape (a record of a model built with another configuration would otherwise load and fail
/// later, inside a step).
pub(super) fn load_weights<B: Backend, M: Module<B>>(
    model: M,
    bytes: Vec<u8>,
    device: &B::Device,
) -> Result<M, String> {
    let expected = param_shapes::<B, _>(&model);
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    let record = Recorder::<B>::load(&rec, bytes, device).map_err(|e| e.to_string())?;
    let model = model.load_record(record);
    let got = param_shapes::<B, _>(&model);
    if got.len() != expected.len() {
        return Err(format!(
            "{} parameters in the checkpoint, {} in the model",
            got.len(),
            expected.len()
        ));
    }
    for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
        if g != e {
            return Err(format!(
                "parameter {k} has shape {g:?} in the checkpoint but {e:?} in the model (built \
                 with another configuration?)"
            ));
        }
    }
    Ok(model)
}

/// Loads model weights from a checkpoint file into `model` (built with the same configuration).
/// Returns the model and the checkpoint's metadata.
///
/// # Errors
/// The file is missing, damaged ([`CheckpointError`] says how) or holds a record that does not
/// decode.
pub fn load_model<B: Backend, M: Module<B>>(
    model: M,
    path: &Path,
    device: &B::Device,
) -> Result<(M, serde_json::Value), CheckpointError> {
    load_model_from(model, CheckpointFile::load(path)?, path, device)
}

/// [`load_model`] from a checkpoint file already read (`file`, read from `path`, which errors
/// name): for callers that read the metadata first to build `model`, so the file is read once.
///
/// # Errors
/// The record does not decode into `model`.
pub fn load_model_from<B: Backend, M: Module<B>>(
    model: M,
    file: CheckpointFile,
    path: &Path,
    device: &B::Device,
) -> Result<(M, serde_json::Value), CheckpointError> {
    let bytes = file.model;
    let model =
        decode_record(|| load_weights::<B, M>(model, bytes, device)).map_err(|message| {
            CheckpointError::Record {
                path: path.to_path_buf(),
                message,
            }
        })?;
    Ok((model, file.meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child half of the test below: a caught decoding panic, in a process of its own so
    /// that its stderr can be read.
    #[test]
    fn quiet_panics_child() {
        if std::env::var_os("ARBOR_QUIET_PANICS_CHILD").is_none() {
            return;
        }
        let e = decode_record::<()>(|| panic!("record of another variant")).unwrap_err();
        eprintln!("error: {e}");
    }

    #[test]
    fn a_caught_decoding_panic_is_an_error_and_prints_nothing_else() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "engine::records::tests::quiet_panics_child",
                "--nocapture",
            ])
            .env("ARBOR_QUIET_PANICS_CHILD", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("error: malformed record: record of another variant"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked at"), "{stderr}");
        // Outside a decode, panics still reach the previous hook.
        assert!(quiet_panics(|| 1).is_ok());
        assert!(!CATCHING.with(std::cell::Cell::get));
    }
}
