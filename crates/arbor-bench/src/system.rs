//! Facts about the run: machine, backend, version, commit; and the process's peak memory.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Where and what was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Burn backend name (`B::name`).
    pub backend: String,
    /// The `--device` it ran on.
    pub device: String,
    /// CPU model and logical cores available to the process.
    pub machine: String,
    /// arbor version.
    pub arbor_version: String,
    /// `git rev-parse --short HEAD` where the benchmark ran (or `$ARBOR_GIT_COMMIT`), with
    /// `-dirty` for uncommitted changes: the checkout, which need not be the code that ran.
    pub git_commit: String,
    /// The commit the binary was built from ([`build_commit`]); empty in records written before
    /// it was recorded.
    #[serde(default)]
    pub build_commit: String,
    /// Seconds since the Unix epoch when the suite started.
    pub started_unix_s: u64,
}

impl RunInfo {
    /// Collects the facts for a run on `backend` / `device`.
    pub fn collect(backend: &str, device: &str) -> Self {
        Self {
            backend: backend.to_string(),
            device: device.to_string(),
            machine: machine(),
            arbor_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            build_commit: build_commit().to_string(),
            started_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// CPU model, core count, the vector extensions the matrix and fused kernels can use and the
/// matrix kernels in use ([`arbor_kernels::cpu_product_kernels`]), then how the CPU backends'
/// threads run when this process set them up ([`arbor_train::threads::join_rayon_pool`]), e.g.
/// `AMD EPYC 7B13 (2 cores; AVX2, FMA; products: gemm AVX2/FMA; main thread in rayon's pool (2
/// threads))`.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let vectors = vector_extensions();
    let mut products = arbor_kernels::cpu_product_kernels().to_string();
    if let Some(pool) = arbor_train::threads::pool_setup() {
        products = format!("{products}; {pool}");
    }
    if vectors.is_empty() {
        format!("{model} ({cores} cores; products: {products})")
    } else {
        format!(
            "{model} ({cores} cores; {}; products: {products})",
            vectors.join(", ")
        )
    }
}

/// The SIMD extensions of this CPU that decide kernel speed, as detected at run time: on x86-64
/// `AVX2`, `FMA`, `AVX-512F`, `AVX-512BW`, `AVX-512VL`, `AVX-512_BF16`, `AVX-VNNI` when present; on
/// aarch64 `NEON`. Empty elsewhere.
pub fn vector_extensions() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let detected = [
            ("AVX2", std::arch::is_x86_feature_detected!("avx2")),
            ("FMA", std::arch::is_x86_feature_detected!("fma")),
            ("AVX-512F", std::arch::is_x86_feature_detected!("avx512f")),
            ("AVX-512BW", std::arch::is_x86_feature_detected!("avx512bw")),
            ("AVX-512VL", std::arch::is_x86_feature_detected!("avx512vl")),
            (
                "AVX-512_BF16",
                std::arch::is_x86_feature_detected!("avx512bf16"),
            ),
            ("AVX-VNNI", std::arch::is_x86_feature_detected!("avxvnni")),
        ];
        out.extend(detected.iter().filter(|(_, on)| *on).map(|(name, _)| *name));
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        out.push("NEON");
    }
    out
}

/// The commit this binary was built from, stamped by `build.rs`: `git rev-parse --short HEAD`
/// of the checkout it was compiled in, with `-dirty` when that checkout had uncommitted changes
/// (`unknown` when it was not built in a git checkout).
pub fn build_commit() -> &'static str {
    env!("ARBOR_BUILD_COMMIT")
}

/// The git commit of the working tree (`unknown` outside a repository).
pub fn git_commit() -> String {
    if let Ok(c) = std::env::var("ARBOR_GIT_COMMIT") {
        return c;
    }
    crate::git::described_commit(None)
}

/// Resets the kernel's record of the process's peak RSS (Linux `clear_refs`), so the next
/// [`peak_rss_bytes`] covers only what happens from now on. Does nothing elsewhere.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size (`VmHWM`) in bytes, on Linux.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_grows_with_a_large_allocation() {
        let Some(before) = peak_rss_bytes() else {
            return; // not Linux
        };
        let v = vec![1u8; 64 << 20];
        let after = peak_rss_bytes().unwrap();
        assert!(after >= before && after >= 64 << 20, "{before} → {after}");
        assert_eq!(v.iter().map(|&b| b as u64).sum::<u64>(), 64 << 20);
    }

    #[test]
    fn run_info_names_the_machine_and_version() {
        let info = RunInfo::collect("flex", "flex");
        assert!(info.machine.contains("cores"));
        assert_eq!(info.arbor_version, env!("CARGO_PKG_VERSION"));
        assert!(!info.git_commit.is_empty());
        assert_eq!(info.build_commit, build_commit());
    }

    /// Built and tested in the same checkout, the stamped commit is the checkout's.
    #[test]
    fn the_build_commit_is_the_checkouts_when_built_here() {
        let here = git_commit();
        if here == "unknown" || std::env::var_os("ARBOR_GIT_COMMIT").is_some() {
            return; // not a git checkout, or the commit is given
        }
        let hash = |c: &str| c.trim_end_matches("-dirty").to_string();
        assert_eq!(hash(build_commit()), hash(&here));
    }
}
