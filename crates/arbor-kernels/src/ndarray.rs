//! The NdArray backend's fused ops.

use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArray, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Device, Shape, TensorData};

use crate::host::{self, HostBuf, HostTensor};
use crate::{Activation, GateLayout};

impl HostTensor for NdArrayTensor {
    fn host(&self) -> Option<HostBuf<'_>> {
        let NdArrayTensor::F32(storage) = self else {
            return None;
        };
        let view = storage.view();
        Some(match view.to_slice() {
            Some(s) => HostBuf::Borrowed(s),
            None => HostBuf::Owned(view.iter().copied().collect()),
        })
    }

    fn from_f32(data: Vec<f32>, shape: Shape) -> Self {
        NdArrayTensor::from_data(TensorData::new(data, shape))
    }
}

host::host_backend!(
    impl<E, I, Q> crate::ArborBackend for NdArray<E, I, Q>
    where
        E: FloatNdArrayElement,
        I: IntNdArrayElement,
        Q: QuantElement,
        NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>
);
