//! The parity comparison that `arbor-gpu-check` runs with CUDA against the CPU, run here with
//! the ndarray backend against flex: every fused op and every encoder, forward and backward,
//! must agree, and a backend that computes something else must be caught.

use arbor_bench::parity::{compare, compare_all, within_tolerance, Case, Op, Size};
use burn::backend::{Flex, NdArray};

#[test]
fn every_op_and_encoder_agrees_between_ndarray_and_flex() {
    let records = compare_all::<NdArray<f32>, Flex>(
        &Case::all(),
        &[Size::Small],
        &Default::default(),
        &Default::default(),
        |_| {},
    );
    assert_eq!(records.len(), Case::all().len());
    for r in &records {
        assert!(
            r.passed,
            "{} ({}): {:?} {:?}",
            r.name, r.size, r.error, r.tensors
        );
        // Something was compared: the output and, except for zeros, gradients.
        let expected = if r.name == "zeros" { 1 } else { 2 };
        assert!(r.tensors.len() >= expected, "{}: {:?}", r.name, r.tensors);
        assert!(r.tensors.iter().all(|t| t.len > 0), "{}", r.name);
    }
    // Encoders compare their parameters' gradients too.
    let gumbel = records.iter().find(|r| r.name == "gumbel").unwrap();
    assert!(
        gumbel
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("grad "))
            .count()
            > 3,
        "{:?}",
        gumbel.tensors
    );
}

#[test]
fn the_same_backend_on_both_sides_is_exact() {
    let r = compare::<Flex, Flex>(
        Case::Op(Op::GatedCellTree),
        Size::Small,
        &Default::default(),
        &Default::default(),
    );
    assert!(r.passed && r.max_abs == 0.0 && r.rel_l2 == 0.0, "{r:?}");
}

#[test]
fn a_difference_beyond_the_tolerance_fails() {
    let reference = [0.5f32, -1.0, 2.0];
    assert!(within_tolerance(&[0.5005, -1.001, 2.004], &reference));
    assert!(!within_tolerance(&[0.5, -1.0, 2.1], &reference));
}
