//! Rendering: bracketed strings, indented ASCII drawings, Graphviz DOT and `Display`.

use std::fmt::Write as _;

use super::{BinaryTree, Tree};

impl BinaryTree {
    /// The unlabelled general tree with the given words at the leaves (missing words print as
    /// their positions).
    pub fn to_tree<S: AsRef<str>>(&self, words: &[S]) -> Tree {
        fn go<S: AsRef<str>>(t: &BinaryTree, pos: &mut usize, words: &[S]) -> Tree {
            match t {
                BinaryTree::Leaf(_) => {
                    let w = words.get(*pos).map(|w| w.as_ref().to_string());
                    let w = w.unwrap_or_else(|| pos.to_string());
                    *pos += 1;
                    Tree::leaf(w)
                }
                BinaryTree::Node(l, r) => {
                    let l = go(l, pos, words);
                    Tree::node("", vec![l, go(r, pos, words)])
                }
            }
        }
        go(self, &mut 0, words)
    }

    /// Bracketed form with the given words, e.g. `( ( the cat ) ( sat down ) )`.
    pub fn to_bracketed<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_bracketed()
    }

    /// Bracketed form with positions as words, e.g. `( ( 0 1 ) ( 2 3 ) )`.
    pub fn to_bracketed_positions(&self) -> String {
        self.to_tree::<&str>(&[]).to_bracketed()
    }

    /// Indented ASCII drawing (see [`Tree::to_ascii`]).
    pub fn to_ascii<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_ascii()
    }

    /// Graphviz DOT source (see [`Tree::to_dot`]).
    pub fn to_dot<S: AsRef<str>>(&self, words: &[S]) -> String {
        self.to_tree(words).to_dot()
    }
}

impl Tree {
    /// Bracketed form. Labelled nodes print as `(LABEL ...)`, tagged leaves as `(TAG word)`,
    /// unlabelled nodes as `( ... )` with spaces, bare leaves as the word: parsing the output
    /// with [`Tree::parse`] gives the same tree back (for words without spaces or brackets).
    pub fn to_bracketed(&self) -> String {
        let mut s = String::new();
        fn go(t: &Tree, s: &mut String) {
            match t {
                Tree::Leaf {
                    word,
                    tag: Some(tag),
                } => {
                    let _ = write!(s, "({tag} {word})");
                }
                Tree::Leaf { word, tag: None } => s.push_str(word),
                Tree::Node { label, children } => {
                    s.push('(');
                    s.push_str(label);
                    for c in children {
                        s.push(' ');
                        go(c, s);
                    }
                    s.push_str(if label.is_empty() { " )" } else { ")" });
                }
            }
        }
        go(self, &mut s);
        s
    }

    /// Indented ASCII drawing, one node per line:
    ///
    /// ```text
    /// S
    /// +-- NP
    /// |   +-- DT the
    /// |   `-- NN cat
    /// `-- VBD sat
    /// ```
    /// Unlabelled nodes print as `*`.
    pub fn to_ascii(&self) -> String {
        fn name(t: &Tree) -> String {
            match t {
                Tree::Leaf {
                    word,
                    tag: Some(tag),
                } => format!("{tag} {word}"),
                Tree::Leaf { word, tag: None } => word.clone(),
                Tree::Node { label, .. } if label.is_empty() => "*".into(),
                Tree::Node { label, .. } => label.clone(),
            }
        }
        fn go(t: &Tree, prefix: &str, out: &mut String) {
            let kids = t.children();
            for (i, c) in kids.iter().enumerate() {
                let last = i + 1 == kids.len();
                let _ = writeln!(
                    out,
                    "{prefix}{}{}",
                    if last { "`-- " } else { "+-- " },
                    name(c)
                );
                go(
                    c,
                    &format!("{prefix}{}", if last { "    " } else { "|   " }),
                    out,
                );
            }
        }
        let mut out = name(self);
        out.push('\n');
        go(self, "", &mut out);
        out
    }

    /// Graphviz DOT source: internal nodes as ellipses, words as boxes kept in sentence order
    /// on one rank. Render with `dot -Tsvg`.
    pub fn to_dot(&self) -> String {
        fn esc(s: &str) -> String {
            s.replace('\\', "\\\\").replace('"', "\\\"")
        }
        let mut out = String::from("digraph tree {\n  node [fontname=\"Helvetica\"];\n");
        let mut leaves = Vec::new();
        fn go(t: &Tree, next: &mut usize, out: &mut String, leaves: &mut Vec<usize>) -> usize {
            let id = *next;
            *next += 1;
            match t {
                Tree::Leaf { word, tag } => {
                    let label = match tag {
                        Some(tag) => format!("{}\\n{}", esc(tag), esc(word)),
                        None => esc(word),
                    };
                    let _ = writeln!(out, "  n{id} [shape=box, label=\"{label}\"];");
                    leaves.push(id);
                }
                Tree::Node { label, children } => {
                    let _ = writeln!(out, "  n{id} [shape=ellipse, label=\"{}\"];", esc(label));
                    for c in children {
                        let cid = go(c, next, out, leaves);
                        let _ = writeln!(out, "  n{id} -> n{cid};");
                    }
                }
            }
            id
        }
        go(self, &mut 0, &mut out, &mut leaves);
        out.push_str("  { rank=same;");
        for l in &leaves {
            let _ = write!(out, " n{l};");
        }
        out.push_str(" }\n");
        for w in leaves.windows(2) {
            let _ = writeln!(out, "  n{} -> n{} [style=invis];", w[0], w[1]);
        }
        out.push_str("}\n");
        out
    }
}

impl std::fmt::Display for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_bracketed())
    }
}

impl std::fmt::Display for BinaryTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_bracketed_positions())
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::*;

    #[test]
    fn rendering() {
        let t = Tree::parse("(S (NP (DT the) (NN cat)) (VBD sat))").unwrap();
        assert_eq!(
            t.to_ascii(),
            "S\n+-- NP\n|   +-- DT the\n|   `-- NN cat\n`-- VBD sat\n"
        );
        let dot = t.to_dot();
        assert!(dot.starts_with("digraph tree {"));
        assert!(dot.contains("n0 -> n1;"));
        assert!(dot.contains("label=\"DT\\nthe\""));
        let (b, w) = BinaryTree::parse("( a \"b\" )").unwrap();
        assert!(b.to_dot(&w).contains("\\\"b\\\""));
        assert_eq!(b.to_ascii(&w), "*\n+-- a\n`-- \"b\"\n");
    }
}
