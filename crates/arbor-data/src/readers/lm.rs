//! Language-model text: Penn Treebank (Mikolov's `ptb.*.txt`) and WikiText-2 (`wiki.*.tokens`
//! or `train.txt`/`valid.txt`).
//!
//! Both are already tokenised: tokens are separated by spaces, one line per sentence (PTB) or per
//! paragraph/heading (WikiText, which also has empty lines).
//!
//! * **Token stream** ([`LmCorpus::token_stream`]): every line, empty ones included, split on
//!   whitespace, with one `<eos>` appended, exactly like the PyTorch `word_language_model`
//!   example and the ON-LSTM code. WikiText-2 train gives 2,088,628 tokens this way.
//! * **Sentences** ([`LmCorpus::sentences`]): for sentence-level models. Empty lines are dropped,
//!   WikiText heading lines (` = Title = `, ` = = Section = = `: first and last token `=`) are
//!   dropped unless asked for, and with `split` each line is cut after every `.`, `?` or `!`
//!   token (WikiText writes decimal points as `@.@` and keeps abbreviations such as `U.S.` as
//!   one token, so a lone `.` token ends a sentence).

use std::io::BufRead;
use std::path::Path;

use crate::error::{DataError, ReadOptions};
use crate::io::{open, read_lines, tokens, LineOutcome};

/// The end-of-sentence token appended to every line of the token stream.
pub const EOS: &str = "<eos>";

/// A tokenised LM text file, one entry per line (empty lines are empty entries).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LmCorpus {
    /// Tokens of every line, in file order.
    pub lines: Vec<Vec<String>>,
    /// Lines skipped as malformed (invalid UTF-8) with [`ReadOptions::skip_bad`].
    pub skipped: usize,
}

/// How [`LmCorpus::sentences`] cuts the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SentenceOptions {
    /// Keep WikiText heading lines as sentences (without their `=` tokens).
    pub keep_headings: bool,
    /// Split lines into sentences after `.`, `?` and `!` tokens (WikiText paragraphs).
    pub split: bool,
}

impl SentenceOptions {
    /// PTB: one sentence per line.
    pub fn ptb() -> Self {
        SentenceOptions {
            keep_headings: false,
            split: false,
        }
    }

    /// WikiText: headings dropped, paragraphs split into sentences.
    pub fn wikitext() -> Self {
        SentenceOptions {
            keep_headings: false,
            split: true,
        }
    }
}

/// Whether a line's tokens form a WikiText heading (` = X = `, ` = = X = = `, ...).
pub fn is_heading(tokens: &[String]) -> bool {
    tokens.len() >= 2 && tokens[0] == "=" && tokens[tokens.len() - 1] == "="
}

/// Splits a token list after every `.`, `?` or `!` token; never returns empty sentences.
pub fn split_sentences(tokens: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for t in tokens {
        cur.push(t.clone());
        if matches!(t.as_str(), "." | "?" | "!") {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

impl LmCorpus {
    /// Number of lines (empty lines included).
    pub fn num_lines(&self) -> usize {
        self.lines.len()
    }

    /// Number of tokens in the stream: all tokens plus one `<eos>` per line.
    pub fn num_stream_tokens(&self) -> usize {
        self.lines.iter().map(|l| l.len() + 1).sum()
    }

    /// All tokens with `eos` after every line (empty lines give a lone `eos`).
    pub fn token_stream(&self, eos: &str) -> Vec<String> {
        let mut out = Vec::with_capacity(self.num_stream_tokens());
        for l in &self.lines {
            out.extend(l.iter().cloned());
            out.push(eos.to_string());
        }
        out
    }

    /// Sentence lists (see the module docs).
    pub fn sentences(&self, opts: SentenceOptions) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for l in &self.lines {
            if l.is_empty() {
                continue;
            }
            if is_heading(l) {
                if opts.keep_headings {
                    let inner: Vec<String> = l.iter().filter(|t| *t != "=").cloned().collect();
                    if !inner.is_empty() {
                        out.push(inner);
                    }
                }
                continue;
            }
            if opts.split {
                out.extend(split_sentences(l));
            } else {
                out.push(l.clone());
            }
        }
        out
    }
}

/// Reads an LM text file.
pub fn read_lm(path: impl AsRef<Path>, opts: ReadOptions) -> Result<LmCorpus, DataError> {
    let path = path.as_ref();
    parse_lm(open(path)?, path, opts)
}

/// Reads LM text from any reader; `name` appears in errors.
pub fn parse_lm<R: BufRead>(
    reader: R,
    name: impl AsRef<Path>,
    opts: ReadOptions,
) -> Result<LmCorpus, DataError> {
    let loaded = read_lines(reader, name.as_ref(), opts, |_, line| {
        Ok(LineOutcome::Record(tokens(line)))
    })?;
    Ok(LmCorpus {
        lines: loaded.records,
        skipped: loaded.skipped,
    })
}

/// The ids of a text file's `<eos>`-terminated token stream ([`LmCorpus::token_stream`]) in
/// `vocab`; a missing file is a [`DataError::Missing`] naming it.
pub fn read_token_stream(
    path: impl AsRef<Path>,
    vocab: &crate::vocab::Vocab,
) -> Result<Vec<u32>, DataError> {
    let corpus = read_existing(path.as_ref())?;
    Ok(vocab.encode(&corpus.token_stream(EOS)))
}

/// The vocabulary of a text file's token stream: every token, `<eos>` included (PTB already
/// maps rare words to `<unk>`); a missing file is a [`DataError::Missing`] naming it.
pub fn build_stream_vocab(path: impl AsRef<Path>) -> Result<crate::vocab::Vocab, DataError> {
    let corpus = read_existing(path.as_ref())?;
    Ok(crate::vocab::Vocab::build(
        corpus.token_stream(EOS),
        &crate::vocab::VocabConfig {
            extra_specials: vec![EOS.to_string()],
            ..crate::vocab::VocabConfig::default()
        },
    ))
}

fn read_existing(path: &Path) -> Result<LmCorpus, DataError> {
    if !path.exists() {
        return Err(DataError::Missing(format!(
            "{} not found; PTB is in ../shared/data/ptb_lm (or pass --train/--valid/--eval)",
            path.display()
        )));
    }
    read_lm(path, ReadOptions::strict())
}

/// Whether a raw WikiText line is a heading (` = Title = `, ` = = Section = = `).
pub fn is_heading_line(line: &str) -> bool {
    let t = line.trim();
    t.len() >= 2 && t.starts_with('=') && t.ends_with('=')
}

/// Raw WikiText-2 text as sentences for sub-word models: headings and empty lines dropped, each
/// paragraph split after the tokens `.`, `?` and `!`; `@-@`-style tokens joined back (`@-@` →
/// `-`) and `<unk>` written `unk` so a WordPiece pipeline sees one word.
pub fn wikitext_sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || is_heading_line(line) {
            continue;
        }
        let mut current: Vec<&str> = Vec::new();
        for tok in line.split_whitespace() {
            let tok = match tok {
                "@-@" => "-",
                "@,@" => ",",
                "@.@" => ".",
                "<unk>" => "unk",
                t => t,
            };
            current.push(tok);
            if matches!(tok, "." | "?" | "!") && current.len() > 1 {
                out.push(current.join(" "));
                current.clear();
            }
        }
        if !current.is_empty() {
            out.push(current.join(" "));
        }
    }
    out
}

