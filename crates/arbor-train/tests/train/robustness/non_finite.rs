//! Non-finite values: a NaN loss or gradient stops the run and keeps the last good checkpoint.

use arbor_train::*;
use burn::backend::Flex;

use super::support::{config, fresh, log, saved_step, serial, Mlp, Probe, Spoil};

#[test]
fn a_nan_loss_stops_naming_step_epoch_batch_and_keeps_the_last_good_checkpoint() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.spoil = Some((10, Spoil::Loss));
    let mut c = config(dir.path());
    c.clip_norm = Some(1.0);
    let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
    match &err {
        TrainError::NonFinite {
            step,
            epoch,
            batch_in_epoch,
            batch_examples,
            tensor,
            value,
        } => {
            assert_eq!((*step, *epoch, *batch_in_epoch), (10, 1, 2));
            assert_eq!((*batch_examples, *tensor), (8, NonFiniteTensor::Loss));
            assert!(value.is_nan());
        }
        other => panic!("expected NonFinite, got {other}"),
    }
    let msg = err.to_string();
    for part in [
        "loss became NaN",
        "step 10",
        "epoch 2",
        "batch 3",
        "8 examples",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    // The epoch-end checkpoint at step 8 is kept; nothing was written after the bad step.
    assert_eq!(saved_step(&c.last_checkpoint()), 8);
    assert!(log(dir.path()).iter().all(|r| r.step <= 8));
}

#[test]
fn a_nan_gradient_stops_with_and_without_clipping() {
    let _guard = serial();
    for clip in [None, Some(1.0)] {
        let dir = tempfile::tempdir().unwrap();
        let mut task = Probe::new(7);
        task.spoil = Some((5, Spoil::Gradient));
        let mut c = config(dir.path());
        c.clip_norm = clip;
        c.eval_every = 4;
        let err = train(&task, fresh(1), &c, &Default::default()).unwrap_err();
        assert!(
            matches!(
                err,
                TrainError::NonFinite {
                    step: 5,
                    epoch: 0,
                    batch_in_epoch: 5,
                    tensor: NonFiniteTensor::GradientNorm,
                    ..
                }
            ),
            "clip {clip:?}: {err}"
        );
        assert!(
            err.to_string().contains("gradient norm became NaN"),
            "{err}"
        );
        assert_eq!(saved_step(&c.last_checkpoint()), 4);
        // The kept checkpoint holds finite weights.
        let (m, _) = load_model::<Flex, _>(
            Mlp::<Flex>::new(&Default::default()),
            &c.last_checkpoint(),
            &Default::default(),
        )
        .unwrap();
        let w = m.l1.weight.val().into_data().to_vec::<f32>().unwrap();
        assert!(w.iter().all(|v| v.is_finite()));
    }
}
