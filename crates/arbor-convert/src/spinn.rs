//! SPINN SNLI models as nyu-mll/spinn's PyTorch port saves them (`python/spinn/fat_stack.py`,
//! `util/blocks.py`, `models/base.py`; docs/encoders.md "Reference parameter layouts" → SPINN,
//! docs/interop.md).
//!
//! The variant is read off the keys: no `spinn.tracker.*` is SPINN-PI-NT, a tracker without
//! `spinn.transition_net.*` is SPINN-PI, both is full SPINN. Every width comes from the shapes;
//! what the weights cannot tell (the vocabulary, the label names, lower-casing, the transition
//! loss weight and the dropout for further training) comes from [`SpinnImport`].

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use arbor_cells::ArborBackend;
use arbor_encoders::{ClassifierInput, Encoder, EncoderConfig, SpinnConfig, SpinnVariant};
use arbor_heads::{NliClassifier, NliClassifierConfig, NliFeatures, TokenEmbeddingConfig};
use arbor_tasks::{ModelConfig, ModelMeta};

use crate::vocab::{arbor_label_order, gather_rows};
use crate::{imported_meta, Array, ConvertError, Imported, StateDict, Weights};

/// The layout name used in errors and in the checkpoint's `imported.layout`.
pub const SPINN_LAYOUT: &str = "spinn-snli";

/// The reference's padding token (`util/data.py` `PADDING_TOKEN`, id 0).
pub const SPINN_PAD: &str = "*PADDING*";
/// The reference's unknown-word token (`util/data.py` `UNK_TOKEN`, id 1).
pub const SPINN_UNK: &str = "_";
/// The default SNLI label order: the port's `LABEL_MAP` at `031c845`
/// (`spinn/data/snli/load_snli_data.py`; checked by the authors' fixtures,
/// `tests/convert/authors_spinn.rs`); `SpinnImport::labels` overrides it.
pub const SPINN_SNLI_LABELS: [&str; 3] = ["entailment", "neutral", "contradiction"];

/// What the weights cannot tell about a SPINN model.
#[derive(Debug, Clone)]
pub struct SpinnImport {
    /// The vocabulary in the reference's id order (`ReferenceVocab::read_file(path)?.tokens`), or `None`: tokens are
    /// then named `<pad>`, `<unk>`, `<2>`, `<3>`, ... and the checkpoint cannot read text.
    /// Needed when the state dict has no `embed.embed.weight` (a model trained on pretrained
    /// vectors).
    pub vocab: Option<Vec<String>>,
    /// Where `vocab` came from (named in errors).
    pub vocab_file: Option<PathBuf>,
    /// GloVe-format text vectors (`word v1 ... vE` per line) for the embedding when the state
    /// dict has none: the reference keeps pretrained vectors outside its state dict. Rows whose
    /// token the file lacks stay zero, as in the reference's `LoadEmbeddingsFromASCII`.
    pub embeddings: Option<PathBuf>,
    /// Label names in the reference model's output order (default: `entailment, neutral,
    /// contradiction`). When they are these three SNLI labels in another order, the output
    /// layer's rows are permuted into arbor's order (that of its SNLI reader).
    pub labels: Vec<String>,
    /// Whether words are lower-cased before lookup (the reference's `--lowercase`, default
    /// off).
    pub lowercase: bool,
    /// Weight `α` of the transition loss if the imported full SPINN is trained further (the
    /// reference's `--transition_weight`; not in the weights).
    pub transition_weight: f64,
    /// Dropout of the arbor classifier if trained further (not used at evaluation; the
    /// reference's `1 − semantic_classifier_keep_rate` = 0.1 by default).
    pub dropout: f64,
}

impl Default for SpinnImport {
    fn default() -> Self {
        SpinnImport {
            vocab: None,
            vocab_file: None,
            embeddings: None,
            labels: SPINN_SNLI_LABELS.iter().map(|s| s.to_string()).collect(),
            lowercase: false,
            transition_weight: 1.0,
            dropout: 0.1,
        }
    }
}

