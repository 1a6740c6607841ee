//! A PyTorch state dict read into host arrays, and the bookkeeping that turns a mapping's
//! mistakes into one error: keys it needed but did not find, keys with the wrong shape, and keys
//! nothing read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};

use crate::pickle_guard::{check_pytorch_file, PickleLimits};
use crate::ConvertError;

/// A dense `f32` array, row-major: what one state-dict tensor becomes on the host, and what the
/// mapping functions reshape (transposes, gate reorders, summed biases) before it becomes an
/// arbor parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Array {
    /// An array of `shape` holding `data` (row-major).
    ///
    /// # Errors
    /// When `data` does not have `shape`'s number of elements.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Self, ConvertError> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(ConvertError::Config(format!(
                "an array of shape {shape:?} needs {n} values, got {}",
                data.len()
            )));
        }
        Ok(Array { shape, data })
    }

    /// Reads any float (or integer) tensor, converting its values to `f32`.
    pub fn from_data(data: TensorData) -> Self {
        let shape = data.shape.to_vec();
        let data = if data.dtype == DType::F32 {
            data
        } else {
            data.convert::<f32>()
        };
        let values = data.into_vec::<f32>().expect("converted to f32 just above");
        Array {
            shape,
            data: values,
        }
    }

    /// The array as Burn tensor data (`f32`).
    pub fn into_data(self) -> TensorData {
        TensorData::new(self.data, self.shape)
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The values, row-major.
    pub fn values(&self) -> &[f32] {
        &self.data
    }

    /// The same values with another shape of the same size.
    ///
    /// # Panics
    /// If the sizes differ (a bug in a mapping: shapes are checked when keys are taken).
    pub fn reshape(mut self, shape: Vec<usize>) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            self.data.len(),
            "reshape {:?} -> {shape:?}",
            self.shape
        );
        self.shape = shape;
        self
    }

    /// The transpose of a matrix: PyTorch's `Linear.weight` is `[out, in]`, Burn's `[in, out]`.
    ///
    /// # Panics
    /// If the array is not 2-D (a bug in a mapping).
    pub fn t(&self) -> Self {
        assert_eq!(self.shape.len(), 2, "transpose of a {:?} array", self.shape);
        let (r, c) = (self.shape[0], self.shape[1]);
        let mut data = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                data[j * r + i] = self.data[i * c + j];
            }
        }
        Array {
            shape: vec![c, r],
            data,
        }
    }

    /// Splits the first axis into `n` equal blocks (e.g. the gates of a fused gate matrix).
    ///
    /// # Panics
    /// If `n` does not divide the first axis (a bug in a mapping).
    pub fn blocks(&self, n: usize) -> Vec<Array> {
        let rows = self.shape[0];
        assert!(n > 0 && rows.is_multiple_of(n), "{rows} rows in {n} blocks");
        let per = self.data.len() / n;
        let mut shape = self.shape.clone();
        shape[0] = rows / n;
        self.data
            .chunks(per)
            .map(|d| Array {
                shape: shape.clone(),
                data: d.to_vec(),
            })
            .collect()
    }

    /// Concatenates arrays along the first axis.
    ///
    /// # Panics
    /// If `parts` is empty or their trailing dimensions differ (a bug in a mapping).
    pub fn concat(parts: &[Array]) -> Self {
        assert!(!parts.is_empty(), "concatenating nothing");
        let tail = &parts[0].shape[1..];
        let mut shape = parts[0].shape.clone();
        shape[0] = 0;
        let mut data = Vec::new();
        for p in parts {
            assert_eq!(&p.shape[1..], tail, "concatenating mismatched arrays");
            shape[0] += p.shape[0];
            data.extend_from_slice(&p.data);
        }
        Array { shape, data }
    }

    /// The first axis's blocks in another order: block `j` of the result is block `order[j]` of
    /// `self` (`self` split into `order.len()` blocks). This is how a fused gate matrix is
    /// rewritten from one implementation's gate order into another's.
    pub fn reorder_blocks(&self, order: &[usize]) -> Self {
        let blocks = self.blocks(order.len());
        let picked: Vec<Array> = order.iter().map(|&k| blocks[k].clone()).collect();
        Array::concat(&picked)
    }

    /// Rows `start..end` of the first axis.
    ///
    /// # Panics
    /// If the range is out of bounds (a bug in a mapping).
    pub fn rows(&self, start: usize, end: usize) -> Self {
        let per: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        Array {
            shape,
            data: self.data[start * per..end * per].to_vec(),
        }
    }

    /// The elementwise sum of two arrays of one shape (e.g. PyTorch's `bias_ih + bias_hh`).
    ///
    /// # Panics
    /// If the shapes differ (a bug in a mapping).
    pub fn add(&self, other: &Array) -> Self {
        assert_eq!(self.shape, other.shape, "adding mismatched arrays");
        Array {
            shape: self.shape.clone(),
            data: self
                .data
                .iter()
                .zip(&other.data)
                .map(|(a, b)| a + b)
                .collect(),
        }
    }

    /// Every value passed through `f`.
    pub fn map(&self, f: impl Fn(f32) -> f32) -> Self {
        Array {
            shape: self.shape.clone(),
            data: self.data.iter().map(|&x| f(x)).collect(),
        }
    }

    /// An array of zeros.
    pub fn zeros(shape: Vec<usize>) -> Self {
        let n = shape.iter().product();
        Array {
            shape,
            data: vec![0.0; n],
        }
    }
}

