//! Imported checkpoints are accepted by arbor's programs: `snli`/`sst` `--eval-only
//! --checkpoint` and `--parse`.

use crate::common;

use arbor_apps::snli::SnliArgs;
use arbor_apps::sst::SstArgs;
use arbor_convert::gumbel::{import_gumbel_snli, import_gumbel_sst, with_reference_specials};
use arbor_convert::gumbel::{GumbelImport, QueryScale};
use arbor_convert::ReferenceVocab;
use arbor_heads::NliFeatures;
use burn::backend::Flex;
use clap::Parser;
use common::fixture;

fn options(dir: &std::path::Path, intra_attention: bool) -> GumbelImport {
    GumbelImport {
        vocab: with_reference_specials(ReferenceVocab::read_file(&dir.join("vocab.txt")).unwrap()),
        labels: None,
        query_scale: QueryScale::SqrtHidden,
        intra_attention,
        tau: 1.0,
        dropout: 0.1,
        features: NliFeatures::AbsDifference,
        lowercase: true,
    }
}

#[test]
fn the_snli_program_evaluates_and_parses_with_an_imported_gumbel_model() {
    let fx = fixture("gumbel-snli-lstm");
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("gumbel-snli.ckpt");
    import_gumbel_snli::<Flex>(
        fx.state_dict.clone(),
        &options(&fx.dir, false),
        &Default::default(),
    )
    .unwrap()
    .save::<Flex>(&ckpt)
    .unwrap();
    let pairs = tmp.path().join("pairs.jsonl");
    std::fs::write(
        &pairs,
        "{\"gold_label\": \"neutral\", \"sentence1\": \"the big dog runs\", \"sentence2\": \"a dog runs\"}\n\
         {\"gold_label\": \"entailment\", \"sentence1\": \"a cat sleeps\", \"sentence2\": \"the cat sleeps on a mat\"}\n",
    )
    .unwrap();
    let c = ckpt.to_str().unwrap();
    let p = pairs.to_str().unwrap();
    let eval = SnliArgs::try_parse_from([
        "snli",
        "--eval-only",
        "--checkpoint",
        c,
        "--train",
        p,
        "--valid",
        p,
        "--test",
        p,
    ])
    .unwrap();
    arbor_apps::snli::run(eval).unwrap();
    let parse =
        SnliArgs::try_parse_from(["snli", "--checkpoint", c, "--parse", "the big dog runs"])
            .unwrap();
    arbor_apps::snli::run(parse).unwrap();
}

#[test]
fn the_sst_program_evaluates_and_parses_with_an_imported_gumbel_model() {
    let fx = fixture("gumbel-sst-bilstm-intra");
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("gumbel-sst.ckpt");
    import_gumbel_sst::<Flex>(
        fx.state_dict.clone(),
        &options(&fx.dir, true),
        &Default::default(),
    )
    .unwrap()
    .save::<Flex>(&ckpt)
    .unwrap();
    let tsv = tmp.path().join("dev.tsv");
    std::fs::write(
        &tsv,
        "sentence\tlabel\nthe big dog runs\t1\na red cat sleeps\t0\n",
    )
    .unwrap();
    let c = ckpt.to_str().unwrap();
    let t = tsv.to_str().unwrap();
    let eval = SstArgs::try_parse_from([
        "sst",
        "--eval-only",
        "--checkpoint",
        c,
        "--valid",
        t,
        "--test",
        t,
    ])
    .unwrap();
    arbor_apps::sst::run(eval).unwrap();
    let parse =
        SstArgs::try_parse_from(["sst", "--checkpoint", c, "--parse", "the big dog runs"]).unwrap();
    arbor_apps::sst::run(parse).unwrap();
    // A pair classifier is refused by the sentence program, with the file named.
    let snli = fixture("gumbel-snli-lstm");
    let pair = tmp.path().join("pair.ckpt");
    import_gumbel_snli::<Flex>(
        snli.state_dict.clone(),
        &options(&snli.dir, false),
        &Default::default(),
    )
    .unwrap()
    .save::<Flex>(&pair)
    .unwrap();
    let p = pair.to_str().unwrap();
    let err = arbor_apps::sst::run(
        SstArgs::try_parse_from(["sst", "--eval-only", "--checkpoint", p, "--valid", t]).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("pair.ckpt") && err.contains("not a sentence classifier"),
        "{err}"
    );
}