/// The widths and switches read off a SPINN state dict.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    /// Vocabulary size.
    v: usize,
    /// Word embedding width.
    e: usize,
    /// Half the reference's `model_dim`: the width of `h` and `c`.
    d: usize,
    /// Tracker width (`tracking_lstm_hidden_dim`), if there is a tracker.
    t: Option<usize>,
    /// What the transition net reads, if there is one.
    transition: Option<ClassifierInput>,
    /// Whether the composition reads the tracker (`use_tracking_in_composition`).
    track: bool,
    /// `encode.weight` is there (`--encode projection`) rather than `pass`.
    projection: bool,
    /// Whether `embed.embed.weight` is there.
    embedded: bool,
    /// MLP hidden layers `L`.
    layers: usize,
    /// MLP hidden width `M` (the class count when `L = 0`).
    m: usize,
    /// Classes `C`.
    c: usize,
    /// `mlp_bn`.
    bn: bool,
}

fn layout_error(sd: &StateDict, problem: String) -> ConvertError {
    ConvertError::Layout {
        path: sd.path().to_path_buf(),
        layout: SPINN_LAYOUT.to_string(),
        problems: vec![problem],
    }
}

fn infer(sd: &StateDict, opts: &SpinnImport) -> Result<Shape, ConvertError> {
    let l = SPINN_LAYOUT;
    for (key, why) in [
        (
            "spinn.tracker.transform.weight",
            "`lateral_tracking = False` (spinn.tracker.transform) is not supported: arbor's \
             tracker is an LSTM",
        ),
        (
            "encode.rnn.weight_ih_l0",
            "`--encode gru` is not supported: arbor's SPINN projects each word alone",
        ),
        (
            "encode.f.weight",
            "`--encode attn` is not supported: arbor's SPINN projects each word alone",
        ),
        (
            "spinn.reduce.W.weight",
            "the `treegru` reduction is not supported: arbor's SPINN composes with a Tree-LSTM",
        ),
    ] {
        if sd.contains(key) {
            return Err(layout_error(sd, format!("{why} (found `{key}`)")));
        }
    }
    let left = sd.require_shape("spinn.reduce.left.weight", l)?;
    if left.len() != 2 || left[1] == 0 || left[0] != 5 * left[1] {
        return Err(layout_error(
            sd,
            format!(
                "`spinn.reduce.left.weight` has shape {left:?}; a Tree-LSTM reduction has \
                 [5D, D]"
            ),
        ));
    }
    let d = left[1];
    let projection = sd.contains("encode.weight");
    let embedded = sd.contains("embed.embed.weight");
    let (v, e) = if embedded {
        let s = sd.require_shape("embed.embed.weight", l)?;
        if s.len() != 2 {
            return Err(layout_error(
                sd,
                format!("`embed.embed.weight` has shape {s:?}, expected [V, E]"),
            ));
        }
        (s[0], s[1])
    } else {
        let Some(vocab) = &opts.vocab else {
            return Err(ConvertError::Config(format!(
                "{}: there is no `embed.embed.weight` (the model was trained on pretrained \
                 vectors, which the reference keeps outside its state dict): give --vocab and \
                 --embeddings (the GloVe text file it was trained with)",
                sd.path().display()
            )));
        };
        let e = if projection {
            match sd.shape("encode.weight") {
                Some([_, e]) => *e,
                s => {
                    return Err(layout_error(
                        sd,
                        format!("`encode.weight` has shape {s:?}, expected [2D, E]"),
                    ))
                }
            }
        } else {
            2 * d
        };
        (vocab.len(), e)
    };
    if !projection && e != 2 * d {
        return Err(layout_error(
            sd,
            format!(
                "there is no `encode.weight` (`--encode pass`), which needs word vectors as wide \
                 as a stack item (2D = {}), but they are {e} wide",
                2 * d
            ),
        ));
    }
    let t = match sd.shape("spinn.tracker.buf.weight") {
        None => None,
        Some(s) if s.len() == 2 && s[0] > 0 && s[0].is_multiple_of(4) => Some(s[0] / 4),
        Some(s) => {
            return Err(layout_error(
                sd,
                format!("`spinn.tracker.buf.weight` has shape {s:?}, expected [4T, D]"),
            ))
        }
    };
    let transition = match (t, sd.shape("spinn.transition_net.weight")) {
        (_, None) => None,
        (None, Some(_)) => {
            return Err(layout_error(
                sd,
                "`spinn.transition_net.weight` without a tracker (`spinn.tracker.*`)".into(),
            ))
        }
        (Some(t), Some([2, w])) if *w == 2 * t => Some(ClassifierInput::HiddenCell),
        (Some(t), Some([2, w])) if *w == t => Some(ClassifierInput::Hidden),
        (Some(t), Some(s)) => {
            return Err(layout_error(
                sd,
                format!(
                    "`spinn.transition_net.weight` has shape {s:?}: arbor's transition \
                     classifier reads [h; c] ([2, {}], predict_use_cell) or h ([2, {t}]); later \
                     port versions' use_lengths inputs ([2, 2T + 2]) are not supported",
                    2 * t
                ),
            ))
        }
    };
    let track = t.is_some() && sd.contains("spinn.reduce.track.weight");
    let mut layers = 0;
    while sd.contains(&format!("mlp.l{}.weight", layers + 1)) {
        layers += 1;
    }
    let out = sd.require_shape(&format!("mlp.l{layers}.weight"), l)?;
    let first = sd.require_shape("mlp.l0.weight", l)?;
    if out.len() != 2 || first.len() != 2 {
        return Err(layout_error(
            sd,
            format!("the MLP's weights have shapes {first:?} … {out:?}, expected matrices"),
        ));
    }
    let c = out[0];
    let m = if layers == 0 { c } else { first[0] };
    if first[1] != 4 * d {
        let what = if first[1] == d {
            "a single-sentence classifier (features [h]), not an SNLI pair model"
        } else if first[1] == 2 * d || first[1] == 3 * d {
            "a pair model trained without use_difference_feature or use_product_feature; arbor's \
             pair features are always [u; v; u − v; u ⊙ v]"
        } else {
            "not a width SPINN's pair features have"
        };
        return Err(layout_error(
            sd,
            format!(
                "`mlp.l0.weight` reads {} features with D = {d}: {what} (expected 4D = {})",
                first[1],
                4 * d
            ),
        ));
    }
    Ok(Shape {
        v,
        e,
        d,
        t,
        transition,
        track,
        projection,
        embedded,
        layers,
        m,
        c,
        bn: sd.contains("mlp.bn_inp.weight"),
    })
}

