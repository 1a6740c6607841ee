//! The Gumbel Tree-LSTM SNLI and SST models of jihunchoi/unsupervised-treelstm
//! (`model/treelstm.py`, `snli/model.py`, `sst/model.py`), as their `state_dict()` is saved.
//! The key-by-key layout is in docs/encoders.md ("Reference parameter layouts") and
//! docs/interop.md.

use arbor_cells::ArborBackend;
use arbor_encoders::{Encoder, EncoderConfig, GumbelTreeLstmConfig, LeafKind};
use arbor_heads::{
    NliClassifier, NliClassifierConfig, NliFeatures, SentenceClassifier, SentenceClassifierConfig,
    TokenEmbeddingConfig,
};
use arbor_tasks::{ClassifierKind, ModelConfig, ModelMeta};

use crate::vocab::{arbor_label_order, gather_rows, ReferenceVocab};
use crate::{imported_meta, Array, ConvertError, Imported, StateDict, Weights};

/// How the reference scores a candidate parent `h̃` with its query `q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum QueryScale {
    /// `q·h̃ / √hidden_dim`, as the released code computes it (the default; `hidden_dim` is
    /// the leaf width, half the tree width with the bidirectional leaf).
    #[default]
    SqrtHidden,
    /// `q·h̃` with no scaling (early versions of the code).
    None,
}

/// What the weights of a Gumbel Tree-LSTM model cannot tell.
#[derive(Debug, Clone)]
pub struct GumbelImport {
    /// The reference vocabulary (with its `<PAD>`/`<UNK>`: see [`with_reference_specials`]).
    pub vocab: ReferenceVocab,
    /// Label names in the reference's class order (`None`: the reference's own, see
    /// [`snli_labels`] and [`sst_labels`]).
    pub labels: Option<Vec<String>>,
    /// How the reference scales the query score.
    pub query_scale: QueryScale,
    /// Whether the model was trained with `intra_attention` (adds no weights).
    pub intra_attention: bool,
    /// The Gumbel-softmax temperature (the reference's `gumbel_temperature`, 1).
    pub tau: f64,
    /// The classifier's dropout (recorded in the configuration; no effect at evaluation).
    pub dropout: f64,
    /// The SNLI classifier's pair features: `[u; v; |u − v|; u ⊙ v]` in the reference's
    /// `snli/model.py` (`torch.abs(pre - hyp)`), the layout this importer reads; unused for SST.
    pub features: NliFeatures,
    /// Whether the text was lower-cased before lookup when the model was trained (the
    /// reference's dataset reader decides; recorded in the checkpoint so that `snli`/`sst`
    /// look words up the same way).
    pub lowercase: bool,
}

/// The padding and unknown-word tokens unsupervised-treelstm's `Vocab` appends after the
/// words of its vocabulary file.
pub const SPECIALS: [&str; 2] = ["<PAD>", "<UNK>"];

/// The unknown-word and padding tokens of a torchtext vocabulary (`itos[0]`, `itos[1]`), which
/// the SST reference's `train.py` builds with `TEXT.build_vocab`: an `itos` file lists them, so
/// it is given as is, without [`with_reference_specials`].
pub const TORCHTEXT_SPECIALS: [&str; 2] = ["<unk>", "<pad>"];

/// `vocab` as the reference uses it: its file's words, then `<PAD>` and `<UNK>`.
pub fn with_reference_specials(vocab: ReferenceVocab) -> ReferenceVocab {
    vocab.with_specials(&SPECIALS)
}

/// The SNLI reference's label order (`snli/dump_dataset.py`: neutral 0, entailment 1,
/// contradiction 2).
pub fn snli_labels() -> Vec<String> {
    ["neutral", "entailment", "contradiction"]
        .map(String::from)
        .to_vec()
}

/// The SST reference's binary label order (negative 0, positive 1).
pub fn sst_labels() -> Vec<String> {
    ["negative", "positive"].map(String::from).to_vec()
}

/// The encoder read off the weights.
struct EncoderShape {
    config: GumbelTreeLstmConfig,
    vocab_rows: usize,
    d_word: usize,
}

