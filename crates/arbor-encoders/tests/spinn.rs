//! SPINN: the thin-stack trace, equality with a recursive Tree-LSTM (forward and gradients),
//! padding, the validity rule, and rejection of malformed transitions.

mod common;

use arbor_cells::ArborBackend;
use arbor_cells::GumbelSampler;
use arbor_data::tree::{BinaryTree, Transition, Transition::Reduce as R, Transition::Shift as S};
use arbor_encoders::spinn::{check_transitions, repair_transitions, trace, transition_accuracy};
use arbor_encoders::{
    ClassifierInput, Decisions, EncoderInput, SentenceEncoder, Spinn, SpinnConfig, SpinnError,
    SpinnVariant,
};
use burn::module::{Param, Reinitializer};
use burn::prelude::*;
use burn::tensor::TensorData;
use common::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn spinn<B: ArborBackend>(variant: SpinnVariant, d_in: usize, d: usize) -> Spinn<B> {
    SpinnConfig::new(d_in, d)
        .with_variant(variant)
        .with_d_tracking(3)
        .init(&dev::<B>())
}

fn random_trees(lengths: &[usize], seed: u64) -> Vec<BinaryTree> {
    let mut rng = StdRng::seed_from_u64(seed);
    lengths
        .iter()
        .map(|&n| BinaryTree::random(n, &mut rng).unwrap())
        .collect()
}

fn transitions(trees: &[BinaryTree]) -> Vec<Vec<Transition>> {
    trees.iter().map(BinaryTree::to_transitions).collect()
}

#[test]
fn thin_stack_trace_of_spot_sat_down() {
    // docs/models.md §3: rows written at t = 1..5 and the live pointer queue after each step.
    let t = trace(&[S, S, S, R, R]).unwrap();
    let rows: Vec<_> = t.iter().map(|s| s.written).collect();
    assert_eq!(rows, vec![Some(1), Some(2), Some(3), Some(4), Some(5)]);
    let words: Vec<_> = t.iter().map(|s| s.word).collect();
    assert_eq!(words, vec![Some(0), Some(1), Some(2), None, None]); // Spot, sat, down
    let queues: Vec<_> = t.iter().map(|s| s.queue.clone()).collect();
    assert_eq!(
        queues,
        vec![vec![1], vec![1, 2], vec![1, 2, 3], vec![1, 4], vec![5]]
    );
    // SKIP padding writes nothing and leaves the queue alone.
    let padded = trace(&[S, S, S, R, R, Transition::Skip]).unwrap();
    assert_eq!(padded[5].written, None);
    assert_eq!(padded[5].queue, vec![5]);
}

#[test]
fn malformed_transitions_are_rejected_with_a_clear_error() {
    let cases: [(&[Transition], usize, &str); 5] = [
        (
            &[S, S, R, R],
            2,
            "4 SHIFT/REDUCE steps for 2 word(s); expected 3",
        ),
        (&[S, R, S], 2, "step 2: REDUCE with 1 item(s) on the stack"),
        (&[S, S, S], 2, "step 3: SHIFT with an empty buffer"),
        (
            &[S, Transition::Skip, S, R],
            2,
            "step 2: SKIP before the sentence is complete",
        ),
        (&[], 1, "0 SHIFT/REDUCE steps for 1 word(s)"),
    ];
    for (ts, n, msg) in cases {
        let e = check_transitions(4, n, ts).unwrap_err().to_string();
        assert!(e.contains("sentence 4") && e.contains(msg), "{e}");
    }
    // Through the encoder's strict path: count mismatch, bad sequence, and none at all.
    let m = spinn::<Fx>(SpinnVariant::Pi, 3, 4);
    let x = padded_batch::<Fx>(&[2, 3], 3, 3, 1);
    let input = |ts: Option<Vec<Vec<Transition>>>| EncoderInput {
        embeddings: x.clone(),
        lengths: vec![2, 3],
        transitions: ts,
    };
    let e = m
        .forward(input(Some(vec![vec![S, S, R]])), Decisions::Argmax)
        .unwrap_err();
    assert_eq!(
        e,
        SpinnError::Count {
            sentences: 2,
            sequences: 1
        }
    );
    let e = m
        .forward(
            input(Some(vec![vec![S, S, R], vec![S, S, R, R, S]])),
            Decisions::Argmax,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("sentence 1: malformed transitions: step 4"),
        "{e}"
    );
    let e = m.forward(input(None), Decisions::Argmax).unwrap_err();
    assert!(e.to_string().contains("needs gold transitions"), "{e}");
    let e = m
        .forward(
            EncoderInput::new(x.clone(), vec![2, 4]).with_transitions(vec![vec![]; 2]),
            Decisions::Argmax,
        )
        .unwrap_err();
    assert!(matches!(
        e,
        SpinnError::Length {
            sentence: 1,
            length: 4,
            time: 3
        }
    ));
    // The infallible path repairs instead of panicking, and says so in its docs.
    let out = m.encode(input(Some(vec![vec![R, R], vec![]])), Decisions::Argmax);
    assert_eq!(out.sentence.dims(), [2, 4]);
    assert_eq!(repair_transitions(3, &[]), vec![S, S, S, R, R]);
    assert_eq!(repair_transitions(3, &[R, S, S, S, S]), vec![S, S, S, R, R]);
    assert_eq!(repair_transitions(2, &[S, S, R]), vec![S, S, R]);
}

