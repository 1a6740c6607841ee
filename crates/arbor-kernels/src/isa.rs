//! Which vector instruction sets the CPU kernels use, decided once per process and in one place.
//!
//! - **AVX2 + FMA**: the `#[target_feature(enable = "avx2,fma")]` copies of the loops, on any
//!   x86-64 CPU that has both.
//! - **AVX-512F**: the packed products' 512-bit kernel (`packed.rs`) and the `gemm` crate's
//!   AVX-512 kernels, on a CPU with AVX-512F when the `x86-v4` feature is on (the default in the
//!   facade and the benchmark). Both follow this one switch, so a build without `x86-v4` (the
//!   choice docs/bench.md gives for AMD Zen 4, where `gemm`'s AVX-512 products trained the cells
//!   more slowly) runs no 512-bit code at all.

/// Whether the CPU has AVX2 and FMA (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Whether the 512-bit kernels run: the `x86-v4` feature is compiled in and the CPU has
/// AVX-512F (and AVX2 + FMA, which every AVX-512F CPU has; checked so that the 512-bit kernels
/// may fall back to the 256-bit ones for their edges).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    cfg!(feature = "x86-v4")
        && *HAS.get_or_init(|| is_x86_feature_detected!("avx512f") && avx2_fma())
}
