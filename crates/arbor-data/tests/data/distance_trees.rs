//! Trees from syntactic distances (ON-LSTM's split-at-maximum rule, docs/models.md §5): hand-checked
//! cases, ties, one- and two-word sentences.

use arbor_data::tree::BinaryTree;
use arbor_data::Span;

fn tree(d: &[f64]) -> String {
    BinaryTree::from_distances(d)
        .expect("a tree")
        .to_bracketed_positions()
}

#[test]
fn hand_checked_six_words() {
    // Max 0.8 at word 1: (0) | (1 rest); in [2..6) the max 0.7 is word 5, so ((2..5) 5); in
    // [2..5) the max 0.6 is word 3: (2 (3 4)).
    assert_eq!(
        tree(&[0.2, 0.8, 0.3, 0.6, 0.1, 0.7]),
        "( 0 ( 1 ( ( 2 ( 3 4 ) ) 5 ) ) )"
    );
    let spans = BinaryTree::from_distances(&[0.2, 0.8, 0.3, 0.6, 0.1, 0.7])
        .unwrap()
        .spans();
    let want = [(3, 5), (2, 5), (2, 6), (1, 6), (0, 6)].map(|(a, b)| Span::new(a, b));
    assert_eq!(spans, want);
}

#[test]
fn monotone_distances_give_branching_trees() {
    // Increasing: the last word always splits off on the right → left-branching.
    assert_eq!(tree(&[0.1, 0.2, 0.3, 0.4]), "( ( ( 0 1 ) 2 ) 3 )");
    // Decreasing: the first word heads everything → right-branching.
    assert_eq!(tree(&[0.4, 0.3, 0.2, 0.1]), "( 0 ( 1 ( 2 3 ) ) )");
    assert_eq!(
        BinaryTree::from_distances(&[0.4, 0.3, 0.2, 0.1]),
        BinaryTree::right_branching(4)
    );
}

#[test]
fn ties_take_the_first_maximum() {
    // All equal: every span splits at its first word → right-branching.
    assert_eq!(tree(&[0.3, 0.3, 0.3, 0.3]), "( 0 ( 1 ( 2 3 ) ) )");
    // Two maxima: word 1 wins over word 2 (the last would give "( ( 0 1 ) ( 2 3 ) )").
    assert_eq!(tree(&[0.5, 0.9, 0.9, 0.1]), "( 0 ( 1 ( 2 3 ) ) )");
    // The tie inside a sub-span: [1..4) has 0.6 at words 2 and 3, word 2 splits.
    // (Taking the last maximum would give "( 0 ( ( 1 2 ) 3 ) )".)
    assert_eq!(tree(&[0.9, 0.1, 0.6, 0.6]), "( 0 ( 1 ( 2 3 ) ) )");
}

#[test]
fn one_and_two_words() {
    assert_eq!(tree(&[0.0]), "0");
    assert_eq!(tree(&[-3.0]), "0");
    assert_eq!(BinaryTree::from_distances(&[0.4]).unwrap().spans(), []);
    // Either order of two distances gives the only binary tree.
    assert_eq!(tree(&[0.1, 0.9]), "( 0 1 )");
    assert_eq!(tree(&[0.9, 0.1]), "( 0 1 )");
    assert_eq!(tree(&[-1.0, -0.5]), "( 0 1 )");
    assert!(BinaryTree::from_distances(&[]).is_none());
    assert!(BinaryTree::from_distances(&[0.1, f64::INFINITY]).is_none());
}
