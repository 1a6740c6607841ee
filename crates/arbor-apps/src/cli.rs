//! Command-line pieces shared by the examples: training flags and their translation into the
//! engine's and the encoders' configurations.

use std::path::PathBuf;

use arbor_cells::names::KindName;
use arbor_encoders::{
    ClassifierInput, EncoderConfig, EncoderKind, EncoderOptions, LeafKind, Pooling,
};
use arbor_train::device::DeviceList;
use arbor_train::{CheckpointEvery, LrSchedule, OptimizerKind, TauAnneal, TrainConfig};
use clap::{Args, ValueEnum};

/// Optimizers, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    /// Adam.
    Adam,
    /// AdamW.
    Adamw,
}

/// The engine flags every training program shares. Each program keeps its own defaults
/// (`#[command(mut_arg(..))]` on its arguments), and [`EngineArgs::train_config`] is the one
/// place they become a [`TrainConfig`].
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Examples per batch.
    #[arg(long, allow_negative_numbers = true, default_value_t = 64)]
    pub batch_size: usize,
    /// Epochs.
    #[arg(long, allow_negative_numbers = true, default_value_t = 5)]
    pub epochs: usize,
    /// Stop after this many optimizer steps in total.
    #[arg(long, allow_negative_numbers = true)]
    pub max_steps: Option<u64>,
    /// Stop after this many minutes of training (a checkpoint is written first).
    #[arg(long, allow_negative_numbers = true)]
    pub max_minutes: Option<f64>,
    /// Learning rate.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1e-3)]
    pub lr: f64,
    /// Weight decay (L2 for Adam, decoupled for AdamW).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Learning-rate schedule: plateau (decay when validation stalls), constant, cosine (to
    /// --min-lr over the whole run), cosine:STEPS, or step:EVERY:GAMMA.
    #[arg(long, default_value = "plateau", value_name = "SCHEDULE")]
    pub lr_schedule: LrSchedule,
    /// Linear learning-rate warm-up over this many optimizer steps (0: none).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub warmup_steps: u64,
    /// Floor of the learning rate (plateau decay and cosine).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1e-6)]
    pub min_lr: f64,
    /// Plateau schedule: multiply the learning rate by this factor when validation stalls.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.5)]
    pub plateau_factor: f64,
    /// Plateau schedule: evaluations without improvement tolerated before a decay.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    pub plateau_patience: u32,
    /// Stop after this many evaluations in a row without a better validation metric (the best
    /// model is kept in OUT/best.ckpt). Default: never stop early.
    #[arg(long, allow_negative_numbers = true, value_name = "EVALS")]
    pub early_stopping: Option<u32>,
    /// Anneal the Gumbel-softmax temperature as the Gumbel Tree-LSTM reference does:
    /// τ = max(--tau-min, exp(−RATE · step)), set every --tau-anneal-every steps.
    #[arg(long, allow_negative_numbers = true, value_name = "RATE")]
    pub tau_anneal_rate: Option<f64>,
    /// Steps between two temperature updates (with --tau-anneal-rate).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1000)]
    pub tau_anneal_every: u64,
    /// Floor of the annealed temperature (with --tau-anneal-rate).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.5)]
    pub tau_min: f64,
    /// Clip the global gradient norm (0: no clipping).
    #[arg(long, allow_negative_numbers = true, default_value_t = 5.0)]
    pub clip: f64,
    /// Evaluate and checkpoint every N steps (0: every epoch).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub eval_every: u64,
    /// Read the training loss, accuracy and gradient norm back from the device (progress bar,
    /// non-finite check) every N steps; also before every evaluation, checkpoint and metrics
    /// record (0: only then). The steps in between read nothing back.
    #[arg(long, allow_negative_numbers = true, default_value_t = arbor_train::DEFAULT_LOG_EVERY)]
    pub log_every: u64,
    /// Also write OUT/last.ckpt every N steps (`500`) or minutes (`10m`), between evaluations.
    #[arg(long, allow_hyphen_values = true, value_name = "N|Mm")]
    pub checkpoint_every: Option<CheckpointEvery>,
    /// Seed of initialisation, data order, dropout and noise.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub seed: u64,
    /// Output directory for checkpoints and the metrics log.
    #[arg(long, default_value = "runs/default")]
    pub out: PathBuf,
    /// Continue the run OUT holds, from OUT/last.ckpt (refused when there is none).
    #[arg(long)]
    pub resume: bool,
    /// With --resume: continue even if the checkpoint was written with other settings (batch,
    /// seed, optimizer, learning-rate schedule…) or other training data; the differences are
    /// printed as a warning.
    #[arg(long, requires = "resume")]
    pub force: bool,
    /// Replace the run OUT holds: its checkpoints, metrics log, curves and result are deleted
    /// first. Without it (or --resume), a folder holding a run is refused.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Data-parallel training: one worker per listed device, comma-separated, all on one
    /// backend (`cuda:0,cuda:1`; `flex,flex` runs two workers on the CPU). Each worker takes its
    /// share of every batch and Burn's collective sums the gradients; the first device
    /// evaluates and writes the checkpoints. Replaces --device (docs/training.md, "Several
    /// devices").
    #[arg(long, value_name = "LIST")]
    pub devices: Option<DeviceList>,
}

