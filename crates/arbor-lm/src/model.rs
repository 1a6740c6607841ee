//! The recurrent language model (docs/models.md §6) with AWD-LSTM regularisation.

use arbor_cells::ArborBackend;
use arbor_cells::{
    run_sequence, run_steps, AnyCell, CellKind, LstmState, RecurrentCell, RecurrentStack,
    RecurrentStackConfig,
};
use burn::module::{ModuleVisitor, Param};
use burn::nn::DropoutConfig;
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::module::embedding;
use burn::tensor::Distribution;

use crate::regularize::{embedding_dropout, locked_dropout, weight_drop};

/// Configuration of an [`RnnLm`]. The dropout defaults are ON-LSTM's PTB settings
/// (`dropout 0.45, dropouth 0.3, dropouti 0.5, dropoute 0.1, wdrop 0.45`, AR α = 2, TAR β = 1).
#[derive(Config, Debug)]
pub struct RnnLmConfig {
    /// The recurrent cell of every layer.
    pub cell: CellKind,
    /// Vocabulary size.
    pub n_tokens: usize,
    /// Embedding width; also the top layer's hidden width, so the decoder can be tied.
    pub d_embed: usize,
    /// Hidden width of the layers below the top one.
    pub d_hidden: usize,
    /// Number of layers.
    #[config(default = 3)]
    pub n_layers: usize,
    /// Neurons per master-gate chunk (cumax cells); must divide `d_hidden` and `d_embed`.
    #[config(default = 10)]
    pub chunk_size: usize,
    /// Temporal kernel width of Conv FastTrees.
    #[config(default = 3)]
    pub kernel_size: usize,
    /// Locked dropout on the top layer's outputs (AWD `dropout`).
    #[config(default = 0.45)]
    pub dropout: f64,
    /// Locked dropout between layers (AWD `dropouth`).
    #[config(default = 0.3)]
    pub dropout_hidden: f64,
    /// Locked dropout on the embedded inputs (AWD `dropouti`).
    #[config(default = 0.5)]
    pub dropout_input: f64,
    /// Embedding (word-row) dropout (AWD `dropoute`).
    #[config(default = 0.1)]
    pub dropout_embedding: f64,
    /// DropConnect on the hidden-to-hidden weights (AWD `wdrop`).
    #[config(default = 0.45)]
    pub weight_drop: f64,
    /// Activation regularisation weight α on the dropped top outputs.
    #[config(default = 2.0)]
    pub alpha: f64,
    /// Temporal activation regularisation weight β on the undropped top outputs.
    #[config(default = 1.0)]
    pub beta: f64,
}

/// The regularisation settings an [`RnnLm`] applies in training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regularisers {
    /// Output locked dropout.
    pub dropout: f64,
    /// Between-layer locked dropout.
    pub dropout_hidden: f64,
    /// Input locked dropout.
    pub dropout_input: f64,
    /// Embedding dropout.
    pub dropout_embedding: f64,
    /// DropConnect on `U`.
    pub weight_drop: f64,
}

/// A layer's recurrent state between segments.
#[derive(Debug, Clone)]
pub struct LayerState<B: Backend> {
    /// `(h, c)` after the last step, `[batch, H]` each.
    pub state: LstmState<B, 2>,
    /// Conv FastTrees: the last `K − 1` inputs of the layer `[batch, K − 1, d_in]`, which the
    /// causal convolution of the next segment must see; `None` for the other cells.
    pub context: Option<Tensor<B, 3>>,
}

/// The state an [`RnnLm`] carries from one segment to the next (one entry per layer, bottom
/// first).
#[derive(Debug, Clone)]
pub struct LmState<B: Backend> {
    /// Per-layer states.
    pub layers: Vec<LayerState<B>>,
}

impl<B: ArborBackend> LmState<B> {
    /// Cuts the state from the autodiff graph (truncated BPTT).
    pub fn detach(self) -> Self {
        LmState {
            layers: self
                .layers
                .into_iter()
                .map(|l| LayerState {
                    state: l.state.detach(),
                    context: l.context.map(Tensor::detach),
                })
                .collect(),
        }
    }
}

