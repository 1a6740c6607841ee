//! Bring your checkpoints: the reference PyTorch models' weights into arbor, and any arbor
//! checkpoint out to safetensors and back (docs/interop.md).
//!
//! - [`StateDict`] reads a `torch.save` state dict (`.pt`/`.pth`/`.bin`, no Python needed) or a
//!   `.safetensors` file into host [`Array`]s. A layout mapping `take`s every key it knows,
//!   reshapes the arrays into arbor's layout (transposed `[out, in]` weights, gate rows in
//!   arbor's order, summed split biases) and puts them into [`Weights`] by arbor parameter path;
//!   [`StateDict::finish`] and [`Weights::apply`] report every missing, unexpected or mis-shaped
//!   tensor in one error, so a load is never partial.
//! - [`Imported`] is the result: the model and the checkpoint metadata that arbor's programs
//!   read (`--eval-only --checkpoint`, `--parse`, `r2d2`, `ptb_lm`).
//! - [`import_rnn_lm`]: the ON-LSTM, FastTrees and Faster FastTrees language models of the
//!   reference code bases.
//! - [`r2d2::import_r2d2`]: the R2D2 language model of ant-research/StructuredLM_RTDT.
//! - [`export_safetensors`] / [`import_safetensors`]: any arbor checkpoint ⇄ `model.safetensors`
//!   plus `config.json`, bit-exact both ways.
//!
//! The `arbor-convert` program wraps all of it.

mod error;
pub mod gumbel;
mod model;
pub mod pickle_guard;
pub mod r2d2;
mod rnn_lm;
mod safetensors;
mod spinn;
mod state_dict;
pub mod vocab;
mod weights;

pub use error::ConvertError;
pub use model::{
    imported_meta, model_parameters, record_bytes, save_checkpoint, CheckpointModel, Imported,
};
pub use pickle_guard::PickleLimits;
pub use rnn_lm::{
    import_rnn_lm, RnnLmFlavour, RnnLmImport, ABSENT_TOKEN_LOGIT, MAX_FULL_SOFTMAX_VOCAB,
    REFERENCE_WEIGHT_DROP,
};
pub use safetensors::{
    export_safetensors, import_export_dir, import_safetensors, Exported, CONFIG_FILE, FORMAT,
    WEIGHTS_FILE,
};
pub use spinn::{
    import_spinn, model_state_dict, SpinnImport, SPINN_LAYOUT, SPINN_PAD, SPINN_SNLI_LABELS,
    SPINN_UNK,
};
pub use state_dict::{Array, StateDict};
pub use vocab::ReferenceVocab;
pub use weights::{parameters, Weights};