impl EngineArgs {
    /// The device the run evaluates and checkpoints on, by its concrete name: the first of
    /// --devices, else the program's `device` (its --device) resolved.
    pub fn main_device(&self, device: &str) -> anyhow::Result<String> {
        Ok(match &self.devices {
            Some(list) => list.0[0].to_string(),
            None => arbor_train::device::resolve(device)?.to_string(),
        })
    }

    /// The workers' devices for backend `B`: the --devices list, else `device` alone.
    pub fn workers<B: burn::tensor::backend::Backend>(&self, device: &B::Device) -> Vec<B::Device> {
        match &self.devices {
            Some(list) => list.devices::<B>(),
            None => vec![device.clone()],
        }
    }

    /// Claims OUT for this run ([`arbor_train::outdir`]): refused when another run holds it,
    /// when it holds a run and neither --resume nor --overwrite was given, or when --resume
    /// finds no last.ckpt; --overwrite deletes the old run's files. Hold the lock until the
    /// program's last write there.
    pub fn claim_out(&self) -> anyhow::Result<arbor_train::RunLock> {
        let mode = arbor_train::StartMode::from_flags(self.resume, self.overwrite)?;
        Ok(arbor_train::claim(&self.out, mode)?)
    }

    /// The engine configuration these flags describe, with `optimizer`.
    pub fn train_config(&self, optimizer: OptimizerKind) -> TrainConfig {
        let mut c = TrainConfig::new(&self.out);
        c.optimizer = optimizer;
        c.lr = self.lr;
        c.weight_decay = self.weight_decay;
        c.lr_schedule = self.lr_schedule;
        c.warmup_steps = self.warmup_steps;
        c.min_lr = self.min_lr;
        c.plateau_factor = self.plateau_factor;
        c.plateau_patience = self.plateau_patience;
        c.early_stopping = self.early_stopping;
        c.tau_anneal = self.tau_anneal_rate.map(|rate| TauAnneal {
            rate,
            every: self.tau_anneal_every,
            min: self.tau_min,
        });
        c.clip_norm = (self.clip > 0.0).then_some(self.clip);
        c.batch_size = self.batch_size;
        c.epochs = self.epochs;
        c.max_steps = self.max_steps;
        c.max_minutes = self.max_minutes;
        c.eval_every = self.eval_every;
        c.log_every = self.log_every;
        c.checkpoint_every = self.checkpoint_every;
        c.seed = self.seed;
        c.resume = self.resume;
        c.force_resume = self.force;
        c.overwrite = self.overwrite;
        c.quiet = self.quiet;
        c
    }
}

