use arbor_cells::ArborBackend;
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;

/// Configuration of an [`Mlp`].
#[derive(Config, Debug)]
pub struct MlpConfig {
    /// Input width.
    pub d_input: usize,
    /// Width of each hidden layer.
    pub d_hidden: usize,
    /// Number of outputs (classes).
    pub d_output: usize,
    /// Number of hidden layers (0: a single linear map).
    #[config(default = 1)]
    pub n_hidden: usize,
    /// Dropout before every linear layer.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Batch norm before every linear layer (as in the Gumbel Tree-LSTM release).
    #[config(default = false)]
    pub batch_norm: bool,
}

/// Multi-layer perceptron: `[BN] → dropout → Linear → ReLU` per hidden layer, then
/// `[BN] → dropout → Linear` to the outputs.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// Hidden layers, then the output layer.
    pub linears: Vec<Linear<B>>,
    /// Batch norms before each linear layer (empty when disabled).
    pub norms: Vec<BatchNorm<B>>,
    /// Dropout before each linear layer.
    pub dropout: Dropout,
}

impl MlpConfig {
    /// Builds the MLP on `device`.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> Mlp<B> {
        let mut widths = vec![self.d_input];
        widths.extend(std::iter::repeat_n(self.d_hidden, self.n_hidden));
        widths.push(self.d_output);
        let linears = widths
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        let norms = if self.batch_norm {
            widths[..widths.len() - 1]
                .iter()
                .map(|&w| BatchNormConfig::new(w).init(device))
                .collect()
        } else {
            Vec::new()
        };
        Mlp {
            linears,
            norms,
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: ArborBackend> Mlp<B> {
    /// # Shapes
    /// - `x`: `[batch, d_input]`
    /// - output: `[batch, d_output]` (logits)
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.linears.len() - 1;
        let mut x = x;
        for (k, linear) in self.linears.iter().enumerate() {
            if let Some(norm) = self.norms.get(k) {
                let [n, d] = x.dims();
                x = norm.forward(x.reshape([n, d, 1])).reshape([n, d]);
            }
            x = linear.forward(self.dropout.forward(x));
            if k < last {
                x = relu(x);
            }
        }
        x
    }
}
