//! The Flex backend's fused ops.

use burn::backend::flex::{Flex, FlexTensor};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Device, Shape, TensorData};

use crate::host::{self, HostBuf, HostTensor};
use crate::{Activation, GateLayout};

impl HostTensor for FlexTensor {
    fn host(&self) -> Option<HostBuf<'_>> {
        if self.dtype() != DType::F32 {
            return None;
        }
        if let Some(s) = self.as_slice::<f32>() {
            return Some(HostBuf::Borrowed(s));
        }
        let layout = self.layout();
        let copy = host::strided_to_vec(
            self.storage::<f32>(),
            layout.shape(),
            layout.strides(),
            layout.start_offset(),
        );
        Some(HostBuf::Owned(copy.unwrap_or_else(|| {
            self.to_contiguous()
                .as_slice::<f32>()
                .expect("a contiguous copy")
                .to_vec()
        })))
    }

    fn matrix(&self) -> Option<(&[f32], usize, isize, isize)> {
        let layout = self.layout();
        let strides = layout.strides();
        if self.dtype() != DType::F32 || strides.len() != 2 || strides.iter().any(|&s| s < 0) {
            return None;
        }
        Some((
            self.storage::<f32>(),
            layout.start_offset(),
            strides[0],
            strides[1],
        ))
    }

    fn from_f32(data: Vec<f32>, shape: Shape) -> Self {
        FlexTensor::from_data(TensorData::new(data, shape))
    }

    fn host_mut(&mut self) -> Option<&mut [f32]> {
        if self.dtype() != DType::F32 {
            return None;
        }
        let (start, end) = self.layout().contiguous_offsets()?;
        Some(&mut self.try_storage_mut::<f32>()?[start..end])
    }
}

host::host_backend!(impl crate::ArborBackend for Flex);
