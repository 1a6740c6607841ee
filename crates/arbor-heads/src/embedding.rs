use arbor_cells::ArborBackend;
use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::prelude::*;
use burn::tensor::TensorData;

/// Configuration of a [`TokenEmbedding`].
#[derive(Config, Debug)]
pub struct TokenEmbeddingConfig {
    /// Vocabulary size.
    pub n_tokens: usize,
    /// Embedding width.
    pub d_embed: usize,
    /// Standard deviation of the random initialisation `N(0, init_std²)`.
    ///
    /// The default, 1, is PyTorch's `nn.Embedding` (and Burn's `EmbeddingConfig`), which is what
    /// the reference code bases start from when no pretrained vectors are given. A much smaller
    /// scale (0.1, arbor's default before) starves the encoders' gates of signal and stalls
    /// learning; see `docs/init.md`.
    #[config(default = 1.0)]
    pub init_std: f64,
}

/// A token-id → vector lookup, optionally initialised from pretrained vectors.
#[derive(Module, Debug)]
pub struct TokenEmbedding<B: Backend> {
    /// The lookup table `[n_tokens, d_embed]`.
    pub embedding: Embedding<B>,
}

impl TokenEmbeddingConfig {
    /// Builds a randomly initialised embedding on `device`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> TokenEmbedding<B> {
        TokenEmbedding {
            embedding: EmbeddingConfig::new(self.n_tokens, self.d_embed)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: self.init_std,
                })
                .init(device),
        }
    }

    /// Builds an embedding whose rows are `vectors` (row-major `[n_tokens, d_embed]`, e.g.
    /// `arbor_data::vocab::Embeddings::data`).
    ///
    /// # Panics
    /// If `vectors.len() != n_tokens · d_embed`.
    pub fn init_pretrained<B: ArborBackend>(
        &self,
        vectors: Vec<f32>,
        device: &B::Device,
    ) -> TokenEmbedding<B> {
        assert_eq!(
            vectors.len(),
            self.n_tokens * self.d_embed,
            "pretrained matrix must be n_tokens × d_embed"
        );
        let mut e = self.init(device);
        let w = Tensor::from_data(
            TensorData::new(vectors, [self.n_tokens, self.d_embed]),
            device,
        );
        e.embedding.weight = Param::from_tensor(w);
        e
    }
}

impl<B: ArborBackend> TokenEmbedding<B> {
    /// Sets the given rows to zero (ids outside the table are ignored).
    ///
    /// The programs zero `<pad>` and `<unk>` of a random embedding: a vocabulary built from the
    /// training data never feeds `<unk>` during training, so its row never receives a gradient,
    /// and a random start there would put an untrained vector of full word scale into every
    /// evaluation sentence with an unknown word (on SST-2 this alone moved dev accuracy by up to
    /// 3 points between seeds; see docs/init.md).
    pub fn with_zero_rows(mut self, rows: &[usize]) -> Self {
        // Rebuilt from host values (once, at initialisation) so the result is a fresh leaf
        // parameter on every backend, autodiff included.
        let [n, d] = self.embedding.weight.dims();
        let device = self.embedding.weight.device();
        // Converted float data always reads back as f32; were it not to, the table is left as
        // it is rather than replaced by zeros.
        let Ok(mut values) = self
            .embedding
            .weight
            .val()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
        else {
            return self;
        };
        for &r in rows {
            if r < n {
                values[r * d..(r + 1) * d].fill(0.0);
            }
        }
        let w = Tensor::from_data(TensorData::new(values, [n, d]), &device);
        self.embedding.weight = Param::from_tensor(w);
        self
    }

    /// # Shapes
    /// - `ids`: `[batch, time]`
    /// - output: `[batch, time, d_embed]`
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.embedding.forward(ids)
    }
}
