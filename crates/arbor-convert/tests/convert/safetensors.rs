//! Any arbor checkpoint → safetensors + config.json → arbor checkpoint, bit-exactly; damaged
//! exports are refused with every problem named.

use std::collections::BTreeMap;
use std::path::Path;

use arbor_convert::{
    export_safetensors, import_export_dir, import_safetensors, save_checkpoint, Array,
    CheckpointModel, StateDict,
};
use arbor_encoders::{EncoderConfig, EncoderKind};
use arbor_heads::{NliClassifierConfig, TokenEmbeddingConfig};
use arbor_lm::RnnLmConfig;
use arbor_tasks::{ModelConfig, ModelMeta};
use burn::backend::Flex;
use burn::module::Module;
use burn_store::ModuleSnapshot;

type B = Flex;

/// Path → (shape, raw bytes).
type Tensors = BTreeMap<String, (Vec<usize>, Vec<u8>)>;

/// Every tensor of `model`, path → (shape, raw bytes).
fn tensors<M: Module<B>>(model: &M) -> Tensors {
    model
        .collect(None, None, true)
        .into_iter()
        .map(|s| {
            let data = s.to_data().unwrap();
            (
                s.full_path(),
                (data.shape.to_vec(), data.as_bytes().to_vec()),
            )
        })
        .collect()
}

fn classifier_checkpoint(dir: &Path, kind: EncoderKind) -> std::path::PathBuf {
    let device = Default::default();
    let embedding = TokenEmbeddingConfig::new(7, 6);
    let encoder = EncoderConfig::of_kind(kind, 6, 8);
    let head = NliClassifierConfig::new(7, 6, 5).with_n_classes(3);
    let model = head.init(
        encoder.init::<B>(&device),
        embedding.init::<B>(&device),
        &device,
    );
    let meta = ModelMeta {
        model: ModelConfig::Nli {
            embedding,
            encoder,
            head,
        },
        vocab: (0..7).map(|i| format!("w{i}")).collect(),
        labels: vec!["a".into(), "b".into(), "c".into()],
        lowercase: true,
        case_fallback: false,
    };
    let path = dir.join(format!("{kind}.ckpt"));
    let meta = serde_json::json!({"task": meta, "note": "kept verbatim"});
    save_checkpoint::<B, _>(&model, meta, &path).unwrap();
    path
}

fn loaded_tensors(path: &Path) -> (serde_json::Value, Tensors) {
    let file = arbor_train::CheckpointFile::load(path).unwrap();
    let kind = CheckpointModel::from_meta(&file.meta).unwrap();
    let device = Default::default();
    let CheckpointModel::Classifier(meta) = kind else {
        panic!("not a classifier")
    };
    let ModelConfig::Nli {
        embedding,
        encoder,
        head,
    } = meta.model
    else {
        panic!("not a pair classifier")
    };
    let model = head.init(
        encoder.init::<B>(&device),
        embedding.init::<B>(&device),
        &device,
    );
    let (model, meta) = arbor_train::load_model::<B, _>(model, path, &device).unwrap();
    (meta, tensors(&model))
}

#[test]
fn classifier_checkpoints_round_trip_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [
        EncoderKind::Gumbel,
        EncoderKind::OnLstm,
        EncoderKind::SpinnPiNt,
    ] {
        let ckpt = classifier_checkpoint(dir.path(), kind);
        let out = dir.path().join(format!("export-{kind}"));
        let exported = export_safetensors(&ckpt, &out).unwrap();
        assert_eq!(exported.model, "classifier");
        let back = dir.path().join(format!("{kind}-back.ckpt"));
        import_export_dir(&out, &back).unwrap();
        let (meta_a, a) = loaded_tensors(&ckpt);
        let (meta_b, b) = loaded_tensors(&back);
        assert_eq!(meta_a, meta_b, "{kind}: metadata");
        assert_eq!(a.len(), exported.tensors, "{kind}");
        assert_eq!(a, b, "{kind}: weights differ after the round trip");

        // The safetensors file is readable on its own, by name, in Burn's layout.
        let sd = StateDict::read(&exported.weights).unwrap();
        let names: Vec<&str> = sd.entries().map(|(k, _)| k).collect();
        let expected: Vec<&str> = a.keys().map(String::as_str).collect();
        assert_eq!(names, expected, "{kind}");
        let emb = sd.shape("embedding.embedding.weight").unwrap();
        assert_eq!(emb, &[7, 6]);
    }
}

#[test]
fn language_model_checkpoints_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let device = Default::default();
    let config = RnnLmConfig::new(arbor_cells::CellKind::OnLstm, 11, 6, 6)
        .with_n_layers(2)
        .with_chunk_size(2);
    let model = config.init::<B>(&device);
    let meta = serde_json::json!({"task": {"model": config, "vocab": (0..11).map(|i| format!("t{i}")).collect::<Vec<_>>()}});
    let ckpt = dir.path().join("lm.ckpt");
    save_checkpoint::<B, _>(&model, meta, &ckpt).unwrap();
    let out = dir.path().join("lm");
    assert_eq!(export_safetensors(&ckpt, &out).unwrap().model, "rnn-lm");
    let back = dir.path().join("lm-back.ckpt");
    import_export_dir(&out, &back).unwrap();
    let (m2, _) =
        arbor_train::load_model::<B, _>(config.init::<B>(&device), &back, &device).unwrap();
    assert_eq!(tensors(&model), tensors(&m2));
}

#[test]
fn a_damaged_export_is_refused_with_every_problem_named() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = classifier_checkpoint(dir.path(), EncoderKind::Gumbel);
    let out = dir.path().join("export");
    let exported = export_safetensors(&ckpt, &out).unwrap();

    // Drop one tensor, reshape another, add a stranger: write the file back with burn-store.
    let sd = StateDict::read(&exported.weights).unwrap();
    let mut arrays: BTreeMap<String, Array> = BTreeMap::new();
    let mut names = Vec::new();
    for (k, shape) in sd.entries() {
        names.push(k.to_string());
        arrays.insert(k.to_string(), Array::zeros(shape.to_vec()));
    }
    let dropped = names[0].clone();
    arrays.remove(&dropped);
    let reshaped = names[1].clone();
    arrays.insert(reshaped.clone(), Array::zeros(vec![1, 1]));
    arrays.insert("stranger.weight".into(), Array::zeros(vec![2]));
    write_safetensors(&arrays, &exported.weights);

    let err = import_safetensors(
        &exported.weights,
        &exported.config,
        &dir.path().join("x.ckpt"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!("missing tensor `{dropped}`")),
        "{err}"
    );
    assert!(err.contains("stranger.weight"), "{err}");
    assert!(err.contains(&reshaped), "{err}");
    assert!(!dir.path().join("x.ckpt").exists());

    // A configuration that is not an export's.
    std::fs::write(&exported.config, "{\"format\": \"something else\"}").unwrap();
    let err = import_export_dir(&out, &dir.path().join("y.ckpt"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("not an arbor export"),
        "{err}"
    );
}

/// Writes `arrays` as a safetensors file (f32).
fn write_safetensors(arrays: &BTreeMap<String, Array>, path: &Path) {
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = arrays
        .iter()
        .map(|(k, a)| {
            let raw = a.values().iter().flat_map(|v| v.to_le_bytes()).collect();
            (k.clone(), raw, a.shape().to_vec())
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(k, raw, shape)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), raw)
                    .unwrap();
            (k.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}
