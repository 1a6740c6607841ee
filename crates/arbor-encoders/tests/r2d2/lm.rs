//! The R2D2 language model: padding invariance, gradients, special tokens, old records.

use arbor_cells::GumbelSampler;
use arbor_encoders::r2d2::{CompositionConfig, R2d2Config, R2d2LmConfig, R2d2SpecialIds};
use arbor_encoders::{Decisions, EncoderInput, SentenceEncoder};
use burn::module::Module;
use burn::prelude::*;

use crate::common::{self, dev, Ad, Fx};
use crate::support::{assert_close, rows};

#[test]
fn a_sentence_alone_equals_the_same_sentence_in_a_padded_batch() {
    let d = 8;
    for pruning in [true, false] {
        Fx::seed(&dev::<Fx>(), 11);
        let enc = R2d2Config::new(d, CompositionConfig::new(d).with_n_heads(2))
            .with_window(2)
            .with_pruning(pruning)
            .init::<Fx>(&dev::<Fx>());
        let lengths = vec![7usize, 3, 9, 1];
        let x = common::padded_batch::<Fx>(&lengths, 9, d, 5);
        let out = enc.encode(
            EncoderInput::new(x.clone(), lengths.clone()),
            Decisions::Argmax,
        );
        let roots = rows(out.sentence);
        let trees = out.trees.unwrap();
        for (b, &n) in lengths.iter().enumerate() {
            let alone = x.clone().narrow(0, b, 1).narrow(1, 0, n);
            let one = enc.encode(EncoderInput::new(alone, vec![n]), Decisions::Argmax);
            assert_close(&roots[b], &rows(one.sentence)[0], 1e-5, "root");
            assert_eq!(trees[b], one.trees.unwrap()[0]);
            assert_eq!(trees[b].num_leaves(), n);
        }
    }
    // The LM loss of every token too.
    Fx::seed(&dev::<Fx>(), 12);
    let lm = R2d2LmConfig::new(30)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .init::<Fx>(&dev::<Fx>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6, 7], vec![8, 9], vec![10]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let batch: Vec<f32> = lm
        .lm_loss(&refs, Decisions::Argmax)
        .nll
        .into_data()
        .convert::<f32>()
        .into_vec()
        .unwrap();
    let mut alone = Vec::new();
    for s in &refs {
        let nll = lm.lm_loss(&[s], Decisions::Argmax).nll;
        alone.extend(nll.into_data().convert::<f32>().into_vec::<f32>().unwrap());
    }
    assert_close(&batch, &alone, 1e-5, "token NLL");
    // Pseudo-perplexity terms, batched or not.
    let pppl = lm.pseudo_nll(&refs);
    for (s, terms) in refs.iter().zip(&pppl) {
        let one = lm.pseudo_nll(&[s]);
        let (a, b): (Vec<f32>, Vec<f32>) = (
            terms.iter().map(|&x| x as f32).collect(),
            one[0].iter().map(|&x| x as f32).collect(),
        );
        assert_close(&a, &b, 1e-5, "pseudo NLL");
        assert!(terms.iter().all(|x| x.is_finite() && *x > 0.0));
    }
}

