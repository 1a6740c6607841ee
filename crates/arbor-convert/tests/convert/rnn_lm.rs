//! The reference ON-LSTM / FastTrees / Faster FastTrees language models (fixtures written by
//! `fixtures/rnn_lm.py`) imported into arbor reproduce the reference's evaluation-mode logits,
//! top-layer outputs and per-layer distances; bad state dicts and vocabularies are refused with
//! every problem named.

use crate::common;

use std::collections::BTreeMap;

use arbor_convert::{
    import_rnn_lm, Array, CheckpointModel, ReferenceVocab, RnnLmFlavour, RnnLmImport, StateDict,
    ABSENT_TOKEN_LOGIT,
};
use arbor_lm::{ids_tensor, RnnLm};
use burn::backend::Flex;
use burn::prelude::*;
use common::{arbor_convert, arbor_convert_error, assert_close, fixture, Fixture};

type B = Flex;

const TOL: f32 = 1e-5;

const FLAVOURS: [(&str, RnnLmFlavour); 3] = [
    ("rnn_lm_on_lstm", RnnLmFlavour::OnLstm),
    ("rnn_lm_fasttrees", RnnLmFlavour::FastTrees),
    ("rnn_lm_faster_fasttrees", RnnLmFlavour::FasterFastTrees),
];

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

/// The options the fixture was made with, its dictionary rebuilt from its training text.
fn options(fx: &Fixture, flavour: RnnLmFlavour) -> RnnLmImport {
    let vocab = ReferenceVocab::from_corpus(&[fx.dir.join("train.txt")]).unwrap();
    let expected: Vec<String> = serde_json::from_value(fx.inputs["vocab"].clone()).unwrap();
    assert_eq!(vocab.tokens, expected, "the reference's dictionary order");
    RnnLmImport {
        weight_drop: fx.inputs["wdrop"].as_f64().unwrap(),
        vocab: Some(vocab),
        ..RnnLmImport::new(flavour)
    }
}

/// The fixture's token ids `[T][B]` (reference ids), as arbor ids `[B, T]` row-major.
fn arbor_ids(fx: &Fixture, reference_ids: &[Option<usize>]) -> (Vec<u32>, usize, usize) {
    let ids: Vec<Vec<usize>> = serde_json::from_value(fx.inputs["ids"].clone()).unwrap();
    let (t, b) = (ids.len(), ids[0].len());
    let to_arbor = |r: usize| {
        reference_ids
            .iter()
            .position(|s| *s == Some(r))
            .expect("every reference token has an arbor id") as u32
    };
    let mut out = vec![0; b * t];
    for (ti, row) in ids.iter().enumerate() {
        for (bi, &r) in row.iter().enumerate() {
            out[bi * t + ti] = to_arbor(r);
        }
    }
    (out, b, t)
}

/// arbor logits `[B, T, V']` → the reference's `[T, B, V]` in reference id order.
fn reference_logits(
    logits: &[f32],
    b: usize,
    t: usize,
    reference_ids: &[Option<usize>],
) -> Vec<f32> {
    let va = reference_ids.len();
    let v = reference_ids.iter().flatten().count();
    let mut out = vec![f32::NAN; t * b * v];
    for ti in 0..t {
        for bi in 0..b {
            for (a, src) in reference_ids.iter().enumerate() {
                if let Some(r) = src {
                    out[(ti * b + bi) * v + r] = logits[(bi * t + ti) * va + a];
                }
            }
        }
    }
    out
}

/// `[B, T, D]` → `[T, B, D]`.
fn time_major(x: &[f32], b: usize, t: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for ti in 0..t {
            for k in 0..d {
                out[(ti * b + bi) * d + k] = x[(bi * t + ti) * d + k];
            }
        }
    }
    out
}

fn reference_ids(meta: &serde_json::Value) -> Vec<Option<usize>> {
    serde_json::from_value(meta["imported"]["reference_ids"].clone()).unwrap()
}

