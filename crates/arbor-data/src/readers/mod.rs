//! Dataset readers. Every reader comes in two forms: `read_*(path, opts)` for a file and
//! `parse_*(reader, name, opts)` for any [`std::io::BufRead`] (`name` is used in errors).
//! Malformed records are errors naming the file, the 1-based line and what is wrong, or, with
//! [`crate::ReadOptions::skip_bad`], are skipped and counted in [`crate::Loaded::skipped`].

pub mod listops;
pub mod lm;
pub mod logic;
pub mod snli;
pub mod sst;
pub mod treebank;

pub use listops::{
    read_listops, LengthStats, ListOp, ListOpsExample, ListOpsExpr, ListOpsGenerator,
};
pub use lm::{
    build_stream_vocab, read_lm, read_token_stream, split_sentences, wikitext_sentences,
    wikitext_sentences_reference, LmCorpus, SentenceOptions,
};
pub use logic::{read_logic, read_logic_dir, LogicData, LogicPair, Relation};
pub use snli::{read_snli, NliLabel, SnliPair};
pub use sst::{read_sst2_tsv, read_sst_trees, sst2_from_trees, Sst2Example, SstTree};
pub use treebank::read_treebank;
