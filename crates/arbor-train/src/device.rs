//! Choosing a backend at run time from a `--device` string.
//!
//! Burn's model code is generic over the backend `B`, which is a type, while a command line
//! names the device as a string. [`run_on`] bridges the two: it parses `flex`, `ndarray`,
//! `cuda` or `cuda:N` and calls your [`BackendJob::run`] with the matching backend type and
//! device. Backends are cargo features of `arbor-train` (forwarded by `arbor` and `arbor-apps`); asking for one that was not compiled in is a
//! clear error naming the feature to enable.
//!
//! `auto` (every program's default) picks the first CUDA GPU when the binary has the `cuda`
//! feature and the driver answers with at least one device, and otherwise the default CPU
//! backend (`flex`, or `ndarray` when only that one is compiled in), as candle's and tch-rs's
//! "best device" helpers do. [`resolve`] turns any `--device` string into the concrete name to
//! print and record. An explicit `cuda`/`cuda:N` on a machine without that GPU is a one-line
//! [`DeviceError::Unavailable`], checked before Burn's CUDA runtime starts (it panics instead).
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
//! # #[cfg(feature = "flex")]
//! assert_eq!(run_on("flex", SumOnes).unwrap(), 4.0);
//! # #[cfg(not(feature = "flex"))]
//! # assert!(run_on("flex", SumOnes).is_err());
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
    #[error("unknown device `{0}`: expected one of auto, flex, ndarray, cuda, cuda:N")]
    Unknown(String),
    /// The backend is compiled in but the device does not answer (no driver, no such GPU).
    #[error("--device {device}: {reason}")]
    Unavailable {
        /// The device asked for (`cuda:1`).
        device: String,
        /// What the driver said.
        reason: String,
    },
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

    /// Parses a device name; `auto` is resolved here ([`DeviceSpec::auto`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase();
        match key.as_str() {
            "auto" => DeviceSpec::auto(),
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

impl DeviceSpec {
    /// Bytes of memory a run on this device can still take, when known: for the CPU backends
    /// the host's available memory (Linux: `MemAvailable` in `/proc/meminfo`, lowered to the
    /// room left under a cgroup v2 memory limit); `None` for CUDA (Burn 0.21 does not report a
    /// device's free memory) and on other systems.
    pub fn available_memory(self) -> Option<u64> {
        match self {
            DeviceSpec::Flex | DeviceSpec::NdArray => host_available_memory(),
            DeviceSpec::Cuda(_) => None,
        }
    }
}

/// Read by hand: two numbers from two Linux files, where the crates that report memory
/// (`sysinfo`) scan the whole process table for them.
fn host_available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let host = mem_available(&meminfo)?;
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let limit = read("/sys/fs/cgroup/memory.max").and_then(|max| {
        let current = read("/sys/fs/cgroup/memory.current")?;
        cgroup_room(&max, &current)
    });
    Some(limit.map_or(host, |room| room.min(host)))
}