/// Rows of a tracker matrix (or bias) whose `4T` rows are interleaved by unit (row `4j + k`
/// is unit `j` of gate `k ∈ (a, i, f, o)`, as the reference's `extract_gates` reads them), in
/// arbor's block-major `i, f, g, o` order: arbor row `b·T + j` ← reference row
/// `4j + (1, 2, 0, 3)[b]`.
fn deinterleave(a: &Array, t: usize) -> Array {
    let mut rows = Vec::with_capacity(4 * t);
    for k in [1, 2, 0, 3] {
        for j in 0..t {
            rows.push(a.rows(4 * j + k, 4 * j + k + 1));
        }
    }
    Array::concat(&rows)
}

/// A reference `[c; h]` projection (`[2D, …]` rows, or a `[2D]` bias) with its halves swapped
/// into arbor's `[h; c]`.
fn swap_halves(a: &Array) -> Array {
    a.reorder_blocks(&[1, 0])
}

/// The `--encode pass` projection: word vector `[c; h]` → arbor's `[h; c]`, as a `[2D, 2D]`
/// permutation in Burn's `[in, out]` layout.
fn pass_projection(d: usize) -> Array {
    let n = 2 * d;
    let mut w = vec![0.0; n * n];
    for j in 0..d {
        w[(d + j) * n + j] = 1.0; // h (input D + j) → output j
        w[j * n + d + j] = 1.0; // c (input j) → output D + j
    }
    Array::new(vec![n, n], w).expect("n·n values")
}

/// The arbor vocabulary for the reference's token list: ids 0 and 1 are the reference's
/// padding and unknown tokens and become `<pad>` and `<unk>`.
fn arbor_vocab(opts: &SpinnImport, v: usize) -> Result<Vec<String>, ConvertError> {
    let source = opts
        .vocab_file
        .as_ref()
        .map_or("the vocabulary".to_string(), |p| p.display().to_string());
    let Some(tokens) = &opts.vocab else {
        let mut t = vec![
            arbor_data::vocab::PAD.to_string(),
            arbor_data::vocab::UNK.to_string(),
        ];
        t.extend((2..v).map(|k| format!("<{k}>")));
        return Ok(t);
    };
    if tokens.len() != v {
        return Err(ConvertError::Config(format!(
            "{source} has {} tokens but the model's embedding has {v} rows: give the vocabulary \
             the model was trained with",
            tokens.len()
        )));
    }
    if v < 2 {
        return Err(ConvertError::Config(format!(
            "{source} has {v} tokens; it needs at least the padding and unknown tokens"
        )));
    }
    let ok0 = tokens[0] == SPINN_PAD || tokens[0] == arbor_data::vocab::PAD;
    let ok1 = tokens[1] == SPINN_UNK || tokens[1] == arbor_data::vocab::UNK;
    if !(ok0 && ok1) {
        return Err(ConvertError::Config(format!(
            "{source}: ids 0 and 1 must be the reference's padding and unknown tokens \
             ({SPINN_PAD:?} and {SPINN_UNK:?}, or {:?} and {:?}), found {:?} and {:?}",
            arbor_data::vocab::PAD,
            arbor_data::vocab::UNK,
            tokens[0],
            tokens[1]
        )));
    }
    let mut out = vec![
        arbor_data::vocab::PAD.to_string(),
        arbor_data::vocab::UNK.to_string(),
    ];
    out.extend(tokens[2..].iter().cloned());
    arbor_data::vocab::Vocab::from_tokens(out.clone())
        .map_err(|e| ConvertError::Config(format!("{source}: {e}")))?;
    Ok(out)
}

