//! R2D2 language models of ant-research/StructuredLM_RTDT, branch `r2d2` (`model/r2d2.py`,
//! `model/r2d2_base.py`, the 2021 `model/tree_encoder.py`), as their `state_dict()` is saved.
//! The key-by-key layout is in docs/r2d2.md ("Reference parameter layout") and
//! docs/interop.md, "R2D2".
//!
//! The configuration is read off the weights (`V`, `D`, `F`, `N`), except what the weights do
//! not record: the head count (the reference's 12 by default), the pruning window (4) and the
//! Gumbel temperature (1). The special tokens are rows of the vocabulary embedding, named by
//! their ids (the reference configuration's 101, 7, 103, 4, 5, or found in the vocabulary).

use arbor_cells::ArborBackend;
use arbor_data::wordpiece::{WordPieceTokenizer, WP_UNK};
use arbor_encoders::r2d2::{
    CompositionConfig, R2d2Config, R2d2Lm, R2d2LmConfig, R2d2SpecialIds, RoleEmbeddings, TreeRule,
};
use arbor_tasks::R2d2Meta;

use crate::{imported_meta, Array, ConvertError, Imported, ReferenceVocab, StateDict, Weights};

/// The layout's name in errors and in the checkpoint's `imported` record.
pub const LAYOUT: &str = "r2d2";

/// The reference configuration's attention heads (`num_attention_heads` in
/// `data/en_config/config.json`): the weights do not record it.
pub const REFERENCE_HEADS: usize = 12;

/// The reference configuration's pruning window (`window_size`).
pub const REFERENCE_WINDOW: usize = 4;

/// The reference configuration's special-token ids (`cls_token_id` 101, `sum_token_id` 7,
/// `mask_token_id` 103, `bos_token_id` 4, `eos_token_id` 5): rows of BERT-uncased's vocabulary.
pub const REFERENCE_SPECIAL_IDS: R2d2SpecialIds = R2d2SpecialIds {
    cls: 101,
    sum: 7,
    mask: 103,
    bos: 4,
    eos: 5,
};

/// Largest difference tolerated between `classifier.weight` and `embedding.weight`, which the
/// reference ties (the same tensor, saved under both names).
const TIE_TOLERANCE: f32 = 0.0;

/// What the weights of an R2D2 model cannot tell.
#[derive(Debug, Clone)]
pub struct R2d2Import {
    /// The WordPiece vocabulary the model was trained with (`vocab.txt`, id order): the r2d2
    /// program tokenizes with it. Its size must be the embedding's row count.
    pub vocab: ReferenceVocab,
    /// The special-token ids (`None`: found in the vocabulary with
    /// [`R2d2SpecialIds::from_vocab`], as the reference's rows 101, 7, 103, 4, 5 of a BERT
    /// vocabulary are).
    pub special_ids: Option<R2d2SpecialIds>,
    /// Attention heads of the composition Transformer (must divide `D`).
    pub n_heads: usize,
    /// Pruning window `m` (the reference's `window_size`).
    pub window: usize,
    /// Pruned tree induction (`false`: exhaustive CKY; the reference always prunes).
    pub pruning: bool,
    /// Gumbel-softmax temperature for further training (the reference's is 1).
    pub tau: f64,
    /// The tree rule recorded in the checkpoint, which `r2d2 parse` uses by default (the
    /// reference's `get_token_tree`: [`TreeRule::Reference`]).
    pub tree_rule: TreeRule,
}

impl R2d2Import {
    /// The reference's settings (12 heads, window 4, pruning, τ = 1) with `vocab`, the special
    /// ids taken from it.
    pub fn new(vocab: ReferenceVocab) -> Self {
        R2d2Import {
            vocab,
            special_ids: None,
            n_heads: REFERENCE_HEADS,
            window: REFERENCE_WINDOW,
            pruning: true,
            tau: 1.0,
            tree_rule: TreeRule::Reference,
        }
    }
}

/// The sizes read off the weights.
struct Shape {
    vocab: usize,
    d: usize,
    d_ff: usize,
    layers: usize,
}

fn layout_error(sd: &StateDict, problem: String) -> ConvertError {
    ConvertError::Layout {
        path: sd.path().to_path_buf(),
        layout: LAYOUT.into(),
        problems: vec![problem],
    }
}