/// SPINN-PI-NT (batched, thin stack) against the per-sentence recursion on the same trees.
#[test]
fn pi_nt_equals_the_recursive_tree_lstm_forward_and_gradients() {
    for (seed, lengths) in [
        (1u64, vec![5usize, 1, 3, 7]),
        (2, vec![6]),
        (3, vec![2, 8, 4, 4, 1]),
    ] {
        let (d_in, d) = (3, 4);
        let time = *lengths.iter().max().unwrap();
        let m = spinn::<Ad>(SpinnVariant::PiNt, d_in, d);
        let trees = random_trees(&lengths, seed);
        let w = tensor::<Ad, 2>([lengths.len(), d], 1.0, seed + 7);
        let run = |thin: bool| {
            let x = padded_batch::<Ad>(&lengths, time, d_in, seed).require_grad();
            let root = if thin {
                m.forward(
                    EncoderInput::new(x.clone(), lengths.clone())
                        .with_transitions(transitions(&trees)),
                    Decisions::Argmax,
                )
                .unwrap()
                .root
            } else {
                m.encode_recursive(x.clone(), &lengths, &trees).unwrap()
            };
            let loss = root
                .h
                .clone()
                .mul(w.clone())
                .sum()
                .add(root.c.clone().sum());
            let grads = loss.backward();
            let g = |p: &Param<Tensor<Ad, 2>>| to_vec(p.grad(&grads).unwrap());
            (
                to_vec(root.h.inner()),
                to_vec(root.c.inner()),
                to_vec(x.grad(&grads).unwrap()),
                g(&m.projection.weight),
                g(&m.composition.children.weight),
            )
        };
        let (a, b) = (run(true), run(false));
        let what = format!("lengths {lengths:?}");
        assert_close(&a.0, &b.0, 1e-5, &format!("{what}: h"));
        assert_close(&a.1, &b.1, 1e-5, &format!("{what}: c"));
        assert_close(&a.2, &b.2, 1e-5, &format!("{what}: d/dx"));
        assert_close(&a.3, &b.3, 1e-5, &format!("{what}: d/d projection"));
        assert_close(&a.4, &b.4, 1e-5, &format!("{what}: d/d composition"));
        assert!(a.4.iter().any(|v| v.abs() > 1e-6) || lengths.iter().all(|&n| n == 1));
        // Padding never reaches a real result: its gradient is exactly zero.
        let xg = &a.2;
        for (bi, &n) in lengths.iter().enumerate() {
            for t in n..time {
                for j in 0..d_in {
                    assert_eq!(
                        xg[(bi * time + t) * d_in + j],
                        0.0,
                        "{what}: padding gradient"
                    );
                }
            }
        }
    }
}