/// The embedding matrix `[V, E]` from a GloVe-format text file, rows in the order of the
/// reference's tokens; tokens the file lacks keep zeros. Returns it and the number of rows
/// found.
fn read_text_vectors(
    path: &Path,
    tokens: &[String],
    e: usize,
) -> Result<(Array, usize), ConvertError> {
    let file = std::fs::File::open(path).map_err(|err| ConvertError::file(path, err))?;
    let index: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut data = vec![0f32; tokens.len() * e];
    let mut seen = vec![false; tokens.len()];
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line =
            line.map_err(|err| ConvertError::file(path, format!("line {}: {err}", n + 1)))?;
        let mut fields = line.split(' ');
        let word = fields.next().unwrap_or("");
        let Some(&row) = index.get(word) else {
            continue;
        };
        let values: Vec<&str> = fields.filter(|f| !f.is_empty()).collect();
        if values.len() != e {
            return Err(ConvertError::file(
                path,
                format!(
                    "line {}: {word:?} has {} values, the model's word vectors have {e}",
                    n + 1,
                    values.len()
                ),
            ));
        }
        for (k, v) in values.iter().enumerate() {
            data[row * e + k] = v.trim().parse().map_err(|_| {
                ConvertError::file(path, format!("line {}: {v:?} is not a number", n + 1))
            })?;
        }
        seen[row] = true;
    }
    let found = seen.iter().filter(|&&s| s).count();
    Ok((Array::new(vec![tokens.len(), e], data)?, found))
}

/// The SPINN configuration a state dict describes, as arbor builds it.
///
/// `classes`: the output rows kept ([`arbor_label_order`] drops classes SNLI never has).
fn configs(
    s: &Shape,
    opts: &SpinnImport,
    classes: usize,
) -> (TokenEmbeddingConfig, SpinnConfig, NliClassifierConfig) {
    let variant = match (s.t, s.transition) {
        (None, _) => SpinnVariant::PiNt,
        (Some(_), None) => SpinnVariant::Pi,
        (Some(_), Some(_)) => SpinnVariant::Full,
    };
    let mut encoder = SpinnConfig::new(s.e, s.d)
        .with_variant(variant)
        .with_d_tracking(s.t.unwrap_or(0))
        .with_transition_weight(opts.transition_weight);
    if let Some(input) = s.transition {
        encoder = encoder.with_classifier_input(Some(input));
    }
    let head = NliClassifierConfig::new(s.v, s.e, s.m)
        .with_n_classes(classes)
        .with_n_mlp_hidden(s.layers)
        .with_dropout(opts.dropout)
        .with_batch_norm(s.bn)
        .with_features(NliFeatures::Difference);
    (TokenEmbeddingConfig::new(s.v, s.e), encoder, head)
}

