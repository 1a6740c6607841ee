//! The logic example on a tiny fixture written here: argument parsing, data loading (operator
//! filter, validation split, extra test files), and short training runs with SPINN and an LSTM
//! that must produce per-operator-count accuracy, checkpoints and a metrics log.

use std::path::Path;
use std::sync::Mutex;

use arbor_apps::logic::{load_splits, per_operator_count, run, LogicArgs};
use arbor_encoders::EncoderKind;
use clap::Parser;

/// Training uses the process-global backend generator.
static TRAINING: Mutex<()> = Mutex::new(());

fn write_fixture(dir: &Path) {
    let files: [(&str, &[&str]); 6] = [
        ("train0", &["=\ta\ta", "#\ta\tb", "=\tb\tb", "#\tb\tc"]),
        (
            "train1",
            &[
                "^\ta\t( not a )",
                "<\t( a ( and b ) )\ta",
                ">\ta\t( a ( and b ) )",
            ],
        ),
        (
            "train2",
            &[
                "=\t( not ( not a ) )\ta",
                "|\t( a ( and b ) )\t( not ( a ( or b ) ) )",
            ],
        ),
        ("train3", &["=\t( not ( not ( not a ) ) )\t( not a )"]),
        ("test0", &["=\tc\tc", "#\tc\ta"]),
        ("test1", &["^\tb\t( not b )"]),
    ];
    for (name, lines) in files {
        let body: String = (0..4)
            .flat_map(|_| lines.iter().map(|l| format!("{l}\n")))
            .collect();
        std::fs::write(dir.join(name), body).unwrap();
    }
    std::fs::write(
        dir.join("long"),
        "v\t( not ( ( not a ) ( and ( not ( b ( or c ) ) ) ) ) )\ta\n",
    )
    .unwrap();
}

fn args(dir: &Path, extra: &[&str]) -> LogicArgs {
    let mut v = vec!["logic", "--data-dir", dir.to_str().unwrap()];
    v.extend_from_slice(extra);
    LogicArgs::try_parse_from(v).unwrap()
}

#[test]
fn loads_splits_by_operator_count_with_extra_test_files() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let a = args(
        dir.path(),
        &["--max-train-operators", "2", "--valid-fraction", "0.25"],
    );
    assert_eq!(a.common.encoder, EncoderKind::Gumbel);
    let s = load_splits(&a).unwrap();
    // 9 distinct lines × 4 with ≤ 2 operators; 25% held out.
    assert_eq!((s.train.len(), s.valid.len()), (27, 9));
    assert!(s.train.iter().chain(&s.valid).all(|p| p.operators <= 2));
    assert_eq!(s.test.len(), 12);
    let long = dir.path().join("long");
    let b = args(
        dir.path(),
        &[
            "--test",
            long.to_str().unwrap(),
            "--test",
            dir.path().join("test1").to_str().unwrap(),
        ],
    );
    let s = load_splits(&b).unwrap();
    assert_eq!(s.test.len(), 5);
    assert_eq!(s.test[0].operators, 5);
    assert_eq!(s.train.len() + s.valid.len(), 40);
    let missing = args(&dir.path().join("nope"), &[]);
    assert!(load_splits(&missing)
        .unwrap_err()
        .to_string()
        .contains("train0"));
    assert!(LogicArgs::try_parse_from(["logic", "--encoder", "spinn-x"]).is_err());
    let p = LogicArgs::try_parse_from(["logic", "--encoder", "spinn-pi-nt"]).unwrap();
    assert_eq!(p.common.encoder, EncoderKind::SpinnPiNt);
}

#[test]
fn trains_and_reports_accuracy_per_operator_count() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let long = dir.path().join("long");
    let test0 = dir.path().join("test0");
    for encoder in ["spinn-pi", "spinn", "lstm"] {
        let out = dir.path().join(format!("run-{encoder}"));
        let a = args(
            dir.path(),
            &[
                "--encoder",
                encoder,
                "--dim",
                "8",
                "--batch-size",
                "8",
                "--epochs",
                "2",
                "--quiet",
                "--test",
                test0.to_str().unwrap(),
                "--test",
                long.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        run(a).unwrap_or_else(|e| panic!("{encoder}: {e:#}"));
        assert!(out.join("last.ckpt").is_file(), "{encoder}: checkpoint");
        let log = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
        assert!(log.contains("group_5_accuracy"), "{encoder}: {log}");
        assert!(log.contains("group_0_count"), "{encoder}: {log}");
        assert_eq!(
            log.contains("transition_accuracy"),
            encoder == "spinn",
            "{encoder}: {log}"
        );
        // result.json: the scored splits and the tables per file and per operator count.
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap())
                .unwrap();
        assert_eq!(r["program"], "logic");
        assert_eq!(r["encoder"], encoder);
        // Gold-tree encoders read the leaves; the others the formulas with their brackets.
        let input = if encoder == "lstm" {
            "bracketed"
        } else {
            "leaves"
        };
        assert_eq!(r["input"], input, "{encoder}");
        let test_total = r["splits"]["test"]["total"].as_u64().unwrap();
        assert_eq!(test_total, 9, "{encoder}: test0 (8 pairs) and long (1)");
        let table = |key: &str| {
            r["tables"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["key"] == key)
                .unwrap_or_else(|| panic!("{encoder}: no table by {key}: {r}"))["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| {
                    (
                        row["key"].as_str().unwrap().to_string(),
                        row["total"].as_u64().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            table("file"),
            vec![("test0".to_string(), 8), ("long".to_string(), 1)]
        );
        let ops = table("operators");
        assert_eq!(ops.iter().map(|(_, n)| n).sum::<u64>(), 9);
        assert!(ops.contains(&("5".to_string(), 1)), "{encoder}: {ops:?}");
        let correct = r["splits"]["test"]["correct"].as_u64().unwrap();
        assert!(correct <= test_total);
    }
}

#[test]
fn per_operator_count_reads_the_group_keys() {
    let mut r = arbor_train::EvalReport::default();
    r.extra.insert("group_3_accuracy".into(), 0.5);
    r.extra.insert("group_3_count".into(), 4.0);
    r.extra.insert("group_12_accuracy".into(), 1.0);
    r.extra.insert("group_12_count".into(), 2.0);
    r.extra.insert("transition_accuracy".into(), 0.9);
    let t = per_operator_count(&r);
    assert_eq!(t.len(), 2);
    assert_eq!(t[&3], (0.5, 4));
    assert_eq!(t[&12], (1.0, 2));
}

#[test]
fn no_brackets_feeds_the_leaves_to_a_sequence_model() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let out = dir.path().join("run");
    let a = args(
        dir.path(),
        &[
            "--encoder",
            "lstm",
            "--no-brackets",
            "--dim",
            "8",
            "--max-steps",
            "2",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(a.no_brackets);
    run(a).unwrap();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["input"], "leaves");
}

#[test]
fn a_sentence_over_max_sentence_len_is_refused_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    // train1's line 2 has a 7-token bracketed formula: `( a ( and b ) )`.
    let a = args(dir.path(), &["--max-sentence-len", "6"]);
    let e = format!("{:#}", load_splits(&a).unwrap_err());
    assert!(
        e.contains("train1:2") && e.contains("over the limit of 6"),
        "{e}"
    );
    let a = args(dir.path(), &["--max-sentence-len", "0"]);
    let e = format!("{:#}", run(a).unwrap_err());
    assert!(e.contains("--max-sentence-len"), "{e}");
}
