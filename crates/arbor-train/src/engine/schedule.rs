//! What changes with the step besides the weights: the learning-rate schedule ([`LrSchedule`],
//! computed with burn-optim's schedulers) and the Gumbel-softmax temperature ([`TauAnneal`]).
//!
//! Both are pure functions of the optimizer step (and, for the plateau schedule, of the
//! learning rate the loop keeps in its state), so a resumed run follows exactly the schedule of
//! an uninterrupted one without storing any scheduler state of its own.

use std::fmt;
use std::str::FromStr;

use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::optim::lr_scheduler::step::StepLrSchedulerConfig;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

/// How the learning rate moves during a run (on top of the linear warm-up, which applies to
/// every schedule).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LrSchedule {
    /// Multiply the learning rate by `plateau_factor` when the validation metric has not
    /// improved for more than `plateau_patience` evaluations (never below `min_lr`).
    #[default]
    Plateau,
    /// The initial learning rate throughout.
    Constant,
    /// Cosine annealing from the initial learning rate down to `min_lr` over `steps` optimizer
    /// steps (`None`: the whole run, `max_steps` or epochs × batches per epoch), then `min_lr`
    /// (no restarts). burn-optim's `CosineAnnealingLrScheduler`.
    Cosine {
        /// Length of the annealing in optimizer steps (`None`: the run's length).
        steps: Option<u64>,
    },
    /// Multiply the learning rate by `gamma` every `every` optimizer steps. burn-optim's
    /// `StepLrScheduler`.
    Step {
        /// Steps between two decays (≥ 1).
        every: u64,
        /// The factor (in (0, 1] for a decay).
        gamma: f64,
    },
}

impl fmt::Display for LrSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LrSchedule::Plateau => f.write_str("plateau"),
            LrSchedule::Constant => f.write_str("constant"),
            LrSchedule::Cosine { steps: None } => f.write_str("cosine"),
            LrSchedule::Cosine { steps: Some(n) } => write!(f, "cosine:{n}"),
            LrSchedule::Step { every, gamma } => write!(f, "step:{every}:{gamma}"),
        }
    }
}

impl FromStr for LrSchedule {
    type Err = String;

    /// `plateau`, `constant`, `cosine`, `cosine:STEPS` or `step:EVERY:GAMMA` (e.g.
    /// `step:5000:0.5`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let parts: Vec<&str> = t.split(':').collect();
        let bad = |why: &str| {
            format!(
                "'{s}': {why} (expected plateau, constant, cosine, cosine:STEPS or \
                 step:EVERY:GAMMA)"
            )
        };
        let count = |v: &str| -> Result<u64, String> {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(&format!("'{v}' is not a positive number of steps"))),
            }
        };
        match parts.as_slice() {
            ["plateau"] => Ok(LrSchedule::Plateau),
            ["constant"] => Ok(LrSchedule::Constant),
            ["cosine"] => Ok(LrSchedule::Cosine { steps: None }),
            ["cosine", n] => Ok(LrSchedule::Cosine {
                steps: Some(count(n)?),
            }),
            ["step", every, gamma] => {
                let gamma = gamma
                    .parse::<f64>()
                    .ok()
                    .filter(|g| g.is_finite() && *g > 0.0)
                    .ok_or_else(|| bad(&format!("'{gamma}' is not a positive factor")))?;
                Ok(LrSchedule::Step {
                    every: count(every)?,
                    gamma,
                })
            }
            _ => Err(bad("unknown schedule")),
        }
    }
}