fn read_encoder_shape(sd: &StateDict, opts: &GumbelImport) -> Result<EncoderShape, ConvertError> {
    let layout = "gumbel";
    let emb = sd.require_shape("word_embedding.weight", layout)?;
    let (vocab_rows, d_word) = (emb[0], emb[1]);
    let d_tree = sd.require_shape("encoder.comp_query", layout)?[0];
    let leaf = if sd.contains("encoder.word_linear.weight") {
        LeafKind::Affine
    } else if sd.contains("encoder.leaf_rnn_cell_bw.weight_ih") {
        LeafKind::BiLstm
    } else if sd.contains("encoder.leaf_rnn_cell.weight_ih") {
        LeafKind::Lstm
    } else {
        return Err(ConvertError::Layout {
            path: sd.path().to_path_buf(),
            layout: layout.into(),
            problems: vec![
                "no leaf transformation: neither `encoder.word_linear.weight` (affine leaves) nor \
                 `encoder.leaf_rnn_cell.weight_ih` (leaf LSTM)"
                    .into(),
            ],
        });
    };
    let config = GumbelTreeLstmConfig::new(d_word, d_tree)
        .with_leaf(leaf)
        .with_tau(opts.tau)
        .with_intra_attention(Some(opts.intra_attention));
    config
        .validate()
        .map_err(|e| ConvertError::Config(format!("{}: {e}", sd.path().display())))?;
    Ok(EncoderShape {
        config,
        vocab_rows,
        d_word,
    })
}

/// Takes the encoder's keys (`encoder.*`) into `w` under arbor's `encoder.*` paths.
fn map_encoder(sd: &mut StateDict, e: &EncoderShape, q: QueryScale, w: &mut Weights) {
    let (x, d) = (e.d_word, e.config.d_hidden);
    let lstm = |sd: &mut StateDict, w: &mut Weights, from: &str, to: &str, h: usize| {
        let wi = sd.take(&format!("{from}.weight_ih"), &[4 * h, x]);
        let wh = sd.take(&format!("{from}.weight_hh"), &[4 * h, h]);
        let bi = sd.take(&format!("{from}.bias_ih"), &[4 * h]);
        let bh = sd.take(&format!("{from}.bias_hh"), &[4 * h]);
        // Both sides order the gates i, f, g, o; arbor has one bias on the input map.
        w.put_some(format!("{to}.input.weight"), wi.map(|a| a.t()));
        w.put_some(format!("{to}.hidden.weight"), wh.map(|a| a.t()));
        if let (Some(bi), Some(bh)) = (bi, bh) {
            w.put(format!("{to}.input.bias"), bi.add(&bh));
        }
    };
    match e.config.leaf {
        LeafKind::Affine => {
            // Output rows 0..D are h, D..2D are c: arbor's [h; c] split.
            let wl = sd.take("encoder.word_linear.weight", &[2 * d, x]);
            w.put_some("encoder.leaf.weight", wl.map(|a| a.t()));
            w.put_some(
                "encoder.leaf.bias",
                sd.take("encoder.word_linear.bias", &[2 * d]),
            );
        }
        LeafKind::Lstm => lstm(sd, w, "encoder.leaf_rnn_cell", "encoder.leaf", d),
        LeafKind::BiLstm => {
            lstm(
                sd,
                w,
                "encoder.leaf_rnn_cell",
                "encoder.leaf.forward_cell",
                d / 2,
            );
            lstm(
                sd,
                w,
                "encoder.leaf_rnn_cell_bw",
                "encoder.leaf.backward_cell",
                d / 2,
            );
        }
    }
    // comp_linear's blocks are i, f_l, f_r, u, o; arbor's are i, f_l, f_r, o, g (u = g).
    const ORDER: [usize; 5] = [0, 1, 2, 4, 3];
    let cw = sd.take("encoder.treelstm_layer.comp_linear.weight", &[5 * d, 2 * d]);
    w.put_some(
        "encoder.composition.children.weight",
        cw.map(|a| a.reorder_blocks(&ORDER).t()),
    );
    if let Some(b) = sd.take("encoder.treelstm_layer.comp_linear.bias", &[5 * d]) {
        // The reference computes σ(f + 1) for both forget gates: the 1 becomes arbor's bias.
        let blocks = b.reorder_blocks(&ORDER).blocks(5);
        let plus_one: Vec<Array> = blocks
            .iter()
            .enumerate()
            .map(|(k, blk)| {
                if k == 1 || k == 2 {
                    blk.map(|v| v + 1.0)
                } else {
                    blk.clone()
                }
            })
            .collect();
        w.put(
            "encoder.composition.children.bias",
            Array::concat(&plus_one),
        );
    }
    // arbor scores q·h̃/√D.
    let leaf_width = if e.config.leaf == LeafKind::BiLstm {
        d / 2
    } else {
        d
    };
    let factor = match q {
        QueryScale::SqrtHidden => (d as f32 / leaf_width as f32).sqrt(),
        QueryScale::None => (d as f32).sqrt(),
    };
    let query = sd.take("encoder.comp_query", &[d]);
    w.put_some("encoder.query", query.map(|a| a.map(|v| v * factor)));
}