/// The thin stack and the buffer as host rows beside the graph (`Autodiff<Flex>`, whose float
/// memory is the host's) against the plain-tensor path every other backend takes
/// (`Autodiff<Counting<Flex>>`: `write_rows` and `select_rows` on one tensor): every variant in
/// training, the same weights, in values and in the gradients of the input and of every
/// parameter (the buffer's projection, the tracking LSTM reading the buffer, the composition,
/// the transition classifier through its teacher-forced loss).
#[test]
fn host_rows_equal_the_tensor_path_in_values_and_gradients() {
    use arbor_kernels::counting::Counting;
    use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
    use burn::tensor::backend::AutodiffBackend;
    type Ac = burn::backend::Autodiff<Counting<Fx>>;

    let lengths = [4usize, 1, 6, 3];
    let (d_in, d, time) = (3, 5, 6);
    let trees = random_trees(&lengths, 21);
    fn run<B: arbor_cells::ArborAutodiffBackend>(
        m: Spinn<B>,
        lengths: &[usize],
        trees: &[BinaryTree],
        shape: [usize; 3],
    ) -> Vec<Vec<f64>> {
        let x = padded_batch::<B>(lengths, shape[1], shape[2], 22).require_grad();
        let out = m
            .forward(
                EncoderInput::new(x.clone(), lengths.to_vec()).with_transitions(transitions(trees)),
                Decisions::Argmax,
            )
            .unwrap();
        let w = tensor::<B, 2>([lengths.len(), out.root.h.dims()[1]], 1.0, 23);
        let mut loss = out.root.h.clone().mul(w).sum() + out.root.c.clone().sum();
        if let Some(aux) = out.transition_loss {
            loss = loss + aux;
        }
        let g = loss.backward();
        let mut all = vec![
            to_vec(out.root.h),
            to_vec(out.root.c),
            to_vec(x.grad(&g).expect("input gradient")),
        ];
        struct Collect<'a, B: AutodiffBackend> {
            g: &'a B::Gradients,
            out: Vec<Vec<f64>>,
        }
        impl<B: arbor_cells::ArborAutodiffBackend> burn::module::ModuleVisitor<B> for Collect<'_, B> {
            fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
                // A parameter no path reaches (the classifier of PI) has no gradient: zeros.
                let v = p
                    .val()
                    .grad(self.g)
                    .map(to_vec)
                    .unwrap_or_else(|| vec![0.0; p.val().shape().num_elements()]);
                self.out.push(v);
            }
        }
        let mut c = Collect::<B> {
            g: &g,
            out: Vec::new(),
        };
        m.visit(&mut c);
        all.extend(c.out);
        all
    }
    for &variant in <SpinnVariant as arbor_cells::names::VariantArray>::VARIANTS {
        let config = SpinnConfig::new(d_in, d)
            .with_variant(variant)
            .with_d_tracking(3);
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let base = config.init::<Fx>(&dev::<Fx>());
        let bytes = Recorder::<Fx>::record(&recorder, base.into_record(), ()).expect("record");
        let rh = Recorder::<Ad>::load(&recorder, bytes.clone(), &dev::<Ad>()).expect("load");
        let rt = Recorder::<Ac>::load(&recorder, bytes, &dev::<Ac>()).expect("load");
        let host = run(
            config.init::<Ad>(&dev::<Ad>()).load_record(rh),
            &lengths,
            &trees,
            [lengths.len(), time, d_in],
        );
        let plain = run(
            config.init::<Ac>(&dev::<Ac>()).load_record(rt),
            &lengths,
            &trees,
            [lengths.len(), time, d_in],
        );
        assert_eq!(host.len(), plain.len(), "{variant}");
        for (k, (a, b)) in host.iter().zip(&plain).enumerate() {
            assert_close(a, b, 1e-5, &format!("{variant}: output or gradient {k}"));
        }
        // The projection's weight (the buffer's gradient) is reached in every variant.
        assert!(host[3..].iter().flatten().any(|&v| v != 0.0), "{variant}");
    }
}

