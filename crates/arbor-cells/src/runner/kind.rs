//! The kinds of recurrent cell a stack can be built from, and their command-line names.

/// The recurrent cells a [`RecurrentStack`](crate::RecurrentStack) can be built from. The
/// names (`lstm`, `on-lstm`, `fasttrees`, `faster-fasttrees`, `conv-fasttrees`) are derived for
/// serde, `Display`, `FromStr` and the programs' flags ([`crate::names`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumMessage,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CellKind {
    /// [`LstmCell`](crate::LstmCell).
    Lstm,
    /// [`OnLstmCell`](crate::OnLstmCell).
    OnLstm,
    /// [`FastTreesCell`](crate::FastTreesCell).
    #[serde(rename = "fasttrees")]
    #[strum(serialize = "fasttrees")]
    FastTrees,
    /// [`FasterFastTreesCell`](crate::FasterFastTreesCell).
    #[serde(rename = "faster-fasttrees")]
    #[strum(serialize = "faster-fasttrees")]
    FasterFastTrees,
    /// [`ConvFastTreesCell`](crate::ConvFastTreesCell).
    #[serde(rename = "conv-fasttrees")]
    #[strum(serialize = "conv-fasttrees")]
    ConvFastTrees,
}

crate::value_enum_names!(CellKind, "cell");

impl CellKind {
    /// Whether the cell has cumax master gates (and so produces syntactic distances).
    pub fn has_master_gates(self) -> bool {
        self != CellKind::Lstm
    }
}
