//! The composition function's role tables, and R2D2 as an encoder kind.

use arbor_encoders::r2d2::{Compose, Composition, CompositionConfig, RoleEmbeddings};
use arbor_encoders::{Decisions, EncoderConfig, EncoderInput, EncoderKind, SentenceEncoder};
use burn::module::Param;
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::common::{dev, tensor, Fx};
use crate::support::{assert_close, composition, rows};

#[test]
fn each_layer_reads_its_own_role_table() {
    let d = 8;
    let per_layer = composition(d, 5);
    assert_eq!(per_layer.roles.dims(), [6, d], "one [3, D] table per layer");
    assert_eq!(per_layer.role_embeddings(), RoleEmbeddings::PerLayer);
    let left = tensor::<Fx, 2>([5, d], 1.0, 11);
    let right = tensor::<Fx, 2>([5, d], 1.0, 12);
    let run = |f: &Composition<Fx>| {
        let c = f.compose(left.clone(), right.clone());
        let mut v = rows(c.repr).concat();
        v.extend(
            c.log_p
                .into_data()
                .convert::<f32>()
                .into_vec::<f32>()
                .unwrap(),
        );
        v.extend(rows(f.mask_context(left.clone(), right.clone())).concat());
        v
    };
    // Burn initialises parameters lazily, on first use: run once so that the clones below
    // share the same weights instead of each drawing its own.
    let a = run(&per_layer);
    // Tables built from host values.
    let table = |n: usize| {
        let v: Vec<f32> = rows(per_layer.roles.val())[..3].concat().repeat(n);
        Tensor::<Fx, 2>::from_data(TensorData::new(v, [3 * n, d]), &dev::<Fx>())
    };
    // The shared layout: one table, read by both layers.
    let mut shared = per_layer.clone();
    shared.roles = Param::from_tensor(table(1));
    assert_eq!(shared.role_embeddings(), RoleEmbeddings::Shared);
    // Per-layer tables that happen to be equal compute what the shared table does.
    let mut twice = per_layer.clone();
    twice.roles = Param::from_tensor(table(2));
    assert_close(&run(&twice), &run(&shared), 1e-6, "equal tables");
    // Layer 1's own table matters.
    let b = run(&shared);
    assert!(
        a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-4),
        "layer 1 reads rows 3..6"
    );
    // The shared layout is still built on request.
    let old = CompositionConfig::new(d)
        .with_n_layers(3)
        .with_n_heads(2)
        .with_role_embeddings(RoleEmbeddings::Shared)
        .init::<Fx>(&dev::<Fx>());
    assert_eq!(old.roles.dims(), [3, d]);
}

#[test]
fn r2d2_is_available_as_an_encoder_kind() {
    let kind: EncoderKind = "r2d2".parse().unwrap();
    assert_eq!(kind, EncoderKind::R2d2);
    let EncoderConfig::R2d2(config) = EncoderConfig::of_kind(kind, 6, 8) else {
        panic!("an R2D2 configuration")
    };
    let enc = EncoderConfig::from(config.with_window(2)).init::<Fx>(&dev::<Fx>());
    let x = tensor::<Fx, 3>([2, 5, 6], 1.0, 1);
    let out = enc.encode(EncoderInput::new(x, vec![5, 3]), Decisions::Argmax);
    assert_eq!(out.sentence.dims(), [2, 8]);
    let trees = out.trees.unwrap();
    assert_eq!((trees[0].num_leaves(), trees[1].num_leaves()), (5, 3));
}
