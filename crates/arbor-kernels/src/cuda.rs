//! The CUDA backend uses the plain-op defaults (CubeCL's fusion already merges elementwise
//! chains on the GPU).

impl<F, I> crate::ArborBackend for burn::backend::Cuda<F, I> where
    burn::backend::Cuda<F, I>: burn::tensor::backend::Backend
{
}
