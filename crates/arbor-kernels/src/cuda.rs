//! The CUDA backend uses the plain-op defaults: each fused op runs as its plain-Burn
//! composition, several kernels per op. arbor's `cuda` feature builds Burn's CUDA backend without
//! kernel fusion (`cuda-fusion` turns it on; on an H100 it was no faster and spent minutes
//! compiling, docs/gpu.md run 5), so these ops are where hand-written CubeCL kernels would go.
//! Implemented for `f32`, the element type arbor's programs run CUDA with; another element type
//! needs its own empty `impl`.

impl crate::ArborBackend for burn::backend::Cuda<f32> {}
