//! Putting mapped arrays into an arbor module, by parameter path, with every mismatch reported.

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::{Module, ParamId};
use burn::prelude::Backend;
use burn_store::{ModuleSnapshot, TensorSnapshot};

use crate::{Array, ConvertError};

/// The parameter paths of `model` with their shapes, in Burn's naming (`encoder.leaf.weight`,
/// `layers.0.attention.query.weight`; enum variants are left out of the path, as in the
/// safetensors export).
pub fn parameters<B: Backend, M: Module<B>>(model: &M) -> BTreeMap<String, Vec<usize>> {
    model
        .collect(None, None, true)
        .into_iter()
        .map(|s| (s.full_path(), s.shape.to_vec()))
        .collect()
}

/// Arrays destined for an arbor module, keyed by its parameter paths (see [`parameters`]).
#[derive(Debug, Clone, Default)]
pub struct Weights {
    arrays: BTreeMap<String, Array>,
}

impl Weights {
    /// No arrays yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the parameter at `path`.
    pub fn put(&mut self, path: impl Into<String>, array: Array) {
        self.arrays.insert(path.into(), array);
    }

    /// Sets `path` when the array is there (a `None` stands for a problem already recorded in
    /// the state dict, reported by its `finish`).
    pub fn put_some(&mut self, path: impl Into<String>, array: Option<Array>) {
        if let Some(a) = array {
            self.put(path, a);
        }
    }

    /// The paths set so far.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.arrays.keys().map(String::as_str)
    }

    /// `model` with every parameter replaced by the array of the same path. Every parameter of
    /// `model` must get an array of its shape and every array must find its parameter; all
    /// mismatches are reported at once, naming `source` and `layout`.
    ///
    /// # Errors
    /// A [`ConvertError::Layout`] listing the parameters without an array, the arrays without a
    /// parameter and the shape mismatches.
    pub fn apply<B: Backend, M: Module<B>>(
        self,
        mut model: M,
        source: &Path,
        layout: &str,
    ) -> Result<M, ConvertError> {
        let expected = parameters::<B, M>(&model);
        let mut problems = Vec::new();
        for (path, shape) in &expected {
            match self.arrays.get(path) {
                None => problems.push(format!(
                    "arbor parameter `{path}` {shape:?} gets no value from the {layout} mapping"
                )),
                Some(a) if a.shape() != shape.as_slice() => problems.push(format!(
                    "arbor parameter `{path}` is {shape:?} but the mapping gives {:?} (the \
                     configuration inferred from the weights does not fit them)",
                    a.shape()
                )),
                Some(_) => {}
            }
        }
        for path in self.arrays.keys() {
            if !expected.contains_key(path) {
                problems.push(format!(
                    "the {layout} mapping gives `{path}`, which this arbor model does not have"
                ));
            }
        }
        if !problems.is_empty() {
            return Err(ConvertError::Layout {
                path: source.to_path_buf(),
                layout: layout.to_string(),
                problems,
            });
        }
        let snapshots: Vec<TensorSnapshot> = self
            .arrays
            .into_iter()
            .map(|(path, a)| {
                let stack: Vec<String> = path.split('.').map(str::to_string).collect();
                TensorSnapshot::from_data(a.into_data(), stack, Vec::new(), ParamId::new())
            })
            .collect();
        let result = model.apply(snapshots, None, None, true);
        if !result.errors.is_empty() || !result.missing.is_empty() || !result.unused.is_empty() {
            let mut problems: Vec<String> =
                result.errors.iter().map(|e| format!("{e:?}")).collect();
            problems.extend(result.missing.iter().map(|(p, _)| format!("`{p}` not set")));
            problems.extend(result.unused.iter().map(|p| format!("`{p}` not used")));
            return Err(ConvertError::Layout {
                path: source.to_path_buf(),
                layout: layout.to_string(),
                problems,
            });
        }
        Ok(model)
    }
}
