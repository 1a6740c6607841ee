//! The engine's robustness flags (`--checkpoint-every`, `--force`) reach every program through
//! the shared `EngineArgs`, and a bad value is refused naming the flag.

use arbor_apps::ptb_lm::PtbLmArgs;
use arbor_apps::snli::SnliArgs;
use arbor_train::{CheckpointEvery, OptimizerKind};
use clap::Parser;

#[test]
fn checkpoint_every_and_force_become_engine_settings() {
    let c = SnliArgs::parse_from(["snli", "--checkpoint-every", "500", "--resume", "--force"])
        .common
        .engine
        .train_config(OptimizerKind::Adam);
    assert_eq!(c.checkpoint_every, Some(CheckpointEvery::Steps(500)));
    assert!(c.resume && c.force_resume);

    let c = PtbLmArgs::parse_from(["ptb_lm", "--checkpoint-every", "10m"]).train_config();
    assert_eq!(c.checkpoint_every, Some(CheckpointEvery::Minutes(10.0)));
    assert!(!c.force_resume);

    let c = SnliArgs::parse_from(["snli"])
        .common
        .engine
        .train_config(OptimizerKind::Adam);
    assert_eq!((c.checkpoint_every, c.force_resume), (None, false));
    assert_eq!(c.log_every, arbor_train::DEFAULT_LOG_EVERY);

    let c = PtbLmArgs::parse_from(["ptb_lm", "--log-every", "100"]).train_config();
    assert_eq!(c.log_every, 100);
}

#[test]
fn a_bad_checkpoint_interval_names_the_flag() {
    for bad in ["0", "10x", "-5m", "soon"] {
        let flag = format!("--checkpoint-every={bad}");
        let err = SnliArgs::try_parse_from(["snli", flag.as_str()]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("--checkpoint-every") && msg.contains("10m") && msg.contains(bad),
            "{bad}: {msg}"
        );
    }
}