impl LrSchedule {
    /// Checks the schedule against the initial learning rate `lr` and the floor `min_lr`
    /// (burn-optim's cosine scheduler wants `0 < lr ≤ 1` and `0 ≤ min_lr ≤ lr`).
    pub fn validate(&self, lr: f64, min_lr: f64) -> Result<(), String> {
        match *self {
            LrSchedule::Cosine { steps } => {
                if !(lr > 0.0 && lr <= 1.0) {
                    return Err(format!(
                        "the cosine schedule needs a learning rate in (0, 1], got {lr}"
                    ));
                }
                if !(0.0..=lr).contains(&min_lr) {
                    return Err(format!(
                        "the cosine schedule needs a minimum learning rate in [0, {lr}], got \
                         {min_lr}"
                    ));
                }
                if steps == Some(0) {
                    return Err("the cosine schedule needs at least 1 step".into());
                }
                Ok(())
            }
            LrSchedule::Step { every, gamma } => {
                if every == 0 {
                    return Err("the step schedule needs EVERY ≥ 1".into());
                }
                if !(gamma.is_finite() && gamma > 0.0) {
                    return Err(format!(
                        "the step schedule needs a positive GAMMA, got {gamma}"
                    ));
                }
                Ok(())
            }
            // The plateau decay multiplies towards `min_lr` and stops there: a floor above the
            // starting rate would make the first decay raise the rate (0.001 to 1.0 once).
            LrSchedule::Plateau if min_lr > lr || min_lr.is_nan() => Err(format!(
                "the plateau schedule decays towards the minimum learning rate, which must not \
                 exceed the learning rate: got minimum {min_lr} above {lr}"
            )),
            LrSchedule::Plateau | LrSchedule::Constant => Ok(()),
        }
    }

    /// Whether the learning rate decays when validation stalls.
    pub fn decays_on_plateau(&self) -> bool {
        matches!(self, LrSchedule::Plateau)
    }

    /// The learning rate at optimizer step `step` (0-based), before warm-up: `lr` is the
    /// initial learning rate (for the plateau schedule, the one in force), `min_lr` the floor of
    /// the cosine, `run_steps` the length of the run in optimizer steps (the cosine's default
    /// length).
    ///
    /// The schedulers are burn-optim's; each is fast-forwarded to `step` through its record,
    /// which is the step count, so nothing but the step needs to be saved for a resume.
    pub fn lr_at<B: Backend>(&self, step: u64, lr: f64, min_lr: f64, run_steps: u64) -> f64 {
        match *self {
            LrSchedule::Plateau | LrSchedule::Constant => lr,
            LrSchedule::Cosine { steps } => {
                let n = steps.unwrap_or(run_steps).max(1);
                if step >= n {
                    // Past the annealing: stay at the floor (burn's scheduler would restart).
                    return min_lr;
                }
                match CosineAnnealingLrSchedulerConfig::new(lr, n as usize)
                    .with_min_lr(min_lr)
                    .init()
                {
                    // The record is the index of the last step taken; `step()` advances it.
                    Ok(s) => s
                        .load_record::<B>((step as usize).wrapping_sub(1))
                        .clone()
                        .step(),
                    // Refused by `validate` before a run starts.
                    Err(_) => lr,
                }
            }
            LrSchedule::Step { every, gamma } => {
                match StepLrSchedulerConfig::new(lr, every as usize)
                    .with_gamma(gamma)
                    .init()
                {
                    Ok(s) => {
                        let before = i32::try_from(step).unwrap_or(i32::MAX - 1) - 1;
                        s.load_record::<B>(before).step()
                    }
                    Err(_) => lr,
                }
            }
        }
    }
}

/// Gumbel-softmax temperature annealing, as in the Gumbel Tree-LSTM reference code:
/// every `every` optimizer steps the temperature is set to `τ = max(min, exp(−rate · step))`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TauAnneal {
    /// The decay rate `r` (> 0).
    pub rate: f64,
    /// Steps between two updates of τ (≥ 1).
    pub every: u64,
    /// The floor of τ (> 0; the reference uses 0.5).
    pub min: f64,
}