/// The classifier MLP read off the weights: hidden layers `classifier.mlp.{k}.0` and an output
/// layer (`classifier.clf_linear`, or the last `classifier.mlp` entry as in the SNLI model),
/// with the optional batch norms before the first and the last linear layer.
struct MlpShape {
    hidden: usize,
    d_hidden: usize,
    classes: usize,
    clf_linear: bool,
    batch_norm: bool,
}

fn read_mlp_shape(sd: &StateDict, d_in: usize) -> Result<MlpShape, ConvertError> {
    let mut n = 0;
    while sd.contains(&format!("classifier.mlp.{n}.0.weight")) {
        n += 1;
    }
    let clf_linear = sd.contains("classifier.clf_linear.weight");
    let (hidden, out_key) = if clf_linear {
        (n, "classifier.clf_linear.weight".to_string())
    } else if n > 0 {
        (n - 1, format!("classifier.mlp.{}.0.weight", n - 1))
    } else {
        return Err(ConvertError::Layout {
            path: sd.path().to_path_buf(),
            layout: "gumbel".into(),
            problems: vec!["no classifier: neither `classifier.mlp.0.0.weight` nor \
                 `classifier.clf_linear.weight`"
                .into()],
        });
    };
    let out = sd.require_shape(&out_key, "gumbel")?;
    let d_hidden = if hidden > 0 {
        sd.require_shape("classifier.mlp.0.0.weight", "gumbel")?[0]
    } else {
        d_in
    };
    Ok(MlpShape {
        hidden,
        d_hidden,
        classes: out[0],
        clf_linear,
        batch_norm: sd.contains("classifier.bn_mlp_input.weight"),
    })
}

fn map_mlp(sd: &mut StateDict, m: &MlpShape, d_in: usize, label_rows: &[usize], w: &mut Weights) {
    let mut width = d_in;
    for k in 0..m.hidden {
        let wk = sd.take(
            &format!("classifier.mlp.{k}.0.weight"),
            &[m.d_hidden, width],
        );
        w.put_some(format!("mlp.linears.{k}.weight"), wk.map(|a| a.t()));
        let bk = sd.take(&format!("classifier.mlp.{k}.0.bias"), &[m.d_hidden]);
        w.put_some(format!("mlp.linears.{k}.bias"), bk);
        width = m.d_hidden;
    }
    let prefix = if m.clf_linear {
        "classifier.clf_linear".to_string()
    } else {
        format!("classifier.mlp.{}.0", m.hidden)
    };
    // Output rows are re-ordered into arbor's label order.
    let wo = sd.take(&format!("{prefix}.weight"), &[m.classes, width]);
    w.put_some(
        format!("mlp.linears.{}.weight", m.hidden),
        wo.map(|a| gather_rows(&a, label_rows).t()),
    );
    let bo = sd.take(&format!("{prefix}.bias"), &[m.classes]);
    w.put_some(
        format!("mlp.linears.{}.bias", m.hidden),
        bo.map(|a| {
            gather_rows(&a.reshape(vec![m.classes, 1]), label_rows).reshape(vec![label_rows.len()])
        }),
    );
    if m.batch_norm {
        let norm = |sd: &mut StateDict, w: &mut Weights, from: &str, to: usize, f: usize| {
            for (src, dst) in [
                ("weight", "gamma"),
                ("bias", "beta"),
                ("running_mean", "running_mean"),
                ("running_var", "running_var"),
            ] {
                let a = sd.take(&format!("classifier.{from}.{src}"), &[f]);
                w.put_some(format!("mlp.norms.{to}.{dst}"), a);
            }
            sd.ignore(&format!("classifier.{from}.num_batches_tracked"));
        };
        norm(sd, w, "bn_mlp_input", 0, d_in);
        norm(sd, w, "bn_mlp_output", m.hidden, width);
        // The reference normalises only before the first and the last linear layer; arbor's
        // norms in between become the identity (var = 1 − ε so that √(var + ε) = 1).
        for k in 1..m.hidden {
            let f = m.d_hidden;
            w.put(
                format!("mlp.norms.{k}.gamma"),
                Array::zeros(vec![f]).map(|_| 1.0),
            );
            w.put(format!("mlp.norms.{k}.beta"), Array::zeros(vec![f]));
            w.put(format!("mlp.norms.{k}.running_mean"), Array::zeros(vec![f]));
            w.put(
                format!("mlp.norms.{k}.running_var"),
                Array::zeros(vec![f]).map(|_| 1.0 - 1e-5),
            );
        }
    }
}

