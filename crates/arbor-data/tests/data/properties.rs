//! Property tests: trees round-trip through brackets and transitions; every reader returns
//! `Ok` or `Err` on arbitrary bytes, never panics.

use arbor_data::readers::{listops, lm, logic, snli, sst, treebank};
use arbor_data::tree::{
    validate_transitions, Binarization, BinaryTree, BracketStyle, PieceBranching, Tree,
};
use arbor_data::vocab::{parse_text_vectors, Vocab, VocabConfig};
use arbor_data::ReadOptions;
use proptest::prelude::*;

/// Random binary trees over n leaves through random layer indices.
fn binary_tree() -> impl Strategy<Value = BinaryTree> {
    (1usize..40).prop_flat_map(|n| {
        let idx: Vec<BoxedStrategy<usize>> = (1..n).rev().map(|m| (0..m).boxed()).collect();
        idx.prop_map(move |ix| BinaryTree::from_layer_indices(n, &ix).unwrap())
    })
}

fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9'.,-]{1,6}"
}

/// Random labelled n-ary trees (treebank-like: every leaf tagged; an untagged leaf alone under
/// a label would print as a tagged leaf, which the bracket format cannot tell apart).
fn labelled_tree() -> impl Strategy<Value = Tree> {
    let leaf = ("[A-Z]{1,3}", word()).prop_map(|(tag, word)| Tree::Leaf {
        word,
        tag: Some(tag),
    });
    leaf.prop_recursive(6, 40, 4, |inner| {
        ("[A-Z]{1,4}", prop::collection::vec(inner, 1..4))
            .prop_map(|(label, children)| Tree::Node { label, children })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn brackets_roundtrip(t in binary_tree(), seed_words in prop::collection::vec(word(), 40)) {
        let n = t.num_leaves();
        let words = &seed_words[..n];
        let s = t.to_bracketed(words);
        let (back, ws) = BinaryTree::parse(&s).unwrap();
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(ws, words.to_vec());
    }

    #[test]
    fn transitions_roundtrip(t in binary_tree()) {
        let ts = t.to_transitions();
        prop_assert_eq!(ts.len(), 2 * t.num_leaves() - 1);
        prop_assert_eq!(validate_transitions(&ts), Ok(t.num_leaves()));
        prop_assert_eq!(BinaryTree::from_transitions(&ts).unwrap(), t.clone());
        let back = BinaryTree::from_spans(t.num_leaves(), &t.spans(), Binarization::Left).unwrap();
        prop_assert_eq!(back, t);
    }

    #[test]
    fn labelled_roundtrip(t in labelled_tree()) {
        let s = t.to_bracketed();
        prop_assert_eq!(Tree::parse(&s).unwrap(), t.clone());
        let c = t.collapse_unary();
        prop_assert_eq!(c.words(), t.words());
        let mut a = c.spans();
        a.retain(|s| s.len() >= 2);
        let mut b = t.spans();
        b.retain(|s| s.len() >= 2);
        prop_assert_eq!(a, b);
        let bin = t.to_binary(Binarization::Right);
        prop_assert_eq!(bin.num_leaves(), t.num_leaves());
    }

    #[test]
    fn pieces_keep_words_together(t in binary_tree(), counts in prop::collection::vec(1usize..4, 40)) {
        let n = t.num_leaves();
        let p = t.to_pieces(&counts[..n], PieceBranching::Right).unwrap();
        prop_assert_eq!(p.num_leaves(), counts[..n].iter().sum::<usize>());
        let spans = arbor_data::tree::spans_to_pieces(&t.spans(), &counts[..n]).unwrap();
        let ps = p.spans();
        for s in spans {
            prop_assert!(ps.contains(&s));
        }
    }

    #[test]
    fn parsers_never_panic(s in "[()a-z \\t]{0,60}") {
        let _ = Tree::parse(&s);
        let _ = Tree::parse_with(&s, BracketStyle::Labelled);
        let _ = BinaryTree::parse(&s);
    }

    #[test]
    fn readers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let lenient = ReadOptions::lenient();
        let strict = ReadOptions::strict();
        for opts in [strict, lenient] {
            let _ = snli::parse_snli(&bytes[..], "f", opts);
            let _ = sst::parse_sst2_tsv(&bytes[..], "f", opts);
            let _ = sst::parse_sst_trees(&bytes[..], "f", opts);
            let _ = logic::parse_logic(&bytes[..], "f", opts);
            let _ = lm::parse_lm(&bytes[..], "f", opts);
            let _ = treebank::parse_treebank(&bytes[..], "f", BracketStyle::Auto, opts);
            for check_labels in [false, true] {
                let _ = listops::parse_listops(&bytes[..], "f", opts, check_labels);
            }
        }
        let v = Vocab::build(["a", "b"], &VocabConfig::default());
        let _ = parse_text_vectors(&bytes[..], "f", &v, 0.1, 0);
    }

    #[test]
    fn structured_garbage_never_panics(lines in prop::collection::vec("[()<>=^|v#a-z{}\":,\\t 0-9-]{0,40}", 0..8)) {
        let text = lines.join("\n");
        let b = text.as_bytes();
        let o = ReadOptions::lenient();
        let _ = snli::parse_snli(b, "f", o);
        let _ = sst::parse_sst2_tsv(b, "f", o);
        let _ = sst::parse_sst_trees(b, "f", o);
        let l = logic::parse_logic(b, "f", o).unwrap();
        prop_assert_eq!(l.len() + l.skipped + l.filtered, text.lines().count());
        let _ = treebank::parse_treebank(b, "f", BracketStyle::Auto, o);
        let _ = listops::parse_listops(b, "f", o, true);
    }

    #[test]
    fn listops_garbage_never_panics(lines in prop::collection::vec("([0-9]\t|\\[MAX |\\[MIN |\\[MED |\\[SM |\\] |[0-9] |\\( |\\) ){0,24}", 0..6)) {
        let text = lines.join("\n");
        for check_labels in [false, true] {
            let _ = listops::parse_listops(text.as_bytes(), "f", ReadOptions::lenient(), check_labels);
        }
    }
}

/// A reader under test: bytes and options to the number of records, or the error's text.
type Reader = fn(&[u8], ReadOptions) -> Result<usize, String>;

/// `ReadOptions::max_tokens` in every sentence reader: a longer sentence is an error naming
/// file and line, or skipped and counted when lenient; the limit itself passes.
#[test]
fn every_sentence_reader_enforces_the_token_limit() {
    let long = ["w"; 6].join(" ");
    let tree6 = "(S (A a) (B b) (C c) (D d) (E e) (F f))";
    let cases: Vec<(&str, String, Reader)> = vec![
        (
            "snli",
            format!(
                "{{\"gold_label\": \"neutral\", \"sentence1\": \"{long}\", \"sentence2\": \"a b\"}}"
            ),
            |b, o| {
                snli::parse_snli(b, "f", o)
                    .map(|l| l.len())
                    .map_err(|e| e.to_string())
            },
        ),
        ("sst2", format!("{long}\t1"), |b, o| {
            sst::parse_sst2_tsv(b, "f", o)
                .map(|l| l.len())
                .map_err(|e| e.to_string())
        }),
        (
            "sst trees",
            "(3 (2 a) (2 b) (2 c) (2 d) (2 e) (2 f))".to_string(),
            |b, o| {
                sst::parse_sst_trees(b, "f", o)
                    .map(|l| l.len())
                    .map_err(|e| e.to_string())
            },
        ),
        ("logic", "=\t( a ( and b ) )\ta".to_string(), |b, o| {
            logic::parse_logic(b, "f", o)
                .map(|l| l.len())
                .map_err(|e| e.to_string())
        }),
        ("listops", "0\t[MAX 1 2 3 4 ]".to_string(), |b, o| {
            listops::parse_listops(b, "f", o, false)
                .map(|l| l.len())
                .map_err(|e| e.to_string())
        }),
        ("treebank", tree6.to_string(), |b, o| {
            treebank::parse_treebank(b, "f", BracketStyle::Auto, o)
                .map(|l| l.len())
                .map_err(|e| e.to_string())
        }),
    ];
    for (name, line, read) in cases {
        // One good short line, then the 6-token one on line 2.
        let short = match name {
            "snli" => "{\"gold_label\": \"neutral\", \"sentence1\": \"a\", \"sentence2\": \"b\"}",
            "sst2" => "a b\t0",
            "sst trees" => "(1 (2 a) (2 b))",
            "logic" => "=\ta\ta",
            "listops" => "1\t1",
            _ => "(S (A a))",
        };
        let text = format!("{short}\n{line}\n");
        // Line 2 has 6 tokens (logic counts the bracketed formula: 7).
        let n = if name == "logic" { 7 } else { 6 };
        let strict = ReadOptions::strict().with_max_tokens(Some(n - 1));
        let e = read(text.as_bytes(), strict).expect_err(name);
        let limit = format!("over the limit of {}", n - 1);
        assert!(e.contains("f:2") && e.contains(&limit), "{name}: {e}");
        let lenient = ReadOptions::lenient().with_max_tokens(Some(n - 1));
        assert_eq!(read(text.as_bytes(), lenient), Ok(1), "{name}");
        let roomy = ReadOptions::strict().with_max_tokens(Some(n));
        assert_eq!(read(text.as_bytes(), roomy), Ok(2), "{name}");
    }
}