/// Each sentence alone gives what it gives in a padded batch, for every variant, in training
/// (teacher forcing) and evaluation (full SPINN: its own parse).
#[test]
fn a_sentence_alone_equals_the_same_sentence_in_a_padded_batch() {
    let lengths = [4usize, 1, 6, 2];
    let (d_in, d, time) = (3, 5, 7);
    let trees = random_trees(&lengths, 11);
    let x = padded_batch::<Fx>(&lengths, time, d_in, 12);
    for (&variant, input) in <SpinnVariant as arbor_cells::names::VariantArray>::VARIANTS
        .iter()
        .flat_map(|v| {
            [
                (v, ClassifierInput::Hidden),
                (v, ClassifierInput::HiddenCell),
            ]
        })
    {
        let m = SpinnConfig::new(d_in, d)
            .with_variant(variant)
            .with_d_tracking(3)
            .with_classifier_input(Some(input))
            .init::<Fx>(&dev::<Fx>());
        for eval in [false, true] {
            let mut sampler = GumbelSampler::seeded(0);
            let all = m
                .forward(
                    EncoderInput::new(x.clone(), lengths.to_vec())
                        .with_transitions(transitions(&trees)),
                    decisions(eval, &mut sampler),
                )
                .unwrap();
            for (b, &n) in lengths.iter().enumerate() {
                let one = m
                    .forward(
                        EncoderInput::new(alone(&x, b, n), vec![n])
                            .with_transitions(vec![trees[b].to_transitions()]),
                        decisions(eval, &mut sampler),
                    )
                    .unwrap();
                let what = format!("{variant} ({input} classifier) eval={eval} sentence {b}");
                assert_close(&row(&all.root.h, b), &row(&one.root.h, 0), 1e-5, &what);
                assert_close(&row(&all.root.c, b), &row(&one.root.c, 0), 1e-5, &what);
                assert_eq!(all.transitions[b], one.transitions[0], "{what}");
            }
            let parsed = variant == SpinnVariant::Full && eval;
            assert_eq!(all.parsed, parsed);
            assert_eq!(
                all.transition_loss.is_some(),
                variant == SpinnVariant::Full && !eval
            );
            if !parsed {
                assert_eq!(all.transitions, transitions(&trees));
            }
        }
    }
}

/// Evaluation (argmax) or training (sampling) decisions.
fn decisions(eval: bool, s: &mut GumbelSampler) -> Decisions<'_> {
    if eval {
        Decisions::Argmax
    } else {
        Decisions::Sample(s)
    }
}

/// Sets the classifier's bias to `bias` and scales its weight by `scale`.
fn force_classifier(m: &mut Spinn<Fx>, bias: [f32; 2], scale: f32) {
    let c = m.classifier.as_mut().expect("full SPINN");
    c.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(bias.to_vec(), [2]),
        &dev::<Fx>(),
    )));
    c.weight = Param::from_tensor(c.weight.val().mul_scalar(scale));
}

#[test]
fn the_validity_rule_holds_whatever_the_classifier_says() {
    let lengths = [1usize, 2, 3, 5, 8, 4];
    let (d_in, d, time) = (3, 4, 8);
    for seed in 0..8u64 {
        let x = padded_batch::<Fx>(&lengths, time, d_in, 100 + seed);
        let mut m = spinn::<Fx>(SpinnVariant::Full, d_in, d);
        let (bias, scale) = match seed % 4 {
            0 => ([1e4, -1e4], 1.0), // always SHIFT
            1 => ([-1e4, 1e4], 1.0), // always REDUCE
            2 => ([0.0, 0.0], 1e3),  // extreme, input-dependent
            _ => ([0.0, 0.0], 1.0),  // as initialised
        };
        force_classifier(&mut m, bias, scale);
        let out = m.encode(EncoderInput::new(x, lengths.to_vec()), Decisions::Argmax);
        let trees = out
            .trees
            .expect("full SPINN returns its parses at evaluation");
        for (b, (tree, &n)) in trees.iter().zip(&lengths).enumerate() {
            assert_eq!(
                tree.leaves(),
                (0..n).collect::<Vec<_>>(),
                "seed {seed} sentence {b}"
            );
            check_transitions(b, n, &tree.to_transitions()).unwrap();
        }
        match seed % 4 {
            // Always SHIFT: every word shifted first, then forced REDUCEs (right-branching).
            0 => assert_eq!(trees[4], BinaryTree::right_branching(8).unwrap()),
            // Always REDUCE: reduce as soon as two items exist (left-branching).
            1 => assert_eq!(trees[4], BinaryTree::left_branching(8).unwrap()),
            _ => {}
        }
    }
}