/// Wrappers that training scripts put around a state dict (`torch.save({"model": sd, ...})`,
/// `nn.DataParallel`'s `module.` prefix): stripped when every key has the same one.
const WRAPPERS: [&str; 5] = ["state_dict", "model_state_dict", "model", "module", "net"];

/// A PyTorch state dict: tensor name → [`Array`], with a record of which names a mapping has
/// read. A mapping `take`s every key it understands; whatever goes wrong is collected, and
/// [`StateDict::finish`] reports all of it at once, together with every key nothing read.
#[derive(Debug, Clone)]
pub struct StateDict {
    path: PathBuf,
    tensors: BTreeMap<String, Array>,
    taken: BTreeSet<String>,
    problems: Vec<String>,
}

impl StateDict {
    /// Reads a state dict saved by `torch.save` (`.pt`, `.pth`, `.bin`: the zip format of
    /// PyTorch ≥ 1.6 or the legacy pickle format) or a `.safetensors` file. No Python is
    /// needed. Non-tensor entries (epoch counters, optimizer settings) are skipped; a common
    /// wrapper key (`state_dict.`, `model.`, `module.`, ...) is stripped.
    ///
    /// # Errors
    /// When the file cannot be read or holds no tensors, or its pickle passes the default
    /// [`PickleLimits`] (see [`StateDict::read_with`]).
    pub fn read(path: &Path) -> Result<Self, ConvertError> {
        Self::read_with(path, &PickleLimits::default())
    }

    /// [`StateDict::read`] with other bounds on an untrusted pickle: before Burn's reader
    /// builds anything, the pickle program is walked without building objects and refused when
    /// it would pass `limits` ([`crate::pickle_guard`]).
    ///
    /// # Errors
    /// As [`StateDict::read`].
    pub fn read_with(path: &Path, limits: &PickleLimits) -> Result<Self, ConvertError> {
        let is_safetensors = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
        let tensors = if is_safetensors {
            read_safetensors(path)?
        } else {
            read_pytorch(path, limits)?
        };
        if tensors.is_empty() {
            return Err(ConvertError::file(path, "holds no tensors"));
        }
        Ok(Self::from_arrays(path, strip_wrapper(tensors)))
    }

    /// A state dict from arrays already in memory; `path` names it in errors.
    pub fn from_arrays(path: impl Into<PathBuf>, tensors: BTreeMap<String, Array>) -> Self {
        StateDict {
            path: path.into(),
            tensors,
            taken: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every key with its shape, in name order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &[usize])> {
        self.tensors
            .iter()
            .map(|(k, a)| (k.as_str(), a.shape.as_slice()))
    }

    /// The shape of `key`, if present (for inferring a configuration from the weights).
    pub fn shape(&self, key: &str) -> Option<&[usize]> {
        self.tensors.get(key).map(|a| a.shape.as_slice())
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains_key(key)
    }

    /// The keys that start with `prefix`, in name order.
    pub fn keys_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.tensors
            .keys()
            .filter(move |k| k.starts_with(prefix))
            .map(String::as_str)
    }

