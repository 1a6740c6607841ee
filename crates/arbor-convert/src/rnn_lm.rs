//! The ON-LSTM, FastTrees and Faster FastTrees language models as their reference code bases
//! save them (yikangshen/Ordered-Neurons, billptw/FastTrees), imported into arbor's
//! [`RnnLm`] (docs/interop.md, "Language models").
//!
//! The reference layout (`L` layers, widths `emb → hid → … → emb`, `C = H / chunk_size`):
//!
//! | key | shape | arbor |
//! | --- | --- | --- |
//! | `encoder.weight` | `[V, emb]` | `embedding` (rows permuted, see below) |
//! | `decoder.weight` | `[V, emb]` | tied: must equal `encoder.weight` |
//! | `decoder.bias` | `[V]` | `decoder_bias` |
//! | `rnn.cells.<l>.ih.0.weight` | `[4H + 2C, d_in]` | `stack.layers.<l>.input.weight`, rows reordered, transposed |
//! | `rnn.cells.<l>.ih.0.bias` | `[4H + 2C]` | `stack.layers.<l>.input.bias` (plus `hh.bias`) |
//! | `rnn.cells.<l>.hh.weight` | ON-LSTM `[4H + 2C, H]`, FastTrees `[4H, H]` | `stack.layers.<l>.hidden.weight` × (1 − wdrop) |
//! | `rnn.cells.<l>.hh.bias` | same rows | added to the input bias |
//!
//! Gate rows, reference: `[ĩ (C), f̃ (C), o, ĉ, i, f (H each)]`; arbor:
//! `[f̃, ĩ, i, f, ĉ, o]`. Faster FastTrees keeps an `hh` of ON-LSTM's shape that its cell never
//! calls: it is checked and left out.

use arbor_cells::{ArborBackend, CellKind};
use arbor_data::readers::lm::EOS;
use arbor_data::vocab::{PAD, UNK};
use arbor_lm::{RnnLm, RnnLmConfig};

use crate::vocab::ReferenceVocab;
use crate::{imported_meta, Array, ConvertError, Imported, StateDict, Weights};

/// The decoder bias given to tokens arbor needs but the reference model does not have
/// (`<pad>`, and `<unk>` when the reference vocabulary lacks it): their logit is this value
/// (their embedding row is zero), so `exp` of it underflows to exactly 0 next to any real
/// logit, in f32 and in f16, and the other tokens' probabilities are the reference's.
pub const ABSENT_TOKEN_LOGIT: f32 = -1.0e4;

/// The reference trains vocabularies above this size with a split softmax whose tail vectors
/// live in its criterion (AWD-LSTM's `SplitCrossEntropyLoss`, `ntokens > 75000`), not in the
/// model; arbor's decoder is one full softmax, so such models are refused.
pub const MAX_FULL_SOFTMAX_VOCAB: usize = 75_000;

/// The reference's defaults for what the state dict does not record: ON-LSTM's PTB command
/// (`--wdrop 0.45`, also FastTrees' default), its training batch size and BPTT length.
pub const REFERENCE_WEIGHT_DROP: f64 = 0.45;
const REFERENCE_BPTT: usize = 70;
const REFERENCE_BATCH_SIZE: usize = 20;

/// Which reference cell the state dict holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnLmFlavour {
    /// ON-LSTM (`ON_LSTM.py`): every gate reads `x_t` and `h_{t−1}`.
    OnLstm,
    /// FastTrees (`FastTrees.py`): the master gates read `x_t` only.
    FastTrees,
    /// Faster FastTrees (`FasterFT.py`): every gate reads `x_t` only.
    FasterFastTrees,
}

impl RnnLmFlavour {
    /// arbor's cell for it.
    pub fn cell(self) -> CellKind {
        match self {
            RnnLmFlavour::OnLstm => CellKind::OnLstm,
            RnnLmFlavour::FastTrees => CellKind::FastTrees,
            RnnLmFlavour::FasterFastTrees => CellKind::FasterFastTrees,
        }
    }

