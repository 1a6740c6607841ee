//! Every training program walks one table of bad engine-flag values (zero, negative, NaN,
//! infinite, out of range, unparsable, contradicting another flag): each is refused before any
//! work, with a message naming the flag, never a panic. The data paths point nowhere, so a
//! program that let a bad value through would fail on the missing file instead, with a message
//! that does not name the flag.

use clap::Parser;

const NOWHERE: &str = "/nonexistent/arbor-flag-table";

/// (flags, a text the refusal must contain).
const TABLE: &[(&[&str], &str)] = &[
    (&["--batch-size", "0"], "--batch-size"),
    (&["--batch-size", "-3"], "--batch-size"),
    (&["--batch-size", "99999999999999999999999"], "--batch-size"),
    (&["--epochs", "0"], "--epochs"),
    (&["--epochs", "x"], "--epochs"),
    (&["--max-steps", "0"], "--max-steps"),
    (&["--max-minutes", "0"], "--max-minutes"),
    (&["--max-minutes", "NaN"], "--max-minutes"),
    (&["--max-minutes", "-5"], "--max-minutes"),
    (&["--lr", "0"], "--lr"),
    (&["--lr", "-1"], "--lr"),
    (&["--lr", "NaN"], "--lr"),
    (&["--lr", "inf"], "--lr"),
    (&["--weight-decay", "-1"], "--weight-decay"),
    (&["--weight-decay", "NaN"], "--weight-decay"),
    (&["--clip", "-1"], "--clip"),
    (&["--clip", "NaN"], "--clip"),
    (&["--min-lr", "-1"], "--min-lr"),
    (&["--min-lr", "NaN"], "--min-lr"),
    (&["--lr", "0.001", "--min-lr", "1"], "--min-lr"),
    (&["--plateau-factor", "0"], "--plateau-factor"),
    (&["--plateau-factor", "2"], "--plateau-factor"),
    (&["--plateau-factor", "NaN"], "--plateau-factor"),
    (&["--early-stopping", "0"], "--early-stopping"),
    (&["--tau-anneal-rate", "-1"], "--tau-anneal-rate"),
    (&["--tau-anneal-rate", "NaN"], "--tau-anneal-rate"),
    (
        &["--tau-anneal-rate", "0.1", "--tau-anneal-every", "0"],
        "--tau-anneal",
    ),
    (&["--tau-anneal-rate", "0.1", "--tau-min", "0"], "--tau-min"),
    (&["--checkpoint-every", "0"], "--checkpoint-every"),
    (&["--checkpoint-every", "-2m"], "--checkpoint-every"),
    (&["--lr-schedule", "cosine:0"], "--lr-schedule"),
    (&["--lr-schedule", "step:0:0.5"], "--lr-schedule"),
    (&["--lr-schedule", "linear"], "--lr-schedule"),
    (&["--force"], "--resume"),
    (&["--resume", "--overwrite"], "--overwrite"),
    (&["--seed", "-1"], "--seed"),
    (&["--devices", ""], "--devices lists no device"),
    (&["--devices", "auto"], "--devices entry 1 is `auto`"),
    (&["--devices", "flex,,flex"], "--devices entry 2"),
    (&["--devices", "flex,tpu"], "--devices entry 2 (`tpu`)"),
    (
        &["--devices", "flex,cuda:99"],
        "--devices entry 2 (`cuda:99`)",
    ),
];

/// A program: its name and how to run it on `flags` (after its fixed, nowhere-pointing data
/// flags): `Err` with the refusal's text.
type Program = (&'static str, fn(&[&str]) -> Result<(), String>);

fn args<'a>(head: &[&'a str], flags: &[&'a str]) -> Vec<&'a str> {
    head.iter().chain(flags).copied().collect()
}

const PROGRAMS: &[Program] = &[
    ("snli", |f| {
        use arbor_apps::snli::{run, SnliArgs};
        let a = SnliArgs::try_parse_from(args(&["snli", "--train", NOWHERE], f))
            .map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
    ("sst", |f| {
        use arbor_apps::sst::{run, SstArgs};
        let a = SstArgs::try_parse_from(args(&["sst", "--train", NOWHERE], f))
            .map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
    ("logic", |f| {
        use arbor_apps::logic::{run, LogicArgs};
        let a = LogicArgs::try_parse_from(args(&["logic", "--data-dir", NOWHERE], f))
            .map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
    ("listops train", |f| {
        use arbor_apps::listops::{run, ListOpsArgs};
        let head = ["listops", "train", "--train", NOWHERE, "--valid", NOWHERE];
        let a = ListOpsArgs::try_parse_from(args(&head, f)).map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
    ("ptb_lm", |f| {
        use arbor_apps::ptb_lm::{run, PtbLmArgs};
        let a = PtbLmArgs::try_parse_from(args(&["ptb_lm", "--train", NOWHERE], f))
            .map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
    ("r2d2 pretrain", |f| {
        use arbor_apps::r2d2::{run, R2d2Args};
        let head = ["r2d2", "pretrain", "--train", NOWHERE];
        let a = R2d2Args::try_parse_from(args(&head, f)).map_err(|e| e.to_string())?;
        run(a).map_err(|e| format!("{e:#}"))
    }),
];

/// The classifier flags the four classification programs share (`TrainArgs`).
const CLASSIFIER_TABLE: &[(&[&str], &str)] = &[
    (&["--dim", "0"], "--dim"),
    (&["--dim", "-4"], "--dim"),
    (&["--embed-dim", "0"], "--embed-dim"),
    (&["--mlp-dim", "0"], "--mlp-dim"),
    (&["--dropout", "1.5"], "--dropout"),
    (&["--dropout", "-0.1"], "--dropout"),
    (&["--dropout", "NaN"], "--dropout"),
    (&["--embed-init-std", "-1"], "--embed-init-std"),
    (&["--embed-init-std", "NaN"], "--embed-init-std"),
    (&["--layers", "0"], "--layers"),
    (&["--encoder", "gumbel", "--layers", "2"], "--layers"),
    (
        &["--encoder", "transformer", "--dim", "100", "--heads", "3"],
        "--heads",
    ),
    (&["--max-sentence-len", "0"], "--max-sentence-len"),
    (&["--encoder", "no-such-encoder"], "--encoder"),
    (&["--device", "tpu"], "tpu"),
];

/// Walks `table` through `programs`; returns one line per case not refused as it should be.
fn walk(programs: &[Program], table: &[(&[&str], &str)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut cases = 0;
    for (program, run) in programs {
        for (flags, needle) in table {
            cases += 1;
            let outcome = std::panic::catch_unwind(|| run(flags));
            let problem = match outcome {
                Err(_) => Some("panicked".to_string()),
                Ok(Ok(())) => Some("was accepted and ran".to_string()),
                Ok(Err(msg)) if !msg.contains(needle) => {
                    Some(format!("refused without naming `{needle}`: {msg}"))
                }
                Ok(Err(_)) => None,
            };
            if let Some(p) = problem {
                failures.push(format!("{program} {}: {p}", flags.join(" ")));
            }
        }
    }
    (cases, failures)
}

#[test]
fn every_program_refuses_every_bad_engine_flag_naming_it() {
    let (cases, failures) = walk(PROGRAMS, TABLE);
    assert!(
        failures.is_empty(),
        "{} of {cases} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_classification_program_refuses_every_bad_model_flag_naming_it() {
    let (cases, failures) = walk(&PROGRAMS[..4], CLASSIFIER_TABLE);
    assert!(
        failures.is_empty(),
        "{} of {cases} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
