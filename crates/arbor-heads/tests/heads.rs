//! Heads: pretrained embeddings, pair features, shapes.

use arbor_encoders::{EncoderConfig, EncoderKind};
use arbor_heads::*;
use burn::backend::Flex;
use burn::prelude::*;

#[test]
fn pretrained_embeddings_are_used_row_for_row() {
    let vectors: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let e = TokenEmbeddingConfig::new(4, 3).init_pretrained::<Flex>(vectors, &Default::default());
    let ids = Tensor::<Flex, 2, Int>::from_data([[2, 0]], &Default::default());
    let out = e.forward(ids).into_data().to_vec::<f32>().unwrap();
    assert_eq!(out, vec![6.0, 7.0, 8.0, 0.0, 1.0, 2.0]);
}

#[test]
fn random_embeddings_start_at_unit_scale_with_chosen_rows_zeroed() {
    let device = Default::default();
    let e = TokenEmbeddingConfig::new(400, 50).init::<Flex>(&device);
    let w = e
        .embedding
        .weight
        .val()
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    let var = w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
    // N(0, 1) by default (the old default, 0.1, gives a variance of 0.01).
    assert!((0.9..1.1).contains(&var), "variance {var}");
    let before = w.clone();
    let e = e.with_zero_rows(&[0, 1, 999]);
    let w = e
        .embedding
        .weight
        .val()
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    assert!(w[..100].iter().all(|&v| v == 0.0));
    assert_eq!(&w[100..], &before[100..]);
}

#[test]
fn nli_head_classifies_pairs_and_splits_trees() {
    let device = Default::default();
    let encoder = EncoderConfig::of_kind(EncoderKind::Gumbel, 6, 5).init::<Flex>(&device);
    for features in [NliFeatures::Difference, NliFeatures::AbsDifference] {
        let model = NliClassifierConfig::new(10, 6, 8)
            .with_n_classes(7)
            .with_batch_norm(true)
            .with_features(features)
            .init(
                encoder.clone(),
                TokenEmbeddingConfig::new(10, 6).init(&device),
                &device,
            );
        assert_eq!(model.mlp.linears[0].weight.dims(), [20, 8], "4·d features");
        let batch = SentenceBatch::<Flex>::from_ids(
            &[&[2u32, 3, 4][..], &[5, 6], &[7], &[8, 9, 2, 3]],
            0,
            &device,
        );
        let out = model.forward(batch, arbor_encoders::Decisions::Argmax);
        assert_eq!(out.logits.dims(), [2, 7]);
        let (p, h) = out.trees.unwrap();
        assert_eq!(
            p.iter().map(|t| t.num_leaves()).collect::<Vec<_>>(),
            vec![3, 2]
        );
        assert_eq!(
            h.iter().map(|t| t.num_leaves()).collect::<Vec<_>>(),
            vec![1, 4]
        );
    }
}

#[test]
fn predictions_and_counts() {
    let logits =
        Tensor::<Flex, 2>::from_data([[0.1, 0.9], [2.0, -1.0], [0.0, 3.0]], &Default::default());
    let targets = Tensor::<Flex, 1, Int>::from_data([1, 1, 1], &Default::default());
    assert_eq!(count_correct(logits.clone(), targets.clone()), 2);
    let loss = cross_entropy(logits, targets).into_scalar().elem::<f64>();
    let expected = [0.9f64 - 0.1, -3.0, 3.0]
        .iter()
        .map(|m| (1.0 + (-m).exp()).ln())
        .sum::<f64>()
        / 3.0;
    assert!((loss - expected).abs() < 1e-5, "{loss} vs {expected}");
}