#[test]
fn gradients_reach_the_composition_and_the_embeddings() {
    Ad::seed(&dev::<Ad>(), 3);
    let lm = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .init::<Ad>(&dev::<Ad>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let mut sampler = GumbelSampler::seeded(1);
    let out = lm.lm_loss(&refs, Decisions::Sample(&mut sampler));
    assert_eq!(out.tokens, 9);
    let grads = out.loss.backward();
    let norm = |t: Option<Tensor<Fx, 2>>, what: &str| {
        let g = t.unwrap_or_else(|| panic!("no gradient for {what}"));
        let s: f32 = g.abs().sum().into_scalar().elem();
        assert!(s > 0.0 && s.is_finite(), "{what}: {s}");
    };
    let comp = &lm.encoder.composition;
    norm(lm.embedding.weight.grad(&grads), "embedding");
    norm(comp.layers[0].qkv.weight.grad(&grads), "layer 0 qkv");
    norm(comp.layers[1].ff_out.weight.grad(&grads), "layer 1 ffn");
    norm(comp.roles.grad(&grads), "role embeddings");
    norm(comp.task_tokens.grad(&grads), "task tokens");
    norm(comp.mix.weight.grad(&grads), "Linear_2 (mixing)");
    // The merge scorer is reached only through the straight-through selection of splits.
    norm(comp.score.weight.grad(&grads), "Linear_1 (score)");
    norm(lm.edges.grad(&grads), "BOS/EOS");
    let _ = lm.num_params();
}

#[test]
fn special_ids_follow_the_reference_vocabulary() {
    // A stock BERT vocabulary: [unused3], [unused4], [unused6] at the rows 4, 5, 7 that the
    // reference's own vocabulary names [BOS], [EOS], [SUM].
    let mut bert: Vec<String> = vec!["[PAD]".into()];
    bert.extend((0..99).map(|i| format!("[unused{i}]")));
    bert.extend(["[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"].map(String::from));
    let ids = R2d2SpecialIds::from_vocab(&bert).unwrap();
    assert_eq!(
        ids,
        R2d2SpecialIds {
            cls: 101,
            sum: 7,
            mask: 103,
            bos: 4,
            eos: 5
        }
    );
    // The reference's vocabulary names them; names win over [unusedN].
    let mut named = bert.clone();
    for (i, name) in [(4, "[BOS]"), (5, "[EOS]"), (7, "[SUM]")] {
        named[i] = name.into();
    }
    named.push("[unused3]".into());
    assert_eq!(R2d2SpecialIds::from_vocab(&named), Some(ids));
    // A vocabulary without them: separate parameters.
    let small = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"];
    assert_eq!(R2d2SpecialIds::from_vocab(&small), None);
    // Ids must exist in the vocabulary.
    let config = R2d2LmConfig::new(50).with_special_ids(Some(ids));
    assert!(config.validate().is_err());
}

#[test]
fn tied_special_tokens_are_rows_of_the_vocabulary_embedding() {
    Ad::seed(&dev::<Ad>(), 4);
    let ids = R2d2SpecialIds {
        cls: 10,
        sum: 11,
        mask: 12,
        bos: 13,
        eos: 14,
    };
    let lm = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2))
        .with_special_ids(Some(ids))
        .init::<Ad>(&dev::<Ad>());
    assert_eq!(lm.encoder.composition.task_tokens.dims(), [0, 8]);
    assert_eq!(lm.edges.dims(), [0, 8]);
    // Sentences that never use the special ids: their rows get gradients only as task tokens
    // and sentence edges.
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let mut sampler = GumbelSampler::seeded(2);
    let out = lm.lm_loss(&refs, Decisions::Sample(&mut sampler));
    let grads = out.loss.backward();
    let g = lm
        .embedding
        .weight
        .grad(&grads)
        .expect("embedding gradient");
    let row_norm = |r: usize| -> f32 { g.clone().narrow(0, r, 1).abs().sum().into_scalar().elem() };
    for (name, r) in [
        ("[CLS]", 10),
        ("[SUM]", 11),
        ("[MASK]", 12),
        ("[BOS]", 13),
        ("[EOS]", 14),
    ] {
        let n = row_norm(r);
        assert!(n > 0.0 && n.is_finite(), "{name}: {n}");
    }
    // Row 15 is used by nothing but the output softmax.
    assert!(row_norm(15) > 0.0, "the tied softmax reaches every row");
    // Pseudo-perplexity runs on the tied tokens too.
    let inner = burn::module::AutodiffModule::valid(&lm);
    let nll = inner.pseudo_nll(&refs);
    assert!(nll.iter().flatten().all(|x| x.is_finite() && *x > 0.0));
}

#[test]
fn records_written_before_special_ids_existed_still_load() {
    use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
    let config = R2d2LmConfig::new(20)
        .with_encoder(R2d2Config::new(8, CompositionConfig::new(8).with_n_heads(2)).with_window(2));
    let lm = config.init::<Fx>(&dev::<Fx>());
    let sents: Vec<Vec<u32>> = vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9]];
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
    let loss = |m: &arbor_encoders::R2d2Lm<Fx>| -> f32 {
        m.lm_loss(&refs, Decisions::Argmax)
            .loss
            .into_scalar()
            .elem()
    };
    // Parameters are initialised on first use: use them before cloning.
    let want = loss(&lm);
    let rec = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<Fx>::record(&rec, lm.clone().into_record(), ()).unwrap();
    // The new trailing field is one empty-record byte; a record from before it ends earlier.
    assert_eq!(bytes.last(), Some(&0));
    let old = bytes[..bytes.len() - 1].to_vec();
    let record = Recorder::<Fx>::load(&rec, old, &dev::<Fx>()).unwrap();
    let back = config.init::<Fx>(&dev::<Fx>()).load_record(record);
    assert_eq!(loss(&back), want);
    assert_eq!(back.special_ids, None);
}