/// `MemAvailable: N kB` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Room under a cgroup v2 limit: `memory.max` (bytes, or `max`: none) less `memory.current`.
fn cgroup_room(max: &str, current: &str) -> Option<u64> {
    let max: u64 = max.trim().parse().ok()?;
    let current: u64 = current.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

/// The `--device` value every program uses when none is given.
pub const DEFAULT_DEVICE: &str = "auto";

impl DeviceSpec {
    /// The CPU backend `auto` falls back to: `flex` when compiled in, else `ndarray`.
    pub fn default_cpu() -> Result<Self, DeviceError> {
        [DeviceSpec::Flex, DeviceSpec::NdArray]
            .into_iter()
            .find(|d| d.is_compiled())
            .ok_or(DeviceError::NotCompiled {
                backend: "flex",
                feature: "flex",
            })
    }

    /// What `--device auto` means on this machine: `cuda:0` when this binary has the `cuda`
    /// feature and the driver reports at least one GPU, otherwise [`DeviceSpec::default_cpu`].
    pub fn auto() -> Result<Self, DeviceError> {
        match cuda_device_count() {
            Ok(n) if n > 0 => Ok(DeviceSpec::Cuda(0)),
            _ => DeviceSpec::default_cpu(),
        }
    }

    /// Checks that the device answers: always for the CPU backends; for `cuda:N`, that the
    /// driver loads and has a GPU number `N`. Fails with a one-line error otherwise.
    pub fn check_available(self) -> Result<(), DeviceError> {
        if !self.is_compiled() {
            return Err(DeviceError::NotCompiled {
                backend: self.backend_name(),
                feature: self.backend_name(),
            });
        }
        let DeviceSpec::Cuda(index) = self else {
            return Ok(());
        };
        let unavailable = |reason: String| DeviceError::Unavailable {
            device: self.to_string(),
            reason,
        };
        match cuda_device_count() {
            Err(reason) => Err(unavailable(reason)),
            Ok(0) => Err(unavailable("the CUDA driver reports no GPU".into())),
            Ok(n) if index >= n => Err(unavailable(format!(
                "this machine has {n} CUDA GPU{} (cuda:0{})",
                if n == 1 { "" } else { "s" },
                if n == 1 {
                    String::new()
                } else {
                    format!("..cuda:{}", n - 1)
                }
            ))),
            Ok(_) => Ok(()),
        }
    }
}

/// How many CUDA GPUs the driver reports, or why it could not be asked (no driver library,
/// `cuInit` failed, or this binary has no `cuda` feature).
///
/// The driver is asked once per process: `auto`, [`resolve`] and [`run_on_spec`] all check,
/// and the answer does not change while the process runs.
pub fn cuda_device_count() -> Result<usize, String> {
    static COUNT: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    COUNT.get_or_init(ask_cuda_driver).clone()
}

fn ask_cuda_driver() -> Result<usize, String> {
    #[cfg(feature = "cuda")]
    {
        use cudarc::driver::{result, sys};
        // SAFETY: only tries to open the driver library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return Err("no NVIDIA driver: libcuda.so could not be loaded".into());
        }
        result::init().map_err(|e| format!("the CUDA driver did not start (cuInit: {e:?})"))?;
        let n = result::device::get_count()
            .map_err(|e| format!("the CUDA driver could not count GPUs ({e:?})"))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// Resolves a `--device` string (including `auto`) to the concrete device it names, checking
/// that it is compiled in and answers. Programs call this first and print and record the result.
///
/// # Errors
/// [`DeviceError::Unknown`], [`DeviceError::NotCompiled`] or [`DeviceError::Unavailable`].
pub fn resolve(device: &str) -> Result<DeviceSpec, DeviceError> {
    let spec: DeviceSpec = device.parse()?;
    spec.check_available()?;
    Ok(spec)
}

/// The backends compiled into this binary, as `--device` names.
pub fn compiled_backends() -> Vec<&'static str> {
    [DeviceSpec::Flex, DeviceSpec::NdArray, DeviceSpec::Cuda(0)]
        .into_iter()
        .filter(|d| d.is_compiled())
        .map(DeviceSpec::backend_name)
        .collect()
}

/// A `--devices` list: the devices of a data-parallel run, one worker each (see
/// [`crate::train_on`]), all on one backend. The same device may appear more than once
/// (`flex,flex`: two workers sharing the CPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceList(pub Vec<DeviceSpec>);

/// Why a `--devices` list could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceListError {
    /// An entry could not be used.
    #[error("--devices entry {position} (`{entry}`): {source}")]
    Entry {
        /// 1-based position in the list.
        position: usize,
        /// The entry as written.
        entry: String,
        /// Why.
        source: DeviceError,
    },
    /// Nothing listed.
    #[error("--devices lists no device: give a comma-separated list such as cuda:0,cuda:1")]
    Empty,
    /// `auto` is not a device of a list.
    #[error("--devices entry {0} is `auto`: name each device (cuda:0,cuda:1, or flex,flex)")]
    Auto(usize),
    /// Two backends in one list.
    #[error(
        "--devices mixes backends ({first} and {other}): every worker of a data-parallel run \
         uses the same backend"
    )]
    MixedBackends {
        /// The first entry's backend.
        first: &'static str,
        /// The first other backend.
        other: &'static str,
    },
}

