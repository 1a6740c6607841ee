//! Loads the real corpora under `../shared/data` (relative to the workspace root) or
//! `$ARBOR_SHARED_DATA`, and checks the record counts. Skips with a message when absent.

use std::path::PathBuf;

use arbor_data::metrics::{baseline_f1, Baseline, F1Convention};
use arbor_data::parseval::load_gold;
use arbor_data::readers::lm::{read_lm, SentenceOptions, EOS};
use arbor_data::readers::logic::{read_logic_dir, train_valid_split};
use arbor_data::readers::snli::read_snli;
use arbor_data::readers::sst::{read_sst2_tsv, read_sst_trees, sst2_from_trees};
use arbor_data::readers::treebank::read_treebank;
use arbor_data::tree::{validate_transitions, TreePrep};
use arbor_data::wordpiece::WordPieceTokenizer;
use arbor_data::ReadOptions;

fn data_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("ARBOR_SHARED_DATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipping: shared data folder {} not found (set ARBOR_SHARED_DATA)",
            dir.display()
        );
        None
    }
}

const STRICT: ReadOptions = ReadOptions {
    skip_bad: false,
    max_tokens: None,
};

#[test]
fn snli_dev() {
    let Some(d) = data_dir() else { return };
    let l = read_snli(d.join("snli/snli_1.0_dev.jsonl"), STRICT).unwrap();
    assert_eq!(l.len(), 9_842);
    assert_eq!(l.skipped, 0);
    let parsed: Vec<_> = l.records.iter().filter(|p| p.has_parses()).collect();
    assert_eq!(parsed.len(), 2_523);
    for p in parsed {
        for s in [&p.premise, &p.hypothesis] {
            let t = s.transitions().unwrap();
            assert_eq!(t.len(), 2 * s.tokens.len() - 1);
            assert_eq!(validate_transitions(&t), Ok(s.tokens.len()));
        }
    }
    assert_eq!(l.records[0].premise.tokens[..2], ["Two", "women"]);
}

#[test]
fn sst2_glue() {
    let Some(d) = data_dir() else { return };
    let train = read_sst2_tsv(d.join("sst2_glue/train.tsv"), STRICT).unwrap();
    let dev = read_sst2_tsv(d.join("sst2_glue/dev.tsv"), STRICT).unwrap();
    assert_eq!((train.len(), dev.len()), (67_349, 872));
    assert_eq!(train.records[0].tokens[0], "hide");
    assert_eq!(train.records[0].label, 0);
    assert!(train
        .records
        .iter()
        .all(|e| !e.tokens.last().unwrap().ends_with('\r')));
}

#[test]
fn sst_trees() {
    let Some(d) = data_dir() else { return };
    let train = read_sst_trees(d.join("sst_ptb_trees/train.txt"), STRICT).unwrap();
    let dev = read_sst_trees(d.join("sst_ptb_trees/dev.txt"), STRICT).unwrap();
    assert_eq!((train.len(), dev.len()), (8_544, 1_101));
    assert_eq!(sst2_from_trees(&train.records).len(), 6_920);
    assert_eq!(sst2_from_trees(&dev.records).len(), 872);
    for t in train.records.iter().take(500) {
        assert_eq!(t.transitions().len(), 2 * t.tokens().len() - 1);
    }
}

#[test]
fn logic() {
    let Some(d) = data_dir() else { return };
    let data = read_logic_dir(d.join("propositional_logic"), STRICT).unwrap();
    assert_eq!(data.files.len(), 14);
    assert_eq!(data.train.len() + data.test.len(), 159_451);
    // Every pair's operator count is the number in its file name.
    let mut start = 0;
    let all: Vec<_> = data.train.iter().chain(&data.test).collect();
    for (k, path, count) in &data.files {
        assert!(
            all[start..start + count].iter().all(|p| p.operators == *k),
            "{}",
            path.display()
        );
        start += count;
    }
    let (tr, va) = train_valid_split(data.train.clone(), 0.1, 0);
    assert_eq!(va.len(), data.train.len() / 10);
    assert_eq!(tr.len() + va.len(), data.train.len());
}

#[test]
fn ptb_lm() {
    let Some(d) = data_dir() else { return };
    let train = read_lm(d.join("ptb_lm/ptb.train.txt"), STRICT).unwrap();
    let valid = read_lm(d.join("ptb_lm/ptb.valid.txt"), STRICT).unwrap();
    assert_eq!((train.num_lines(), valid.num_lines()), (42_068, 3_370));
    assert_eq!(train.sentences(SentenceOptions::ptb()).len(), 42_068);
    // The standard Mikolov PTB train stream: 929,589 tokens incl. <eos>.
    assert_eq!(train.num_stream_tokens(), 929_589);
}

#[test]
fn wikitext2() {
    let Some(d) = data_dir() else { return };
    let train = read_lm(d.join("wikitext2/train.txt"), STRICT).unwrap();
    let valid = read_lm(d.join("wikitext2/valid.txt"), STRICT).unwrap();
    assert_eq!((train.num_lines(), valid.num_lines()), (36_718, 3_760));
    assert_eq!(train.num_stream_tokens(), 2_088_628);
    assert_eq!(train.token_stream(EOS).len(), 2_088_628);
    let sents = valid.sentences(SentenceOptions::wikitext());
    assert!(sents.iter().all(|s| !s.is_empty() && s[0] != "="));
}

#[test]
fn wsj22() {
    let Some(d) = data_dir() else { return };
    let path = d.join("wsj_gold_trees/22.auto.clean");
    let trees = read_treebank(&path, STRICT).unwrap();
    assert_eq!(trees.len(), 1_700);
    let gold = load_gold(&path, &TreePrep::evaluation(), None).unwrap();
    let rb = baseline_f1(&gold.span_lists(), Baseline::RightBranching);
    let lb = baseline_f1(&gold.span_lists(), Baseline::LeftBranching);
    // Literature on WSJ test: right-branching ≈ 40, left-branching ≈ 9 (sentence-level).
    let (r, l) = (
        rb.percent(F1Convention::Sentence),
        lb.percent(F1Convention::Sentence),
    );
    assert!((35.0..45.0).contains(&r), "{r}");
    assert!((5.0..12.0).contains(&l), "{l}");
}

#[test]
fn wordpiece_vocab() {
    let Some(d) = data_dir() else { return };
    let t = WordPieceTokenizer::from_vocab_file(d.join("wordpiece/vocab.txt"), true).unwrap();
    assert_eq!(t.vocab_size(), 30_522);
    assert_eq!(t.piece_id("[UNK]"), Some(100));
    let e = t.encode_words(&["The", "unaffable", "Café"]).unwrap();
    assert_eq!(e.word_ids.first(), Some(&0));
    assert_eq!(e.word_ids.last(), Some(&2));
    assert_eq!(e.pieces[0], "the");
    assert_eq!(*e.pieces.last().unwrap(), "cafe");
    assert!(e.pieces.len() > 3);
}