/// Imports a SPINN SNLI model saved by nyu-mll/spinn's PyTorch port (`model.state_dict()`;
/// a training checkpoint's `model_state_dict` is found by [`StateDict::read`]'s wrapper rule
/// only when it is alone in the file — see [`model_state_dict`]).
///
/// # Errors
/// A [`ConvertError::Layout`] naming every missing, unexpected or mis-shaped key at once; a
/// [`ConvertError::Config`] for a vocabulary or label list that does not fit the weights, or
/// a setting arbor's SPINN cannot represent.
pub fn import_spinn<B: ArborBackend>(
    mut sd: StateDict,
    opts: &SpinnImport,
    device: &B::Device,
) -> Result<Imported<NliClassifier<B, Encoder<B>>>, ConvertError> {
    let s = infer(&sd, opts)?;
    if opts.labels.len() != s.c {
        return Err(ConvertError::Config(format!(
            "{}: the model has {} classes but {} labels were given ({})",
            sd.path().display(),
            s.c,
            opts.labels.len(),
            opts.labels.join(", ")
        )));
    }
    let vocab = arbor_vocab(opts, s.v)?;
    let (d, e) = (s.d, s.e);
    let mut w = Weights::new();

    // Word embedding: from the state dict, or from the pretrained vectors.
    let mut found_vectors = None;
    if s.embedded {
        w.put_some(
            "embedding.embedding.weight",
            sd.take("embed.embed.weight", &[s.v, e]),
        );
    } else {
        let (Some(path), Some(tokens)) = (&opts.embeddings, &opts.vocab) else {
            return Err(ConvertError::Config(format!(
                "{}: there is no `embed.embed.weight` (the model was trained on pretrained \
                 vectors, which the reference keeps outside its state dict): give --embeddings \
                 (the GloVe text file it was trained with) with --vocab",
                sd.path().display()
            )));
        };
        let (matrix, found) = read_text_vectors(path, tokens, e)?;
        found_vectors = Some((path.clone(), found));
        w.put("embedding.embedding.weight", matrix);
    }

    // Buffer items: the reference's [c; h] projection becomes arbor's [h; c].
    if s.projection {
        w.put_some(
            "encoder.projection.weight",
            sd.take("encode.weight", &[2 * d, e])
                .map(|a| swap_halves(&a).t()),
        );
        w.put_some(
            "encoder.projection.bias",
            sd.take("encode.bias", &[2 * d]).map(|a| swap_halves(&a)),
        );
    } else {
        w.put("encoder.projection.weight", pass_projection(d));
        w.put("encoder.projection.bias", Array::zeros(vec![2 * d]));
    }

    // Reduction: left (the second item) and right (the top) over [h_l; h_r], gates
    // i, f_l, f_r, o, g in both.
    let left = sd.take("spinn.reduce.left.weight", &[5 * d, d]);
    let right = sd.take("spinn.reduce.right.weight", &[5 * d, d]);
    if let (Some(l), Some(r)) = (left, right) {
        w.put(
            "encoder.composition.children.weight",
            Array::concat(&[l.t(), r.t()]),
        );
    }
    w.put_some(
        "encoder.composition.children.bias",
        sd.take("spinn.reduce.left.bias", &[5 * d]),
    );

    if let Some(t) = s.t {
        // The composition's tracker input: `track`, or zeros when the model never used it.
        if s.track {
            w.put_some(
                "encoder.composition.external.weight",
                sd.take("spinn.reduce.track.weight", &[5 * d, t])
                    .map(|a| a.t()),
            );
        } else {
            w.put(
                "encoder.composition.external.weight",
                Array::zeros(vec![t, 5 * d]),
            );
        }
        // Tracker: input [h(top); h(second); h(buffer top)] = stack1, stack2, buf.
        let parts: Vec<Option<Array>> = ["stack1", "stack2", "buf"]
            .iter()
            .map(|k| sd.take(&format!("spinn.tracker.{k}.weight"), &[4 * t, d]))
            .collect();
        if parts.iter().all(Option::is_some) {
            let blocks: Vec<Array> = parts
                .iter()
                .flatten()
                .map(|a| deinterleave(a, t).t())
                .collect();
            w.put("encoder.tracker.input.weight", Array::concat(&blocks));
        }
        w.put_some(
            "encoder.tracker.input.bias",
            sd.take("spinn.tracker.buf.bias", &[4 * t])
                .map(|a| deinterleave(&a, t)),
        );
        w.put_some(
            "encoder.tracker.hidden.weight",
            sd.take("spinn.tracker.lateral.weight", &[4 * t, t])
                .map(|a| deinterleave(&a, t).t()),
        );
        if let Some(input) = s.transition {
            let width = match input {
                ClassifierInput::HiddenCell => 2 * t,
                ClassifierInput::Hidden => t,
            };
            w.put_some(
                "encoder.classifier.weight",
                sd.take("spinn.transition_net.weight", &[2, width])
                    .map(|a| a.t()),
            );
            w.put_some(
                "encoder.classifier.bias",
                sd.take("spinn.transition_net.bias", &[2]),
            );
        }
    }

    // MLP: l_k → linears.k; bn_inp → norms.0, bn_k → norms.{k+1}. The output rows are put in
    // arbor's label order.
    // arbor's SNLI reader numbers the labels as `NliLabel::ALL`.
    let arbor_order: Vec<&str> = arbor_data::readers::NliLabel::ALL
        .iter()
        .map(|l| l.name())
        .collect();
    let (labels, order) = arbor_label_order(&opts.labels, &arbor_order);
    let mut width = 4 * d;
    for k in 0..=s.layers {
        let out = if k == s.layers { s.c } else { s.m };
        let ordered = |a: Array| {
            if k == s.layers {
                gather_rows(&a, &order)
            } else {
                a
            }
        };
        w.put_some(
            format!("mlp.linears.{k}.weight"),
            sd.take(&format!("mlp.l{k}.weight"), &[out, width])
                .map(|a| ordered(a).t()),
        );
        w.put_some(
            format!("mlp.linears.{k}.bias"),
            sd.take(&format!("mlp.l{k}.bias"), &[out]).map(ordered),
        );
        if s.bn {
            let name = if k == 0 {
                "bn_inp".to_string()
            } else {
                format!("bn{}", k - 1)
            };
            for (from, to) in [
                ("weight", "gamma"),
                ("bias", "beta"),
                ("running_mean", "running_mean"),
                ("running_var", "running_var"),
            ] {
                w.put_some(
                    format!("mlp.norms.{k}.{to}"),
                    sd.take(&format!("mlp.{name}.{from}"), &[width]),
                );
            }
            sd.ignore(&format!("mlp.{name}.num_batches_tracked"));
        }
        width = out;
    }

    let source = sd.path().to_path_buf();
    sd.finish(SPINN_LAYOUT)?;
    let (embedding, encoder, head) = configs(&s, opts, order.len());
    let encoder = EncoderConfig::from(encoder);
    let config = ModelConfig::Nli {
        embedding,
        encoder,
        head,
    };
    let model = w.apply(
        crate::model::build_classifier(&config, device)?,
        &source,
        SPINN_LAYOUT,
    )?;
    let meta = ModelMeta {
        model: config,
        vocab,
        labels,
        lowercase: opts.lowercase,
        case_fallback: true,
    };
    let task = serde_json::to_value(&meta)
        .map_err(|e| ConvertError::Config(format!("model metadata: {e}")))?;
    let mut meta = imported_meta(task, &source, SPINN_LAYOUT);
    if let Some((path, found)) = found_vectors {
        meta["imported"]["embeddings"] = serde_json::json!({
            "source": path.display().to_string(),
            "rows_found": found,
            "rows": s.v,
        });
    }
    Ok(Imported { model, meta })
}

