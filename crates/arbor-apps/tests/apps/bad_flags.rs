//! Bad flag values stop every program before any work, with a message naming the flag and the
//! rule, and never a panic. The data paths point nowhere: a program that got past its checks
//! would fail on the missing file instead, with a different message.

use clap::Parser;

/// Runs `f`, which must return an error (not panic) whose message names every one of `needles`.
fn refused(
    what: &str,
    needles: &[&str],
    f: impl FnOnce() -> anyhow::Result<()> + std::panic::UnwindSafe,
) {
    let result = std::panic::catch_unwind(f)
        .unwrap_or_else(|_| panic!("{what}: the program panicked instead of refusing"));
    let err = result.expect_err(what);
    let msg = format!("{err:#}");
    for n in needles {
        assert!(msg.contains(n), "{what}: `{n}` not in `{msg}`");
    }
}

const NOWHERE: &str = "/nonexistent/arbor-bad-flags";

#[test]
fn classification_programs_check_their_flags() {
    use arbor_apps::{listops, logic, snli, sst};
    refused("snli heads", &["--heads", "--dim"], || {
        snli::run(snli::SnliArgs::parse_from([
            "snli",
            "--encoder",
            "transformer",
            "--dim",
            "100",
            "--heads",
            "3",
            "--train",
            NOWHERE,
        ]))
    });
    refused("sst cosine lr", &["--lr-schedule", "(0, 1]"], || {
        sst::run(sst::SstArgs::parse_from([
            "sst",
            "--lr-schedule",
            "cosine",
            "--lr",
            "2",
            "--train",
            NOWHERE,
        ]))
    });
    refused("logic early stopping", &["--early-stopping"], || {
        logic::run(logic::LogicArgs::parse_from([
            "logic",
            "--early-stopping",
            "0",
            "--data-dir",
            NOWHERE,
        ]))
    });
    refused("snli tau anneal", &["--tau-anneal-rate", "> 0"], || {
        snli::run(snli::SnliArgs::parse_from([
            "snli",
            "--tau-anneal-rate=-0.1",
            "--train",
            NOWHERE,
        ]))
    });
    refused("listops plateau factor", &["--plateau-factor"], || {
        listops::run(listops::ListOpsArgs::parse_from([
            "listops",
            "train",
            "--plateau-factor",
            "0",
            "--train",
            NOWHERE,
        ]))
    });
    assert!(
        sst::SstArgs::try_parse_from(["sst", "--lr-schedule", "linear"]).is_err(),
        "an unknown schedule must be a parse error"
    );
    refused("snli lr", &["--lr"], || {
        snli::run(snli::SnliArgs::parse_from([
            "snli", "--lr=-1", "--train", NOWHERE,
        ]))
    });
    refused("sst batch", &["--batch-size"], || {
        sst::run(sst::SstArgs::parse_from([
            "sst",
            "--batch-size",
            "0",
            "--train",
            NOWHERE,
        ]))
    });
    refused("sst dropout", &["--dropout"], || {
        sst::run(sst::SstArgs::parse_from([
            "sst",
            "--dropout",
            "1.5",
            "--train",
            NOWHERE,
        ]))
    });
    refused("logic layers", &["--layers"], || {
        logic::run(logic::LogicArgs::parse_from([
            "logic",
            "--encoder",
            "lstm",
            "--layers",
            "0",
            "--data-dir",
            NOWHERE,
        ]))
    });
    refused("listops r2d2 heads", &["--heads"], || {
        listops::run(listops::ListOpsArgs::parse_from([
            "listops",
            "train",
            "--encoder",
            "r2d2",
            "--dim",
            "10",
            "--heads",
            "4",
            "--train",
            NOWHERE,
            "--valid",
            NOWHERE,
        ]))
    });
    refused(
        "logic valid fraction",
        &["--valid-fraction", "(0, 1)"],
        || {
            logic::run(logic::LogicArgs::parse_from([
                "logic",
                "--valid-fraction",
                "NaN",
                "--data-dir",
                NOWHERE,
            ]))
        },
    );
    for (flag, value) in [("--epochs", "0"), ("--max-steps", "0")] {
        refused(flag, &[flag, "at least 1"], || {
            snli::run(snli::SnliArgs::parse_from([
                "snli", flag, value, "--train", NOWHERE,
            ]))
        });
    }
    refused("min-lr above lr", &["--min-lr", "--lr", "plateau"], || {
        sst::run(sst::SstArgs::parse_from([
            "sst", "--lr", "0.001", "--min-lr", "1", "--train", NOWHERE,
        ]))
    });
    refused("listops clip", &["--clip"], || {
        listops::run(listops::ListOpsArgs::parse_from([
            "listops", "train", "--clip", "NaN", "--train", NOWHERE, "--valid", NOWHERE,
        ]))
    });
}

