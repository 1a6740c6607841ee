//! A tiny synthetic task a tree encoder must learn through the engine: is token `a` anywhere in
//! the sentence? Gumbel Tree-LSTM with affine leaves has to carry that through its tree.

use arbor_encoders::{EncoderConfig, GumbelTreeLstmConfig, LeafKind};
use arbor_heads::{SentenceClassifierConfig, TokenEmbeddingConfig};
use arbor_tasks::{ClassifyData, ClassifyTask, ModelConfig, ModelMeta};
use arbor_train::{seed_everything, train, TrainConfig};
use burn::backend::{Autodiff, Flex};

type Ad = Autodiff<Flex>;

fn data(n: usize, seed: u64) -> ClassifyData {
    let mut s = seed;
    let mut next = |m: u64| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) % m
    };
    let mut d = ClassifyData::default();
    for _ in 0..n {
        let len = 2 + next(5) as usize;
        // Tokens 2..=5 stand for a, b, c, d (0 and 1 are <pad> and <unk>); half the sentences
        // get an `a`.
        let mut sent: Vec<u32> = (0..len).map(|_| 3 + next(3) as u32).collect();
        let label = next(2) as usize;
        if label == 1 {
            let at = next(len as u64) as usize;
            sent[at] = 2;
        }
        d.sentences.push(sent);
        d.labels.push(label);
    }
    d
}

#[test]
fn gumbel_tree_lstm_learns_a_tree_task() {
    let _serial = crate::serial();
    let device = Default::default();
    seed_everything::<Ad>(&device, 0);
    let embedding = TokenEmbeddingConfig::new(6, 16);
    let encoder: EncoderConfig = GumbelTreeLstmConfig::new(16, 16)
        .with_leaf(LeafKind::Affine)
        .into();
    let head = SentenceClassifierConfig::new(16).with_dropout(0.0);
    let model = head.init(
        encoder.init::<Ad>(&device),
        embedding.init::<Ad>(&device),
        &device,
    );
    let task = ClassifyTask::<Ad> {
        train: data(512, 1),
        splits: vec![("valid".into(), data(200, 2))],
        eval_batch_size: 100,
        meta: ModelMeta {
            model: ModelConfig::Classify {
                embedding,
                encoder,
                head,
            },
            vocab: ["<pad>", "<unk>", "a", "b", "c", "d"]
                .map(String::from)
                .to_vec(),
            labels: vec!["no".into(), "yes".into()],
            lowercase: false,
            case_fallback: false,
        },
        device,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = TrainConfig::new(dir.path());
    config.epochs = 8;
    config.batch_size = 32;
    config.lr = 1e-2;
    config.quiet = true;
    let out = train(&task, model, &config, &Default::default()).unwrap();
    let acc = out.evals["valid"].accuracy();
    assert!(acc >= 0.95, "accuracy {acc} after {} steps", out.state.step);
    assert!(out.state.step <= 8 * 16);
}