/// What [`RnnLm::forward`] returns.
#[derive(Debug, Clone)]
pub struct LmOutput<B: Backend> {
    /// Next-token logits `[batch, time, vocab]`.
    pub logits: Tensor<B, 3>,
    /// The state after the segment (not detached).
    pub state: LmState<B>,
    /// The top layer's outputs before output dropout `[batch, time, d_embed]` (for TAR).
    pub outputs: Tensor<B, 3>,
    /// The top layer's outputs after output dropout (for AR and the decoder).
    pub dropped: Tensor<B, 3>,
    /// Each layer's syntactic distances `[batch, time]`, bottom first; empty for the LSTM.
    pub distances: Vec<Tensor<B, 2>>,
}

impl<B: ArborBackend> LmOutput<B> {
    /// AWD-LSTM's activation regularisers:
    /// `α · mean(dropped²) + β · mean((h_t − h_{t−1})²)` over the top layer (TAR over the
    /// undropped outputs; 0 for a one-step segment).
    pub fn ar_tar(&self, alpha: f64, beta: f64) -> Tensor<B, 1> {
        let ar = self.dropped.clone().powi_scalar(2).mean().mul_scalar(alpha);
        let [b, t, d] = self.outputs.dims();
        if t < 2 || beta == 0.0 {
            return ar;
        }
        let next = self.outputs.clone().slice([0..b, 1..t, 0..d]);
        let prev = self.outputs.clone().slice([0..b, 0..t - 1, 0..d]);
        ar.add(next.sub(prev).powi_scalar(2).mean().mul_scalar(beta))
    }
}

/// A word-level language model: embedding → stacked recurrent cells → decoder tied to the
/// embedding (Press & Wolf 2017; Inan et al. 2017). As in AWD-LSTM, the top layer is as wide as
/// the embedding so the tied decoder needs no projection. Regularisers apply only with
/// autodiff; see the crate docs.
#[derive(Module, Debug)]
pub struct RnnLm<B: Backend> {
    /// Word embedding `[vocab, d_embed]`, also the decoder weight.
    pub embedding: Param<Tensor<B, 2>>,
    /// Decoder bias `[vocab]`.
    pub decoder_bias: Param<Tensor<B, 1>>,
    /// The layers (the stack's own dropout is unused: the model applies locked dropout).
    pub stack: RecurrentStack<B>,
    /// Regularisation settings.
    pub reg: Regularisers,
}

impl RnnLmConfig {
    /// Checks the settings: a non-empty vocabulary, positive widths, at least one layer,
    /// dropouts in `[0, 1)`, and for the cumax cells a `chunk_size` dividing both `d_embed` (the
    /// last layer's width) and `d_hidden`.
    pub fn validate(&self) -> Result<(), arbor_cells::ConfigError> {
        use arbor_cells::check::{at_least_one, dropout};
        at_least_one("n_tokens", self.n_tokens)?;
        at_least_one("n_layers", self.n_layers)?;
        for (name, p) in [
            ("dropout", self.dropout),
            ("dropout_hidden", self.dropout_hidden),
            ("dropout_input", self.dropout_input),
            ("dropout_embedding", self.dropout_embedding),
            ("weight_drop", self.weight_drop),
        ] {
            dropout(name, p)?;
        }
        for (l, (d_in, h)) in self.widths().into_iter().enumerate() {
            RecurrentStackConfig::new(self.cell, d_in, h)
                .with_chunk_size(self.chunk_size)
                .with_kernel_size(self.kernel_size)
                .validate()
                .map_err(|e| match e.field.as_str() {
                    "d_hidden" if l + 1 == self.n_layers => e.named(&[("d_hidden", "d_embed")]),
                    "d_input" if l == 0 => e.named(&[("d_input", "d_embed")]),
                    _ => e,
                })?;
        }
        Ok(())
    }

    /// `(input width, output width)` of every layer: `d_embed → d_hidden → … → d_embed`.
    fn widths(&self) -> Vec<(usize, usize)> {
        let n = self.n_layers;
        (0..n)
            .map(|l| {
                let d_in = if l == 0 { self.d_embed } else { self.d_hidden };
                let h = if l + 1 == n {
                    self.d_embed
                } else {
                    self.d_hidden
                };
                (d_in, h)
            })
            .collect()
    }

