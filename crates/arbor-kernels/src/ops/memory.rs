//! Memory ops: `contiguous` (a tensor in row-major memory of its own, in both passes) and
//! `zeros` (without the CPU backends' copy of the zeroed bytes).

use burn::prelude::*;
use burn::tensor::{Shape, TensorPrimitive};

use crate::ArborBackend;

/// `Tensor::zeros(shape, device)`, without the CPU backends' copy: Flex 0.21 allocates zeros as
/// bytes and then copies them into a freshly aligned buffer, touching every page twice; here
/// the CPU backends take one zeroed `f32` allocation, whose pages the system maps only when
/// they are first written. A large buffer that fills up over time (SPINN's thin stack) costs
/// nothing up front. Other backends use their own zeros.
///
/// # Shapes
/// - output: `shape`
pub fn zeros<B: ArborBackend, const D: usize>(
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::zeros(Shape::from(shape), device)))
}

/// `x` with its elements in row-major order, in both passes: one op (and one autodiff node)
/// whose forward pass copies a strided view into memory of its own, and whose backward pass
/// does the same to the gradient. The value is `x`; only the memory layout changes.
///
/// Put it where a reshape meets a permuted view, e.g. attention heads: `x.reshape(..)` then
/// `contiguous` then `swap_dims(..)`. Flex 0.21 copies a permuted view of rank ≥ 3 one element
/// at a time when it is reshaped, in the forward pass (`swap_dims` then `reshape`) and in the
/// backward pass (the gradient of `swap_dims` is a permuted view, which the gradient of the
/// `reshape` before it copies); the CPU backends here copy by contiguous runs instead.
///
/// # Shapes
/// - `x`, output: any shape
pub fn contiguous<B: ArborBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(B::contiguous(
        x.into_primitive().tensor(),
    )))
}

/// Zeros in plain Burn ops (`contiguous` has no reference: its default is `x`).
pub(crate) mod reference {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    /// A tensor of zeros of the backend's default float type.
    pub fn zeros<B: Backend>(shape: Shape, device: &B::Device) -> FloatTensor<B> {
        let n = shape.num_elements();
        let flat = Tensor::<B, 1>::zeros([n], device).into_primitive().tensor();
        B::float_reshape(flat, shape)
    }
}

/// The CPU backends' entry points.
pub(crate) mod host {
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{DType, Shape};

    use super::reference;
    use crate::host::{HostBuf, HostTensor};

    /// `t` in memory of its own, row-major: itself when it already is (or is not `f32`), a copy
    /// by contiguous runs otherwise.
    pub(crate) fn contiguous_f32<T: HostTensor>(t: T) -> T {
        let copy = match t.host() {
            Some(HostBuf::Owned(v)) => v,
            _ => return t,
        };
        T::from_f32(copy, t.shape())
    }

    /// [`contiguous_f32`] for a CPU backend's float primitive.
    pub(crate) fn contiguous<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        contiguous_f32(x)
    }

    /// One zeroed `f32` allocation when the backend's default float type is `f32` (its pages mapped
    /// only when first written); [`reference::zeros`] otherwise.
    pub(crate) fn zeros<B: Backend>(shape: Shape, device: &Device<B>) -> FloatTensor<B>
    where
        FloatTensor<B>: HostTensor,
    {
        // The default float type, from a one-element tensor.
        let probe = Tensor::<B, 1>::zeros([1], device);
        if probe.dtype() == DType::F32 {
            let n = shape.num_elements();
            <FloatTensor<B> as HostTensor>::from_f32(vec![0.0; n], shape)
        } else {
            reference::zeros::<B>(shape, device)
        }
    }
}

/// The autodiff nodes.
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops};
    use burn::backend::autodiff::Autodiff;
    use burn::prelude::*;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use crate::autodiff::{backward_with, unary};
    use crate::ArborBackend;

    /// A tensor with no inputs (`zeros`): nothing to propagate.
    #[derive(Debug)]
    struct Constant;

    impl<B: Backend> Backward<B, 0> for Constant {
        type State = ();

        fn backward(self, _: Ops<Self::State, 0>, _: &mut Gradients, _: &mut Checkpointer) {}
    }

    /// The backward step of `contiguous`: the gradient, made contiguous too.
    #[derive(Debug)]
    pub(crate) struct Contiguous;

    impl<B: ArborBackend> Backward<B, 1> for Contiguous {
        type State = ();

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 1, _>(ops, grads, |(), grad| [B::contiguous(grad)]);
        }
    }

    /// `contiguous` as one node without state.
    pub(crate) fn contiguous<B: ArborBackend, C: CheckpointStrategy>(
        x: FloatTensor<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        unary::<B, C, _>(Contiguous, x, B::contiguous)
    }

    /// `zeros` as a constant: a node with no parents, never tracked.
    pub(crate) fn zeros<B: ArborBackend, C: CheckpointStrategy>(
        shape: Shape,
        device: &Device<Autodiff<B, C>>,
    ) -> FloatTensor<Autodiff<B, C>> {
        Constant
            .prepare::<C>([])
            .compute_bound()
            .stateless(B::zeros(shape, device))
    }
}
