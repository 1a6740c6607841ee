//! Position information added to the token vectors of a Transformer encoder.

use arbor_cells::ArborBackend;
use burn::nn::{Embedding, EmbeddingConfig};
use burn::prelude::*;

/// Which position information a [`crate::TransformerEncoder`] adds to its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PositionKind {
    /// Fixed sinusoids (Vaswani et al. 2017 §3.5), for any length.
    Sinusoidal,
    /// A learned vector per position `0 … max_len − 1`; later positions reuse the last one.
    Learned,
    /// None (the model is then permutation-equivariant, apart from a causal-conv gate).
    None,
}

/// Position vectors: fixed sinusoids, learned embeddings, or none.
///
/// Sinusoids: `PE(t, 2k) = sin(t / 10000^{2k/D})`, `PE(t, 2k+1) = cos(t / 10000^{2k/D})`.
#[derive(Module, Debug)]
pub struct Positions<B: Backend> {
    /// Which kind.
    pub kind: PositionKind,
    /// The learned table `[max_len, D]` of [`PositionKind::Learned`].
    pub learned: Option<Embedding<B>>,
}

impl<B: ArborBackend> Positions<B> {
    /// Builds the position vectors of `kind` for width `d_model`.
    pub fn new(kind: PositionKind, d_model: usize, max_len: usize, device: &B::Device) -> Self {
        Self {
            kind,
            learned: (kind == PositionKind::Learned)
                .then(|| EmbeddingConfig::new(max_len.max(1), d_model).init(device)),
        }
    }

    /// Adds the position vectors to `x`.
    ///
    /// # Shapes
    /// - `x`: `[batch, time, D]`
    /// - output: `[batch, time, D]`
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, time, d] = x.dims();
        let device = x.device();
        // The table is added over whole rows (`[batch, time·D] + [1, time·D]`), which the CPU
        // backends do in one vectorised pass; Flex walks a rank-3 broadcast element by element.
        let add_rows = |x: Tensor<B, 3>, table: Tensor<B, 2>| {
            x.reshape([batch, time * d])
                .add(table.reshape([1, time * d]))
                .reshape([batch, time, d])
        };
        match (self.kind, &self.learned) {
            (PositionKind::Sinusoidal, _) => add_rows(x, sinusoids::<B>(time, d, &device)),
            (PositionKind::Learned, Some(embedding)) => {
                let max_len = embedding.weight.dims()[0];
                let ids: Vec<i64> = (0..time).map(|t| t.min(max_len - 1) as i64).collect();
                let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [time]), &device);
                add_rows(
                    x,
                    embedding.forward(ids.reshape([1, time])).reshape([time, d]),
                )
            }
            _ => x,
        }
    }
}

/// The sinusoid table `[time, d]` (Vaswani et al. 2017 §3.5); an odd last column is a sine.
pub fn sinusoids<B: ArborBackend>(time: usize, d: usize, device: &B::Device) -> Tensor<B, 2> {
    let mut values = Vec::with_capacity(time * d);
    for t in 0..time {
        for j in 0..d {
            let k = (j / 2) as f64;
            let angle = t as f64 / 10000f64.powf(2.0 * k / d as f64);
            values.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    Tensor::from_data(TensorData::new(values, [time, d]), device)
}