    /// [`RnnLmConfig::init`] after [`RnnLmConfig::validate`]: an error instead of a panic.
    pub fn try_init<B: ArborBackend>(
        &self,
        device: &B::Device,
    ) -> Result<RnnLm<B>, arbor_cells::ConfigError> {
        self.validate()?;
        Ok(self.init(device))
    }

    /// The regularisation settings of this configuration.
    pub fn regularisers(&self) -> Regularisers {
        Regularisers {
            dropout: self.dropout,
            dropout_hidden: self.dropout_hidden,
            dropout_input: self.dropout_input,
            dropout_embedding: self.dropout_embedding,
            weight_drop: self.weight_drop,
        }
    }

    /// Builds the model on `device`; embeddings are drawn from `U(−0.1, 0.1)` and the decoder
    /// bias starts at 0 (AWD-LSTM's `init_weights`).
    ///
    /// # Panics
    /// If `n_layers` is 0, or `chunk_size` does not divide the widths of a cumax cell.
    pub fn init<B: ArborBackend>(&self, device: &B::Device) -> RnnLm<B> {
        assert!(
            self.n_layers > 0,
            "a language model needs at least one layer"
        );
        let n = self.n_layers;
        let layers = (0..n)
            .map(|l| {
                let d_in = if l == 0 { self.d_embed } else { self.d_hidden };
                let h = if l + 1 == n {
                    self.d_embed
                } else {
                    self.d_hidden
                };
                RecurrentStackConfig::new(self.cell, d_in, h)
                    .with_chunk_size(self.chunk_size)
                    .with_kernel_size(self.kernel_size)
                    .init::<B>(device)
                    .layers
                    .pop()
                    .expect("one layer")
            })
            .collect();
        let model = RnnLm {
            embedding: Param::from_tensor(Tensor::random(
                [self.n_tokens, self.d_embed],
                Distribution::Uniform(-0.1, 0.1),
                device,
            )),
            decoder_bias: Param::from_tensor(Tensor::zeros([self.n_tokens], device)),
            stack: RecurrentStack {
                layers,
                dropout: DropoutConfig::new(0.0).init(),
            },
            reg: self.regularisers(),
        };
        // Burn initialises parameters lazily, and a clone of a not-yet-initialised parameter
        // draws its own values. DropConnect clones the cells in every forward pass, so every
        // parameter is materialised here, once.
        model.visit(&mut Materialize);
        model
    }
}

/// Forces the lazy initialisation of every parameter it visits.
struct Materialize;

impl<B: ArborBackend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

/// `K − 1` for a Conv FastTrees cell of kernel width `K > 1`.
fn conv_context<B: ArborBackend>(cell: &AnyCell<B>) -> Option<usize> {
    match cell {
        AnyCell::ConvFastTrees(c) => {
            let k = c.conv.weight.dims()[2];
            (k > 1).then(|| k - 1)
        }
        AnyCell::Lstm(_)
        | AnyCell::OnLstm(_)
        | AnyCell::FastTrees(_)
        | AnyCell::FasterFastTrees(_) => None,
    }
}

/// Runs one layer over a segment from `init`, returning its outputs `[batch, time, H]`, its
/// state after the segment and its distances `[batch, time]` (cumax cells).
fn run_layer<B: ArborBackend>(
    cell: &AnyCell<B>,
    x: Tensor<B, 3>,
    init: Option<LayerState<B>>,
) -> (Tensor<B, 3>, LayerState<B>, Option<Tensor<B, 2>>) {
    let device = x.device();
    let [batch, time, d_in] = x.dims();
    let (state, context) = match init {
        Some(s) => (Some(s.state), s.context),
        None => (None, None),
    };
    let h = cell.d_hidden();
    let state = state.unwrap_or_else(|| LstmState::zeros([batch, h], &device));
    let (out, context) = match conv_context(cell) {
        // The convolution's context: the last K − 1 inputs of the previous segment in front.
        Some(k1) => {
            let ctx = context.unwrap_or_else(|| Tensor::zeros([batch, k1, d_in], &device));
            let ext = Tensor::cat(vec![ctx, x.clone()], 1);
            let next = ext.clone().narrow(1, time, k1);
            let conv = cell.context(ext).map(|c| c.narrow(1, k1, time));
            (run_steps(cell, x, conv, state), Some(next))
        }
        // The cell's whole-sequence op where it has one (LSTM, ON-LSTM, FastTrees, Faster
        // FastTrees), else its step loop.
        None => (run_sequence(cell, x, None, Some(state)), None),
    };
    (
        out.outputs,
        LayerState {
            state: out.last,
            context,
        },
        out.distances,
    )
}

