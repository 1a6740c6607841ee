//! The engine flags are one shared set (`EngineArgs`), and every program keeps its own defaults.

use arbor_apps::cli::EngineArgs;
use arbor_apps::ptb_lm::PtbLmArgs;
use arbor_apps::r2d2::{Command, R2d2Args};
use arbor_apps::snli::SnliArgs;
use arbor_train::OptimizerKind;
use clap::Parser;

fn summary(e: &EngineArgs) -> (usize, usize, f64, f64, f64, u64, String) {
    (
        e.batch_size,
        e.epochs,
        e.lr,
        e.weight_decay,
        e.clip,
        e.eval_every,
        e.out.display().to_string(),
    )
}

#[test]
fn every_program_keeps_its_own_engine_defaults() {
    let snli = SnliArgs::parse_from(["snli"]);
    assert_eq!(
        summary(&snli.common.engine),
        (64, 5, 1e-3, 0.0, 5.0, 0, "runs/default".into())
    );
    let ptb = PtbLmArgs::parse_from(["ptb_lm"]);
    assert_eq!(
        summary(&ptb.engine),
        (20, 1, 2e-3, 1.2e-6, 0.25, 0, "runs/ptb_lm".into())
    );
    let Command::Pretrain(pretrain) = R2d2Args::parse_from(["r2d2", "pretrain"]).command else {
        panic!("a pretrain command")
    };
    assert_eq!(
        summary(&pretrain.engine),
        (64, 1, 5e-4, 0.01, 1.0, 200, "runs/r2d2".into())
    );
}

#[test]
fn the_flags_become_one_engine_configuration() {
    let ptb = PtbLmArgs::parse_from([
        "ptb_lm",
        "--lr",
        "0.5",
        "--max-minutes",
        "2.5",
        "--seed",
        "7",
        "--clip",
        "0",
        "--resume",
    ]);
    let c = ptb.train_config();
    assert_eq!((c.lr, c.seed, c.resume), (0.5, 7, true));
    assert_eq!((c.max_minutes, c.clip_norm), (Some(2.5), None));
    assert_eq!(c.batch_size, 1, "one TBPTT segment per step");
    assert!(matches!(c.optimizer, OptimizerKind::Adam));
    let e = SnliArgs::parse_from(["snli", "--batch-size", "8", "--clip", "2"])
        .common
        .engine
        .train_config(OptimizerKind::AdamW);
    assert_eq!((e.batch_size, e.clip_norm), (8, Some(2.0)));
    assert!(matches!(e.optimizer, OptimizerKind::AdamW));
}

#[test]
fn schedules_early_stopping_and_annealing_reach_the_engine() {
    use arbor_train::{LrSchedule, TauAnneal};
    let e = SnliArgs::parse_from([
        "snli",
        "--lr-schedule",
        "step:100:0.5",
        "--warmup-steps",
        "10",
        "--min-lr",
        "1e-5",
        "--plateau-factor",
        "0.25",
        "--plateau-patience",
        "3",
        "--early-stopping",
        "4",
        "--tau-anneal-rate",
        "1e-4",
        "--tau-anneal-every",
        "50",
        "--weight-decay",
        "0.01",
    ])
    .common
    .train_config();
    assert_eq!(
        e.lr_schedule,
        LrSchedule::Step {
            every: 100,
            gamma: 0.5
        }
    );
    assert_eq!((e.warmup_steps, e.min_lr), (10, 1e-5));
    assert_eq!((e.plateau_factor, e.plateau_patience), (0.25, 3));
    assert_eq!(e.early_stopping, Some(4));
    assert_eq!(
        e.tau_anneal,
        Some(TauAnneal {
            rate: 1e-4,
            every: 50,
            min: 0.5
        })
    );
    assert_eq!(e.weight_decay, 0.01);
    // Defaults: plateau decay, no early stopping, no annealing.
    let d = SnliArgs::parse_from(["snli"]).common.train_config();
    assert_eq!(d.lr_schedule, LrSchedule::Plateau);
    assert_eq!((d.early_stopping, d.tau_anneal), (None, None));
    // r2d2 keeps its warm-up default and its old flag name.
    let R2d2Args {
        command: Command::Pretrain(p),
    } = R2d2Args::parse_from(["r2d2", "pretrain", "--warmup", "7"])
    else {
        panic!("pretrain")
    };
    assert_eq!(p.engine.warmup_steps, 7);
}