    /// The shape of a key the layout needs: a missing key is an error naming it.
    ///
    /// # Errors
    /// When `key` is absent.
    pub fn require_shape(&self, key: &str, layout: &str) -> Result<Vec<usize>, ConvertError> {
        self.shape(key)
            .map(<[usize]>::to_vec)
            .ok_or_else(|| ConvertError::Layout {
                path: self.path.clone(),
                layout: layout.to_string(),
                problems: vec![format!(
                    "missing key `{key}` (the {layout} layout needs it; keys present: {})",
                    self.key_summary()
                )],
            })
    }

    fn key_summary(&self) -> String {
        let keys: Vec<&str> = self.tensors.keys().map(String::as_str).take(12).collect();
        let more = self.tensors.len().saturating_sub(keys.len());
        if more > 0 {
            format!("{}, and {more} more", keys.join(", "))
        } else {
            keys.join(", ")
        }
    }

    /// Takes `key`, which must have `shape`. A missing key or another shape is recorded as a
    /// problem (reported by [`StateDict::finish`]) and gives `None`.
    pub fn take(&mut self, key: &str, shape: &[usize]) -> Option<Array> {
        match self.tensors.get(key) {
            None => {
                self.problems
                    .push(format!("missing key `{key}` (expected shape {shape:?})"));
                None
            }
            Some(a) => self.checked(key, a.clone(), shape),
        }
    }

    /// Like [`StateDict::take`], but an absent key is not a problem (an optional tensor, such
    /// as a bias a layer may have been built without).
    pub fn take_optional(&mut self, key: &str, shape: &[usize]) -> Option<Array> {
        let a = self.tensors.get(key)?.clone();
        self.checked(key, a, shape)
    }

    fn checked(&mut self, key: &str, a: Array, shape: &[usize]) -> Option<Array> {
        self.taken.insert(key.to_string());
        if a.shape != shape {
            self.problems.push(format!(
                "key `{key}` has shape {:?}, expected {shape:?}",
                a.shape
            ));
            return None;
        }
        Some(a)
    }

    /// Marks `key` as read on purpose without using it (a buffer arbor recomputes, such as
    /// batch norm's `num_batches_tracked`).
    pub fn ignore(&mut self, key: &str) {
        if self.tensors.contains_key(key) {
            self.taken.insert(key.to_string());
        }
    }

    /// Records a problem the mapping found (an unsupported setting visible in the weights, a
    /// vocabulary of the wrong size...).
    pub fn problem(&mut self, message: impl Into<String>) {
        self.problems.push(message.into());
    }