/// Label names and the reference row of each arbor class ([`arbor_label_order`], which also
/// drops classes the task never has, such as torchtext's `<unk>`), after checking there is one
/// name per class.
fn label_rows(
    labels: &[String],
    classes: usize,
    arbor_order: &[&str],
) -> Result<(Vec<String>, Vec<usize>), ConvertError> {
    if labels.len() != classes {
        return Err(ConvertError::Config(format!(
            "{} label names ({}) for a classifier with {classes} classes: give --labels in the \
             reference's class order",
            labels.len(),
            labels.join(",")
        )));
    }
    Ok(arbor_label_order(labels, arbor_order))
}

fn embedding(
    sd: &mut StateDict,
    e: &EncoderShape,
    vocab: &ReferenceVocab,
    w: &mut Weights,
) -> Result<(TokenEmbeddingConfig, Vec<String>), ConvertError> {
    // The reference's `<PAD>`/`<UNK>` (appended by [`with_reference_specials`]), or torchtext's
    // `<pad>`/`<unk>` (listed in its `itos`, [`TORCHTEXT_SPECIALS`]).
    let (pad, unk) = if vocab.tokens.iter().any(|t| t == SPECIALS[0]) {
        (SPECIALS[0], SPECIALS[1])
    } else {
        (TORCHTEXT_SPECIALS[1], TORCHTEXT_SPECIALS[0])
    };
    let (tokens, rows) = vocab.to_arbor(e.vocab_rows, pad, unk)?;
    let emb = sd.take("word_embedding.weight", &[e.vocab_rows, e.d_word]);
    w.put_some(
        "embedding.embedding.weight",
        emb.map(|a| gather_rows(&a, &rows)),
    );
    Ok((TokenEmbeddingConfig::new(e.vocab_rows, e.d_word), tokens))
}

/// Everything both models share, read and mapped: the shapes, the labels in arbor's order, the
/// vocabulary, and the weights of the embedding, the encoder and the MLP.
struct Mapped {
    e: EncoderShape,
    m: MlpShape,
    labels: Vec<String>,
    tokens: Vec<String>,
    emb_config: TokenEmbeddingConfig,
    weights: Weights,
    path: std::path::PathBuf,
}

/// Reads and maps a `SNLIModel` (`pair`: the MLP reads `[u; v; u − v; u ⊙ v]`) or an `SSTModel`
/// state dict, ending with [`StateDict::finish`] under `layout`.
fn map_model(
    mut sd: StateDict,
    opts: &GumbelImport,
    pair: bool,
    layout: &str,
) -> Result<Mapped, ConvertError> {
    let e = read_encoder_shape(&sd, opts)?;
    let d_in = if pair { 4 } else { 1 } * e.config.d_hidden;
    let m = read_mlp_shape(&sd, d_in)?;
    let labels = match (&opts.labels, pair) {
        (Some(l), _) => l.clone(),
        (None, true) => snli_labels(),
        (None, false) if m.classes == 2 => sst_labels(),
        (None, false) => (0..m.classes).map(|k| k.to_string()).collect(),
    };
    let arbor_order: &[&str] = if pair {
        &["entailment", "neutral", "contradiction"]
    } else {
        &["negative", "positive"]
    };
    let (labels, rows) = label_rows(&labels, m.classes, arbor_order)?;
    let mut weights = Weights::new();
    let (emb_config, tokens) = embedding(&mut sd, &e, &opts.vocab, &mut weights)?;
    map_encoder(&mut sd, &e, opts.query_scale, &mut weights);
    map_mlp(&mut sd, &m, d_in, &rows, &mut weights);
    let path = sd.path().to_path_buf();
    sd.finish(layout)?;
    Ok(Mapped {
        e,
        m,
        labels,
        tokens,
        emb_config,
        weights,
        path,
    })
}