impl<B: ArborBackend> RnnLm<B> {
    /// Vocabulary size.
    pub fn n_tokens(&self) -> usize {
        self.embedding.dims()[0]
    }

    /// Runs the model over a segment. With autodiff, the AWD-LSTM regularisers apply:
    /// embedding dropout, locked dropout on the embedded input, DropConnect on each layer's
    /// hidden-to-hidden matrix, locked dropout between layers and on the output.
    ///
    /// # Shapes
    /// - `ids`: `[batch, time]`
    /// - `state`: the previous segment's [`LmOutput::state`] (detach it for truncated BPTT),
    ///   or `None` for zeros
    /// - output: see [`LmOutput`]
    ///
    /// # Panics
    /// If `state` has a different number of layers.
    pub fn forward(&self, ids: Tensor<B, 2, Int>, state: Option<LmState<B>>) -> LmOutput<B> {
        let [batch, time] = ids.dims();
        let n = self.stack.layers.len();
        let mut init = state.map(|s| {
            assert_eq!(s.layers.len(), n, "one state per layer");
            s.layers.into_iter()
        });
        let weight = self.embedding.val();
        let mut x = embedding(
            embedding_dropout(weight.clone(), self.reg.dropout_embedding),
            ids,
        );
        x = locked_dropout(x, self.reg.dropout_input);
        let mut layers = Vec::with_capacity(n);
        let mut distances = Vec::new();
        for (l, layer) in self.stack.layers.iter().enumerate() {
            let cell = weight_drop(layer, self.reg.weight_drop);
            let (out, st, d) = run_layer(&cell, x, init.as_mut().and_then(|it| it.next()));
            layers.push(st);
            distances.extend(d);
            x = if l + 1 < n {
                locked_dropout(out, self.reg.dropout_hidden)
            } else {
                out
            };
        }
        let dropped = locked_dropout(x.clone(), self.reg.dropout);
        let d = dropped.dims()[2];
        let vocab = self.n_tokens();
        // Tied decoder: logits = h · Eᵀ + b.
        let logits = dropped
            .clone()
            .reshape([batch * time, d])
            .matmul(weight.transpose())
            .add(self.decoder_bias.val().unsqueeze_dim(0))
            .reshape([batch, time, vocab]);
        LmOutput {
            logits,
            state: LmState { layers },
            outputs: x,
            dropped,
            distances,
        }
    }

    /// Each layer's syntactic distances for a padded batch of sentences, from a zero state
    /// (cumax cells; empty for the LSTM). Uses the padding-aware runner, so each sentence gets
    /// the distances it gets alone.
    ///
    /// # Shapes
    /// - `ids`: `[batch, time]`, padded at the end
    /// - `lengths`: `batch` entries, each `≤ time`
    /// - output: one `[batch, time]` per layer, bottom first (zeros at padding)
    pub fn layer_distances(&self, ids: Tensor<B, 2, Int>, lengths: &[usize]) -> Vec<Tensor<B, 2>> {
        let x = embedding(self.embedding.val(), ids);
        self.stack.forward(x, Some(lengths), None).distances
    }
}

/// Negative log-likelihood of every target `[batch, time]` under `logits` `[batch, time, vocab]`.
pub fn token_nll<B: ArborBackend>(
    logits: Tensor<B, 3>,
    targets: Tensor<B, 2, Int>,
) -> Tensor<B, 2> {
    let [b, t, _] = logits.dims();
    log_softmax(logits, 2)
        .gather(2, targets.unsqueeze_dim(2))
        .reshape([b, t])
        .neg()
}