/// Flags every classification program shares.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    pub device: String,
    /// Train even when the longest training batch is estimated not to fit in the memory left
    /// (CPU backends; see docs/encoders.md, "Memory of a training step").
    #[arg(long)]
    pub skip_memory_check: bool,
    /// Sentence encoder.
    #[arg(long, default_value = "gumbel", value_parser = kind_parser::<EncoderKind>())]
    pub encoder: EncoderKind,
    /// Hidden width of the encoder (and word-embedding width unless --embed-dim or --glove).
    #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
    pub dim: usize,
    /// Word-embedding width (default: --dim, or the GloVe width).
    #[arg(long, allow_negative_numbers = true)]
    pub embed_dim: Option<usize>,
    /// Hidden width of the classifier MLP (default: --dim).
    #[arg(long, allow_negative_numbers = true)]
    pub mlp_dim: Option<usize>,
    /// Leaves of Gumbel Tree-LSTM (bi-lstm: two directions of --dim / 2 each; --dim even).
    #[arg(long, default_value = "lstm", value_parser = kind_parser::<LeafKind>())]
    pub leaf: LeafKind,
    /// Gumbel Tree-LSTM: the sentence vector is intra-attention over every tree node's h
    /// instead of the root h (the reference's intra_attention).
    #[arg(long)]
    pub intra_attention: bool,
    /// Full SPINN: what the transition classifier reads from the tracking LSTM, h or h-c
    /// ([h; c], the PyTorch port's predict_use_cell). Default: h-c.
    #[arg(long, value_name = "INPUT", value_parser = kind_parser::<ClassifierInput>())]
    pub transition_input: Option<ClassifierInput>,
    /// Sentence vector of the recurrent encoders: last real state, or mean or max over the
    /// real words.
    #[arg(long, default_value = "last", value_parser = kind_parser::<Pooling>())]
    pub pooling: Pooling,
    /// Stacked encoder layers (LSTM family and Transformer).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    pub layers: usize,
    /// Longest sentence read from any training or evaluation file, in tokens: a longer one is
    /// an error naming its file and line (the models' time and memory grow with the length;
    /// the longest sentences of SNLI, SST and the logic data are under 100 tokens, of the
    /// released ListOps test file 939).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10_000)]
    pub max_sentence_len: usize,
    /// Transformer: attention heads (0: the largest divisor of --dim that is at most 4).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub heads: usize,
    /// Transformer: feed-forward inner width (0: 4 × --dim).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub ff_dim: usize,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adam")]
    pub optimizer: OptimizerArg,
    /// Dropout on embeddings and in the classifier.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.1)]
    pub dropout: f64,
    /// Standard deviation of randomly initialised word embeddings, `N(0, std²)`. Default: the
    /// program's, which follows its reference code (1 for logic and ListOps, as SPINN's
    /// `nn.Embedding`; 0.01 for SST-2 and SNLI, as the Gumbel Tree-LSTM code; 1 for the
    /// Transformer encoders in every program); see docs/init.md.
    /// Not used with --glove.
    #[arg(long, allow_negative_numbers = true)]
    pub embed_init_std: Option<f64>,
    /// Pretrained word vectors (GloVe/word2vec text format).
    #[arg(long)]
    pub glove: Option<PathBuf>,
    /// The engine's flags (batch, epochs, learning rate, checkpoints…).
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The flag parser of a model crate's kind enum ([`KindName`]): the kind's own forgiving
/// `FromStr` (case, `-` and `_` not significant; an error names the kind and lists every name),
/// and the names with their doc comments as the flag's possible values in `--help`. The model
/// crates name their kinds without clap; this is where the names meet the command line.
pub fn kind_parser<T>() -> KindParser<T>
where
    T: KindName + std::str::FromStr<Err = String>,
{
    KindParser(std::marker::PhantomData)
}