/// Imports a `SNLIModel` state dict as an arbor pair classifier (`snli --eval-only
/// --checkpoint`). Output classes are re-ordered into arbor's SNLI label order (entailment,
/// neutral, contradiction) when the labels are SNLI's.
///
/// # Errors
/// A [`ConvertError`] naming every missing, unexpected or mis-shaped key, a vocabulary that
/// does not fit the embedding, or labels that do not fit the classifier.
pub fn import_gumbel_snli<B: ArborBackend>(
    sd: StateDict,
    opts: &GumbelImport,
    device: &B::Device,
) -> Result<Imported<NliClassifier<B, Encoder<B>>>, ConvertError> {
    let mapped = map_model(sd, opts, true, "gumbel-snli")?;
    let (e, m) = (&mapped.e, &mapped.m);
    let head = NliClassifierConfig::new(e.vocab_rows, e.d_word, m.d_hidden)
        .with_features(opts.features)
        .with_n_classes(mapped.labels.len())
        .with_n_mlp_hidden(m.hidden)
        .with_dropout(opts.dropout)
        .with_batch_norm(m.batch_norm);
    mapped.import(
        |embedding, encoder| ModelConfig::Nli {
            embedding,
            encoder,
            head,
        },
        opts,
        "gumbel-snli",
        device,
    )
}

/// Imports an `SSTModel` state dict as an arbor sentence classifier (`sst --eval-only
/// --checkpoint`).
///
/// # Errors
/// As [`import_gumbel_snli`].
pub fn import_gumbel_sst<B: ArborBackend>(
    sd: StateDict,
    opts: &GumbelImport,
    device: &B::Device,
) -> Result<Imported<SentenceClassifier<B, Encoder<B>>>, ConvertError> {
    let mapped = map_model(sd, opts, false, "gumbel-sst")?;
    let m = &mapped.m;
    let head = SentenceClassifierConfig::new(m.d_hidden)
        .with_n_classes(mapped.labels.len())
        .with_n_mlp_hidden(m.hidden)
        .with_dropout(opts.dropout)
        .with_batch_norm(m.batch_norm);
    mapped.import(
        |embedding, encoder| ModelConfig::Classify {
            embedding,
            encoder,
            head,
        },
        opts,
        "gumbel-sst",
        device,
    )
}

impl Mapped {
    /// The classifier that `config` makes of this state dict's embedding and Gumbel encoder
    /// (adding its head), with the mapped weights, and the checkpoint metadata of the import.
    fn import<B: ArborBackend, M: ClassifierKind<B> + burn::module::Module<B>>(
        self,
        config: impl FnOnce(TokenEmbeddingConfig, EncoderConfig) -> ModelConfig,
        opts: &GumbelImport,
        layout: &str,
        device: &B::Device,
    ) -> Result<Imported<M>, ConvertError> {
        let Mapped {
            e,
            labels,
            tokens,
            emb_config,
            weights,
            path,
            ..
        } = self;
        let config = config(emb_config, EncoderConfig::Gumbel(e.config));
        let model = weights.apply(
            crate::model::build_classifier(&config, device)?,
            &path,
            layout,
        )?;
        let meta = ModelMeta {
            model: config,
            vocab: tokens,
            labels,
            lowercase: opts.lowercase,
            case_fallback: false,
        };
        Ok(Imported {
            model,
            meta: imported_meta(to_json(&meta), &path, layout),
        })
    }
}

fn to_json(meta: &ModelMeta) -> serde_json::Value {
    serde_json::to_value(meta).expect("model metadata always serialises")
}
