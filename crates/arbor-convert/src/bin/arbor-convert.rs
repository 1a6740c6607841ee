//! `arbor-convert`: import the reference PyTorch weights into arbor checkpoints, export arbor
//! checkpoints to safetensors and back, and list what a weights file holds (docs/interop.md).

use std::path::PathBuf;

use anyhow::Result;
use arbor_convert::gumbel::{
    import_gumbel_snli, import_gumbel_sst, with_reference_specials, GumbelImport, QueryScale,
};
use arbor_convert::r2d2::{import_r2d2, R2d2Import};
use arbor_convert::PickleLimits;
use arbor_convert::{
    export_safetensors, import_rnn_lm, import_safetensors, import_spinn, model_state_dict,
    CheckpointModel, ReferenceVocab, RnnLmFlavour, RnnLmImport, SpinnImport, StateDict,
};
use arbor_encoders::r2d2::{R2d2SpecialIds, TreeRule};
use arbor_heads::NliFeatures;
use burn::backend::Flex;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "arbor-convert", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every `import` reads and writes.
#[derive(clap::Args, Debug)]
struct ImportFiles {
    /// The reference model's state dict (`torch.save` output: `.pt`, `.pth`, `.bin`; or
    /// `.safetensors`).
    #[arg(long)]
    state_dict: PathBuf,
    /// The vocabulary, one token per line in id order (the reference's vocabulary file).
    /// Without it, tokens are named `<id>` and inputs must be given as ids.
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// The arbor checkpoint to write.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Bounds on reading an untrusted PyTorch pickle (arbor_convert::pickle_guard).
#[derive(clap::Args, Debug)]
struct LimitArgs {
    /// Largest pickle program read (`data.pkl`, or a legacy file's pickles), MiB.
    #[arg(long, default_value_t = PickleLimits::default().max_pickle_bytes >> 20)]
    max_pickle_mib: u64,
    /// Most memory the pickle's objects may take in the reader, MiB.
    #[arg(long, default_value_t = PickleLimits::default().max_object_bytes >> 20)]
    max_object_mib: u64,
    /// Deepest nesting of containers in the pickle.
    #[arg(long, default_value_t = PickleLimits::default().max_depth)]
    max_depth: u32,
}

impl LimitArgs {
    fn limits(&self) -> PickleLimits {
        PickleLimits {
            max_pickle_bytes: self.max_pickle_mib.saturating_mul(1 << 20),
            max_object_bytes: self.max_object_mib.saturating_mul(1 << 20),
            max_depth: self.max_depth,
        }
    }
}

/// The reference models `import` reads, one subcommand each.
#[derive(Subcommand, Debug)]
enum Import {
    /// A Gumbel Tree-LSTM SNLI or SST model (jihunchoi/unsupervised-treelstm).
    Gumbel(GumbelArgs),
    /// An ON-LSTM language model (yikangshen/Ordered-Neurons, `--model ON` of billptw/FastTrees).
    OnLstm(RnnLmArgs),
    /// A FastTrees language model (billptw/FastTrees `--model FT`).
    Fasttrees(RnnLmArgs),
    /// A Faster FastTrees language model (billptw/FastTrees `--model FFT`).
    FasterFasttrees(RnnLmArgs),
    /// A SPINN SNLI model of nyu-mll/spinn's PyTorch port (SPINN-PI-NT, SPINN-PI or full SPINN,
    /// read off the keys).
    Spinn(SpinnArgs),
    /// An R2D2 language model (ant-research/StructuredLM_RTDT, branch `r2d2`).
    R2d2(R2d2Args),
}

/// The flags of the R2D2 import.
#[derive(clap::Args, Debug)]
struct R2d2Args {
    #[command(flatten)]
    files: ImportFiles,
    /// Attention heads of the composition Transformer (`num_attention_heads`; the weights do
    /// not record it).
    #[arg(long, default_value_t = arbor_convert::r2d2::REFERENCE_HEADS)]
    heads: usize,
    /// Pruning window m (`window_size`), recorded in the configuration.
    #[arg(long, default_value_t = arbor_convert::r2d2::REFERENCE_WINDOW)]
    window: usize,
    /// Exhaustive CKY instead of pruned tree induction (the reference always prunes).
    #[arg(long)]
    no_pruning: bool,
    /// Gumbel-softmax temperature recorded for further training (the reference's is 1).
    #[arg(long, default_value_t = 1.0)]
    tau: f64,
    /// Vocabulary ids of [CLS], [SUM], [MASK], [BOS], [EOS], comma-separated (the reference's
    /// `cls_token_id`, `sum_token_id`, `mask_token_id`, `bos_token_id`, `eos_token_id`;
    /// default: found in --vocab, which gives 101,7,103,4,5 on a BERT-uncased vocab.txt).
    #[arg(long, value_delimiter = ',')]
    special_ids: Option<Vec<u32>>,
    /// The tree rule recorded in the checkpoint, which `r2d2 parse` uses unless its
    /// --tree-rule says otherwise: the reference's `get_token_tree` (reference) or arbor's
    /// (docs/r2d2.md, "Tree recovery").
    #[arg(long, default_value_t = TreeRule::Reference, value_parser = |s: &str| s.parse::<TreeRule>())]
    tree_rule: TreeRule,
}

/// The flags of the Gumbel Tree-LSTM import.
#[derive(clap::Args, Debug)]
struct GumbelArgs {
    #[command(flatten)]
    files: ImportFiles,
    /// Which model: the SNLI pair classifier (`snli/model.py`) or the SST sentence classifier
    /// (`sst/model.py`).
    #[arg(long, value_enum)]
    task: GumbelTask,
    /// The reference's `--vocab-size`: how many entries of --vocab it kept.
    #[arg(long)]
    vocab_size: Option<usize>,
    /// Label names in the reference's class order, comma-separated (default: the reference's
    /// own, neutral,entailment,contradiction for SNLI and negative,positive for binary SST).
    #[arg(long, value_delimiter = ',')]
    labels: Option<Vec<String>>,
    /// How the reference scaled its composition query score: by √hidden_dim as the released
    /// code does, or not at all (early versions).
    #[arg(long, value_enum, default_value_t = QueryScale::SqrtHidden)]
    query_scale: QueryScale,
    /// The model was trained with --intra-attention (it adds no weights, so say so).
    #[arg(long)]
    intra_attention: bool,
    /// Gumbel-softmax temperature recorded for training (the reference's is 1).
    #[arg(long, default_value_t = 1.0)]
    tau: f64,
    /// The classifier's dropout recorded for training (no effect at evaluation).
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
    /// The SNLI classifier's difference feature: `abs` (`|u − v|`, the reference's
    /// `snli/model.py` for the layout read here) or `signed` (`u − v`).
    #[arg(long, value_enum, default_value_t = PairDifference::Abs)]
    difference: PairDifference,
    /// The model was trained on lower-cased text: the reference's `dump_dataset.py --lower`.
    /// Without it words are looked up as written, its default (`--lower` is off there; the
    /// authors' released vocabulary has no capitals, so their own models used it).
    #[arg(long)]
    lower: bool,
    /// What --vocab lists: `reference` (the words of the file given to the reference's
    /// dump_dataset.py; `<PAD>`, `<UNK>` follow them) or `torchtext` (a torchtext `itos` in id
    /// order, `<unk>` and `<pad>` first, as the SST reference's `TEXT.build_vocab` makes it).
    #[arg(long, value_enum, default_value_t = VocabFormat::Reference)]
    vocab_format: VocabFormat,
}

/// What a Gumbel import's vocabulary file lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum VocabFormat {
    /// The words; the reference appends `<PAD>` and `<UNK>`.
    Reference,
    /// torchtext's `itos`, specials included.
    Torchtext,
}