/// A state dict inside a reference training checkpoint: the port's `ModelTrainer.save` writes
/// `{step, best_dev_error, model_state_dict, optimizer_state_dict}`; this keeps the
/// `model_state_dict.` entries (prefix removed) and drops the optimizer's. A plain state dict
/// is returned unchanged.
pub fn model_state_dict(sd: StateDict) -> StateDict {
    const PREFIX: &str = "model_state_dict.";
    if sd.keys_with_prefix(PREFIX).next().is_none() {
        return sd;
    }
    let path = sd.path().to_path_buf();
    let keys: Vec<(String, Vec<usize>)> = sd
        .entries()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    let mut sd = sd;
    let tensors = keys
        .into_iter()
        .filter_map(|(k, s)| {
            let a = sd.take(&k, &s)?;
            Some((k[PREFIX.len()..].to_string(), a))
        })
        .collect();
    StateDict::from_arrays(path, tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_gates_are_deinterleaved_into_block_order() {
        // T = 2: reference rows 4j + k hold value 10·k + j (k: a, i, f, o).
        let t = 2;
        let values: Vec<f32> = (0..4 * t).map(|r| (10 * (r % 4) + r / 4) as f32).collect();
        let a = Array::new(vec![4 * t], values).unwrap();
        // arbor blocks i, f, g, o = reference gates 1, 2, 0, 3.
        assert_eq!(
            deinterleave(&a, t).values(),
            &[10.0, 11.0, 20.0, 21.0, 0.0, 1.0, 30.0, 31.0]
        );
    }

    #[test]
    fn the_pass_projection_swaps_c_and_h() {
        let p = pass_projection(2);
        // x = [c0, c1, h0, h1] → x·P = [h0, h1, c0, c1].
        let x = [1.0, 2.0, 3.0, 4.0];
        let out: Vec<f32> = (0..4)
            .map(|j| (0..4).map(|i| x[i] * p.values()[i * 4 + j]).sum())
            .collect();
        assert_eq!(out, [3.0, 4.0, 1.0, 2.0]);
    }
}
