//! Learning rate and clipping: warm-up, plateau decay, global-norm clipping.

use arbor_train::*;
use burn::backend::Flex;
use burn::optim::GradientsParams;

use super::support::{config, fresh, log, serial, Ad, Mlp, Probe};

#[test]
fn warm_up_ramps_linearly_then_holds() {
    let mut c = TrainConfig::new("unused");
    c.warmup_steps = 4;
    let lrs: Vec<f64> = (0..7).map(|s| warmed_up(&c, s, 0.01)).collect();
    let expected = [0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01, 0.01];
    for (got, want) in lrs.iter().zip(expected) {
        assert!((got - want).abs() < 1e-15, "{lrs:?}");
    }
    // The ramp follows the learning rate in force (after a plateau decay, for instance).
    assert!((warmed_up(&c, 1, 0.004) - 0.002).abs() < 1e-15);
    c.warmup_steps = 0;
    assert_eq!(warmed_up(&c, 0, 0.01), 0.01);
}

#[test]
fn plateau_decay_multiplies_after_patience_and_stops_at_min_lr() {
    let mut c = TrainConfig::new("unused");
    c.plateau_factor = 0.5;
    c.plateau_patience = 2;
    c.min_lr = 3e-3;
    let (mut bad, mut lr) = (0u32, 1e-2);
    let mut lrs = Vec::new();
    for _ in 0..9 {
        plateau_decay(&c, &mut bad, &mut lr);
        lrs.push(lr);
    }
    // Two stalled evaluations are tolerated; the third halves; the next halving is clamped.
    let expected = [1e-2, 1e-2, 5e-3, 5e-3, 5e-3, 3e-3, 3e-3, 3e-3, 3e-3];
    for (got, want) in lrs.iter().zip(expected) {
        assert!((got - want).abs() < 1e-15, "{lrs:?}");
    }
}

#[test]
fn plateau_decay_in_a_run_follows_the_validation_metric() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut task = Probe::new(7);
    task.constant_correct = Some(50);
    let mut c = config(dir.path());
    c.epochs = 1;
    c.eval_every = 1;
    c.plateau_factor = 0.5;
    c.plateau_patience = 1;
    c.min_lr = 2.5e-3;
    let out = train(&task, fresh(1), &c, &Default::default()).unwrap();
    // The lr logged with each evaluation is the one in force before it: the first sets the
    // best; then every second stalled evaluation halves, down to min_lr.
    let lrs: Vec<f64> = log(dir.path())
        .into_iter()
        .filter(|r| r.kind == "eval:valid")
        .map(|r| r.lr)
        .collect();
    assert_eq!(lrs, [1e-2, 1e-2, 1e-2, 5e-3, 5e-3, 2.5e-3, 2.5e-3, 2.5e-3]);
    assert_eq!(out.state.lr, 2.5e-3);
    assert_eq!(out.state.best_step, Some(1));
}

fn gradient_values(model: &Mlp<Ad>, grads: &GradientsParams) -> Vec<f32> {
    let mut v = Vec::new();
    for id in [model.l1.weight.id, model.l2.weight.id] {
        v.extend(
            grads
                .get::<Flex, 2>(id)
                .unwrap()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    for b in [&model.l1.bias, &model.l2.bias] {
        let id = b.as_ref().unwrap().id;
        v.extend(
            grads
                .get::<Flex, 1>(id)
                .unwrap()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    v
}

#[test]
fn clipping_bounds_the_global_norm_and_leaves_small_gradients_alone() {
    let _guard = serial();
    let task = Probe::new(7);
    let model = fresh(3);
    let grads = |scale: f64| {
        let (x, y) = task.tensors::<Ad>(&(0..16).collect::<Vec<_>>());
        let loss = burn::nn::loss::CrossEntropyLossConfig::new()
            .init(&Default::default())
            .forward(model.forward(x), y)
            .mul_scalar(scale);
        GradientsParams::from_grads(loss.backward(), &model)
    };
    let norm_of = |g: &[f32]| g.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();

    // Above the bound: rescaled onto it, direction kept.
    let mut big = grads(1000.0);
    let before = gradient_values(&model, &big);
    let norm = global_grad_norm::<Ad, _>(&model, &big);
    assert!((norm - norm_of(&before)).abs() < 1e-3 * norm, "{norm}");
    let bound = norm / 10.0;
    assert_eq!(clip_global_norm::<Ad, _>(&model, &mut big, bound), norm);
    let after = gradient_values(&model, &big);
    let clipped = global_grad_norm::<Ad, _>(&model, &big);
    assert!(
        (clipped - bound).abs() < 1e-5 * bound.max(1.0),
        "{clipped} vs {bound}"
    );
    assert!((norm_of(&after) - bound).abs() < 1e-5 * bound.max(1.0));
    for (a, b) in after.iter().zip(&before) {
        assert!((f64::from(*a) - f64::from(*b) / 10.0).abs() < 1e-4 * f64::from(b.abs()) + 1e-9);
    }

    // Below the bound: untouched, bit for bit.
    let mut small = grads(1.0);
    let before = gradient_values(&model, &small);
    let norm = global_grad_norm::<Ad, _>(&model, &small);
    clip_global_norm::<Ad, _>(&model, &mut small, norm * 10.0);
    assert_eq!(gradient_values(&model, &small), before);
}