#[test]
fn full_spinn_trains_its_classifier_and_reports_transition_accuracy() {
    let lengths = [3usize, 5, 1];
    let (d_in, d, time) = (3, 4, 5);
    let trees = random_trees(&lengths, 5);
    let m = SpinnConfig::new(d_in, d)
        .with_variant(SpinnVariant::Full)
        .with_transition_weight(2.0)
        .init::<Ad>(&dev::<Ad>());
    let x = padded_batch::<Ad>(&lengths, time, d_in, 6);
    let mut sampler = GumbelSampler::seeded(1);
    let out = m.encode(
        EncoderInput::new(x.clone(), lengths.to_vec()).with_transitions(transitions(&trees)),
        Decisions::Sample(&mut sampler),
    );
    assert!(out.trees.is_none(), "training follows the gold trees");
    let aux = out
        .aux_loss
        .expect("teacher forcing gives a transition loss");
    let v = aux.clone().into_scalar();
    // Near-uniform initial classifier: about α·ln 2.
    assert!((v - 2.0 * std::f32::consts::LN_2).abs() < 0.5, "{v}");
    let grads = aux.backward();
    let g = m.classifier.as_ref().unwrap().weight.grad(&grads).unwrap();
    assert!(to_vec(g).iter().any(|v| v.abs() > 0.0));
    // Accuracy helper: step-aligned, SKIPs ignored.
    let gold = vec![vec![S, S, R], vec![S]];
    let pred = vec![vec![S, S, S], vec![S, Transition::Skip]];
    assert_eq!(transition_accuracy(&pred, &gold), (3, 4));
}

#[test]
fn sentence_vector_is_the_root_h() {
    let m = spinn::<Fx>(SpinnVariant::Pi, 3, 4);
    assert_eq!(m.d_output(), 4);
    assert_eq!(m.variant(), SpinnVariant::Pi);
    let x = padded_batch::<Fx>(&[3], 3, 3, 2);
    let ts = vec![vec![S, S, S, R, R]];
    let a = m.forward(
        EncoderInput::new(x.clone(), vec![3]).with_transitions(ts.clone()),
        Decisions::Argmax,
    );
    let b = m.encode(
        EncoderInput::new(x, vec![3]).with_transitions(ts),
        Decisions::Argmax,
    );
    assert_eq!(to_vec(a.unwrap().root.h), to_vec(b.sentence));
    assert!(b.trees.is_none());
}

#[test]
fn spinn_kinds_in_the_common_configuration() {
    use arbor_encoders::{Encoder, EncoderConfig, EncoderKind};
    for (name, kind, variant) in [
        ("spinn-pi-nt", EncoderKind::SpinnPiNt, SpinnVariant::PiNt),
        ("spinn-pi", EncoderKind::SpinnPi, SpinnVariant::Pi),
        ("spinn", EncoderKind::Spinn, SpinnVariant::Full),
    ] {
        assert_eq!(name.parse::<EncoderKind>(), Ok(kind));
        assert_eq!(kind.to_string(), name);
        assert_eq!(variant.to_string(), name);
        assert!(kind.needs_transitions());
        assert_eq!(kind.induces_trees(), variant == SpinnVariant::Full);
        let EncoderConfig::Spinn(spinn) = EncoderConfig::of_kind(kind, 3, 6) else {
            panic!("{name}: a SPINN configuration")
        };
        let config = EncoderConfig::from(spinn.with_d_tracking(2));
        assert_eq!(config.kind(), kind);
        let enc: Encoder<Fx> = config.init(&dev::<Fx>());
        let Encoder::Spinn(s) = &enc else {
            panic!("{name}: a SPINN encoder")
        };
        assert_eq!(s.variant(), variant);
        assert_eq!(
            s.tracker.as_ref().map(|t| t.d_hidden),
            (variant != SpinnVariant::PiNt).then_some(2)
        );
        let out = enc.encode(
            EncoderInput::new(padded_batch::<Fx>(&[2, 3], 3, 3, 4), vec![2, 3])
                .with_transitions(vec![vec![S, S, R], vec![S, S, R, S, R]]),
            Decisions::Argmax,
        );
        assert_eq!(out.sentence.dims(), [2, 6]);
    }
    assert!(!EncoderKind::Lstm.needs_transitions() && !EncoderKind::Gumbel.needs_transitions());
}

