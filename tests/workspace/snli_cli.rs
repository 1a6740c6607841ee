//! The snli example's argument parsing and its offline message.

use arbor_apps::snli::{load_splits, SnliArgs};
use arbor_encoders::EncoderKind;
use clap::Parser;

#[test]
fn parses_flags() {
    let a = SnliArgs::try_parse_from([
        "snli",
        "--train",
        "t.jsonl",
        "--holdout",
        "1000",
        "--device",
        "ndarray",
        "--encoder",
        "lstm",
        "--dim",
        "300",
        "--batch-size",
        "32",
        "--epochs",
        "2",
        "--max-steps",
        "10",
        "--lr",
        "0.002",
        "--seed",
        "3",
        "--out",
        "runs/x",
        "--resume",
    ])
    .unwrap();
    assert_eq!(a.holdout, Some(1000));
    assert_eq!(a.common.encoder, EncoderKind::Lstm);
    assert_eq!(a.common.dim, 300);
    let c = a.common.train_config();
    assert_eq!(
        (c.batch_size, c.epochs, c.max_steps, c.seed),
        (32, 2, Some(10), 3)
    );
    assert!(c.resume && (c.lr - 0.002).abs() < 1e-12);
    assert!(SnliArgs::try_parse_from(["snli", "--encoder", "cky"]).is_err());
    let d = SnliArgs::try_parse_from(["snli"]).unwrap();
    assert_eq!(d.data_dir, std::path::PathBuf::from("datasets/snli"));
    assert_eq!(d.common.encoder, EncoderKind::Gumbel);
}

#[test]
fn offline_says_what_to_put_where() {
    // Training falls back to the built-in sample (next test); evaluation needs the real files.
    let dir = tempfile::tempdir().unwrap();
    let mut a = SnliArgs::try_parse_from(["snli", "--eval-only"]).unwrap();
    a.data_dir = dir.path().join("snli");
    a.snli_url = "http://127.0.0.1:9/snli_1.0.zip".into();
    let err = load_splits(&a).unwrap_err().to_string();
    let d = a.data_dir.display().to_string();
    assert!(
        err.contains(&format!("{d}/snli_1.0/snli_1.0_train.jsonl")),
        "{err}"
    );
    assert!(err.contains(&format!("{d}/snli_1.0.zip")), "{err}");
}

#[test]
fn holdout_splits_the_training_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pairs.jsonl");
    let line = |l: &str, i: usize| {
        format!(
            "{{\"gold_label\": \"{l}\", \"sentence1\": \"a man sleeps {i}\", \"sentence2\": \"a person rests\"}}\n"
        )
    };
    let body: String = (0..10)
        .map(|i| line(["entailment", "neutral", "contradiction"][i % 3], i))
        .collect();
    std::fs::write(&path, body).unwrap();
    let a = SnliArgs::try_parse_from(["snli", "--train", path.to_str().unwrap(), "--holdout", "3"])
        .unwrap();
    let s = load_splits(&a).unwrap();
    assert_eq!(s.train.len(), 7);
    assert_eq!(s.eval[0].0, "valid");
    assert_eq!(s.eval[0].1.len(), 3);
    assert_eq!(s.eval[0].1[0].premise.tokens.last().unwrap(), "7");
    let bad =
        SnliArgs::try_parse_from(["snli", "--train", path.to_str().unwrap(), "--holdout", "10"])
            .unwrap();
    assert!(load_splits(&bad).is_err());
}

#[test]
fn without_snli_and_network_the_built_in_sample_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("snli");
    let args = SnliArgs::parse_from([
        "snli",
        "--data-dir",
        missing.to_str().unwrap(),
        "--snli-url",
        "http://127.0.0.1:9/",
    ]);
    let splits = load_splits(&args).expect("the sample instead of an error");
    assert_eq!(splits.train.len(), 2523 - arbor_apps::snli::SAMPLE_HOLDOUT);
    assert_eq!(splits.eval[0].0, "valid");
    assert_eq!(splits.eval[0].1.len(), arbor_apps::snli::SAMPLE_HOLDOUT);
    assert!(
        splits.train.iter().all(|p| p.has_parses()),
        "SPINN can train on it"
    );
    // Evaluation-only runs still need the real data.
    let eval_only = SnliArgs::parse_from([
        "snli",
        "--data-dir",
        missing.to_str().unwrap(),
        "--snli-url",
        "http://127.0.0.1:9/",
        "--eval-only",
    ]);
    assert!(load_splits(&eval_only).is_err());
}