/// See [`kind_parser`].
#[derive(Debug)]
pub struct KindParser<T>(std::marker::PhantomData<T>);

impl<T> Clone for KindParser<T> {
    fn clone(&self) -> Self {
        KindParser(std::marker::PhantomData)
    }
}

impl<T> clap::builder::TypedValueParser for KindParser<T>
where
    T: KindName + std::str::FromStr<Err = String>,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        clap::builder::StringValueParser::new()
            .try_map(|s| s.parse::<T>())
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(T::VARIANTS.iter().map(|&v| {
            let value = clap::builder::PossibleValue::new(v.name());
            match v.help() {
                Some(help) => value.help(help),
                None => value,
            }
        })))
    }
}

impl TrainArgs {
    /// The engine configuration these flags describe.
    pub fn train_config(&self) -> TrainConfig {
        self.engine.train_config(match self.optimizer {
            OptimizerArg::Adam => OptimizerKind::Adam,
            OptimizerArg::Adamw => OptimizerKind::AdamW,
        })
    }

    /// Checks every flag before any work: the engine flags ([`check_engine`]), the classifier's
    /// widths and dropout, and the encoder configuration the flags describe (its own
    /// `validate`), with errors naming the flag and the rule.
    pub fn check(&self) -> anyhow::Result<()> {
        check_engine(&self.engine)?;
        if self.dim == 0 || self.embed_dim == Some(0) || self.mlp_dim == Some(0) {
            anyhow::bail!("--dim, --embed-dim and --mlp-dim must be at least 1");
        }
        if !(self.dropout.is_finite() && (0.0..1.0).contains(&self.dropout)) {
            anyhow::bail!("--dropout {} must be in [0, 1)", self.dropout);
        }
        if let Some(std) = self.embed_init_std {
            if !(std.is_finite() && std >= 0.0) {
                anyhow::bail!("--embed-init-std {std} must be a finite number ≥ 0");
            }
        }
        if self.layers == 0 {
            anyhow::bail!("--layers must be at least 1");
        }
        if self.max_sentence_len == 0 {
            anyhow::bail!("--max-sentence-len must be at least 1");
        }
        // Every encoder has at least one dim × dim and one dim × embed-dim weight matrix.
        let (d, e) = (self.dim as f64, self.embed_dim.unwrap_or(self.dim) as f64);
        check_weights_fit("--dim/--embed-dim", d * d + d * e, &self.device)?;
        if self.layers > 1 && !self.encoder.stacks_layers() {
            anyhow::bail!(
                "--layers {}: the {} encoder has no stacked layers (--layers applies to the LSTM \
                 family, the Transformers and R2D2)",
                self.layers,
                self.encoder
            );
        }
        if self.heads > 0 && !self.dim.is_multiple_of(self.heads) {
            anyhow::bail!(
                "--heads {} must divide --dim {} (the width of each head is dim / heads)",
                self.heads,
                self.dim
            );
        }
        self.encoder_config(self.embed_dim.unwrap_or(self.dim))
            .validate()
            .map_err(|e| {
                anyhow::anyhow!(
                    "invalid flags for the {} encoder: {}",
                    self.encoder,
                    e.named(&[
                        ("n_heads", "--heads"),
                        ("d_model", "--dim"),
                        ("d_hidden", "--dim"),
                        ("d_input", "--embed-dim"),
                        ("n_layers", "--layers"),
                        ("d_ff", "--ff-dim"),
                        ("chunk_size", "the gate chunk size derived from --dim"),
                    ])
                )
            })?;
        Ok(())
    }

    /// How the program reads its data files: strict, with `--max-sentence-len`.
    pub fn read_options(&self) -> arbor_data::ReadOptions {
        arbor_data::ReadOptions::strict().with_max_tokens(Some(self.max_sentence_len))
    }

