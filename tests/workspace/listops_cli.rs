//! The listops program end to end on data it generates: `generate` writes files whose labels
//! read back, `train` learns and reports by depth and length, `eval` scores a checkpoint, and
//! bad input is an error naming the file and line.

use std::sync::Mutex;

use arbor_apps::listops::{generate, read_file, run, to_data, ListOpsArgs};
use arbor_data::vocab::{Vocab, VocabConfig};
use clap::Parser;

/// Training uses the process-global backend generator.
static TRAINING: Mutex<()> = Mutex::new(());

fn parse(args: &[&str]) -> ListOpsArgs {
    let mut v = vec!["listops"];
    v.extend_from_slice(args);
    ListOpsArgs::try_parse_from(v).unwrap()
}

#[test]
fn generate_train_and_eval() {
    let _guard = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let arbor_apps::listops::Command::Generate(g) = parse(&[
        "generate",
        "--out",
        d,
        "--train-size",
        "300",
        "--valid-size",
        "60",
        "--test-size",
        "60",
        "--max-length",
        "30",
        "--seed",
        "3",
    ])
    .command
    else {
        panic!("generate parses as Generate");
    };
    let summary = generate(&g).unwrap();
    assert_eq!(summary.len(), 3, "{summary:?}");
    // Each file's line gives its length statistics, to compare with a released file.
    assert!(
        summary[0].contains("300 expressions, length mean")
            && summary[0].contains("% over 100; depth up to"),
        "{summary:?}"
    );
    let train = read_file(&data.join("train.tsv")).unwrap();
    let test = read_file(&data.join("test.tsv")).unwrap();
    assert_eq!((train.len(), test.len()), (300, 60));
    assert!(train
        .iter()
        .all(|e| e.tree.is_some() && e.tokens.len() <= 30));
    // Splits are disjoint.
    let seen: std::collections::HashSet<_> = train.iter().map(|e| e.tokens.clone()).collect();
    assert!(test.iter().all(|e| !seen.contains(&e.tokens)));
    // Depth groups and transitions come with the data.
    let vocab = Vocab::build(
        train.iter().flat_map(|e| e.tokens.iter().cloned()),
        &VocabConfig {
            min_freq: 1,
            max_size: None,
            extra_specials: Vec::new(),
        },
    );
    let cd = to_data(&test, &vocab);
    assert_eq!(cd.groups.as_ref().unwrap().len(), 60);
    assert_eq!(cd.transitions.as_ref().unwrap().len(), 60);

    let out = dir.path().join("run");
    let o = out.to_str().unwrap();
    let train_path = data.join("train.tsv");
    let valid_path = data.join("valid.tsv");
    let test_path = data.join("test.tsv");
    run(parse(&[
        "train",
        "--train",
        train_path.to_str().unwrap(),
        "--valid",
        valid_path.to_str().unwrap(),
        "--test",
        test_path.to_str().unwrap(),
        "--encoder",
        "spinn-pi-nt",
        "--dim",
        "16",
        "--batch-size",
        "32",
        "--epochs",
        "1",
        "--out",
        o,
        "--quiet",
    ]))
    .unwrap();
    assert!(out.join("last.ckpt").is_file());
    run(parse(&[
        "eval",
        "--checkpoint",
        o,
        "--test",
        test_path.to_str().unwrap(),
    ]))
    .unwrap();
    // A flat file cannot feed the gold-tree encoder at evaluation.
    let flat = dir.path().join("flat.tsv");
    std::fs::write(&flat, "9\t[MAX 2 9 ]\n").unwrap();
    let err = run(parse(&[
        "eval",
        "--checkpoint",
        o,
        "--test",
        flat.to_str().unwrap(),
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("flat lines"), "{err}");
    // A bare digit is a one-token expression with its (one-leaf) gold tree: a file of bracketed
    // lines and such a line, as the released test file has, is scored by eval...
    let mixed = dir.path().join("mixed.tsv");
    std::fs::write(&mixed, "9\t( ( ( [MAX 2 ) 9 ) ] )\n9\t9\n").unwrap();
    run(parse(&[
        "eval",
        "--checkpoint",
        o,
        "--test",
        mixed.to_str().unwrap(),
    ]))
    .unwrap();
    // ...while train --test refuses a flat file before training, as eval does.
    let err = run(parse(&[
        "train",
        "--train",
        train_path.to_str().unwrap(),
        "--valid",
        valid_path.to_str().unwrap(),
        "--test",
        flat.to_str().unwrap(),
        "--encoder",
        "spinn-pi-nt",
        "--out",
        dir.path().join("run2").to_str().unwrap(),
        "--quiet",
    ]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("flat.tsv") && err.contains("flat lines"),
        "{err}"
    );
    assert!(!dir.path().join("run2").join("last.ckpt").exists());
}

#[test]
fn bad_files_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tsv");
    std::fs::write(&bad, "9\t[MAX 2 9 ]\n3\t[MIN 3 4\n").unwrap();
    let err = format!("{:#}", read_file(&bad).unwrap_err());
    assert!(
        err.contains("bad.tsv:2:") && err.contains("not closed"),
        "{err}"
    );
    let missing = dir.path().join("none.tsv");
    let err = read_file(&missing).unwrap_err().to_string();
    assert!(err.contains("generate"), "{err}");
    let err = parse(&[
        "generate",
        "--out",
        "x",
        "--min-length",
        "50",
        "--max-length",
        "10",
    ]);
    let arbor_apps::listops::Command::Generate(g) = err.command else {
        panic!("generate");
    };
    let msg = generate(&g).unwrap_err().to_string();
    assert!(msg.contains("--max-length"), "{msg}");
}

#[test]
fn max_train_length_keeps_only_short_training_expressions() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.tsv");
    let valid = dir.path().join("valid.tsv");
    std::fs::write(&train, "9\t( ( ( [MAX 2 ) 9 ) ] )\n").unwrap();
    std::fs::write(&valid, "9\t( ( ( [MAX 2 ) 9 ) ] )\n").unwrap();
    let err = run(parse(&[
        "train",
        "--train",
        train.to_str().unwrap(),
        "--valid",
        valid.to_str().unwrap(),
        "--max-train-length",
        "3",
        "--out",
        dir.path().join("run").to_str().unwrap(),
        "--quiet",
    ]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--max-train-length 3") && err.contains("train.tsv"),
        "{err}"
    );
}

#[test]
fn generating_nothing_is_refused_naming_the_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("none");
    let arbor_apps::listops::Command::Generate(g) = parse(&[
        "generate",
        "--out",
        out.to_str().unwrap(),
        "--train-size",
        "0",
        "--valid-size",
        "0",
        "--test-size",
        "0",
    ])
    .command
    else {
        panic!("generate parses as Generate");
    };
    let e = generate(&g).unwrap_err().to_string();
    assert!(
        e.contains("--train-size") && e.contains("nothing to generate"),
        "{e}"
    );
    assert!(!out.exists());
}
