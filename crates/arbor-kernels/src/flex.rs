//! The Flex backend's fused ops.

use burn::backend::flex::{Flex, FlexTensor};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Device, Shape, TensorData};

use crate::host::{self, HostBuf, HostTensor, Rows};
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

    fn rows(&self) -> Option<Rows<'_>> {
        let layout = self.layout();
        let (shape, strides) = (layout.shape(), layout.strides());
        let rank = strides.len();
        if self.dtype() != DType::F32 || rank < 2 || strides.iter().any(|&s| s < 0) {
            return None;
        }
        // Unit stride inside a row, and every leading dimension a whole number of rows.
        let even = strides[rank - 1] == 1
            && (0..rank - 2).all(|i| strides[i] == strides[i + 1] * shape[i + 1] as isize);
        even.then(|| {
            Rows::strided(
                self.storage::<f32>(),
                layout.start_offset(),
                strides[rank - 2] as usize,
                shape[rank - 1],
            )
        })
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

#[cfg(test)]
mod tests {
    use burn::backend::flex::Flex;
    use burn::prelude::*;

    use crate::host::{rows_of, HostTensor};

    fn primitive(t: Tensor<Flex, 3>) -> burn::backend::flex::FlexTensor {
        t.into_primitive().tensor()
    }

    /// The `c` half of a `[b, n, 2D]` tensor is read in place, row by row, with the values a
    /// contiguous copy has; a transposed view's rows are not evenly spaced, so it is copied.
    #[test]
    fn rows_read_a_strided_half_in_place() {
        let device = Default::default();
        let full: Tensor<Flex, 3> = Tensor::arange(0..2 * 3 * 8, &device)
            .float()
            .reshape([2, 3, 8]);
        let half = primitive(full.clone().narrow(2, 4, 4));
        let copy = half.host().expect("f32");
        let rows = half.rows().expect("evenly spaced rows");
        for r in 0..6 {
            assert_eq!(rows.row(r), &copy[r * 4..(r + 1) * 4], "row {r}");
            assert_eq!(rows.row(r)[0], (r * 8 + 4) as f32);
        }
        let transposed = primitive(full.swap_dims(1, 2));
        assert!(transposed.rows().is_none());
        let mut kept = None;
        let rows = rows_of(&transposed, &mut kept).expect("a copy");
        let copy = transposed.host().expect("f32");
        for r in 0..16 {
            assert_eq!(rows.row(r), &copy[r * 3..(r + 1) * 3], "row {r}");
        }
    }
}