    /// The encoder configuration for word embeddings of width `d_embed`: the kind's defaults
    /// ([`EncoderConfig::of_kind`]) with these flags applied to the models they concern.
    pub fn encoder_config(&self, d_embed: usize) -> EncoderConfig {
        self.encoder_options(d_embed).config()
    }

    /// The encoder choices these flags make, for word embeddings of width `d_embed` (`--heads`
    /// and `--ff-dim` at 0 leave the model's defaults).
    pub fn encoder_options(&self, d_embed: usize) -> EncoderOptions {
        EncoderOptions {
            kind: self.encoder,
            d_input: d_embed,
            d_hidden: self.dim,
            n_layers: self.layers,
            n_heads: (self.heads > 0).then_some(self.heads),
            d_ff: (self.ff_dim > 0).then_some(self.ff_dim),
            leaf: self.leaf,
            intra_attention: self.intra_attention,
            pooling: self.pooling,
            transition_input: self.transition_input,
        }
    }
}

/// Refuses sizes whose weights alone cannot fit before anything is allocated (an allocation
/// that fails aborts the process instead of returning an error): `floats` is a lower bound on
/// the model's parameter count, `flags` names the flags it grows with. Training keeps four
/// copies (weights, gradients, Adam's two moments) of 4-byte floats. Devices that do not report
/// their free memory (CUDA on Burn 0.21) are not checked.
pub fn check_weights_fit(flags: &str, floats: f64, device: &str) -> anyhow::Result<()> {
    let Ok(spec) = arbor_train::device::resolve(device) else {
        return Ok(());
    };
    check_fits(
        flags,
        "the weights alone, with their gradients and the optimizer's moments,",
        16.0 * floats,
        spec,
    )
}

/// Refuses `need` bytes of `what` (grown by `flags`) when `spec`'s available memory is known
/// and smaller: the one place the programs compare a size with the memory before allocating.
pub fn check_fits(
    flags: &str,
    what: &str,
    need: f64,
    spec: arbor_train::device::DeviceSpec,
) -> anyhow::Result<()> {
    let Some(available) = spec.available_memory() else {
        return Ok(());
    };
    if need > available as f64 {
        let gib = |b: f64| b / (1u64 << 30) as f64;
        anyhow::bail!(
            "{flags}: {what} would take at least {:.1} GiB, and {:.1} GiB of memory is available",
            gib(need),
            gib(available as f64)
        );
    }
    Ok(())
}

