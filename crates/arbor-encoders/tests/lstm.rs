//! The LSTM baseline encoder: padding invariance and the sentence vector.

mod common;

use arbor_cells::run_sequence;
use arbor_encoders::*;
use common::*;

const D_IN: usize = 4;
const H: usize = 5;
const LENGTHS: [usize; 4] = [4, 1, 3, 2];
const TIME: usize = 6;

fn encoder(n_layers: usize) -> LstmEncoder<Fx> {
    LstmEncoderConfig::new(D_IN, H)
        .with_n_layers(n_layers)
        .init(&dev::<Fx>())
}

#[test]
fn every_sentence_gets_what_it_gets_alone() {
    for n_layers in [1, 2] {
        let enc = encoder(n_layers);
        let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 1);
        let out = enc.encode(
            EncoderInput::new(x.clone(), LENGTHS.to_vec()),
            Decisions::Argmax,
        );
        let tokens = out.tokens.expect("outputs");
        for (b, &len) in LENGTHS.iter().enumerate() {
            let what = format!("{n_layers} layers, example {b}");
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
            let real = tokens.clone().narrow(0, b, 1).narrow(1, 0, len);
            let single_tokens = single.tokens.expect("outputs");
            assert_close(
                &to_vec(real),
                &to_vec(single_tokens),
                1e-5,
                &format!("{what}: tokens"),
            );
        }
    }
}

#[test]
fn the_sentence_is_the_last_real_output_of_the_top_layer() {
    let enc = encoder(2);
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 2);
    let out = enc.encode(EncoderInput::new(x, LENGTHS.to_vec()), Decisions::Argmax);
    assert_eq!(enc.d_output(), H);
    assert_eq!(out.sentence.dims(), [LENGTHS.len(), H]);
    assert!(out.trees.is_none() && out.aux_loss.is_none());
    let tokens = out.tokens.expect("outputs");
    assert_eq!(tokens.dims(), [LENGTHS.len(), TIME, H]);
    for (b, &len) in LENGTHS.iter().enumerate() {
        let last = to_vec(tokens.clone().narrow(0, b, 1).narrow(1, len - 1, 1));
        assert_eq!(row(&out.sentence, b), last, "example {b}");
        let pad = to_vec(tokens.clone().narrow(0, b, 1).narrow(1, len, TIME - len));
        assert!(
            pad.iter().all(|&v| v == 0.0),
            "example {b}: padding outputs"
        );
    }
}

#[test]
fn one_layer_is_the_cell_run_over_the_words() {
    let enc = encoder(1);
    let x = tensor::<Fx, 3>([2, 3, D_IN], 1.0, 3);
    let out = enc.encode(EncoderInput::new(x.clone(), vec![3, 3]), Decisions::Argmax);
    let arbor_cells::AnyCell::Lstm(cell) = &enc.stack.layers[0] else {
        panic!("an LSTM stack")
    };
    let want = run_sequence(cell, x, None, None).last.h;
    assert_close(&to_vec(out.sentence), &to_vec(want), 1e-6, "sentence");
}

#[test]
fn every_recurrent_kind_is_an_encoder_and_padding_invariant() {
    use arbor_encoders::{
        Decisions, Encoder, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder,
    };
    use burn::backend::Flex;
    use burn::prelude::*;
    use burn::tensor::TensorData;

    let device = Default::default();
    assert_eq!(arbor_encoders::default_chunk_size(100), 10);
    assert_eq!(arbor_encoders::default_chunk_size(32), 8);
    assert_eq!(arbor_encoders::default_chunk_size(7), 7);
    use arbor_cells::names::VariantArray;
    for kind in EncoderKind::VARIANTS
        .iter()
        .copied()
        .filter(|k| k.cell().is_some())
    {
        let config = EncoderConfig::of_kind(kind, 3, 12).with_layers(2);
        assert_eq!(config.kind(), kind);
        let enc: Encoder<Flex> = config.init(&device);
        assert_eq!(kind.to_string().parse::<EncoderKind>(), Ok(kind));
        let values: Vec<f32> = (0..2 * 5 * 3)
            .map(|v| ((v * 7) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let x = Tensor::<Flex, 3>::from_data(TensorData::new(values, [2, 5, 3]), &device);
        let both = enc.encode(EncoderInput::new(x.clone(), vec![5, 3]), Decisions::Argmax);
        let alone = enc.encode(
            EncoderInput::new(x.slice([1..2, 0..3, 0..3]), vec![3]),
            Decisions::Argmax,
        );
        let a = both
            .sentence
            .slice([1..2, 0..12])
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let b = alone.sentence.into_data().to_vec::<f32>().unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5, "{kind}: {p} vs {q}");
        }
    }
}

#[test]
fn cumax_encoders_return_distance_trees_in_evaluation() {
    use arbor_cells::GumbelSampler;
    use arbor_encoders::{
        Decisions, Encoder, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder,
    };
    use burn::backend::Flex;
    use burn::prelude::*;

    let device = Default::default();
    let enc: Encoder<Flex> = EncoderConfig::of_kind(EncoderKind::OnLstm, 3, 8).init(&device);
    let x = Tensor::<Flex, 3>::ones([2, 5, 3], &device);
    let out = enc.encode(EncoderInput::new(x.clone(), vec![5, 2]), Decisions::Argmax);
    let trees = out.trees.expect("trees in evaluation");
    assert_eq!(trees[0].leaves(), vec![0, 1, 2, 3, 4]);
    assert_eq!(trees[1].leaves(), vec![0, 1]);
    let Encoder::Lstm(inner) = &enc else {
        panic!("recurrent")
    };
    let d = inner.forward(x.clone(), &[5, 2]).distances.pop().unwrap();
    let row: Vec<f64> = d
        .slice([0..1, 0..5])
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap();
    assert_eq!(
        trees[0],
        arbor_data::tree::BinaryTree::from_distances(&row).unwrap()
    );
    let mut s = GumbelSampler::seeded(0);
    let train = enc.encode(EncoderInput::new(x, vec![5, 2]), Decisions::Sample(&mut s));
    assert!(train.trees.is_none(), "no host reads in training mode");
}
