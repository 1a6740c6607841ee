//! Command-line and serde names of arbor's kind enums, derived rather than hand-written.
//!
//! Each kind enum derives [`clap::ValueEnum`] (its variants, names and aliases) and serde with
//! the same kebab-case names; [`value_enum_names!`](crate::value_enum_names) then adds
//! `Display` (the name) and a forgiving `FromStr` built on [`parse_value`].

pub use clap::ValueEnum;

/// Parses `s` as a variant of `T` by its derived name: case, `_`/`-` and missing dashes are not
/// significant (`ON_LSTM`, `onlstm` and `on-lstm` all name the same cell). The error names
/// `what` and lists every accepted name.
pub fn parse_value<T: ValueEnum>(s: &str, what: &str) -> Result<T, String> {
    let squash = |n: &str| n.trim().to_ascii_lowercase().replace(['-', '_'], "");
    let key = squash(s);
    T::value_variants()
        .iter()
        .find(|v| {
            v.to_possible_value()
                .is_some_and(|p| p.get_name_and_aliases().any(|n| squash(n) == key))
        })
        .cloned()
        .ok_or_else(|| format!("unknown {what} `{s}`; expected one of {}", names::<T>()))
}

/// Every name of `T`, comma-separated, in declaration order.
pub fn names<T: ValueEnum>() -> String {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|p| p.get_name().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Implements `Display` (the derived name) and `FromStr` ([`parse_value`]) for an enum that
/// derives [`clap::ValueEnum`]; `$what` names the kind in error messages.
#[macro_export]
macro_rules! value_enum_names {
    ($ty:ty, $what:literal) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match $crate::names::ValueEnum::to_possible_value(self) {
                    Some(v) => f.write_str(v.get_name()),
                    None => Ok(()),
                }
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::names::parse_value(s, $what)
            }
        }
    };
}
