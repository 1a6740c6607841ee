//! The check made before resuming: does the checkpoint come from the same run?
//!
//! Every checkpoint stores the [`TrainConfig`] it was written with and the task's
//! [`data fingerprint`](super::Task::data_fingerprint). On resume, [`compare`] lists the
//! settings that change what the run computes ([`RUN_FIELDS`]) and the fingerprint where they
//! differ; the loop refuses such a resume unless [`TrainConfig::force_resume`] is set. Settings a
//! user legitimately changes when continuing a run (epochs, step and time budgets, evaluation
//! and checkpoint schedules, verbosity, output directory) are not compared.

use serde_json::Value;

use super::config::TrainConfig;

/// The [`TrainConfig`] fields (by their serialised names) that change what a run computes, so a
/// resumed run must keep them.
pub(super) const RUN_FIELDS: &[&str] = &[
    "batch_size",
    "max_tokens",
    "seed",
    "optimizer",
    "lr",
    "weight_decay",
    "clip_norm",
    "plateau_factor",
    "plateau_patience",
    "min_lr",
    "warmup_steps",
    "lr_schedule",
    "tau_anneal",
];

/// Key of the data fingerprint in a checkpoint's metadata.
pub(super) const FINGERPRINT_KEY: &str = "data_fingerprint";

/// Key of the training configuration in a checkpoint's metadata.
pub(super) const CONFIG_KEY: &str = "train_config";

/// What [`compare`] found.
#[derive(Debug, Default)]
pub(super) struct ResumeCheck {
    /// `field: saved X, now Y` for each difference.
    pub(super) differences: Vec<String>,
    /// What could not be checked (a checkpoint from an older version).
    pub(super) warnings: Vec<String>,
}

/// Compares the checkpoint metadata `meta` with the run about to resume: its configuration
/// `config` and data fingerprint `fingerprint`.
pub(super) fn compare(
    meta: &Value,
    config: &TrainConfig,
    fingerprint: Option<&str>,
) -> ResumeCheck {
    let mut check = ResumeCheck::default();
    compare_config(meta.get(CONFIG_KEY), config, &mut check);
    match (meta.get(FINGERPRINT_KEY), fingerprint) {
        (None, Some(_)) => check.warnings.push(
            "the checkpoint records no data fingerprint (written by an older version): the \
             training data were not checked"
                .into(),
        ),
        (Some(Value::String(saved)), Some(now)) if saved != now => check
            .differences
            .push(format!("{FINGERPRINT_KEY}: saved {saved}, now {now}")),
        (Some(Value::String(_)), None) => check.warnings.push(
            "the checkpoint records a data fingerprint but the task now gives none: the \
             training data were not checked"
                .into(),
        ),
        _ => {}
    }
    check
}

fn compare_config(saved: Option<&Value>, config: &TrainConfig, check: &mut ResumeCheck) {
    let Some(saved) = saved else {
        check.warnings.push(
            "the checkpoint records no training configuration (written by an older version): \
             the settings were not checked"
                .into(),
        );
        return;
    };
    // Through `TrainConfig`, so a field added since the checkpoint was written takes its
    // serde default (the value that run had).
    let saved =
        match serde_json::from_value::<TrainConfig>(saved.clone()).and_then(serde_json::to_value) {
            Ok(v) => v,
            Err(e) => {
                check.warnings.push(format!(
                "the checkpoint's training configuration cannot be read ({e}): the settings were \
                 not checked"
            ));
                return;
            }
        };
    let now = match serde_json::to_value(config) {
        Ok(v) => v,
        Err(e) => {
            check.warnings.push(format!(
                "the training configuration cannot be serialised ({e}): the settings were not \
                 checked"
            ));
            return;
        }
    };
    // A field the checkpoint lacks (written before the field existed) had its default value.
    let defaults = serde_json::to_value(TrainConfig::new("")).unwrap_or(Value::Null);
    for &field in RUN_FIELDS {
        let (s, n) = (
            saved
                .get(field)
                .or_else(|| defaults.get(field))
                .unwrap_or(&Value::Null),
            now.get(field).unwrap_or(&Value::Null),
        );
        if s != n {
            check
                .differences
                .push(format!("{field}: saved {}, now {}", show(s), show(n)));
        }
    }
}

/// A JSON value as a user would write it: `none` for null, strings unquoted.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_field_and_both_values() {
        let saved = TrainConfig::new("a");
        let mut now = TrainConfig::new("b");
        now.epochs = 9;
        now.max_steps = Some(3);
        now.quiet = true;
        now.batch_size = 8;
        now.clip_norm = None;
        now.optimizer = super::super::config::OptimizerKind::AdamW;
        let meta = serde_json::json!({ CONFIG_KEY: saved, FINGERPRINT_KEY: "abc" });
        let check = compare(&meta, &now, Some("abd"));
        assert_eq!(
            check.differences,
            [
                "batch_size: saved 32, now 8",
                "optimizer: saved adam, now adamw",
                "clip_norm: saved 5.0, now none",
                "data_fingerprint: saved abc, now abd",
            ]
        );
        assert!(check.warnings.is_empty());
    }

    #[test]
    fn old_checkpoints_only_warn() {
        let check = compare(&serde_json::json!({}), &TrainConfig::new("a"), Some("x"));
        assert!(check.differences.is_empty());
        assert_eq!(check.warnings.len(), 2);
        // A configuration written before `warmup_steps` existed means no warm-up.
        let mut old = serde_json::to_value(TrainConfig::new("a")).unwrap();
        old.as_object_mut().unwrap().remove("warmup_steps");
        let check = compare(
            &serde_json::json!({ CONFIG_KEY: old, FINGERPRINT_KEY: null }),
            &TrainConfig::new("a"),
            None,
        );
        assert!(check.differences.is_empty() && check.warnings.is_empty());
    }
}
