//! Gradients: what sampling trains, what argmax does not, and the sampler's temperature.

use arbor_cells::GumbelSampler;
use arbor_encoders::*;
use burn::prelude::*;

use crate::common::*;
use crate::support::{model, D, D_IN};

#[test]
fn gradients_reach_the_query_the_composition_and_the_leaves() {
    for &leaf in <LeafKind as arbor_cells::names::VariantArray>::VARIANTS {
        let m = model::<Ad>(leaf, 17);
        let lengths = [4, 2, 5];
        let x = padded_batch::<Ad>(&lengths, 5, D_IN, 18);
        let out = m.forward(
            x,
            &lengths,
            Decisions::Sample(&mut GumbelSampler::seeded(3)),
        );
        let w = tensor::<Ad, 2>([3, D], 1.0, 19);
        let grads = out.root.h.mul(w).sum().backward();
        let norm = |g: Option<Tensor<Fx, 2>>| {
            to_vec(g.expect("a gradient"))
                .iter()
                .map(|v| v.abs())
                .sum::<f64>()
        };
        let q = m.query.grad(&grads).expect("q has a gradient");
        assert!(
            to_vec(q).iter().any(|&v| v != 0.0),
            "{leaf}: zero gradient for q"
        );
        assert!(
            norm(m.composition.children.weight.grad(&grads)) > 0.0,
            "{leaf}: composition"
        );
        let leaf_grad = match &m.leaf {
            Leaf::Affine(linear) => norm(linear.weight.grad(&grads)),
            Leaf::Lstm(cell) => {
                norm(cell.input.weight.grad(&grads)) * norm(cell.hidden.weight.grad(&grads))
            }
            Leaf::BiLstm(cells) => [&cells.forward_cell, &cells.backward_cell]
                .iter()
                .map(|cell| {
                    norm(cell.input.weight.grad(&grads)) * norm(cell.hidden.weight.grad(&grads))
                })
                .product(),
        };
        assert!(leaf_grad > 0.0, "{leaf}: leaf weights");
    }
}

#[test]
fn argmax_evaluation_has_no_gradient_path_to_the_query() {
    let m = model::<Ad>(LeafKind::Affine, 20);
    let lengths = [4, 3];
    let x = padded_batch::<Ad>(&lengths, 4, D_IN, 21);
    let out = m.forward(x, &lengths, Decisions::Argmax);
    let grads = out.root.h.sum().backward();
    let q = m.query.grad(&grads).map(to_vec).unwrap_or_default();
    assert!(
        q.iter().all(|&v| v == 0.0),
        "argmax must not train q: {q:?}"
    );
}

/// The query's gradient of `m` when sampling with the seeded sampler at temperature `tau`
/// (`None`: the model's own τ).
fn query_grad_at(m: &GumbelTreeLstm<Ad>, tau: Option<f64>) -> Vec<f64> {
    let lengths = [5, 3];
    let x = padded_batch::<Ad>(&lengths, 5, D_IN, 22);
    let out = m.forward(
        x,
        &lengths,
        Decisions::Sample(&mut GumbelSampler::seeded(4).with_temperature(tau)),
    );
    let grads = out.root.h.sum().backward();
    to_vec(m.query.grad(&grads).expect("q has a gradient"))
}

#[test]
fn an_annealed_temperature_from_the_sampler_replaces_the_models_own() {
    // The straight-through forward value does not depend on τ; its gradient does.
    let m = model::<Ad>(LeafKind::Lstm, 21);
    let own = query_grad_at(&m, None);
    let same = query_grad_at(&m, Some(GumbelTreeLstmConfig::new(D_IN, D).tau));
    let cold = query_grad_at(&m, Some(0.1));
    assert_eq!(
        own, same,
        "the model's own τ given explicitly changed the gradient"
    );
    assert!(
        own.iter().zip(&cold).any(|(a, b)| (a - b).abs() > 1e-6),
        "τ = 0.1 left the gradient unchanged: the sampler's temperature is ignored"
    );
    // A non-positive temperature is ignored rather than dividing by zero.
    assert_eq!(own, query_grad_at(&m, Some(0.0)));
}
