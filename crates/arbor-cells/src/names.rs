//! Names of arbor's kind enums (cells, encoders, leaves, poolings, …), derived rather than
//! hand-written, and without a command-line parser: the model crates do not depend on clap.
//!
//! Each kind enum derives strum's [`VariantArray`] (every variant, in declaration order),
//! [`IntoStaticStr`](strum::IntoStaticStr) (its name, kebab-case like its serde name) and
//! [`EnumMessage`] (its doc comment, which a program shows as the value's help); it is then a
//! [`KindName`]. [`value_enum_names!`](crate::value_enum_names) adds `Display` (the name) and a
//! forgiving `FromStr` built on [`parse_value`]. The programs build their flags from the same
//! names (`arbor-apps`' `kind_parser`).

pub use strum::{EnumMessage, VariantArray};

/// A kind enum with derived names: see the [module](self) documentation.
pub trait KindName:
    Copy + VariantArray + Into<&'static str> + EnumMessage + Send + Sync + 'static
{
    /// The name (the command line's and serde's).
    fn name(self) -> &'static str {
        self.into()
    }

    /// The doc comment's first paragraph, as one line (help text for the command line).
    fn help(self) -> Option<String> {
        let doc = self.get_documentation()?;
        let first = doc.split("\n\n").next().unwrap_or(doc);
        Some(first.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

impl<T> KindName for T where
    T: Copy + VariantArray + Into<&'static str> + EnumMessage + Send + Sync + 'static
{
}

/// Parses `s` as a variant of `T` by its derived name: case, `_`/`-` and missing dashes are not
/// significant (`ON_LSTM`, `onlstm` and `on-lstm` all name the same cell). The error names
/// `what` and lists every accepted name.
pub fn parse_value<T: KindName>(s: &str, what: &str) -> Result<T, String> {
    let squash = |n: &str| n.trim().to_ascii_lowercase().replace(['-', '_'], "");
    let key = squash(s);
    T::VARIANTS
        .iter()
        .copied()
        .find(|v| squash(v.name()) == key)
        .ok_or_else(|| format!("unknown {what} `{s}`; expected one of {}", names::<T>()))
}

/// Every name of `T`, comma-separated, in declaration order.
pub fn names<T: KindName>() -> String {
    T::VARIANTS
        .iter()
        .map(|v| v.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Implements `Display` (the derived name) and `FromStr` ([`parse_value`]) for an enum that is a
/// [`KindName`]; `$what` names the kind in error messages.
#[macro_export]
macro_rules! value_enum_names {
    ($ty:ty, $what:literal) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::names::KindName::name(*self))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CellKind;

    #[test]
    fn names_are_the_serde_names_and_parse_forgivingly() {
        for &kind in CellKind::VARIANTS {
            let serde = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde, format!("\"{}\"", kind.name()));
            assert_eq!(kind.to_string().parse::<CellKind>().unwrap(), kind);
        }
        assert_eq!("ON_LSTM".parse::<CellKind>().unwrap(), CellKind::OnLstm);
        assert_eq!(
            "FastTrees".parse::<CellKind>().unwrap(),
            CellKind::FastTrees
        );
        let err = "gru".parse::<CellKind>().unwrap_err();
        assert!(err.contains("unknown cell `gru`"), "{err}");
        assert!(err.contains("lstm, on-lstm, fasttrees, faster-fasttrees, conv-fasttrees"));
        assert_eq!(
            CellKind::Lstm.help().as_deref(),
            Some("[`LstmCell`](crate::LstmCell).")
        );
    }
}