    /// The layout's name in errors and in the checkpoint's `imported` record.
    pub fn layout(self) -> &'static str {
        match self {
            RnnLmFlavour::OnLstm => "on-lstm-lm",
            RnnLmFlavour::FastTrees => "fasttrees-lm",
            RnnLmFlavour::FasterFastTrees => "faster-fasttrees-lm",
        }
    }

    /// Rows of `hh.weight`: `4H + 2C` (ON-LSTM, Faster FastTrees) or `4H` (FastTrees).
    fn hh_rows(self, h: usize, c: usize) -> usize {
        match self {
            RnnLmFlavour::FastTrees => 4 * h,
            _ => 4 * h + 2 * c,
        }
    }
}

/// How to import a reference language model.
#[derive(Debug, Clone)]
pub struct RnnLmImport {
    /// Which cell the state dict holds (ON-LSTM and Faster FastTrees have the same shapes).
    pub flavour: RnnLmFlavour,
    /// The reference's DropConnect rate `wdrop`: its evaluation uses `U · (1 − wdrop)`, arbor's
    /// uses `U` (it rescales by `1/(1 − p)` in training), so the imported `U` is scaled.
    pub weight_drop: f64,
    /// The vocabulary in reference id order; `None` names token `k` `<k>`.
    pub vocab: Option<ReferenceVocab>,
    /// The token the reference appended to every line (`<eos>`; some versions used `</s>`):
    /// renamed `<eos>`, which arbor's LM pipeline appends.
    pub eos_token: String,
}

impl RnnLmImport {
    /// The reference's defaults: `wdrop` 0.45, no vocabulary, `<eos>`.
    pub fn new(flavour: RnnLmFlavour) -> Self {
        RnnLmImport {
            flavour,
            weight_drop: REFERENCE_WEIGHT_DROP,
            vocab: None,
            eos_token: EOS.to_string(),
        }
    }
}

/// arbor's vocabulary for a reference one: `<pad>` and `<unk>` first (arbor's fixed ids 0 and
/// 1), then the reference tokens in their order; with, for every arbor id, the reference id it
/// comes from (`None` for a token the reference lacks).
fn arbor_vocab(
    reference: &[String],
    eos_token: &str,
    synthetic: bool,
    source: &str,
) -> Result<(Vec<String>, Vec<Option<usize>>), ConvertError> {
    let renamed: Vec<String> = reference
        .iter()
        .map(|t| {
            if t == eos_token {
                EOS.to_string()
            } else {
                t.clone()
            }
        })
        .collect();
    if eos_token != EOS && reference.iter().any(|t| t == EOS) {
        return Err(ConvertError::Config(format!(
            "{source}: holds both {eos_token:?} (--eos-token) and {EOS:?}, which arbor's pipeline \
             appends to every line"
        )));
    }
    if !synthetic && !renamed.iter().any(|t| t == EOS) {
        return Err(ConvertError::Config(format!(
            "{source}: has no end-of-line token {eos_token:?}; the reference appends one to every \
             line (pass --eos-token if it used another, e.g. </s>)"
        )));
    }
    let find = |tok: &str| renamed.iter().position(|t| t == tok);
    let mut tokens = vec![PAD.to_string(), UNK.to_string()];
    let mut sources = vec![find(PAD), find(UNK)];
    for (k, t) in renamed.iter().enumerate() {
        if t != PAD && t != UNK {
            tokens.push(t.clone());
            sources.push(Some(k));
        }
    }
    Ok((tokens, sources))
}

/// The rows of a fused reference gate array (`[ĩ, f̃, o, ĉ, i, f]`, or `[o, ĉ, i, f]` without
/// master gates) in arbor's order (`[f̃, ĩ, i, f, ĉ, o]`, or `[i, f, ĉ, o]`).
fn gate_rows(a: &Array, h: usize, c: usize, master: bool) -> Array {
    let (mut parts, off) = if master {
        (vec![a.rows(c, 2 * c), a.rows(0, c)], 2 * c)
    } else {
        (Vec::new(), 0)
    };
    // Reference blocks after the master gates: o, ĉ, i, f → arbor i, f, ĉ, o.
    for block in [2, 3, 1, 0] {
        parts.push(a.rows(off + block * h, off + (block + 1) * h));
    }
    Array::concat(&parts)
}