fn read_shape(sd: &StateDict) -> Result<Shape, ConvertError> {
    let emb = sd.require_shape("embedding.weight", LAYOUT)?;
    let [vocab, d] = emb[..] else {
        return Err(layout_error(
            sd,
            format!("`embedding.weight` is {emb:?}, not a [vocab, dim] matrix"),
        ));
    };
    let mut layers = 0;
    while sd.contains(&format!(
        "tree_encoder.layers.{layers}.self_attn.in_proj_weight"
    )) {
        layers += 1;
    }
    if layers == 0 {
        return Err(layout_error(
            sd,
            "no composition Transformer: `tree_encoder.layers.0.self_attn.in_proj_weight` is \
             missing (the fast-R2D2 modules of the same repository are another layout)"
                .into(),
        ));
    }
    let ff = sd.require_shape("tree_encoder.layers.0.linear1.weight", LAYOUT)?;
    let d_ff = ff.first().copied().unwrap_or(0);
    if vocab == 0 || d == 0 || d_ff == 0 {
        return Err(layout_error(
            sd,
            format!("empty sizes: vocabulary {vocab}, width {d}, feed-forward {d_ff}"),
        ));
    }
    Ok(Shape {
        vocab,
        d,
        d_ff,
        layers,
    })
}

/// Takes every reference key into `w` under arbor's `R2d2Lm` paths.
fn map_weights(sd: &mut StateDict, s: &Shape, w: &mut Weights) {
    let (v, d, f) = (s.vocab, s.d, s.d_ff);
    let emb = sd.take("embedding.weight", &[v, d]);
    // The reference ties the classifier to the embedding: the same tensor under both names.
    // arbor ties them by construction, so an untied classifier cannot be represented; a state
    // dict saved without the duplicate is fine.
    if let (Some(e), Some(c)) = (&emb, sd.take_optional("classifier.weight", &[v, d])) {
        let worst = e
            .values()
            .iter()
            .zip(c.values())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        if worst.is_nan() || worst > TIE_TOLERANCE {
            sd.problem(format!(
                "`classifier.weight` differs from `embedding.weight` (by up to {worst}): the \
                 model was trained with an untied decoder (`tie_decoder: false`), which arbor's \
                 R2D2 (one tied vocabulary matrix) cannot represent"
            ));
        }
    }
    w.put_some("embedding.weight", emb);
    w.put_some("out_bias", sd.take("classifier.bias", &[v]));

    let mut roles = Vec::with_capacity(s.layers);
    for l in 0..s.layers {
        let from = |name: &str| format!("tree_encoder.layers.{l}.{name}");
        let to = |name: &str| format!("encoder.composition.layers.{l}.{name}");
        // in_proj rows are W_q, W_k, W_v ([out, in]); Burn's fused qkv columns are q, k, v.
        let linear = |sd: &mut StateDict, w: &mut Weights, src: &str, dst: &str, o, i| {
            let weight = sd.take(&from(&format!("{src}.weight")), &[o, i]);
            w.put_some(to(&format!("{dst}.weight")), weight.map(|a| a.t()));
            w.put_some(
                to(&format!("{dst}.bias")),
                sd.take(&from(&format!("{src}.bias")), &[o]),
            );
        };
        let qkv = sd.take(&from("self_attn.in_proj_weight"), &[3 * d, d]);
        w.put_some(to("qkv.weight"), qkv.map(|a| a.t()));
        w.put_some(
            to("qkv.bias"),
            sd.take(&from("self_attn.in_proj_bias"), &[3 * d]),
        );
        linear(sd, w, "self_attn.out_proj", "out", d, d);
        linear(sd, w, "linear1", "ff_in", f, d);
        linear(sd, w, "linear2", "ff_out", d, f);
        for (src, dst) in [("norm1", "norm_attn"), ("norm2", "norm_ff")] {
            w.put_some(
                to(&format!("{dst}.gamma")),
                sd.take(&from(&format!("{src}.weight")), &[d]),
            );
            w.put_some(
                to(&format!("{dst}.beta")),
                sd.take(&from(&format!("{src}.bias")), &[d]),
            );
        }
        // Rows: 0 task tokens, 1 left child, 2 right child (arbor's role ids too).
        roles.push(sd.take(&from("position_embedding.weight"), &[3, d]));
    }
    if let Some(tables) = roles.into_iter().collect::<Option<Vec<Array>>>() {
        w.put("encoder.composition.roles", Array::concat(&tables));
    }
    // blender output 0 weighs the left child, 1 the right; score_linear scores [SUM].
    let head = |sd: &mut StateDict, w: &mut Weights, src: &str, dst: &str, o: usize| {
        let weight = sd.take(&format!("{src}.weight"), &[o, d]);
        w.put_some(format!("{dst}.weight"), weight.map(|a| a.t()));
        w.put_some(format!("{dst}.bias"), sd.take(&format!("{src}.bias"), &[o]));
    };
    head(sd, w, "blender", "encoder.composition.mix", 2);
    head(sd, w, "score_linear", "encoder.composition.score", 1);
    // cls_dense is Linear → GELU → LayerNorm(no affine): only the Linear has weights.
    head(sd, w, "cls_dense.0", "head", d);
    // Tied special tokens: the composition's own task tokens and the LM's edges are empty.
    w.put("encoder.composition.task_tokens", Array::zeros(vec![0, d]));
    w.put("edges", Array::zeros(vec![0, d]));
}