/// The difference feature of an SNLI pair classifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PairDifference {
    /// `|u − v|`.
    Abs,
    /// `u − v`.
    Signed,
}

/// The flags of the SPINN import.
#[derive(clap::Args, Debug)]
struct SpinnArgs {
    #[command(flatten)]
    files: ImportFiles,
    /// The GloVe-format text vectors the model was trained with, when the state dict has no
    /// `embed.embed.weight` (the reference keeps pretrained vectors outside its state dict);
    /// needs --vocab.
    #[arg(long, requires = "vocab")]
    embeddings: Option<PathBuf>,
    /// The label names in the model's output order, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "entailment,neutral,contradiction"
    )]
    labels: Vec<String>,
    /// Lower-case words before lookup (the model was trained with the reference's
    /// `--lowercase`).
    #[arg(long)]
    lowercase: bool,
    /// Weight of the transition loss if full SPINN is trained further (the reference's
    /// `--transition_weight`; not in the weights).
    #[arg(long, default_value_t = 1.0)]
    transition_weight: f64,
    /// Classifier dropout if the model is trained further (not used at evaluation).
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
}

/// Which Gumbel Tree-LSTM model.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum GumbelTask {
    /// `SNLIModel`.
    Snli,
    /// `SSTModel`.
    Sst,
}