    /// Ends the mapping: every recorded problem and every key nothing read, as one
    /// [`ConvertError::Layout`] naming the file and the `layout`; `Ok` only when the whole
    /// state dict was understood.
    ///
    /// # Errors
    /// When there is any problem.
    pub fn finish(self, layout: &str) -> Result<(), ConvertError> {
        let mut problems = self.problems;
        for (k, a) in &self.tensors {
            if !self.taken.contains(k) {
                problems.push(format!(
                    "unexpected key `{k}` with shape {:?} (the {layout} layout has no such tensor)",
                    a.shape
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConvertError::Layout {
                path: self.path,
                layout: layout.to_string(),
                problems,
            })
        }
    }
}

fn read_pytorch(
    path: &Path,
    limits: &PickleLimits,
) -> Result<BTreeMap<String, Array>, ConvertError> {
    if !path.exists() {
        return Err(ConvertError::file(path, "no such file"));
    }
    check_pytorch_file(path, limits)?;
    let reader = burn_store::pytorch::PytorchReader::new(path).map_err(|e| {
        ConvertError::file(
            path,
            format!("not a readable PyTorch state dict (torch.save output): {e}"),
        )
    })?;
    let mut out = BTreeMap::new();
    for (name, snapshot) in reader.into_tensors() {
        let data = snapshot
            .to_data()
            .map_err(|e| ConvertError::file(path, format!("tensor `{name}`: {e:?}")))?;
        out.insert(name, Array::from_data(data));
    }
    Ok(out)
}

fn read_safetensors(path: &Path) -> Result<BTreeMap<String, Array>, ConvertError> {
    let bytes = std::fs::read(path).map_err(|e| ConvertError::file(path, e))?;
    let mut store = burn_store::SafetensorsStore::from_bytes(Some(bytes));
    use burn_store::ModuleStore;
    let all = store
        .get_all_snapshots()
        .map_err(|e| ConvertError::file(path, format!("not a readable safetensors file: {e}")))?;
    let mut out = BTreeMap::new();
    for (name, snapshot) in all {
        let data = snapshot
            .to_data()
            .map_err(|e| ConvertError::file(path, format!("tensor `{name}`: {e:?}")))?;
        out.insert(name.clone(), Array::from_data(data));
    }
    Ok(out)
}

/// Strips a wrapper prefix that every key shares (see [`WRAPPERS`]), repeatedly.
fn strip_wrapper(mut tensors: BTreeMap<String, Array>) -> BTreeMap<String, Array> {
    loop {
        let Some(prefix) = WRAPPERS.iter().map(|w| format!("{w}.")).find(|p| {
            tensors
                .keys()
                .all(|k| k.starts_with(p.as_str()) && k.len() > p.len())
        }) else {
            return tensors;
        };
        tensors = tensors
            .into_iter()
            .map(|(k, v)| (k[prefix.len()..].to_string(), v))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(shape: &[usize]) -> Array {
        let n = shape.iter().product();
        Array::new(shape.to_vec(), (0..n).map(|x| x as f32).collect()).unwrap()
    }

    #[test]
    fn transpose_and_block_reorder() {
        let a = arr(&[2, 3]);
        assert_eq!(a.t().values(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(a.t().shape(), &[3, 2]);
        let g = arr(&[3, 2]); // blocks [0 1] [2 3] [4 5]
        assert_eq!(
            g.reorder_blocks(&[2, 0, 1]).values(),
            &[4.0, 5.0, 0.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(g.rows(1, 3).values(), &[2.0, 3.0, 4.0, 5.0]);
        assert_eq!(g.add(&g).values()[5], 10.0);
    }

    #[test]
    fn every_problem_and_every_unread_key_is_reported_together() {
        let mut t = BTreeMap::new();
        t.insert("a.weight".to_string(), arr(&[2, 3]));
        t.insert("b.weight".to_string(), arr(&[4]));
        t.insert("extra".to_string(), arr(&[1]));
        let mut sd = StateDict::from_arrays("model.pt", t);
        assert!(sd.take("a.weight", &[2, 3]).is_some());
        assert!(sd.take("b.weight", &[5]).is_none());
        assert!(sd.take("c.bias", &[2]).is_none());
        assert!(sd.take_optional("d.bias", &[2]).is_none());
        let err = sd.finish("test").unwrap_err().to_string();
        assert!(
            err.starts_with("model.pt: does not match the test layout (3 problems)"),
            "{err}"
        );
        assert!(
            err.contains("key `b.weight` has shape [4], expected [5]"),
            "{err}"
        );
        assert!(err.contains("missing key `c.bias`"), "{err}");
        assert!(err.contains("unexpected key `extra`"), "{err}");
        assert!(!err.contains("d.bias"), "{err}");
    }

    #[test]
    fn a_shared_wrapper_prefix_is_stripped() {
        let mut t = BTreeMap::new();
        t.insert("module.model.x".to_string(), arr(&[1]));
        t.insert("module.model.y".to_string(), arr(&[1]));
        let keys: Vec<String> = strip_wrapper(t).into_keys().collect();
        assert_eq!(keys, ["x", "y"]);
        let mut t = BTreeMap::new();
        t.insert("model.x".to_string(), arr(&[1]));
        t.insert("other.y".to_string(), arr(&[1]));
        assert_eq!(strip_wrapper(t).len(), 2);
    }
}
