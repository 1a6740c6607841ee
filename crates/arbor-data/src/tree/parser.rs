//! The bracketed-string lexer and parser for labelled and unlabelled trees.

use super::{BinaryTree, Tree};
use crate::error::TreeError;

/// The deepest bracket nesting the parsers accept (guards the recursive tree algorithms).
pub const MAX_DEPTH: usize = 4096;

/// How labels are recognised in bracketed input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BracketStyle {
    /// A label is an atom attached to its `(` with no space, as in `(NP (DT the) ...)` or
    /// SST's `(3 (2 It) ...)`; `( the cat )` is unlabelled. Right for every format this crate
    /// reads.
    #[default]
    Auto,
    /// The first atom after each `(` is the label, spaces or not.
    Labelled,
    /// No labels: every atom is a word.
    Unlabelled,
}

enum Tok<'a> {
    Open(Option<&'a str>),
    Close,
    Atom(&'a str),
}

fn lex(s: &str, style: BracketStyle) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    let is_delim = |c: u8| c == b'(' || c == b')' || c.is_ascii_whitespace();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' {
            i += 1;
            if style == BracketStyle::Auto && i < b.len() && !is_delim(b[i]) {
                let start = i;
                while i < b.len() && !is_delim(b[i]) {
                    i += 1;
                }
                out.push(Tok::Open(Some(&s[start..i])));
            } else {
                out.push(Tok::Open(None));
            }
        } else if c == b')' {
            i += 1;
            out.push(Tok::Close);
        } else {
            let start = i;
            while i < b.len() && !is_delim(b[i]) {
                i += 1;
            }
            out.push(Tok::Atom(&s[start..i]));
        }
    }
    out
}

impl Tree {
    /// Parses one bracketed tree, recognising labels with [`BracketStyle::Auto`].
    pub fn parse(s: &str) -> Result<Tree, TreeError> {
        Tree::parse_with(s, BracketStyle::Auto)
    }

    /// Parses one bracketed tree.
    ///
    /// * `(TAG word)` becomes a tagged leaf; `(LABEL children...)` a node.
    /// * An unlabelled bracket with one child is that child (unary = same node).
    /// * A bare atom is a one-word tree.
    /// * Errors: unbalanced brackets, `()`/`(X)`, text after the tree, nesting deeper than
    ///   [`MAX_DEPTH`].
    pub fn parse_with(s: &str, style: BracketStyle) -> Result<Tree, TreeError> {
        let toks = lex(s, style);
        let mut stack: Vec<(Option<String>, Vec<Tree>)> = Vec::new();
        let mut done: Option<Tree> = None;
        let mut iter = toks.into_iter().peekable();
        while let Some(tok) = iter.next() {
            if done.is_some() {
                let rest = match tok {
                    Tok::Open(_) => "(".to_string(),
                    Tok::Close => ")".to_string(),
                    Tok::Atom(a) => a.to_string(),
                };
                if rest == ")" {
                    return Err(TreeError::Unbalanced(
                        "`)` after the end of the tree".into(),
                    ));
                }
                return Err(TreeError::Trailing(rest));
            }
            match tok {
                Tok::Open(label) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(TreeError::TooDeep(MAX_DEPTH));
                    }
                    let mut label = label.map(str::to_string);
                    if style == BracketStyle::Labelled {
                        if let Some(Tok::Atom(a)) = iter.peek() {
                            label = Some(a.to_string());
                            iter.next();
                        }
                    }
                    stack.push((label, Vec::new()));
                }
                Tok::Close => {
                    let Some((label, mut children)) = stack.pop() else {
                        return Err(TreeError::Unbalanced("`)` without matching `(`".into()));
                    };
                    let t = match label {
                        Some(label) => {
                            if children.is_empty() {
                                return Err(TreeError::EmptyConstituent);
                            }
                            if children.len() == 1
                                && matches!(&children[0], Tree::Leaf { tag: None, .. })
                            {
                                let Some(Tree::Leaf { word, .. }) = children.pop() else {
                                    unreachable!()
                                };
                                Tree::Leaf {
                                    word,
                                    tag: Some(label),
                                }
                            } else {
                                Tree::Node { label, children }
                            }
                        }
                        None => match children.len() {
                            0 => return Err(TreeError::EmptyConstituent),
                            1 => children.pop().expect("one child"),
                            _ => Tree::Node {
                                label: String::new(),
                                children,
                            },
                        },
                    };
                    match stack.last_mut() {
                        Some((_, siblings)) => siblings.push(t),
                        None => done = Some(t),
                    }
                }
                Tok::Atom(a) => match stack.last_mut() {
                    Some((_, siblings)) => siblings.push(Tree::leaf(a)),
                    None => done = Some(Tree::leaf(a)),
                },
            }
        }
        if !stack.is_empty() {
            return Err(TreeError::Unbalanced(format!(
                "{} `(` never closed",
                stack.len()
            )));
        }
        done.ok_or(TreeError::Empty)
    }
}