fn layout_error(sd: &StateDict, layout: &str, problem: String) -> ConvertError {
    ConvertError::Layout {
        path: sd.path().to_path_buf(),
        layout: layout.to_string(),
        problems: vec![problem],
    }
}

/// The configuration the reference weights describe: widths, layers and chunk size, read from
/// `encoder.weight` and every `rnn.cells.<l>.ih.0.weight`.
fn infer_config(sd: &StateDict, opts: &RnnLmImport) -> Result<RnnLmConfig, ConvertError> {
    let layout = opts.flavour.layout();
    let emb = sd.require_shape("encoder.weight", layout)?;
    let [v, d_embed] = emb[..] else {
        return Err(layout_error(
            sd,
            layout,
            format!("`encoder.weight` has shape {emb:?}, expected [vocab, emb]"),
        ));
    };
    let mut ih = Vec::new();
    while let Some(s) = sd.shape(&format!("rnn.cells.{}.ih.0.weight", ih.len())) {
        if s.len() != 2 {
            return Err(layout_error(
                sd,
                layout,
                format!(
                    "`rnn.cells.{}.ih.0.weight` has shape {s:?}, expected [4H + 2C, d_in]",
                    ih.len()
                ),
            ));
        }
        ih.push((s[0], s[1]));
    }
    if ih.is_empty() {
        sd.require_shape("rnn.cells.0.ih.0.weight", layout)?;
    }
    let n = ih.len();
    // Layer l's width H_l is layer l+1's input width; the top layer is as wide as the embedding.
    let widths: Vec<usize> = (0..n)
        .map(|l| if l + 1 < n { ih[l + 1].1 } else { d_embed })
        .collect();
    let mut chunk = None;
    for (l, (&(rows, _), &h)) in ih.iter().zip(&widths).enumerate() {
        let c2 = rows.checked_sub(4 * h).filter(|c2| *c2 > 0 && c2 % 2 == 0);
        let Some(c) = c2.map(|c2| c2 / 2).filter(|c| h % c == 0) else {
            return Err(layout_error(
                sd,
                layout,
                format!(
                    "`rnn.cells.{l}.ih.0.weight` has {rows} rows: not 4H + 2C for this layer's \
                     width H = {h} and a number of chunks C dividing it"
                ),
            ));
        };
        match chunk {
            None => chunk = Some(h / c),
            Some(s) if s == h / c => {}
            Some(s) => {
                return Err(layout_error(
                    sd,
                    layout,
                    format!(
                        "layer {l} has chunks of {} neurons but the layers below have {s}: arbor's \
                         language model has one chunk size",
                        h / c
                    ),
                ))
            }
        }
    }
    if ih[0].1 != d_embed {
        return Err(layout_error(
            sd,
            layout,
            format!(
                "`rnn.cells.0.ih.0.weight` reads {} inputs but the embedding is {d_embed} wide",
                ih[0].1
            ),
        ));
    }
    let d_hidden = if n > 1 { widths[0] } else { d_embed };
    if let Some(l) = (0..n.saturating_sub(1)).find(|&l| widths[l] != d_hidden) {
        return Err(layout_error(
            sd,
            layout,
            format!(
                "layer {l} is {} wide but layer 0 is {d_hidden}: arbor's language model has one \
                 hidden width below the top layer",
                widths[l]
            ),
        ));
    }
    if v > MAX_FULL_SOFTMAX_VOCAB {
        return Err(layout_error(
            sd,
            layout,
            format!(
                "a vocabulary of {v} tokens: the reference trains more than \
                 {MAX_FULL_SOFTMAX_VOCAB} tokens with a split softmax whose tail vectors are in \
                 its criterion, not in this state dict; arbor's decoder is a full softmax and \
                 would not compute the reference's probabilities"
            ),
        ));
    }
    Ok(RnnLmConfig::new(opts.flavour.cell(), v, d_embed, d_hidden)
        .with_n_layers(n)
        .with_chunk_size(chunk.expect("at least one layer"))
        .with_weight_drop(opts.weight_drop))
}