impl TauAnneal {
    /// The schedule of the reference code: floor 0.5.
    pub fn new(rate: f64, every: u64) -> Self {
        Self {
            rate,
            every,
            min: 0.5,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!(
                "the temperature decay rate must be > 0, got {}",
                self.rate
            ));
        }
        if self.every == 0 {
            return Err("the temperature must be updated every ≥ 1 steps".into());
        }
        if !(self.min.is_finite() && self.min > 0.0) {
            return Err(format!(
                "the temperature floor must be > 0, got {}",
                self.min
            ));
        }
        Ok(())
    }

    /// τ in force at optimizer step `step` (0-based): the value set at the last multiple of
    /// `every` at or before `step` (τ = 1 at step 0, as `exp(0)`).
    pub fn tau_at(&self, step: u64) -> f64 {
        let set_at = step - step % self.every.max(1);
        (-self.rate * set_at as f64).exp().max(self.min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = burn::backend::Flex;

    #[test]
    fn schedules_parse_and_print_back() {
        for s in ["plateau", "constant", "cosine", "cosine:100", "step:50:0.5"] {
            let parsed: LrSchedule = s.parse().unwrap();
            assert_eq!(parsed.to_string(), s);
        }
        for bad in [
            "",
            "cosine:0",
            "cosine:x",
            "step:10",
            "step:0:0.5",
            "step:10:-1",
            "linear",
        ] {
            let e = bad.parse::<LrSchedule>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn cosine_goes_from_lr_to_the_floor_and_stays() {
        let s = LrSchedule::Cosine { steps: Some(10) };
        assert!((s.lr_at::<B>(0, 0.1, 0.001, 0) - 0.1).abs() < 1e-12);
        let mid = s.lr_at::<B>(5, 0.1, 0.001, 0);
        assert!((mid - (0.001 + 0.5 * 0.099)).abs() < 1e-12, "{mid}");
        let mut last = f64::INFINITY;
        for step in 0..=10 {
            let lr = s.lr_at::<B>(step, 0.1, 0.001, 0);
            assert!(lr <= last + 1e-15, "not decreasing at {step}");
            last = lr;
        }
        assert!((s.lr_at::<B>(10, 0.1, 0.001, 0) - 0.001).abs() < 1e-12);
        assert_eq!(s.lr_at::<B>(50, 0.1, 0.001, 0), 0.001);
        // Without a length, the run's length is used.
        let run = LrSchedule::Cosine { steps: None };
        assert!((run.lr_at::<B>(50, 0.1, 0.0, 100) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn step_schedule_decays_every_n_steps() {
        let s = LrSchedule::Step {
            every: 3,
            gamma: 0.5,
        };
        let lrs: Vec<f64> = (0..7).map(|k| s.lr_at::<B>(k, 0.8, 0.0, 0)).collect();
        assert_eq!(lrs, vec![0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2]);
    }

    #[test]
    fn plateau_and_constant_keep_the_rate_in_force() {
        assert_eq!(LrSchedule::Plateau.lr_at::<B>(99, 0.3, 0.0, 10), 0.3);
        assert_eq!(LrSchedule::Constant.lr_at::<B>(99, 0.3, 0.0, 10), 0.3);
        assert!(LrSchedule::Plateau.decays_on_plateau());
        assert!(!LrSchedule::Constant.decays_on_plateau());
    }

    #[test]
    fn validation_names_the_problem() {
        let cos = LrSchedule::Cosine { steps: None };
        assert!(cos.validate(1e-3, 0.0).is_ok());
        assert!(cos.validate(2.0, 0.0).unwrap_err().contains("(0, 1]"));
        assert!(cos.validate(1e-3, 1e-2).unwrap_err().contains("minimum"));
    }

    #[test]
    fn temperature_follows_the_reference_schedule() {
        let a = TauAnneal::new(1e-3, 100);
        assert_eq!(a.tau_at(0), 1.0);
        assert_eq!(a.tau_at(99), 1.0);
        assert!((a.tau_at(150) - (-0.1f64).exp()).abs() < 1e-12);
        assert!((a.tau_at(199) - (-0.1f64).exp()).abs() < 1e-12);
        assert_eq!(a.tau_at(1_000_000), 0.5);
        assert!(TauAnneal::new(0.0, 1).validate().is_err());
        assert!(TauAnneal::new(1.0, 0).validate().is_err());
    }
}
