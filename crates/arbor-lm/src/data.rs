//! Batchifying a token stream for truncated back-propagation through time.

use arbor_cells::ArborBackend;

/// A token stream cut into `batch` contiguous rows (the PyTorch `word_language_model` /
/// AWD-LSTM `batchify`): row `b` holds tokens `b·n … (b+1)·n − 1` of the stream, where
/// `n = ⌊len / batch⌋`; the remainder is dropped. Segment `s` of length `bptt` reads columns
/// `s·bptt …` of every row and predicts the next column, so consecutive segments continue each
/// row and the recurrent state can be carried from one to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batchified {
    /// Row-major `[batch, n]` token ids.
    pub ids: Vec<u32>,
    /// Rows.
    pub batch: usize,
    /// Tokens per row.
    pub n: usize,
    /// Time steps per segment.
    pub bptt: usize,
}

/// One training or evaluation segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Row-major `[batch, len]` inputs.
    pub inputs: Vec<u32>,
    /// Row-major `[batch, len]` targets: each input's next token.
    pub targets: Vec<u32>,
    /// Rows.
    pub batch: usize,
    /// Time steps.
    pub len: usize,
}

impl Batchified {
    /// Cuts `stream` into `batch` rows of segments of `bptt` steps.
    ///
    /// # Panics
    /// If `batch` or `bptt` is 0.
    pub fn new(stream: &[u32], batch: usize, bptt: usize) -> Self {
        assert!(batch > 0 && bptt > 0, "batch and bptt must be positive");
        let n = stream.len() / batch;
        Batchified {
            ids: stream[..n * batch].to_vec(),
            batch,
            n,
            bptt,
        }
    }

    /// Number of segments (the last one may be shorter than `bptt`; each needs one more token
    /// for its targets).
    pub fn num_segments(&self) -> usize {
        if self.n < 2 {
            0
        } else {
            (self.n - 1).div_ceil(self.bptt)
        }
    }

    /// Tokens predicted over all segments: `batch · (n − 1)`.
    pub fn num_targets(&self) -> usize {
        self.batch * self.n.saturating_sub(1)
    }

    /// Segment `s` (`s < num_segments()`).
    ///
    /// # Panics
    /// If `s` is out of range.
    pub fn segment(&self, s: usize) -> Segment {
        assert!(s < self.num_segments(), "segment {s} out of range");
        let start = s * self.bptt;
        let len = self.bptt.min(self.n - 1 - start);
        let mut inputs = Vec::with_capacity(self.batch * len);
        let mut targets = Vec::with_capacity(self.batch * len);
        for b in 0..self.batch {
            let row = &self.ids[b * self.n..(b + 1) * self.n];
            inputs.extend_from_slice(&row[start..start + len]);
            targets.extend_from_slice(&row[start + 1..start + len + 1]);
        }
        Segment {
            inputs,
            targets,
            batch: self.batch,
            len,
        }
    }
}

impl Segment {
    /// The rows `rows` of this segment (a worker's share in data-parallel training).
    ///
    /// # Panics
    /// If `rows` is not within `0..batch`.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Segment {
        assert!(
            rows.end <= self.batch,
            "rows {rows:?} of a {}-row segment",
            self.batch
        );
        let cells = rows.start * self.len..rows.end * self.len;
        Segment {
            inputs: self.inputs[cells.clone()].to_vec(),
            targets: self.targets[cells].to_vec(),
            batch: rows.len(),
            len: self.len,
        }
    }
}

/// Token ids as an `[batch, time]` integer tensor (row-major `ids`).
///
/// # Shapes
/// - `ids`: `batch · time` values
/// - returns `[batch, time]`
pub fn ids_tensor<B: ArborBackend>(
    ids: &[u32],
    shape: [usize; 2],
    device: &B::Device,
) -> burn::prelude::Tensor<B, 2, burn::prelude::Int> {
    let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
    burn::prelude::Tensor::from_data(burn::tensor::TensorData::new(v, shape), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_continue_across_segments() {
        let stream: Vec<u32> = (0..23).collect();
        let b = Batchified::new(&stream, 3, 4);
        assert_eq!(b.n, 7);
        assert_eq!(b.num_segments(), 2);
        assert_eq!(b.num_targets(), 18);
        let s0 = b.segment(0);
        assert_eq!(s0.len, 4);
        assert_eq!(&s0.inputs[..4], [0, 1, 2, 3]);
        assert_eq!(&s0.targets[4..8], [8, 9, 10, 11]);
        let s1 = b.segment(1);
        assert_eq!(s1.len, 2);
        assert_eq!(s1.inputs, [4, 5, 11, 12, 18, 19]);
        assert_eq!(s1.targets, [5, 6, 12, 13, 19, 20]);
        let total: usize = (0..b.num_segments())
            .map(|s| b.segment(s).targets.len())
            .sum();
        assert_eq!(total, b.num_targets());
        assert_eq!(Batchified::new(&stream, 30, 4).num_segments(), 0);
    }
}