impl BinaryTree {
    /// Parses an unlabelled binary bracketing such as `( ( the cat ) ( sat down ) )` or a logic
    /// formula `( not ( a ( and b ) ) )`; a bare word is a one-leaf tree. Returns the tree and
    /// the words. Unary brackets `( word )` are the same node as their child; nodes with more
    /// than two children are an error (parse with [`Tree::parse`] and call
    /// [`Tree::to_binary`] to binarise instead).
    pub fn parse(s: &str) -> Result<(BinaryTree, Vec<String>), TreeError> {
        let tree = Tree::parse_with(s, BracketStyle::Unlabelled)?;
        let words = tree.words().into_iter().map(str::to_string).collect();
        Ok((tree.to_binary_strict()?, words))
    }
}

#[cfg(test)]
mod tests {
    use crate::error::TreeError;
    use crate::tree::*;

    use Transition::Shift as S;

    #[test]
    fn unary_brackets_are_the_same_node() {
        let (a, _) = BinaryTree::parse("( ( word ) ( ( x y ) ) )").unwrap();
        let (b, _) = BinaryTree::parse("( word ( x y ) )").unwrap();
        assert_eq!(a, b);
        let (c, w) = BinaryTree::parse("d").unwrap();
        assert_eq!(c, BinaryTree::Leaf(0));
        assert_eq!(w, ["d"]);
        assert_eq!(c.to_transitions(), vec![S]);
    }

    #[test]
    fn logic_formula() {
        let (t, w) = BinaryTree::parse("( not ( e ( or ( not c ) ) ) )").unwrap();
        assert_eq!(w, ["not", "e", "or", "not", "c"]);
        assert_eq!(
            transitions_to_string(&t.to_transitions()),
            "S S S S S R R R R"
        );
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            BinaryTree::parse("( a b c )").unwrap_err(),
            TreeError::NotBinary(3)
        );
        assert!(matches!(
            Tree::parse("( a b"),
            Err(TreeError::Unbalanced(_))
        ));
        assert!(matches!(Tree::parse("a b )"), Err(TreeError::Trailing(_))));
        assert!(matches!(
            Tree::parse("( a b ) )"),
            Err(TreeError::Unbalanced(_))
        ));
        assert!(matches!(Tree::parse(")"), Err(TreeError::Unbalanced(_))));
        assert_eq!(Tree::parse("   "), Err(TreeError::Empty));
        assert_eq!(Tree::parse("( )"), Err(TreeError::EmptyConstituent));
        assert_eq!(Tree::parse("(NP)"), Err(TreeError::EmptyConstituent));
        let deep = "(".repeat(MAX_DEPTH + 1);
        assert_eq!(Tree::parse(&deep), Err(TreeError::TooDeep(MAX_DEPTH)));
    }

    #[test]
    fn labelled_style_with_spaces() {
        let t =
            Tree::parse_with("( S ( NP the cat ) ( VP sat ) )", BracketStyle::Labelled).unwrap();
        assert_eq!(t.to_bracketed(), "(S (NP the cat) (VP sat))");
    }
}
