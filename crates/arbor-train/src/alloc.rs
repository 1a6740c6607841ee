//! The host allocator's settings for CPU tensor work.
//!
//! CPU backends allocate a fresh buffer for almost every op. glibc's `malloc` serves blocks above
//! its mmap threshold (128 KiB, rising to at most 32 MiB) with a new `mmap` and returns them with
//! `munmap` on free, so every large tensor is paid for again in page faults on first touch. In
//! arbor's workloads that was most of the time of SPINN's thin stack (a 74 MB stack rewritten per
//! step) and half of an LSTM's backward pass (docs/log/bench.md, "Allocator"). Keeping freed memory in
//! the heap instead (`M_MMAP_MAX = 0`, a high `M_TRIM_THRESHOLD`, a 64 MiB `M_TOP_PAD`) removes
//! those faults without raising the peak; the measured alternative, mimalloc as the global
//! allocator, was as fast on the small workloads but raised peak memory by 20–50% and slowed the
//! largest autodiff graphs by up to 25%, so it is only an `arbor-bench` feature.
//!
//! [`tune_for_cpu_tensors`] applies the settings once per process; `device::run_on` calls it
//! before running a job on `flex` or `ndarray`. It changes nothing when
//! - the target is not Linux with glibc,
//! - `ARBOR_MALLOC=system` is set (keep the C library's defaults), or
//! - the user already tunes glibc through any `MALLOC_*_` variable (theirs win).

use std::sync::OnceLock;

/// What [`tune_for_cpu_tensors`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocTuning {
    /// glibc now keeps large freed blocks for reuse.
    Applied,
    /// Left alone: `ARBOR_MALLOC=system`.
    OptedOut,
    /// Left alone: a `MALLOC_*_` variable names the user's own settings.
    UserSettings,
    /// Left alone: not Linux with glibc, or `mallopt` refused a setting.
    Unsupported,
}

/// The glibc variables that mean "the user tunes malloc themselves".
const USER_VARIABLES: [&str; 5] = [
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
];

/// Applies the allocator settings for CPU tensor work once per process and says what happened
/// (later calls return the first call's answer). See the module documentation.
pub fn tune_for_cpu_tensors() -> AllocTuning {
    static DONE: OnceLock<AllocTuning> = OnceLock::new();
    *DONE.get_or_init(|| {
        if std::env::var("ARBOR_MALLOC").is_ok_and(|v| v == "system") {
            return AllocTuning::OptedOut;
        }
        if USER_VARIABLES.iter().any(|v| std::env::var_os(v).is_some()) {
            return AllocTuning::UserSettings;
        }
        apply()
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> AllocTuning {
    // SAFETY: `mallopt` only changes glibc's allocator parameters; it is safe to call at any time
    // from any thread (glibc takes the arena lock).
    let ok = unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
            && libc::mallopt(libc::M_TOP_PAD, 64 << 20) == 1
    };
    if ok {
        AllocTuning::Applied
    } else {
        AllocTuning::Unsupported
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> AllocTuning {
    AllocTuning::Unsupported
}