#[test]
fn the_transition_classifier_reads_h_or_h_and_c() {
    let (d_in, d, dt) = (3, 4, 3);
    let build = |input: Option<ClassifierInput>| {
        SpinnConfig::new(d_in, d)
            .with_variant(SpinnVariant::Full)
            .with_d_tracking(dt)
            .with_classifier_input(input)
            .init::<Ad>(&dev::<Ad>())
    };
    // The default is the PyTorch port's [h; c]; the width of the classifier's input says which.
    assert_eq!(
        SpinnConfig::new(d_in, d).transition_input(),
        ClassifierInput::HiddenCell
    );
    for (input, width) in [
        (None, dt),
        (Some(ClassifierInput::Hidden), dt),
        (Some(ClassifierInput::HiddenCell), 2 * dt),
    ] {
        let m = build(input);
        let c = m.classifier.as_ref().unwrap();
        assert_eq!(c.weight.dims(), [width, 2], "{input:?}");
        let want = input.unwrap_or(ClassifierInput::Hidden);
        assert_eq!(m.transition_input(), Some(want));
    }
    assert_eq!(
        spinn::<Fx>(SpinnVariant::Pi, d_in, d).transition_input(),
        None
    );

    // [h; c] with the h rows and the bias zeroed: the loss (and so the predictions) depend on
    // the c rows alone.
    let lengths = [3usize, 5, 2];
    let trees = random_trees(&lengths, 7);
    let x = padded_batch::<Ad>(&lengths, 5, d_in, 8);
    // One model for both losses, its weights drawn from a generator of its own (Burn's
    // `Reinitializer`): the backends' global one is shared by the tests of this binary running
    // in parallel, so the tracker's c, and how far it moves the loss, would vary between runs.
    let base = Reinitializer::new()
        .random_float(11, -0.5, 0.5)
        .apply(build(Some(ClassifierInput::HiddenCell)));
    let loss = |c_rows: Tensor<Ad, 2>| {
        let mut m = base.clone();
        let c = m.classifier.as_mut().unwrap();
        let w = Tensor::cat(vec![Tensor::zeros([dt, 2], &dev::<Ad>()), c_rows], 0);
        c.weight = Param::from_tensor(w);
        c.bias = Some(Param::from_tensor(Tensor::zeros([2], &dev::<Ad>())));
        let out = m.encode(
            EncoderInput::new(x.clone(), lengths.to_vec()).with_transitions(transitions(&trees)),
            Decisions::Sample(&mut GumbelSampler::seeded(0)),
        );
        let aux = out.aux_loss.expect("a transition loss");
        let value = aux.clone().into_scalar() as f64;
        let grads = aux.backward();
        let g = m.classifier.as_ref().unwrap().weight.grad(&grads).unwrap();
        (value, to_vec(g.narrow(0, dt, dt)))
    };
    let (flat, _) = loss(Tensor::zeros([dt, 2], &dev::<Ad>()));
    assert!((flat - std::f64::consts::LN_2).abs() < 1e-6, "{flat}");
    let (value, g) = loss(tensor::<Ad, 2>([dt, 2], 3.0, 9));
    // A loss that ignored c would equal `flat` to the bit.
    assert!(
        (value - flat).abs() > 1e-3,
        "the loss ignores c: {value} against {flat}"
    );
    assert!(
        g.iter().any(|v| v.abs() > 0.0),
        "no gradient reaches the c rows"
    );
}

#[test]
fn old_configurations_keep_an_h_classifier() {
    let old = r#"{"d_input": 3, "d_hidden": 4, "variant": "full", "d_tracking": 0,
                  "transition_weight": 1.0}"#;
    let config: SpinnConfig = serde_json::from_str(old).unwrap();
    assert_eq!(config.classifier_input, None);
    assert_eq!(config.transition_input(), ClassifierInput::Hidden);
    let m = config.init::<Fx>(&dev::<Fx>());
    assert_eq!(m.classifier.as_ref().unwrap().weight.dims(), [4, 2]);
    let json = serde_json::to_string(&SpinnConfig::new(3, 4)).unwrap();
    assert!(json.contains("\"classifier_input\":\"h-c\""), "{json}");
    let back: SpinnConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back.transition_input(), ClassifierInput::HiddenCell);
    assert_eq!("h".parse::<ClassifierInput>(), Ok(ClassifierInput::Hidden));
    assert_eq!(
        "h-c".parse::<ClassifierInput>(),
        Ok(ClassifierInput::HiddenCell)
    );
}