/// Checks `model` against the fixture: logits, top outputs, distances (from the LM's forward,
/// from two segments with the state carried, and from the padding-aware parse path).
fn check(fx: &Fixture, name: &str, model: &RnnLm<B>, sources: &[Option<usize>]) -> f32 {
    let device = Default::default();
    let (ids, b, t) = arbor_ids(fx, sources);
    let e = fx.inputs["emb"].as_u64().unwrap() as usize;
    let v = sources.iter().flatten().count();
    let out = model.forward(ids_tensor::<B>(&ids, [b, t], &device), None);
    let logits = values(out.logits.clone());
    let got = reference_logits(&logits, b, t, sources);
    assert_close(fx, "logits", &got, &[t, b, v], TOL);
    // Tokens the reference lacks (here `<pad>`) are never predicted.
    let va = sources.len();
    for (a, src) in sources.iter().enumerate() {
        if src.is_none() {
            for row in logits.chunks(va) {
                assert!(
                    row[a] <= ABSENT_TOKEN_LOGIT + 1.0,
                    "{name}: absent token {a}"
                );
            }
        }
    }
    let top = time_major(&values(out.outputs), b, t, e);
    assert_close(fx, "output", &top, &[t, b, e], TOL);
    let layers = out.distances.len();
    let dist: Vec<f32> = out
        .distances
        .into_iter()
        .flat_map(|d| time_major(&values(d), b, t, 1))
        .collect();
    assert_close(fx, "distances", &dist, &[layers, t, b], TOL);

    // The parse path (padding-aware runner) gives the same distances.
    let parse: Vec<f32> = model
        .layer_distances(ids_tensor::<B>(&ids, [b, t], &device), &vec![t; b])
        .into_iter()
        .flat_map(|d| time_major(&values(d), b, t, 1))
        .collect();
    assert_close(fx, "distances", &parse, &[layers, t, b], TOL);

    // Two segments with the state carried give the same logits (truncated BPTT evaluation).
    let cut = 3;
    let seg = |from: usize, to: usize| -> Vec<u32> {
        (0..b)
            .flat_map(|bi| ids[bi * t + from..bi * t + to].to_vec())
            .collect()
    };
    let first = model.forward(ids_tensor::<B>(&seg(0, cut), [b, cut], &device), None);
    let second = model.forward(
        ids_tensor::<B>(&seg(cut, t), [b, t - cut], &device),
        Some(first.state),
    );
    let joined = values(Tensor::cat(vec![first.logits, second.logits], 1));
    assert_close(
        fx,
        "logits",
        &reference_logits(&joined, b, t, sources),
        &[t, b, v],
        TOL,
    );

    let expected = fx.expected["logits"].values();
    got.iter()
        .zip(expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn reference_language_models_reproduce_their_evaluation_outputs() {
    let device = Default::default();
    for (name, flavour) in FLAVOURS {
        let fx = fixture(name);
        let opts = options(&fx, flavour);
        let imported = import_rnn_lm::<B>(fx.state_dict.clone(), &opts, &device)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let config = &imported.meta["task"]["model"];
        assert_eq!(config["n_layers"], 2, "{name}");
        assert_eq!(config["chunk_size"], 4, "{name}");
        assert_eq!(config["d_embed"], 8, "{name}");
        assert_eq!(config["d_hidden"], 12, "{name}");
        assert_eq!(config["weight_drop"], 0.3, "{name}");
        // <pad> added in front, <unk> moved to id 1, <eos> kept.
        let vocab: Vec<String> =
            serde_json::from_value(imported.meta["task"]["vocab"].clone()).unwrap();
        assert_eq!(&vocab[..3], ["<pad>", "<unk>", "the"], "{name}");
        assert!(vocab.contains(&"<eos>".to_string()), "{name}");
        let sources = reference_ids(&imported.meta);
        let worst = check(&fx, name, &imported.model, &sources);
        eprintln!("{name}: max |logit difference| {worst:e}");

        // The checkpoint it writes loads back, through the metadata ptb_lm reads, to the same
        // model.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.ckpt");
        imported.save::<B>(&path).unwrap();
        let file = arbor_train::CheckpointFile::load(&path).unwrap();
        let CheckpointModel::RnnLm { config, vocab: v2 } =
            CheckpointModel::from_meta(&file.meta).unwrap()
        else {
            panic!("{name}: not a language-model checkpoint")
        };
        assert_eq!(v2, vocab);
        let (loaded, meta) =
            arbor_train::load_model::<B, _>(config.init::<B>(&device), &path, &device).unwrap();
        check(&fx, name, &loaded, &reference_ids(&meta));
    }
}

#[test]
fn the_dropconnect_scaling_is_what_makes_the_outputs_match() {
    let device = Default::default();
    let fx = fixture("rnn_lm_on_lstm");
    let opts = RnnLmImport {
        weight_drop: 0.0,
        ..options(&fx, RnnLmFlavour::OnLstm)
    };
    let imported = import_rnn_lm::<B>(fx.state_dict.clone(), &opts, &device).unwrap();
    let sources = reference_ids(&imported.meta);
    let (ids, b, t) = arbor_ids(&fx, &sources);
    let logits = values(
        imported
            .model
            .forward(ids_tensor::<B>(&ids, [b, t], &device), None)
            .logits,
    );
    let got = reference_logits(&logits, b, t, &sources);
    let worst = got
        .iter()
        .zip(fx.expected["logits"].values())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        worst > 1e-3,
        "unscaled hh weights should not match ({worst})"
    );
}

#[test]
fn faster_fasttrees_ignores_its_unused_hidden_weights() {
    // The reference builds `hh` for Faster FastTrees but never calls it: a state dict without
    // those keys imports to the same model.
    let device = Default::default();
    let fx = fixture("rnn_lm_faster_fasttrees");
    let arrays: BTreeMap<String, Array> = entries(&fx.state_dict)
        .into_iter()
        .filter(|(k, _)| !k.contains(".hh."))
        .collect();
    let sd = StateDict::from_arrays("no-hh.pt", arrays);
    let imported =
        import_rnn_lm::<B>(sd, &options(&fx, RnnLmFlavour::FasterFastTrees), &device).unwrap();
    let sources = reference_ids(&imported.meta);
    check(&fx, "no-hh", &imported.model, &sources);
}

fn entries(sd: &StateDict) -> BTreeMap<String, Array> {
    let mut sd = sd.clone();
    let keys: Vec<(String, Vec<usize>)> = sd
        .entries()
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    keys.into_iter()
        .map(|(k, s)| {
            let a = sd.take(&k, &s).unwrap();
            (k, a)
        })
        .collect()
}

#[test]
fn a_damaged_state_dict_is_refused_with_every_problem_named() {
    let device = Default::default();
    let fx = fixture("rnn_lm_on_lstm");
    let mut arrays = entries(&fx.state_dict);
    arrays.remove("rnn.cells.1.hh.bias");
    arrays.insert("rnn.cells.0.extra".into(), Array::zeros(vec![3]));
    arrays.insert("decoder.bias".into(), Array::zeros(vec![15]));
    let sd = StateDict::from_arrays("damaged.pt", arrays);
    let err = import_rnn_lm::<B>(sd, &options(&fx, RnnLmFlavour::OnLstm), &device)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("damaged.pt: does not match the on-lstm-lm layout (3 problems)"),
        "{err}"
    );
    assert!(err.contains("missing key `rnn.cells.1.hh.bias`"), "{err}");
    assert!(err.contains("unexpected key `rnn.cells.0.extra`"), "{err}");
    assert!(
        err.contains("key `decoder.bias` has shape [15], expected [16]"),
        "{err}"
    );
}