/// WikiText as the R2D2 reference prepares it (alipay/StructuredLM_RTDT at `6edf2ac`, the R2D2
/// paper's code; its committed `data/en_wiki/wiki2_test_splited.txt` shows the procedure):
/// every non-blank line is a "sentence", headings included; a line of `split_at` (128) or more
/// word pieces (`pieces` counts them) is split after each `.` token (the ` . ` of its regex),
/// a shorter one is kept whole; `@-@`, `@,@` and `@.@` stay as they are (BERT's tokenizer
/// splits them into `@ - @`). The reference read the raw files; the tokenised WikiText-2 here has
/// `<unk>` for rare words, written `unk` as in [`wikitext_sentences`].
pub fn wikitext_sentences_reference(
    text: &str,
    mut pieces: impl FnMut(&str) -> usize,
    split_at: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line
            .split_whitespace()
            .map(|t| if t == "<unk>" { "unk" } else { t })
            .collect();
        if words.is_empty() {
            continue;
        }
        let whole = words.join(" ");
        if pieces(&whole) < split_at {
            out.push(whole);
            continue;
        }
        let mut current: Vec<&str> = Vec::new();
        for w in words {
            current.push(w);
            if w == "." {
                out.push(current.join(" "));
                current.clear();
            }
        }
        if !current.is_empty() {
            out.push(current.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIKI: &str =
        " \n = Title = \n \n The cat sat . It was 3 @.@ 5 m tall ! And \n = = Sub = = \n";

    #[test]
    fn stream_and_sentences() {
        let c = parse_lm(WIKI.as_bytes(), "w.txt", ReadOptions::strict()).unwrap();
        assert_eq!(c.num_lines(), 5);
        // tokens: 0 + 3 + 0 + 13 + 5, plus 5 <eos>.
        assert_eq!(c.num_stream_tokens(), 21 + 5);
        let s = c.token_stream(EOS);
        assert_eq!(s.len(), 26);
        assert_eq!(&s[..5], ["<eos>", "=", "Title", "=", "<eos>"]);
        let sents = c.sentences(SentenceOptions::wikitext());
        assert_eq!(sents.len(), 3);
        assert_eq!(sents[0], ["The", "cat", "sat", "."]);
        assert_eq!(sents[2], ["And"]);
        let with_heads = c.sentences(SentenceOptions {
            keep_headings: true,
            split: false,
        });
        assert_eq!(with_heads.len(), 3);
        assert_eq!(with_heads[0], ["Title"]);
        assert_eq!(with_heads[2], ["Sub"]);
    }

    #[test]
    fn invalid_utf8() {
        let bytes = b"ok line\n\xc3\x28 bad\n";
        let e = parse_lm(&bytes[..], "p.txt", ReadOptions::strict()).unwrap_err();
        assert_eq!(e.to_string(), "p.txt:2: invalid UTF-8");
        let c = parse_lm(&bytes[..], "p.txt", ReadOptions::lenient()).unwrap();
        assert_eq!((c.num_lines(), c.skipped), (1, 1));
    }

    #[test]
    fn wikitext_lines_become_sentences() {
        let text = " = Valkyria = \n\n The game @-@ a sequel . It sold <unk> copies ! Then\n = = Plot = = \n";
        assert_eq!(
            wikitext_sentences(text),
            vec!["The game - a sequel .", "It sold unk copies !", "Then"]
        );
        assert!(is_heading_line(" = = Plot = = "));
        assert!(!is_heading_line(" = "));
    }

    #[test]
    fn reference_preparation_keeps_headings_and_splits_only_long_lines() {
        let text =
            " \n = Title = \n \n The cat @-@ sat . It was <unk> . And so\n x . y\n a b . c . d e\n";
        // Count words as pieces; split lines of 6 or more.
        let s = wikitext_sentences_reference(text, |l| l.split_whitespace().count(), 6);
        assert_eq!(
            s,
            vec![
                "= Title =",
                "The cat @-@ sat .",
                "It was unk .",
                "And so",
                "x . y",
                "a b .",
                "c .",
                "d e",
            ]
        );
    }
}