/// Checks the engine flags every training program shares before any work: a batch of at
/// least one example, at least one epoch and step, a finite positive learning rate, finite
/// non-negative weight decay and clipping, a positive `--max-minutes`, a `--min-lr` the
/// schedule can use, and the temperature annealing.
pub fn check_engine(e: &EngineArgs) -> anyhow::Result<()> {
    if e.batch_size == 0 {
        anyhow::bail!("--batch-size must be at least 1");
    }
    if e.epochs == 0 {
        anyhow::bail!("--epochs must be at least 1 (a run of no epochs trains nothing)");
    }
    if e.max_steps == Some(0) {
        anyhow::bail!("--max-steps must be at least 1 (a run of no steps trains nothing)");
    }
    if !(e.lr.is_finite() && e.lr > 0.0) {
        anyhow::bail!("--lr {} must be a finite number > 0", e.lr);
    }
    for (flag, v) in [("--weight-decay", e.weight_decay), ("--clip", e.clip)] {
        if !(v.is_finite() && v >= 0.0) {
            anyhow::bail!("{flag} {v} must be a finite number ≥ 0");
        }
    }
    if let Some(m) = e.max_minutes {
        if !(m.is_finite() && m > 0.0) {
            anyhow::bail!("--max-minutes {m} must be a finite number > 0");
        }
    }
    if !(e.min_lr.is_finite() && e.min_lr >= 0.0) {
        anyhow::bail!("--min-lr {} must be a finite number ≥ 0", e.min_lr);
    }
    if !(e.plateau_factor.is_finite() && e.plateau_factor > 0.0 && e.plateau_factor <= 1.0) {
        anyhow::bail!("--plateau-factor {} must be in (0, 1]", e.plateau_factor);
    }
    e.lr_schedule.validate(e.lr, e.min_lr).map_err(|m| {
        anyhow::anyhow!(
            "--lr-schedule {}: {m} (see --lr and --min-lr)",
            e.lr_schedule
        )
    })?;
    if e.early_stopping == Some(0) {
        anyhow::bail!("--early-stopping must be at least 1 evaluation");
    }
    if let Some(rate) = e.tau_anneal_rate {
        TauAnneal {
            rate,
            every: e.tau_anneal_every,
            min: e.tau_min,
        }
        .validate()
        .map_err(|m| anyhow::anyhow!("--tau-anneal-rate/--tau-anneal-every/--tau-min: {m}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        train: TrainArgs,
    }

    fn encoder(args: &[&str]) -> EncoderConfig {
        let cli = Cli::try_parse_from(std::iter::once("prog").chain(args.iter().copied()))
            .expect("the flags parse");
        cli.train.check().expect("the flags are valid");
        cli.train.encoder_config(cli.train.dim)
    }

    #[test]
    fn cli_gumbel_leaf_and_intra_attention_flags() {
        let EncoderConfig::Gumbel(c) = encoder(&["--dim", "8"]) else {
            panic!("gumbel is the default encoder")
        };
        assert_eq!((c.leaf, c.uses_intra_attention()), (LeafKind::Lstm, false));
        let EncoderConfig::Gumbel(c) =
            encoder(&["--dim", "8", "--leaf", "bi-lstm", "--intra-attention"])
        else {
            panic!("a gumbel configuration")
        };
        assert_eq!((c.leaf, c.uses_intra_attention()), (LeafKind::BiLstm, true));
        let odd = Cli::try_parse_from(["prog", "--dim", "7", "--leaf", "bi-lstm"]).unwrap();
        let err = odd.train.check().unwrap_err().to_string();
        assert!(err.contains("--dim") && err.contains("even"), "{err}");
    }

    #[test]
    fn cli_spinn_transition_input_flag() {
        let EncoderConfig::Spinn(c) = encoder(&["--encoder", "spinn"]) else {
            panic!("a SPINN configuration")
        };
        assert_eq!(c.transition_input(), ClassifierInput::HiddenCell);
        let EncoderConfig::Spinn(c) = encoder(&["--encoder", "spinn", "--transition-input", "h"])
        else {
            panic!("a SPINN configuration")
        };
        assert_eq!(c.transition_input(), ClassifierInput::Hidden);
    }

    /// Every kind is a flag value (its name, and forgivingly spelt), builds the configuration of
    /// its own kind, and `--help` lists every name; a bad name is an error that lists them.
    #[test]
    fn every_encoder_kind_round_trips_through_the_command_line() {
        use arbor_cells::names::VariantArray;
        for &kind in EncoderKind::VARIANTS {
            let name = kind.to_string();
            let dim = if kind == EncoderKind::R2d2 { "16" } else { "8" };
            assert_eq!(
                encoder(&["--encoder", &name, "--dim", dim]).kind(),
                kind,
                "{kind}"
            );
            let shouted = name.to_ascii_uppercase().replace('-', "_");
            assert_eq!(encoder(&["--encoder", &shouted, "--dim", dim]).kind(), kind);
        }
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for &kind in EncoderKind::VARIANTS {
            assert!(help.contains(&kind.to_string()), "--help lists {kind}");
        }
        for &leaf in LeafKind::VARIANTS {
            assert!(help.contains(&leaf.to_string()), "--help lists {leaf}");
        }
        let err = Cli::try_parse_from(["prog", "--encoder", "gru"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--encoder") && err.contains("unknown encoder `gru`"),
            "{err}"
        );
        assert!(err.contains("transformer-fasttrees"), "{err}");
    }
}
