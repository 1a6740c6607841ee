//! Training curves.

use arbor_train::*;

use super::support::{config, fresh, log, serial, Probe};

#[test]
fn a_run_draws_its_curves_as_svg() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let task = Probe::new(7);
    let mut c = config(dir.path());
    c.eval_every = 3;
    train(&task, fresh(1), &c, &Default::default()).unwrap();
    let svg = std::fs::read_to_string(c.curves()).unwrap();
    assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("training loss") && svg.contains("valid selection metric"));
    assert!(
        svg.matches("<polyline").count() >= 2,
        "both curves are drawn"
    );
    // Only the first split carries the selection metric in the log.
    let records = log(dir.path());
    assert!(records
        .iter()
        .filter(|r| r.kind == "eval:valid")
        .all(|r| r.extra.contains_key("selection_metric")));
    assert!(records
        .iter()
        .filter(|r| r.kind == "eval:test")
        .all(|r| !r.extra.contains_key("selection_metric")));

    // An unwritable destination is only a warning: the run still succeeds.
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    std::fs::create_dir_all(c.curves().join("blocker")).unwrap();
    train(&task, fresh(1), &c, &Default::default()).unwrap();
}
