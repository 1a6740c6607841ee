//! Which vector instruction sets the CPU kernels use, decided once per process and in one place.
//!
//! - **AVX2 + FMA**: the packed products' AVX2 kernel (`packed.rs`) and the `avx2` copies of
//!   the vectorised loops ([`simd_copies!`]), on any x86-64 CPU that has both.
//! - **AVX-512F**: the packed products' 512-bit kernel, the `avx512` copies of the loops and the
//!   `gemm` crate's AVX-512 kernels, on a CPU with AVX-512F when the `x86-v4` feature is on (the
//!   default in the facade and the benchmark). All follow this one switch, so a build without
//!   `x86-v4` runs no 512-bit code at all (on AMD Zen 4, whose 512-bit operations issue as two
//!   256-bit halves, such a build was a median 1.16× slower at `c33be2a`: docs/bench.md,
//!   "AVX-512 matrix products").

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

/// Defines modules `avx2` and `avx512` in the calling module, each holding a copy of every
/// function given, compiled for that instruction set (`#[target_feature]`); [`widest!`] calls
/// the copy for the widest set this process uses. The bodies are plain Rust whose loops LLVM
/// vectorises for each set (helpers they call must be `#[inline(always)]`, so that they are
/// compiled into each copy). Rust neither reassociates nor contracts floating-point operations,
/// so each copy computes the same values as the others.
macro_rules! simd_copies {
    ($($(#[$attr:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block)*) => {
        /// The functions compiled for AVX2 + FMA.
        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) mod avx2 {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$attr])*
                #[target_feature(enable = "avx2,fma")]
                pub(crate) unsafe fn $name($($arg: $ty),*) $(-> $ret)? $body
            )*
        }

        /// The functions compiled for AVX-512F (with AVX2 + FMA).
        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) mod avx512 {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$attr])*
                #[target_feature(enable = "avx512f,avx2,fma")]
                pub(crate) unsafe fn $name($($arg: $ty),*) $(-> $ret)? $body
            )*
        }
    };
}

/// `widest!(copies, name(args…) else fallback)`: calls `copies::avx512::name` where
/// [`avx512`] holds, else `copies::avx2::name` where [`avx2_fma`] holds, else evaluates
/// `fallback` (`copies` is a module that [`simd_copies!`] filled).
#[cfg(target_arch = "x86_64")]
macro_rules! widest {
    ($copies:ident, $name:ident($($arg:expr),* $(,)?) else $fallback:expr) => {
        if $crate::isa::avx512() {
            // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked just now).
            unsafe { $copies::avx512::$name($($arg),*) }
        } else if $crate::isa::avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA (checked just now).
            unsafe { $copies::avx2::$name($($arg),*) }
        } else {
            $fallback
        }
    };
}

/// Off x86-64 there are no copies: the fallback.
#[cfg(not(target_arch = "x86_64"))]
macro_rules! widest {
    ($copies:ident, $name:ident($($arg:expr),* $(,)?) else $fallback:expr) => {
        $fallback
    };
}

pub(crate) use {simd_copies, widest};