#[test]
fn language_model_programs_check_their_flags() {
    use arbor_apps::{ptb_lm, r2d2};
    refused(
        "ptb chunk",
        &["--chunk-size", "must be at least 1 and divide"],
        || {
            ptb_lm::run(ptb_lm::PtbLmArgs::parse_from([
                "ptb_lm",
                "--cell",
                "on-lstm",
                "--chunk-size",
                "7",
                "--train",
                NOWHERE,
            ]))
        },
    );
    refused(
        "ptb eval batch",
        &["--eval-batch-size", "at least 1"],
        || {
            ptb_lm::run(ptb_lm::PtbLmArgs::parse_from([
                "ptb_lm",
                "--eval-batch-size",
                "0",
                "--train",
                NOWHERE,
            ]))
        },
    );
    refused("ptb alpha", &["--alpha", "finite"], || {
        ptb_lm::run(ptb_lm::PtbLmArgs::parse_from([
            "ptb_lm", "--alpha", "NaN", "--train", NOWHERE,
        ]))
    });
    refused("ptb dropout", &["--weight-drop"], || {
        ptb_lm::run(ptb_lm::PtbLmArgs::parse_from([
            "ptb_lm",
            "--weight-drop",
            "1",
            "--train",
            NOWHERE,
        ]))
    });
    refused("r2d2 window", &["--window", "at least 1"], || {
        r2d2::run(r2d2::R2d2Args::parse_from([
            "r2d2", "pretrain", "--window", "0", "--train", NOWHERE,
        ]))
    });
    refused("r2d2 heads", &["--heads", "--dim"], || {
        r2d2::run(r2d2::R2d2Args::parse_from([
            "r2d2", "pretrain", "--dim", "10", "--heads", "4", "--train", NOWHERE,
        ]))
    });
}

#[test]
fn flags_that_contradict_or_do_not_apply_are_refused() {
    use arbor_apps::snli::{self, SnliArgs};
    for (a, b) in [("--holdout=5", "--valid=x"), ("--eval-only", "--parse=a b")] {
        let e = SnliArgs::try_parse_from(["snli", a, b])
            .unwrap_err()
            .to_string();
        let flag = b.split('=').next().unwrap();
        assert!(
            e.contains("cannot be used with") && e.contains(flag),
            "{a} {b}: {e}"
        );
    }
    refused("gumbel layers", &["--layers", "no stacked layers"], || {
        snli::run(SnliArgs::parse_from([
            "snli",
            "--encoder",
            "gumbel",
            "--layers",
            "2",
            "--train",
            NOWHERE,
        ]))
    });
}

#[test]
fn sizes_that_cannot_fit_in_memory_are_refused_before_allocating() {
    use arbor_apps::{logic, ptb_lm, snli};
    refused("snli dim", &["--dim", "GiB"], || {
        snli::run(snli::SnliArgs::parse_from([
            "snli",
            "--device",
            "flex",
            "--dim",
            "100000000",
            "--train",
            NOWHERE,
        ]))
    });
    refused("logic dim", &["--dim", "GiB"], || {
        logic::run(logic::LogicArgs::parse_from([
            "logic",
            "--device",
            "flex",
            "--dim",
            "4000000000",
            "--data-dir",
            NOWHERE,
        ]))
    });
    refused("ptb emb", &["--emb", "GiB"], || {
        ptb_lm::run(ptb_lm::PtbLmArgs::parse_from([
            "ptb_lm",
            "--device",
            "flex",
            "--emb",
            "4000000000",
            "--train",
            NOWHERE,
        ]))
    });
    let dir = tempfile::tempdir().unwrap();
    let arbor_apps::listops::ListOpsArgs {
        command: arbor_apps::listops::Command::Generate(g),
    } = arbor_apps::listops::ListOpsArgs::parse_from([
        "listops",
        "generate",
        "--out",
        dir.path().join("g").to_str().unwrap(),
        "--train-size",
        "100000000000",
    ])
    else {
        panic!("generate parses as Generate");
    };
    let e = arbor_apps::listops::generate(&g).unwrap_err().to_string();
    assert!(e.contains("--train-size") && e.contains("GiB"), "{e}");
}

#[test]
fn r2d2_batch_sizes_are_at_least_one() {
    use arbor_apps::r2d2::R2d2Args;
    for sub in ["eval", "parse"] {
        let e = R2d2Args::try_parse_from(["r2d2", sub, "--batch-size", "0"]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("--batch-size") && msg.contains("at least 1"),
            "{sub}: {msg}"
        );
    }
}
