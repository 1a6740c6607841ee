//! The CUDA backend uses the plain-op defaults (CubeCL's fusion already merges elementwise
//! chains on the GPU). Implemented for `f32`, the element type arbor's programs run CUDA with;
//! another element type needs its own empty `impl`.

impl crate::ArborBackend for burn::backend::Cuda<f32> {}