impl FromStr for DeviceList {
    type Err = DeviceListError;

    /// Parses and checks `cuda:0,cuda:1`: every entry a compiled device that answers, all on
    /// one backend, `auto` refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Err(DeviceListError::Empty);
        }
        let mut specs = Vec::new();
        for (i, entry) in s.split(',').map(str::trim).enumerate() {
            if entry.eq_ignore_ascii_case("auto") {
                return Err(DeviceListError::Auto(i + 1));
            }
            let spec = resolve(entry).map_err(|source| DeviceListError::Entry {
                position: i + 1,
                entry: entry.to_string(),
                source,
            })?;
            specs.push(spec);
        }
        let first = specs[0].backend_name();
        if let Some(other) = specs.iter().find(|d| d.backend_name() != first) {
            return Err(DeviceListError::MixedBackends {
                first,
                other: other.backend_name(),
            });
        }
        Ok(DeviceList(specs))
    }
}

impl fmt::Display for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&names.join(","))
    }
}

impl DeviceList {
    /// The backend devices of the list for backend `B` (the backend its first entry names).
    pub fn devices<B: burn::tensor::backend::Backend>(&self) -> Vec<B::Device> {
        self.0.iter().map(|&spec| device_of::<B>(spec)).collect()
    }
}

/// `spec`'s device for backend `B`: `cuda:N` is device `N` of its kind, a CPU backend its one
/// device.
pub fn device_of<B: burn::tensor::backend::Backend>(spec: DeviceSpec) -> B::Device {
    use burn::tensor::backend::{Device, DeviceId};
    match spec {
        DeviceSpec::Flex | DeviceSpec::NdArray => B::Device::default(),
        DeviceSpec::Cuda(index) => {
            B::Device::from_id(DeviceId::new(0, u16::try_from(index).unwrap_or(u16::MAX)))
        }
    }
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
/// cargo feature is off, [`DeviceError::Unavailable`] when the GPU does not answer.
pub fn run_on<J: BackendJob>(device: &str, job: J) -> Result<J::Output, DeviceError> {
    run_on_spec(resolve(device)?, job)
}

/// What a process sets up before running CPU tensor work, once: [`crate::alloc::tune_for_cpu_tensors`]
/// (glibc keeps large freed blocks instead of unmapping them; `ARBOR_MALLOC=system` opts out) and
/// [`crate::threads::join_rayon_pool`] (the main thread computes as one of rayon's threads
/// instead of handing every op's parallel work to the pool; `ARBOR_POOL=plain` opts out).
/// [`run_on_spec`] calls it for `flex` and `ndarray`; so do `arbor-bench` and its examples.
pub fn set_up_cpu_process() {
    crate::alloc::tune_for_cpu_tensors();
    crate::threads::join_rayon_pool();
}

/// Runs `job` on an already parsed [`DeviceSpec`].
///
/// On the CPU backends it first calls [`set_up_cpu_process`].
///
/// # Errors
/// [`DeviceError::NotCompiled`] when the backend's cargo feature is off,
/// [`DeviceError::Unavailable`] when the GPU does not answer.
pub fn run_on_spec<J: BackendJob>(spec: DeviceSpec, job: J) -> Result<J::Output, DeviceError> {
    let missing = |spec: DeviceSpec| DeviceError::NotCompiled {
        backend: spec.backend_name(),
        feature: spec.backend_name(),
    };
    match spec {
        #[cfg(feature = "flex")]
        DeviceSpec::Flex => {
            set_up_cpu_process();
            Ok(job.run::<burn::backend::Flex>(device_of::<burn::backend::Flex>(spec)))
        }
        #[cfg(feature = "ndarray")]
        DeviceSpec::NdArray => {
            set_up_cpu_process();
            type NdArray = burn::backend::NdArray<f32>;
            Ok(job.run::<NdArray>(device_of::<NdArray>(spec)))
        }
        #[cfg(feature = "cuda")]
        DeviceSpec::Cuda(_) => {
            spec.check_available()?;
            type Cuda = burn::backend::Cuda<f32>;
            Ok(job.run::<Cuda>(device_of::<Cuda>(spec)))
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
    fn available_memory_is_read_from_meminfo_and_the_cgroup_limit() {
        let meminfo =
            "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(cgroup_room("max\n", "100\n"), None);
        assert_eq!(cgroup_room("1000\n", "300\n"), Some(700));
        assert_eq!(cgroup_room("1000", "3000"), Some(0));
        assert_eq!(DeviceSpec::Cuda(0).available_memory(), None);
        if cfg!(target_os = "linux") {
            assert!(DeviceSpec::Flex.available_memory().is_some_and(|b| b > 0));
        }
    }

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

    // Without a backend feature (`cargo test -p arbor-train` alone) no device is compiled and
    // `auto` rightly names none.
    #[cfg(any(feature = "flex", feature = "ndarray", feature = "cuda"))]
    #[test]
    fn auto_is_a_compiled_device_that_answers() {
        let spec: DeviceSpec = "auto".parse().unwrap();
        assert!(spec.is_compiled(), "{spec}");
        assert_eq!(resolve("AUTO"), Ok(spec));
        assert_eq!(resolve(DEFAULT_DEVICE), Ok(spec));
        // On a machine without a GPU (or without the feature), auto is the default CPU backend.
        if cuda_device_count().map_or(true, |n| n == 0) {
            assert_eq!(spec, DeviceSpec::default_cpu().unwrap());
        } else {
            assert_eq!(spec, DeviceSpec::Cuda(0));
        }
    }

    #[test]
    fn a_missing_gpu_is_one_clear_line() {
        // cuda:99 exists nowhere: either not compiled in, or the driver has fewer GPUs.
        let err = resolve("cuda:99").unwrap_err();
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        if DeviceSpec::Cuda(0).is_compiled() {
            assert!(matches!(err, DeviceError::Unavailable { .. }), "{err:?}");
            assert!(line.starts_with("--device cuda:99: "), "{line}");
            // run_on refuses it the same way, without starting Burn's runtime (which panics).
            assert!(matches!(
                run_on("cuda:99", Name),
                Err(DeviceError::Unavailable { .. })
            ));
        } else {
            assert!(matches!(err, DeviceError::NotCompiled { .. }), "{err:?}");
        }
    }

    #[cfg(feature = "flex")]
    #[test]
    fn a_device_list_is_checked_entry_by_entry() {
        let list: DeviceList = " flex, cpu ".parse().unwrap();
        assert_eq!(list.0, vec![DeviceSpec::Flex, DeviceSpec::Flex]);
        assert_eq!(list.to_string(), "flex,flex");
        assert_eq!(list.devices::<burn::backend::Flex>().len(), 2);
        assert_eq!("".parse::<DeviceList>(), Err(DeviceListError::Empty));
        assert_eq!(
            "flex,AUTO".parse::<DeviceList>(),
            Err(DeviceListError::Auto(2))
        );
        let err = "flex,x".parse::<DeviceList>().unwrap_err();
        assert!(
            matches!(&err, DeviceListError::Entry { position: 2, entry, .. } if entry == "x"),
            "{err:?}"
        );
        if DeviceSpec::NdArray.is_compiled() {
            assert!(matches!(
                "flex,ndarray".parse::<DeviceList>(),
                Err(DeviceListError::MixedBackends {
                    first: "flex",
                    other: "ndarray"
                })
            ));
        }
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