/// Imports a reference ON-LSTM / FastTrees / Faster FastTrees language model (see the module
/// docs for the layout). The result reproduces the reference's evaluation-mode logits, top
/// outputs and per-layer distances in arbor's evaluation mode (any non-autodiff backend), and
/// its metadata is what `ptb_lm --eval/--parse --checkpoint` reads.
///
/// The vocabulary becomes `<pad>`, `<unk>`, then the reference's tokens in order; the
/// embedding rows and decoder biases follow, and a token the reference lacks gets a zero row
/// and the bias [`ABSENT_TOKEN_LOGIT`]. `meta["imported"]["reference_ids"]` gives, for every
/// arbor id, the reference id (or `null`).
///
/// # Errors
/// A [`ConvertError::Layout`] naming every missing, unexpected or mis-shaped key (or a
/// configuration the weights cannot describe), or a [`ConvertError::Config`] for a bad
/// `weight_drop` or a vocabulary that does not fit.
pub fn import_rnn_lm<B: ArborBackend>(
    mut sd: StateDict,
    opts: &RnnLmImport,
    device: &B::Device,
) -> Result<Imported<RnnLm<B>>, ConvertError> {
    let layout = opts.flavour.layout();
    let p = opts.weight_drop;
    if !(0.0..1.0).contains(&p) {
        return Err(ConvertError::Config(format!(
            "--weight-drop {p}: the DropConnect rate must be in [0, 1)"
        )));
    }
    let ref_config = infer_config(&sd, opts)?;
    let v = ref_config.n_tokens;
    let (ref_tokens, synthetic, source) = match &opts.vocab {
        Some(voc) => {
            if voc.tokens.len() != v {
                return Err(ConvertError::Config(format!(
                    "{}: {} tokens, but `encoder.weight` of {} has {v} rows (a vocabulary from \
                     another corpus or model?)",
                    voc.source,
                    voc.tokens.len(),
                    sd.path().display()
                )));
            }
            (voc.tokens.clone(), false, voc.source.clone())
        }
        None => (
            (0..v).map(|k| format!("<{k}>")).collect(),
            true,
            String::new(),
        ),
    };
    let (tokens, sources) = arbor_vocab(&ref_tokens, &opts.eos_token, synthetic, &source)?;
    let config = RnnLmConfig {
        n_tokens: tokens.len(),
        ..ref_config.clone()
    };
    let model = config
        .try_init::<B>(device)
        .map_err(|e| layout_error(&sd, layout, format!("inferred configuration: {e}")))?;

    let (d_embed, d_hidden, n) = (config.d_embed, config.d_hidden, config.n_layers);
    let mut w = Weights::new();
    // Embedding and tied decoder.
    let enc = sd.take("encoder.weight", &[v, d_embed]);
    let dec_w = sd.take_optional("decoder.weight", &[v, d_embed]);
    let dec_b = sd.take("decoder.bias", &[v]);
    if let (Some(e), Some(d)) = (&enc, &dec_w) {
        if e != d {
            sd.problem(
                "`decoder.weight` differs from `encoder.weight`: the model was trained without \
                 tied weights, and arbor's decoder is the embedding",
            );
        }
    }
    if let (Some(e), Some(b)) = (enc, dec_b) {
        let mut emb = Vec::with_capacity(tokens.len() * d_embed);
        let mut bias = Vec::with_capacity(tokens.len());
        for src in &sources {
            match src {
                Some(k) => {
                    emb.extend_from_slice(&e.values()[k * d_embed..(k + 1) * d_embed]);
                    bias.push(b.values()[*k]);
                }
                None => {
                    emb.extend(std::iter::repeat_n(0.0, d_embed));
                    bias.push(ABSENT_TOKEN_LOGIT);
                }
            }
        }
        w.put("embedding", Array::new(vec![tokens.len(), d_embed], emb)?);
        w.put("decoder_bias", Array::new(vec![tokens.len()], bias)?);
    }

    // The layers.
    let keep = (1.0 - p) as f32;
    for l in 0..n {
        let d_in = if l == 0 { d_embed } else { d_hidden };
        let h = if l + 1 == n { d_embed } else { d_hidden };
        let c = h / config.chunk_size;
        let rows = 4 * h + 2 * c;
        let hh_rows = opts.flavour.hh_rows(h, c);
        let key = |k: &str| format!("rnn.cells.{l}.{k}");
        let ih_w = sd.take(&key("ih.0.weight"), &[rows, d_in]);
        let ih_b = sd.take(&key("ih.0.bias"), &[rows]);
        let arbor = |k: &str| format!("stack.layers.{l}.{k}");
        if opts.flavour == RnnLmFlavour::FasterFastTrees {
            // Built by the reference, never called by its cell.
            sd.take_optional(&key("hh.weight"), &[hh_rows, h]);
            sd.take_optional(&key("hh.bias"), &[hh_rows]);
            w.put_some(
                arbor("input.weight"),
                ih_w.map(|a| gate_rows(&a, h, c, true).t()),
            );
            w.put_some(arbor("input.bias"), ih_b.map(|a| gate_rows(&a, h, c, true)));
            continue;
        }
        let hh_w = sd.take(&key("hh.weight"), &[hh_rows, h]);
        let hh_b = sd.take(&key("hh.bias"), &[hh_rows]);
        if hh_rows != rows && sd.shape(&key("hh.weight")) == Some(&[rows, h][..]) {
            sd.problem(format!(
                "`{}` has the ON-LSTM / Faster FastTrees shape [4H + 2C, H]: import it as \
                 on-lstm or faster-fasttrees",
                key("hh.weight")
            ));
        }
        if opts.flavour == RnnLmFlavour::OnLstm
            && sd.shape(&key("hh.weight")) == Some(&[4 * h, h][..])
        {
            sd.problem(format!(
                "`{}` has the FastTrees shape [4H, H]: import it as fasttrees",
                key("hh.weight")
            ));
        }
        let master = opts.flavour == RnnLmFlavour::OnLstm;
        w.put_some(
            arbor("input.weight"),
            ih_w.map(|a| gate_rows(&a, h, c, true).t()),
        );
        if let (Some(ib), Some(hb)) = (ih_b, hh_b) {
            // One bias in arbor: the hidden bias joins the input bias on the gates it feeds.
            let hb = if master {
                hb
            } else {
                Array::concat(&[Array::zeros(vec![2 * c]), hb])
            };
            w.put(arbor("input.bias"), gate_rows(&ib.add(&hb), h, c, true));
        }
        w.put_some(
            arbor("hidden.weight"),
            hh_w.map(|a| gate_rows(&a.map(|x| x * keep), h, c, master).t()),
        );
    }
    let path = sd.path().to_path_buf();
    sd.finish(layout)?;
    let model = w.apply(model, &path, layout)?;

    let task = serde_json::json!({
        "model": config,
        "vocab": tokens,
        "bptt": REFERENCE_BPTT,
        "batch_size": REFERENCE_BATCH_SIZE,
    });
    let mut meta = imported_meta(task, &path, layout);
    meta["imported"]["weight_drop"] = serde_json::json!(p);
    meta["imported"]["vocab"] = if synthetic {
        serde_json::json!(null)
    } else {
        serde_json::json!(source)
    };
    meta["imported"]["reference_ids"] = serde_json::json!(sources);
    Ok(Imported { model, meta })
}
