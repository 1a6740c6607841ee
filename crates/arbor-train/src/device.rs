//! Choosing a backend at run time from a `--device` string.
//!
//! Burn's model code is generic over the backend `B`, which is a type, while a command line
//! names the device as a string. [`run_on`] bridges the two: it parses `flex`, `ndarray`,
//! `cuda` or `cuda:N` and calls your [`BackendJob::run`] with the matching backend type and
//! device. Backends are cargo features of `arbor-train` (forwarded by `arbor` and `arbor-apps`); asking for one that was not compiled in is a
//! clear error naming the feature to enable.
//!
//! ```
//! use burn::prelude::*;
//! use arbor_train::device::{run_on, BackendJob};
//! use arbor_kernels::ArborBackend;
//!
//! struct SumOnes;
//! impl BackendJob for SumOnes {
//!     type Output = f32;
//!     fn run<B: ArborBackend>(self, device: B::Device) -> f32 {
//!         Tensor::<B, 1>::ones([4], &device).sum().into_scalar().elem()
//!     }
//! }
//! assert_eq!(run_on("flex", SumOnes).unwrap(), 4.0);
//! ```

use std::fmt;
use std::str::FromStr;

use arbor_kernels::ArborBackend;

/// A backend and device named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The pure-Rust CPU backend `burn-flex` (cargo feature `flex`, on by default).
    Flex,
    /// The `ndarray` CPU backend (cargo feature `ndarray`).
    NdArray,
    /// A CUDA GPU by index (cargo feature `cuda`).
    Cuda(usize),
}

/// Why a `--device` string could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    /// The string names no known backend.
    #[error("unknown device `{0}`: expected one of flex, ndarray, cuda, cuda:N")]
    Unknown(String),
    /// The backend exists but this binary was built without its cargo feature.
    #[error(
        "the `{backend}` backend is not compiled into this binary; rebuild with \
         `--features {feature}` (for example `cargo run --release --features {feature} \
         --example snli -- --device {backend}`)"
    )]
    NotCompiled {
        /// The backend asked for.
        backend: &'static str,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
}

impl DeviceSpec {
    /// The backend's name (`flex`, `ndarray`, `cuda`).
    pub fn backend_name(self) -> &'static str {
        match self {
            DeviceSpec::Flex => "flex",
            DeviceSpec::NdArray => "ndarray",
            DeviceSpec::Cuda(_) => "cuda",
        }
    }

    /// Whether this binary was compiled with the backend's feature.
    pub fn is_compiled(self) -> bool {
        match self {
            DeviceSpec::Flex => cfg!(feature = "flex"),
            DeviceSpec::NdArray => cfg!(feature = "ndarray"),
            DeviceSpec::Cuda(_) => cfg!(feature = "cuda"),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
            other => f.write_str(other.backend_name()),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase();
        match key.as_str() {
            "flex" | "cpu" => Ok(DeviceSpec::Flex),
            "ndarray" => Ok(DeviceSpec::NdArray),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => key
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| DeviceError::Unknown(s.to_string())),
        }
    }
}

/// The backends compiled into this binary, as `--device` names.
pub fn compiled_backends() -> Vec<&'static str> {
    [DeviceSpec::Flex, DeviceSpec::NdArray, DeviceSpec::Cuda(0)]
        .into_iter()
        .filter(|d| d.is_compiled())
        .map(DeviceSpec::backend_name)
        .collect()
}

/// Work to run on whichever backend the user picked.
///
/// Training jobs wrap the backend themselves: `Autodiff<B>` for the model, `B` for validation.
pub trait BackendJob {
    /// What the job returns.
    type Output;
    /// Runs the job with backend `B` on `device`.
    fn run<B: ArborBackend>(self, device: B::Device) -> Self::Output;
}

/// Parses `device` and runs `job` on that backend.
///
/// # Errors
/// [`DeviceError::Unknown`] for an unknown name, [`DeviceError::NotCompiled`] when the backend's
/// cargo feature is off.
pub fn run_on<J: BackendJob>(device: &str, job: J) -> Result<J::Output, DeviceError> {
    run_on_spec(device.parse()?, job)
}

/// Runs `job` on an already parsed [`DeviceSpec`].
///
/// On the CPU backends it first applies [`crate::alloc::tune_for_cpu_tensors`] (glibc keeps large
/// freed blocks instead of unmapping them; `ARBOR_MALLOC=system` opts out).
///
/// # Errors
/// [`DeviceError::NotCompiled`] when the backend's cargo feature is off.
pub fn run_on_spec<J: BackendJob>(spec: DeviceSpec, job: J) -> Result<J::Output, DeviceError> {
    let missing = |spec: DeviceSpec| DeviceError::NotCompiled {
        backend: spec.backend_name(),
        feature: spec.backend_name(),
    };
    match spec {
        #[cfg(feature = "flex")]
        DeviceSpec::Flex => {
            crate::alloc::tune_for_cpu_tensors();
            Ok(job.run::<burn::backend::Flex>(Default::default()))
        }
        #[cfg(feature = "ndarray")]
        DeviceSpec::NdArray => {
            crate::alloc::tune_for_cpu_tensors();
            Ok(job.run::<burn::backend::NdArray<f32>>(Default::default()))
        }
        #[cfg(feature = "cuda")]
        DeviceSpec::Cuda(index) => {
            Ok(job.run::<burn::backend::Cuda<f32>>(burn::backend::cuda::CudaDevice { index }))
        }
        #[allow(unreachable_patterns)]
        other => {
            let _ = &job;
            Err(missing(other))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!("flex".parse(), Ok(DeviceSpec::Flex));
        assert_eq!("NdArray".parse(), Ok(DeviceSpec::NdArray));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:1".parse(), Ok(DeviceSpec::Cuda(1)));
        assert_eq!(DeviceSpec::Cuda(3).to_string(), "cuda:3");
        assert!(matches!(
            "tpu".parse::<DeviceSpec>(),
            Err(DeviceError::Unknown(_))
        ));
        assert!(matches!(
            "cuda:x".parse::<DeviceSpec>(),
            Err(DeviceError::Unknown(_))
        ));
    }

    struct Name;
    impl BackendJob for Name {
        type Output = String;
        fn run<B: ArborBackend>(self, device: B::Device) -> String {
            B::name(&device)
        }
    }

    #[test]
    fn runs_compiled_backends_and_names_missing_features() {
        for spec in [DeviceSpec::Flex, DeviceSpec::NdArray, DeviceSpec::Cuda(0)] {
            let result = run_on_spec(spec, Name);
            if spec.is_compiled() {
                if !matches!(spec, DeviceSpec::Cuda(_)) {
                    assert!(result.is_ok(), "{spec} should run");
                }
            } else {
                let err = result.unwrap_err().to_string();
                assert!(
                    err.contains(&format!("--features {}", spec.backend_name())),
                    "{err}"
                );
            }
        }
    }
}
