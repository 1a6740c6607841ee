//! Resume checks: settings, data fingerprint and model shape against the saved run.

use arbor_train::*;
use burn::backend::Flex;

use super::support::{config, fresh, serial, Ad, Mlp, Probe};

/// A run stopped at step 3 in a fresh directory, with data fingerprint `aaaa`.
fn stopped_run(task: &mut Probe) -> (tempfile::TempDir, TrainConfig) {
    let dir = tempfile::tempdir().unwrap();
    task.fingerprint = Some("aaaa".into());
    let mut c = config(dir.path());
    c.max_steps = Some(3);
    train(task, fresh(1), &c, &Default::default()).unwrap();
    c.max_steps = None;
    c.resume = true;
    (dir, c)
}

#[test]
fn a_resume_with_other_settings_or_data_is_refused_listing_each_difference() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, saved) = stopped_run(&mut task);
    let before = std::fs::read(saved.last_checkpoint()).unwrap();

    let mut c = saved.clone();
    c.batch_size = 4;
    c.seed = 8;
    c.lr = 0.02;
    c.warmup_steps = 10;
    // Budgets, schedules and verbosity may change freely.
    c.epochs = 5;
    c.max_steps = Some(20);
    c.max_minutes = Some(30.0);
    c.eval_every = 2;
    c.checkpoint_every = Some(CheckpointEvery::Steps(4));
    c.quiet = false;
    task.fingerprint = Some("bbbb".into());
    let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    let TrainError::ResumeMismatch { differences, path } = &err else {
        panic!("expected ResumeMismatch, got {err}");
    };
    assert_eq!(path, &saved.last_checkpoint());
    assert_eq!(
        differences,
        &[
            "batch_size: saved 8, now 4",
            "seed: saved 7, now 8",
            "lr: saved 0.01, now 0.02",
            "warmup_steps: saved 0, now 10",
            "data_fingerprint: saved aaaa, now bbbb",
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.contains("seed: saved 7, now 8") && msg.contains("--force"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(saved.last_checkpoint()).unwrap(),
        before,
        "a refused resume writes nothing"
    );

    // Forced: a warning, and the run continues from step 3.
    c.force_resume = true;
    c.quiet = true;
    c.max_steps = Some(6);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 6);
}

#[test]
fn a_forced_resume_past_the_end_of_a_shorter_epoch_moves_on() {
    let _guard = serial();
    let mut task = Probe::new(7);
    // Saved at batch 4 of 8; with batches of 32 an epoch has 2.
    let (_dir, mut c) = stopped_run(&mut task);
    c.batch_size = 32;
    c.force_resume = true;
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!((out.state.epoch, out.state.step), (2, 3 + 2));
}

#[test]
fn a_resume_changing_only_budgets_and_schedules_is_accepted() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, mut c) = stopped_run(&mut task);
    c.epochs = 1;
    c.eval_every = 2;
    c.checkpoint_every = Some(CheckpointEvery::Minutes(5.0));
    c.max_minutes = Some(10.0);
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.step, 8);
}

#[test]
fn an_old_checkpoint_without_settings_or_fingerprint_resumes_with_a_warning() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, mut c) = stopped_run(&mut task);
    let path = c.last_checkpoint();
    let mut file = CheckpointFile::load(&path).unwrap();
    let meta = file.meta.as_object_mut().unwrap();
    assert!(meta.remove("train_config").is_some());
    assert!(meta.remove("data_fingerprint").is_some());
    file.save(&path).unwrap();
    c.batch_size = 4;
    task.fingerprint = Some("other".into());
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    assert_eq!(out.state.epoch, 2);
}

#[test]
fn a_checkpoint_of_another_model_is_refused_not_loaded() {
    let _guard = serial();
    let mut task = Probe::new(7);
    let (_dir, c) = stopped_run(&mut task);
    // Same settings, but a hidden layer of 16 instead of 8.
    let wider = Mlp::<Ad>::with_hidden(16, &Default::default());
    let err = train(&task, wider, &c, &Default::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("last.ckpt")
            && msg.contains("does not match this model")
            && msg.contains("16"),
        "{msg}"
    );
    let err = load_model::<Flex, _>(
        Mlp::<Flex>::with_hidden(16, &Default::default()),
        &c.last_checkpoint(),
        &Default::default(),
    )
    .unwrap_err();
    assert!(matches!(err, CheckpointError::Record { .. }), "{err}");
}
