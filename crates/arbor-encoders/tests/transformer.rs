//! The Transformer sentence encoders (plain and FastTrees-gated): padding invariance, pooling,
//! trees from the gate's distances, and their place among the encoder kinds.

mod common;

use arbor_cells::GumbelSampler;
use arbor_encoders::*;
use common::*;

const D_IN: usize = 4;
const D: usize = 8;
const LENGTHS: [usize; 4] = [4, 1, 3, 2];
const TIME: usize = 6;

fn encoder(kind: EncoderKind, pooling: TransformerPooling) -> Encoder<Fx> {
    config(kind, pooling).init(&dev::<Fx>())
}

fn config(kind: EncoderKind, pooling: TransformerPooling) -> EncoderConfig {
    let EncoderConfig::Transformer(mut c) = EncoderConfig::of_kind(kind, D_IN, D).with_layers(2)
    else {
        panic!("{kind}: a Transformer configuration")
    };
    c.stack.n_heads = 2;
    c.stack.d_ff = 16;
    c.stack.chunk_size = 2;
    c.with_pooling(pooling).into()
}

#[test]
fn every_sentence_gets_what_it_gets_alone_with_either_pooling() {
    for kind in [EncoderKind::Transformer, EncoderKind::TransformerFastTrees] {
        for pooling in [TransformerPooling::Mean, TransformerPooling::First] {
            assert_eq!(config(kind, pooling).kind(), kind);
            let enc = encoder(kind, pooling);
            let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 1);
            let out = enc.encode(
                EncoderInput::new(x.clone(), LENGTHS.to_vec()),
                Decisions::Argmax,
            );
            assert_eq!(out.sentence.dims(), [4, D]);
            let tokens = out.tokens.clone().expect("token outputs");
            for (b, &len) in LENGTHS.iter().enumerate() {
                let what = format!("{kind} {pooling:?}, example {b}");
                let single = enc.encode(
                    EncoderInput::new(alone(&x, b, len), vec![len]),
                    Decisions::Argmax,
                );
                assert_close(
                    &row(&out.sentence, b),
                    &to_vec(single.sentence),
                    1e-5,
                    &what,
                );
                // The pooled vector is what its definition says over the real tokens.
                let tok = to_vec(tokens.clone().slice([b..b + 1, 0..len, 0..D]));
                let want: Vec<f64> = match pooling {
                    TransformerPooling::Mean => (0..D)
                        .map(|j| (0..len).map(|t| tok[t * D + j]).sum::<f64>() / len as f64)
                        .collect(),
                    TransformerPooling::First => tok[..D].to_vec(),
                };
                assert_close(&row(&out.sentence, b), &want, 1e-5, &what);
                if kind == EncoderKind::TransformerFastTrees {
                    let (batched, alone) =
                        (&out.trees.as_ref().unwrap()[b], &single.trees.unwrap()[0]);
                    assert_eq!(batched, alone, "{what}: tree");
                }
            }
        }
    }
}

#[test]
fn only_the_gated_encoder_returns_trees_and_only_in_evaluation() {
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 2);
    let input = || EncoderInput::new(x.clone(), LENGTHS.to_vec());
    let gated = encoder(EncoderKind::TransformerFastTrees, TransformerPooling::Mean);
    let trees = gated
        .encode(input(), Decisions::Argmax)
        .trees
        .expect("trees");
    for (tree, &len) in trees.iter().zip(&LENGTHS) {
        assert_eq!(
            tree.leaves(),
            (0..len).collect::<Vec<_>>(),
            "a tree over the real words"
        );
    }
    let mut sampler = GumbelSampler::seeded(0);
    assert!(gated
        .encode(input(), Decisions::Sample(&mut sampler))
        .trees
        .is_none());
    let plain = encoder(EncoderKind::Transformer, TransformerPooling::Mean);
    assert!(plain.encode(input(), Decisions::Argmax).trees.is_none());
    assert!(EncoderKind::TransformerFastTrees.induces_trees());
    assert!(!EncoderKind::Transformer.induces_trees());
}

#[test]
fn the_transformer_kinds_round_trip_through_their_names() {
    for (name, kind) in [
        ("transformer", EncoderKind::Transformer),
        ("transformer-fasttrees", EncoderKind::TransformerFastTrees),
        ("Transformer_FastTrees", EncoderKind::TransformerFastTrees),
    ] {
        assert_eq!(name.parse::<EncoderKind>(), Ok(kind));
        assert_eq!(kind.to_string().parse::<EncoderKind>(), Ok(kind));
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(serde_json::from_str::<EncoderKind>(&json).unwrap(), kind);
        assert!(<EncoderKind as arbor_cells::names::VariantArray>::VARIANTS.contains(&kind));
        assert_eq!(kind.cell(), None);
    }
    // Defaults: heads divide the width, d_ff = 4·D, gate chunks from the cells' rule.
    let transformer = |kind| match EncoderConfig::of_kind(kind, 5, 12) {
        EncoderConfig::Transformer(c) => c,
        _ => panic!("{kind}: a Transformer configuration"),
    };
    let config = transformer(EncoderKind::TransformerFastTrees);
    assert_eq!(
        (
            config.stack.n_heads,
            config.stack.d_ff,
            config.stack.chunk_size
        ),
        (4, 48, 6)
    );
    assert!(config.stack.fasttrees);
    assert!(!transformer(EncoderKind::Transformer).stack.fasttrees);
}