/// The flags of the language-model imports.
#[derive(clap::Args, Debug)]
struct RnnLmArgs {
    #[command(flatten)]
    files: ImportFiles,
    /// Rebuild the reference's dictionary from its training text, as its `data.Corpus` does
    /// (order of first appearance, `<eos>` after every line), instead of reading `--vocab`.
    #[arg(long, conflicts_with = "vocab")]
    corpus_train: Option<PathBuf>,
    /// With `--corpus-train`: the validation text, whose new words the reference added next.
    #[arg(long, requires = "corpus_train")]
    corpus_valid: Option<PathBuf>,
    /// With `--corpus-train`: the test text, whose new words the reference added last.
    #[arg(long, requires = "corpus_valid")]
    corpus_test: Option<PathBuf>,
    /// The reference's DropConnect rate `--wdrop` the model was trained with: its evaluation
    /// scales the hidden-to-hidden weights by (1 - wdrop), so the import does too.
    #[arg(long, default_value_t = arbor_convert::REFERENCE_WEIGHT_DROP)]
    weight_drop: f64,
    /// The token the reference appended to every line, if not `<eos>` (e.g. `</s>`); it
    /// becomes arbor's `<eos>`.
    #[arg(long, default_value = "<eos>")]
    eos_token: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Imports a reference model's PyTorch state dict as an arbor checkpoint.
    Import {
        #[command(subcommand)]
        family: Import,
    },
    /// Lists the tensors of a PyTorch state dict, a safetensors file or an arbor checkpoint.
    Inspect {
        /// The file: `.pt`/`.pth`/`.bin`, `.safetensors` or an arbor `.ckpt`.
        file: PathBuf,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Writes an arbor checkpoint as `DIR/model.safetensors` plus `DIR/config.json`.
    Export {
        /// The arbor checkpoint.
        #[arg(long)]
        checkpoint: PathBuf,
        /// The output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// Rebuilds an arbor checkpoint from an export (`model.safetensors` + `config.json`).
    FromSafetensors {
        /// The export directory (holding `model.safetensors` and `config.json`).
        dir: PathBuf,
        /// The checkpoint to write.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("arbor-convert: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Import { family } => import(family),
        Command::Inspect { file, limits } => inspect(&file, &limits.limits()),
        Command::Export { checkpoint, out } => {
            let e = export_safetensors(&checkpoint, &out)?;
            println!(
                "exported {} ({} tensors) to {} and {}",
                e.model,
                e.tensors,
                e.weights.display(),
                e.config.display()
            );
            Ok(())
        }
        Command::FromSafetensors { dir, out } => {
            import_safetensors(
                &dir.join(arbor_convert::WEIGHTS_FILE),
                &dir.join(arbor_convert::CONFIG_FILE),
                &out,
            )?;
            println!("wrote {}", out.display());
            Ok(())
        }
    }
}

fn import(family: Import) -> Result<()> {
    let (flavour, args) = match family {
        Import::Gumbel(a) => return import_gumbel(a),
        Import::Spinn(a) => return import_spinn_files(a),
        Import::R2d2(a) => return import_r2d2_model(a),
        Import::OnLstm(a) => (RnnLmFlavour::OnLstm, a),
        Import::Fasttrees(a) => (RnnLmFlavour::FastTrees, a),
        Import::FasterFasttrees(a) => (RnnLmFlavour::FasterFastTrees, a),
    };
    import_lm(flavour, args)
}

fn import_gumbel(a: GumbelArgs) -> Result<()> {
    let Some(vocab_file) = &a.files.vocab else {
        anyhow::bail!(
            "--vocab is required for a Gumbel Tree-LSTM model: the reference's vocabulary file \
             (the one given to its dump_dataset.py)"
        );
    };
    let mut vocab = ReferenceVocab::read_file(vocab_file)?;
    if let Some(n) = a.vocab_size {
        vocab = vocab.truncated(n);
    }
    let vocab = match a.vocab_format {
        VocabFormat::Reference => with_reference_specials(vocab),
        VocabFormat::Torchtext => vocab,
    };
    let opts = GumbelImport {
        vocab,
        labels: a.labels,
        query_scale: a.query_scale,
        intra_attention: a.intra_attention,
        tau: a.tau,
        dropout: a.dropout,
        features: match a.difference {
            PairDifference::Abs => NliFeatures::AbsDifference,
            PairDifference::Signed => NliFeatures::Difference,
        },
        lowercase: a.lower,
    };
    let sd = StateDict::read_with(&a.files.state_dict, &a.files.limits.limits())?;
    let device = Default::default();
    let task = match a.task {
        GumbelTask::Snli => {
            let imported = import_gumbel_snli::<Flex>(sd, &opts, &device)?;
            imported.save::<Flex>(&a.files.out)?;
            imported.meta["task"].clone()
        }
        GumbelTask::Sst => {
            let imported = import_gumbel_sst::<Flex>(sd, &opts, &device)?;
            imported.save::<Flex>(&a.files.out)?;
            imported.meta["task"].clone()
        }
    };
    let encoder = &task["model"]["encoder"];
    println!(
        "wrote {} (gumbel-{}: {} words, leaf {}, width {}, labels {})",
        a.files.out.display(),
        match a.task {
            GumbelTask::Snli => "snli",
            GumbelTask::Sst => "sst",
        },
        task["vocab"].as_array().map_or(0, Vec::len),
        encoder["leaf"],
        encoder["d_hidden"],
        task["labels"],
    );
    Ok(())
}

fn import_r2d2_model(a: R2d2Args) -> Result<()> {
    let Some(vocab_file) = &a.files.vocab else {
        anyhow::bail!(
            "--vocab is required for an R2D2 model: the WordPiece vocab.txt it was trained with \
             (bert-base-uncased's for the released models)"
        );
    };
    let special_ids = match a.special_ids.as_deref() {
        None => None,
        Some(&[cls, sum, mask, bos, eos]) => Some(R2d2SpecialIds {
            cls,
            sum,
            mask,
            bos,
            eos,
        }),
        Some(other) => anyhow::bail!(
            "--special-ids takes five ids (cls,sum,mask,bos,eos), got {}",
            other.len()
        ),
    };
    let opts = R2d2Import {
        vocab: ReferenceVocab::read_file(vocab_file)?,
        special_ids,
        n_heads: a.heads,
        window: a.window,
        pruning: !a.no_pruning,
        tau: a.tau,
        tree_rule: a.tree_rule,
    };
    let sd = StateDict::read_with(&a.files.state_dict, &a.files.limits.limits())?;
    let imported = import_r2d2::<Flex>(sd, &opts, &Default::default())?;
    imported.save::<Flex>(&a.files.out)?;
    let model = &imported.meta["task"]["model"];
    let c = &model["encoder"]["composition"];
    println!(
        "wrote {} (r2d2: {} pieces, width {}, {} layers, {} heads, feed-forward {}, window {}, \
         special ids {})",
        a.files.out.display(),
        model["vocab_size"],
        c["d_model"],
        c["n_layers"],
        c["n_heads"],
        c["d_ff"],
        model["encoder"]["window"],
        model["special_ids"],
    );
    Ok(())
}

fn import_lm(flavour: RnnLmFlavour, args: RnnLmArgs) -> Result<()> {
    let vocab = match (&args.files.vocab, &args.corpus_train) {
        (Some(file), _) => Some(ReferenceVocab::read_file(file)?),
        (None, Some(train)) => {
            let files: Vec<PathBuf> = [
                Some(train),
                args.corpus_valid.as_ref(),
                args.corpus_test.as_ref(),
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
            Some(ReferenceVocab::from_corpus(&files)?)
        }
        (None, None) => {
            eprintln!(
                "arbor-convert: no --vocab or --corpus-train: tokens are named <0>, <1>, ... and \
                 the checkpoint cannot read text"
            );
            None
        }
    };
    let opts = RnnLmImport {
        flavour,
        weight_drop: args.weight_drop,
        vocab,
        eos_token: args.eos_token,
    };
    let sd = StateDict::read_with(&args.files.state_dict, &args.files.limits.limits())?;
    let device = Default::default();
    let imported = import_rnn_lm::<Flex>(sd, &opts, &device)?;
    imported.save::<Flex>(&args.files.out)?;
    let model = &imported.meta["task"]["model"];
    let scaled = if flavour == RnnLmFlavour::FasterFastTrees {
        "its unused hidden-to-hidden weights left out".to_string()
    } else {
        format!(
            "hidden-to-hidden weights scaled by 1 - {}",
            args.weight_drop
        )
    };
    println!(
        "wrote {} ({}: {} tokens, emb {}, hidden {}, {} layers, chunk size {}; {scaled})",
        args.files.out.display(),
        flavour.layout(),
        model["n_tokens"],
        model["d_embed"],
        model["d_hidden"],
        model["n_layers"],
        model["chunk_size"],
    );
    Ok(())
}

fn import_spinn_files(args: SpinnArgs) -> Result<()> {
    let sd = model_state_dict(StateDict::read_with(
        &args.files.state_dict,
        &args.files.limits.limits(),
    )?);
    let vocab = args
        .files
        .vocab
        .as_deref()
        .map(|f| ReferenceVocab::read_file(f).map(|v| v.tokens))
        .transpose()?;
    if vocab.is_none() {
        eprintln!(
            "arbor-convert: no --vocab: tokens are named <pad>, <unk>, <2>, <3>, ... and the \
             checkpoint cannot read text"
        );
    }
    let opts = SpinnImport {
        vocab,
        vocab_file: args.files.vocab.clone(),
        embeddings: args.embeddings,
        labels: args.labels,
        lowercase: args.lowercase,
        transition_weight: args.transition_weight,
        dropout: args.dropout,
    };
    let device = Default::default();
    let imported = import_spinn::<Flex>(sd, &opts, &device)?;
    imported.save::<Flex>(&args.files.out)?;
    let encoder = &imported.meta["task"]["model"]["encoder"];
    println!(
        "wrote {} ({}: {}, D = {}, tracker {}, {} words)",
        args.files.out.display(),
        arbor_convert::SPINN_LAYOUT,
        encoder["variant"].as_str().unwrap_or("?"),
        encoder["d_hidden"],
        encoder["d_tracking"],
        imported.meta["task"]["vocab"]
            .as_array()
            .map_or(0, Vec::len),
    );
    if let Some(e) = imported.meta["imported"].get("embeddings") {
        println!(
            "embeddings: {} of {} rows found in {} (the others are zero, as in the reference)",
            e["rows_found"], e["rows"], e["source"]
        );
    }
    Ok(())
}

fn inspect(file: &std::path::Path, limits: &PickleLimits) -> Result<()> {
    let is_ckpt = file.extension().is_some_and(|e| e == "ckpt");
    if is_ckpt {
        let ckpt = arbor_train::CheckpointFile::load(file)?;
        let kind = CheckpointModel::from_meta(&ckpt.meta)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let device = Default::default();
        let params = arbor_convert::model_parameters(&kind, &device);
        println!("{}: arbor {} checkpoint", file.display(), kind.name());
        for (path, shape) in params {
            println!("{path}\t{shape:?}");
        }
        return Ok(());
    }
    let sd = StateDict::read_with(file, limits)?;
    for (key, shape) in sd.entries() {
        println!("{key}\t{shape:?}");
    }
    Ok(())
}