#[test]
fn wrong_vocabularies_flavours_and_rates_are_refused() {
    let device = Default::default();
    let fx = fixture("rnn_lm_on_lstm");
    let err_of = |sd: StateDict, opts: &RnnLmImport| {
        import_rnn_lm::<B>(sd, opts, &device)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };

    // A vocabulary of the wrong size.
    let mut opts = options(&fx, RnnLmFlavour::OnLstm);
    let mut voc = opts.vocab.clone().unwrap();
    voc.tokens.push("extra".into());
    voc.source = "vocab.txt".into();
    opts.vocab = Some(voc);
    let err = err_of(fx.state_dict.clone(), &opts);
    assert!(
        err.starts_with("vocab.txt: 17 tokens, but `encoder.weight`") && err.contains("16 rows"),
        "{err}"
    );

    // A vocabulary without the end-of-line token.
    let mut opts = options(&fx, RnnLmFlavour::OnLstm);
    opts.eos_token = "</s>".into();
    let err = err_of(fx.state_dict.clone(), &opts);
    assert!(err.contains("holds both \"</s>\""), "{err}");
    let mut opts = options(&fx, RnnLmFlavour::OnLstm);
    let mut voc = opts.vocab.clone().unwrap();
    let k = voc.tokens.iter().position(|t| t == "<eos>").unwrap();
    voc.tokens[k] = "EOL".into();
    opts.vocab = Some(voc);
    let err = err_of(fx.state_dict.clone(), &opts);
    assert!(err.contains("no end-of-line token \"<eos>\""), "{err}");
    // ... unless told which token it is.
    opts.eos_token = "EOL".into();
    import_rnn_lm::<B>(fx.state_dict.clone(), &opts, &device).unwrap();

    // ON-LSTM weights imported as FastTrees.
    let err = err_of(
        fx.state_dict.clone(),
        &options(&fx, RnnLmFlavour::FastTrees),
    );
    assert!(
        err.contains("import it as on-lstm or faster-fasttrees"),
        "{err}"
    );
    // FastTrees weights imported as ON-LSTM.
    let ft = fixture("rnn_lm_fasttrees");
    let err = err_of(ft.state_dict.clone(), &options(&ft, RnnLmFlavour::OnLstm));
    assert!(err.contains("import it as fasttrees"), "{err}");

    // An untied decoder.
    let mut arrays = entries(&fx.state_dict);
    arrays.insert("decoder.weight".into(), Array::zeros(vec![16, 8]));
    let err = err_of(
        StateDict::from_arrays("untied.pt", arrays),
        &options(&fx, RnnLmFlavour::OnLstm),
    );
    assert!(err.contains("differs from `encoder.weight`"), "{err}");

    // A DropConnect rate outside [0, 1).
    let opts = RnnLmImport {
        weight_drop: 1.0,
        ..options(&fx, RnnLmFlavour::OnLstm)
    };
    let err = err_of(fx.state_dict.clone(), &opts);
    assert!(err.contains("--weight-drop 1"), "{err}");

    // Not a language model at all.
    let mut arrays = BTreeMap::new();
    arrays.insert("encoder.weight".to_string(), Array::zeros(vec![16, 8]));
    let err = err_of(
        StateDict::from_arrays("other.pt", arrays),
        &options(&fx, RnnLmFlavour::OnLstm),
    );
    assert!(
        err.contains("missing key `rnn.cells.0.ih.0.weight`"),
        "{err}"
    );
}

