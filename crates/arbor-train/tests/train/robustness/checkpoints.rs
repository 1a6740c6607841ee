//! Time budget and scheduled checkpoints.

use std::path::Path;

use arbor_train::*;

use super::support::{config, fresh, log, saved_step, serial, weights, Probe, Spoil};

#[test]
fn a_tiny_time_budget_stops_early_with_a_resumable_checkpoint() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let task = Probe::new(7);
    let mut c = config(dir.path());
    c.max_minutes = Some(1e-9);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.stopped, StopReason::MaxMinutes);
    assert_eq!(
        out.state.step, 1,
        "the budget is spent after the first step"
    );
    assert_eq!(saved_step(&out.last_checkpoint), 1);

    c.max_minutes = None;
    c.resume = true;
    let resumed = train(&task, fresh(5), &c, &Default::default()).unwrap();
    assert_eq!(resumed.stopped, StopReason::Finished);
    assert_eq!(resumed.state.step, 16);

    // Also through max_steps.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.max_steps = Some(3);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!((out.stopped, out.state.step), (StopReason::MaxSteps, 3));
}

#[test]
fn checkpoint_every_steps_writes_last_between_evaluations_and_resumes_exactly() {
    let _guard = serial();
    let (a, b, none) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let mut task = Probe::new(7);
    let every = |dir: &Path| {
        let mut c = config(dir);
        c.checkpoint_every = Some(CheckpointEvery::Steps(3));
        c
    };
    let full = train(&task, fresh(1), &every(a.path()), &Default::default()).unwrap();

    // Step 10 (epoch 2, batch 3) fails: last.ckpt is the one written at step 9, between the
    // evaluations at steps 8 and 16.
    task.spoil = Some((10, Spoil::Loss));
    let err = train(&task, fresh(1), &every(b.path()), &Default::default()).unwrap_err();
    assert!(
        matches!(err, TrainError::NonFinite { step: 10, .. }),
        "{err}"
    );
    assert_eq!(saved_step(&b.path().join("last.ckpt")), 9);
    let train_steps: Vec<u64> = log(b.path())
        .into_iter()
        .filter(|r| r.kind == "train")
        .map(|r| r.step)
        .collect();
    assert_eq!(
        train_steps,
        [3, 6, 8, 9],
        "a checkpoint closes the logged window"
    );

    // Without the schedule, the last checkpoint is the evaluation's at step 8.
    train(&task, fresh(1), &config(none.path()), &Default::default()).unwrap_err();
    assert_eq!(saved_step(&none.path().join("last.ckpt")), 8);

    // Resuming from the mid-epoch checkpoint ends exactly where the uninterrupted run did.
    task.spoil = None;
    let mut c = every(b.path());
    c.resume = true;
    let resumed = train(&task, fresh(42), &c, &Default::default()).unwrap();
    assert_eq!(weights(&resumed.model), weights(&full.model));
    assert_eq!(resumed.state.step, full.state.step);
}

#[test]
fn checkpoint_every_minutes_writes_last_on_time() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.spoil = Some((4, Spoil::Loss));
    let mut c = config(dir.path());
    // A vanishing interval: due after every step.
    c.checkpoint_every = Some(CheckpointEvery::Minutes(1e-9));
    train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    assert_eq!(saved_step(&c.last_checkpoint()), 4);
    // A long one never comes due within a run.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.checkpoint_every = Some(CheckpointEvery::Minutes(60.0));
    train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    assert!(!c.last_checkpoint().exists());
}

#[test]
fn checkpoint_every_parses_steps_and_minutes_and_refuses_the_rest() {
    assert_eq!("500".parse(), Ok(CheckpointEvery::Steps(500)));
    assert_eq!("10m".parse(), Ok(CheckpointEvery::Minutes(10.0)));
    assert_eq!(" 0.5m".parse(), Ok(CheckpointEvery::Minutes(0.5)));
    for bad in [
        "", "0", "-3", "10s", "m", "0m", "-1m", "nanm", "infm", "1.5", "ten",
    ] {
        let err = bad.parse::<CheckpointEvery>().unwrap_err();
        assert!(err.contains("10m") && err.contains(bad), "{bad}: {err}");
    }
    for every in [CheckpointEvery::Steps(7), CheckpointEvery::Minutes(2.5)] {
        assert_eq!(every.to_string().parse(), Ok(every));
    }
}
