//! The `SentenceEncoder` view: root, trees and leaf states, training without trees, and
//! non-finite inputs.

use arbor_cells::GumbelSampler;
use arbor_encoders::*;
use burn::prelude::*;

use crate::common::*;
use crate::support::{model, D, D_IN};

#[test]
fn encode_returns_the_root_the_trees_and_masked_leaf_states() {
    let m = model::<Fx>(LeafKind::Lstm, 26);
    let lengths = [3, 1, 4];
    let time = 6; // longer than the longest sentence
    let x = padded_batch::<Fx>(&lengths, time, D_IN, 27);
    let out = m.forward(x.clone(), &lengths, Decisions::Argmax);
    let enc = m.encode(EncoderInput::new(x, lengths.to_vec()), Decisions::Argmax);
    assert_eq!(m.d_output(), D);
    assert_eq!(enc.sentence.dims(), [3, D]);
    assert_eq!(to_vec(enc.sentence), to_vec(out.root.h.clone()));
    assert_eq!(enc.trees.as_deref(), Some(out.trees().as_slice()));
    let tokens = enc.tokens.expect("leaf states");
    assert_eq!(tokens.dims(), [3, time, D]);
    for (b, &len) in lengths.iter().enumerate() {
        for t in 0..time {
            let tok = to_vec(tokens.clone().narrow(0, b, 1).narrow(1, t, 1));
            if t < len {
                let leaf = to_vec(out.leaves.h.clone().narrow(0, b, 1).narrow(1, t, 1));
                assert_eq!(tok, leaf, "example {b} position {t}");
            } else {
                assert!(tok.iter().all(|&v| v == 0.0), "example {b} padding {t}");
            }
        }
    }
    assert!(enc.aux_loss.is_none());
}

#[test]
fn encode_in_training_builds_no_trees_and_samples_as_forward_does() {
    // Trees are read back from the device, which a training step never does: `encode` with
    // sampled decisions leaves them out; its sentence vectors are `forward`'s with the same
    // noise, whose trees are still there for whoever wants them.
    let m = model::<Fx>(LeafKind::Lstm, 28);
    let lengths = [3, 1, 5];
    let x = padded_batch::<Fx>(&lengths, 6, D_IN, 29);
    let enc = m.encode(
        EncoderInput::new(x.clone(), lengths.to_vec()),
        Decisions::Sample(&mut GumbelSampler::seeded(8)),
    );
    assert!(enc.trees.is_none(), "no trees in training");
    let out = m.forward(
        x,
        &lengths,
        Decisions::Sample(&mut GumbelSampler::seeded(8)),
    );
    assert_eq!(to_vec(enc.sentence), to_vec(out.root.h.clone()));
    assert_eq!(out.trees().len(), 3);
}

#[test]
fn non_finite_inputs_give_trees_not_a_panic() {
    // A diverged model: every score is NaN. The encoder must still return one tree per
    // sentence over its words (the sentence vectors are NaN, which the engine reports).
    let device = dev::<Fx>();
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let enc = GumbelTreeLstmConfig::new(3, 4)
            .with_leaf(leaf)
            .init::<Fx>(&device);
        let x = Tensor::<Fx, 3>::full([2, 5, 3], f32::NAN, &device);
        let out = enc.encode(EncoderInput::new(x, vec![5, 3]), Decisions::Argmax);
        let trees = out.trees.expect("trees");
        assert_eq!(trees[0].leaves(), vec![0, 1, 2, 3, 4], "{leaf}");
        assert_eq!(trees[1].leaves(), vec![0, 1, 2], "{leaf}");
    }
}
