//! Propositional-logic inference (Bowman et al. 2015): train on formulas with ≤ 6 operators,
//! report test accuracy per operator count.
//!
//! ```text
//! cargo run --release --example logic -- --encoder spinn-pi --dim 32 --epochs 2
//! cargo run --release --example logic -- --encoder lstm --test ../shared/data/propositional_logic/test6
//! ```
//! `--help` lists every flag.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    arbor::apps::logic::run(arbor::apps::logic::LogicArgs::parse())
}
