//! Shared by the fixture tests: reading a fixture directory written by
//! `crates/arbor-convert/fixtures/<name>.py` and comparing outputs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use arbor_convert::{Array, StateDict};

/// One fixture: the reference state dict, the expected outputs and the inputs.
pub struct Fixture {
    /// `state_dict.pt`.
    pub state_dict: StateDict,
    /// `expected.pt`: output name → values.
    pub expected: BTreeMap<String, Array>,
    /// `inputs.json`.
    pub inputs: serde_json::Value,
    /// The fixture directory.
    pub dir: PathBuf,
}

/// Reads `tests/fixtures/<name>/`.
pub fn fixture(name: &str) -> Fixture {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let state_dict = StateDict::read(&dir.join("state_dict.pt")).expect("state_dict.pt");
    let expected_sd = StateDict::read(&dir.join("expected.pt")).expect("expected.pt");
    let keys: Vec<(String, Vec<usize>)> = expected_sd
        .entries()
        .map(|(k, s)| (k.to_string(), s.to_vec()))
        .collect();
    let mut expected_sd = expected_sd;
    let expected = keys
        .into_iter()
        .map(|(k, s)| {
            let a = expected_sd.take(&k, &s).unwrap();
            (k, a)
        })
        .collect();
    let inputs = serde_json::from_str(
        &std::fs::read_to_string(dir.join("inputs.json")).expect("inputs.json"),
    )
    .expect("inputs.json is JSON");
    Fixture {
        state_dict,
        expected,
        inputs,
        dir,
    }
}

/// Asserts `actual` (row-major, `shape`) equals the expected output `name` within `tol`
/// (absolute), naming the first differing element.
pub fn assert_close(fx: &Fixture, name: &str, actual: &[f32], shape: &[usize], tol: f32) {
    let e = fx
        .expected
        .get(name)
        .unwrap_or_else(|| panic!("{}: no expected output `{name}`", fx.dir.display()));
    assert_eq!(e.shape(), shape, "{name}: shape");
    let mut worst = (0usize, 0f32);
    for (i, (a, b)) in actual.iter().zip(e.values()).enumerate() {
        let d = (a - b).abs();
        if d.is_nan() || d > worst.1 {
            worst = (i, if d.is_nan() { f32::INFINITY } else { d });
        }
    }
    assert!(
        worst.1 <= tol,
        "{name}: element {} is {} in arbor and {} in the reference (|diff| {} > {tol})",
        worst.0,
        actual[worst.0],
        e.values()[worst.0],
        worst.1
    );
}

/// A value of a fixture's `inputs.json`.
pub fn input<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

/// A bracketed tree with spaces around every bracket and one space between tokens:
/// `((a b) c)` and `( ( a b ) c )` agree.
pub fn normalised_tree(tree: &str) -> String {
    tree.replace('(', " ( ")
        .replace(')', " ) ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the `arbor-convert` binary of this build, set up by `configure`.
fn run_arbor_convert(configure: impl FnOnce(&mut std::process::Command)) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_arbor-convert"));
    configure(&mut cmd);
    cmd.output().unwrap()
}

/// Runs the `arbor-convert` binary of this build, set up by `configure`; panics with its stderr unless it
/// succeeds.
pub fn arbor_convert(configure: impl FnOnce(&mut std::process::Command)) {
    let output = run_arbor_convert(configure);
    assert!(
        output.status.success(),
        "arbor-convert failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs the `arbor-convert` binary of this build, set up by `configure`, expecting it to fail;
/// returns its stderr (panics if it succeeds).
pub fn arbor_convert_error(configure: impl FnOnce(&mut std::process::Command)) -> String {
    let output = run_arbor_convert(configure);
    assert!(!output.status.success(), "arbor-convert succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The index of the largest of three logits (the first on ties).
pub fn argmax(row: &[f32; 3]) -> usize {
    (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b })
}