/// The special ids: the given ones, else the vocabulary's.
fn special_ids(opts: &R2d2Import) -> Result<R2d2SpecialIds, ConvertError> {
    if let Some(ids) = opts.special_ids {
        return Ok(ids);
    }
    R2d2SpecialIds::from_vocab(&opts.vocab.tokens).ok_or_else(|| {
        ConvertError::Config(format!(
            "{}: no [CLS], [MASK], [SUM]/[unused6], [BOS]/[unused3] or [EOS]/[unused4] piece to \
             tie R2D2's special tokens to; give their ids (--special-ids \
             cls,sum,mask,bos,eos; the reference's are 101,7,103,4,5)",
            opts.vocab.source
        ))
    })
}

/// Checks the vocabulary the r2d2 program will tokenize with: one piece per embedding row,
/// with BERT's `[UNK]`.
fn check_vocab(opts: &R2d2Import, rows: usize) -> Result<(), ConvertError> {
    let v = &opts.vocab;
    if v.tokens.len() != rows {
        return Err(ConvertError::Config(format!(
            "{}: the vocabulary has {} pieces but the embedding has {rows} rows: give the \
             vocab.txt the model was trained with",
            v.source,
            v.tokens.len()
        )));
    }
    if !v.tokens.iter().any(|t| t == WP_UNK) {
        return Err(ConvertError::Config(format!(
            "{}: no {WP_UNK} piece; arbor's WordPiece tokenizer (BERT's conventions) needs it",
            v.source
        )));
    }
    WordPieceTokenizer::from_pieces(&v.tokens, true).map_err(|e| {
        ConvertError::Config(format!("{}: not a WordPiece vocabulary: {e}", v.source))
    })?;
    Ok(())
}

/// Imports an `R2D2` state dict as an arbor R2D2 language model (`r2d2 eval|parse
/// --checkpoint`).
///
/// # Errors
/// A [`ConvertError`] naming every missing, unexpected or mis-shaped key, an untied
/// classifier, a vocabulary that does not fit the embedding, special ids outside it, or
/// settings (heads, window, temperature) arbor's R2D2 refuses.
pub fn import_r2d2<B: ArborBackend>(
    mut sd: StateDict,
    opts: &R2d2Import,
    device: &B::Device,
) -> Result<Imported<R2d2Lm<B>>, ConvertError> {
    let s = read_shape(&sd)?;
    check_vocab(opts, s.vocab)?;
    let ids = special_ids(opts)?;
    let composition = CompositionConfig::new(s.d)
        .with_n_layers(s.layers)
        .with_n_heads(opts.n_heads)
        .with_d_ff(s.d_ff)
        .with_role_embeddings(RoleEmbeddings::PerLayer);
    let config = R2d2LmConfig::new(s.vocab)
        .with_encoder(
            R2d2Config::new(s.d, composition)
                .with_window(opts.window)
                .with_pruning(opts.pruning)
                .with_tau(opts.tau),
        )
        .with_special_ids(Some(ids));
    config.validate().map_err(|e| {
        ConvertError::Config(format!(
            "{}: {}",
            sd.path().display(),
            e.named(&[
                ("n_heads", "--heads"),
                ("window", "--window"),
                ("tau", "--tau"),
                ("special_ids", "--special-ids"),
            ])
        ))
    })?;
    let mut w = Weights::new();
    map_weights(&mut sd, &s, &mut w);
    let path = sd.path().to_path_buf();
    sd.finish(LAYOUT)?;
    let model = w.apply(config.init::<B>(device), &path, LAYOUT)?;
    let meta = R2d2Meta {
        model: config,
        vocab: opts.vocab.tokens.clone(),
        tree_rule: opts.tree_rule,
    };
    let task = serde_json::to_value(&meta).expect("R2D2 metadata always serialises");
    Ok(Imported {
        model,
        meta: imported_meta(task, &path, LAYOUT),
    })
}