#[test]
fn vocabulary_files_are_read_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.txt");
    std::fs::write(&path, "a\r\nb\n<eos>\n").unwrap();
    assert_eq!(
        ReferenceVocab::read_file(&path).unwrap().tokens,
        ["a", "b", "<eos>"]
    );
    std::fs::write(&path, "a\nb\na\n").unwrap();
    let err = ReferenceVocab::read_file(&path).unwrap_err().to_string();
    assert!(err.contains("line 3: token \"a\" appears twice"), "{err}");
    std::fs::write(&path, "a\n\nb\n").unwrap();
    let err = ReferenceVocab::read_file(&path).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
    let err = ReferenceVocab::read_file(&dir.path().join("none.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("none.txt"), "{err}");
    // The corpus order: train then valid, `<eos>` after every line, first appearance wins.
    let train = dir.path().join("train.txt");
    let valid = dir.path().join("valid.txt");
    std::fs::write(&train, "b a\n\na c\n").unwrap();
    std::fs::write(&valid, "d b\n").unwrap();
    assert_eq!(
        ReferenceVocab::from_corpus(&[train, valid]).unwrap().tokens,
        ["b", "a", "<eos>", "c", "d"]
    );
}

#[test]
fn the_import_command_writes_a_checkpoint_ptb_lm_can_load() {
    let device = Default::default();
    let dir = tempfile::tempdir().unwrap();
    for (name, flavour, sub) in [
        ("rnn_lm_on_lstm", RnnLmFlavour::OnLstm, "on-lstm"),
        ("rnn_lm_fasttrees", RnnLmFlavour::FastTrees, "fasttrees"),
        (
            "rnn_lm_faster_fasttrees",
            RnnLmFlavour::FasterFastTrees,
            "faster-fasttrees",
        ),
    ] {
        let fx = fixture(name);
        let out = dir.path().join(format!("{sub}.ckpt"));
        arbor_convert(|c| {
            c.args(["import", sub, "--state-dict"])
                .arg(fx.dir.join("state_dict.pt"))
                .arg("--corpus-train")
                .arg(fx.dir.join("train.txt"))
                .args(["--weight-drop", "0.3", "--out"])
                .arg(&out);
        });
        let file = arbor_train::CheckpointFile::load(&out).unwrap();
        assert_eq!(file.meta["imported"]["layout"], flavour.layout());
        let CheckpointModel::RnnLm { config, .. } = CheckpointModel::from_meta(&file.meta).unwrap()
        else {
            panic!("{name}: not a language-model checkpoint")
        };
        let (model, meta) =
            arbor_train::load_model::<B, _>(config.init::<B>(&device), &out, &device).unwrap();
        check(&fx, name, &model, &reference_ids(&meta));
    }
    // A bad flag value is an error, not a panic.
    let fx = fixture("rnn_lm_on_lstm");
    let stderr = arbor_convert_error(|c| {
        c.args(["import", "on-lstm", "--state-dict"])
            .arg(fx.dir.join("state_dict.pt"))
            .args(["--weight-drop", "1.5", "--out"])
            .arg(dir.path().join("bad.ckpt"));
    });
    assert!(stderr.contains("--weight-drop 1.5"), "{stderr}");
}
