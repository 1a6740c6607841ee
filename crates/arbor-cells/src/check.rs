//! Checking configurations before building them, so a bad setting is an error naming the
//! setting and the rule, not a panic deep inside `init`.

use std::fmt::Display;

/// Why a configuration cannot be built: the setting, its value and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value}: {rule}")]
pub struct ConfigError {
    /// The setting (a config field, or a command-line flag once renamed with
    /// [`ConfigError::named`]).
    pub field: String,
    /// Its value.
    pub value: String,
    /// The rule it breaks.
    pub rule: String,
}

impl ConfigError {
    /// A setting `field` whose `value` breaks `rule`.
    pub fn new(field: impl Into<String>, value: impl Display, rule: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: value.to_string(),
            rule: rule.into(),
        }
    }

    /// The same error with the setting renamed by `names` (`(field, name)` pairs), e.g. to the
    /// command-line flag that sets it. A setting named in the rule (`must … divide d_model (10)`) is renamed too.
    pub fn named(mut self, names: &[(&str, &str)]) -> Self {
        if let Some((_, name)) = names.iter().find(|(f, _)| *f == self.field) {
            self.field = (*name).to_string();
        }
        for (f, name) in names {
            self.rule = self
                .rule
                .replace(&format!("divide {f} ("), &format!("divide {name} ("));
        }
        self
    }
}

/// `value` must be at least 1.
pub fn at_least_one(field: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::new(field, value, "must be at least 1"));
    }
    Ok(())
}

/// `value` must be finite and positive.
pub fn positive(field: &str, value: f64) -> Result<(), ConfigError> {
    if !(value.is_finite() && value > 0.0) {
        return Err(ConfigError::new(
            field,
            value,
            "must be a finite number > 0",
        ));
    }
    Ok(())
}

/// `value` must be a probability of dropping, in `[0, 1)`.
pub fn dropout(field: &str, value: f64) -> Result<(), ConfigError> {
    if !(value.is_finite() && (0.0..1.0).contains(&value)) {
        return Err(ConfigError::new(field, value, "must be in [0, 1)"));
    }
    Ok(())
}

/// `part` (the setting `field`) must be at least 1 and divide `whole` (named `whole_name`).
pub fn divides(
    field: &str,
    part: usize,
    whole_name: &str,
    whole: usize,
) -> Result<(), ConfigError> {
    if part == 0 || !whole.is_multiple_of(part) {
        return Err(ConfigError::new(
            field,
            part,
            format!("must be at least 1 and divide {whole_name} ({whole})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_setting_and_the_rule_and_can_be_renamed() {
        assert!(at_least_one("window", 1).is_ok());
        let e = at_least_one("window", 0).unwrap_err();
        assert_eq!(e.to_string(), "window = 0: must be at least 1");
        assert_eq!(
            e.named(&[("window", "--window")]).to_string(),
            "--window = 0: must be at least 1"
        );
        let e = divides("n_heads", 3, "d_model", 10).unwrap_err();
        assert_eq!(
            e.named(&[("n_heads", "--heads"), ("d_model", "--dim")])
                .to_string(),
            "--heads = 3: must be at least 1 and divide --dim (10)"
        );
        assert!(divides("n_heads", 0, "d_model", 10).is_err());
        assert!(divides("n_heads", 5, "d_model", 10).is_ok());
        assert!(positive("tau", f64::NAN).is_err() && positive("tau", 0.0).is_err());
        assert!(dropout("p", 1.0).is_err() && dropout("p", 0.0).is_ok());
    }
}
