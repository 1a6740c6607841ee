//! Training curves: the metrics log drawn as an SVG at the end of a run.
//!
//! Two panels against the optimizer step: the mean training loss of every `train` window, and
//! the selection metric of the first evaluation split (the records carrying
//! [`SELECTION_METRIC`]; logs written before that key existed fall back to the accuracy of the
//! first `eval:` split they name).

use std::path::Path;

use plotters::prelude::*;

use crate::log::{MetricsLog, MetricsRecord};

/// Key, in the `extra` of the first split's evaluation records, of the value model selection
/// maximises.
pub(super) const SELECTION_METRIC: &str = "selection_metric";

type Points = Vec<(f64, f64)>;

/// The training-loss points and the validation points (with the split's name) of `records`.
fn series(records: &[MetricsRecord]) -> (Points, Points, String) {
    let finite = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let loss: Points = records
        .iter()
        .filter(|r| r.kind == "train")
        .filter_map(|r| r.loss.map(|l| (r.step as f64, l)))
        .filter(finite)
        .collect();
    let selected: Vec<&MetricsRecord> = records
        .iter()
        .filter(|r| r.kind.starts_with("eval:") && r.extra.contains_key(SELECTION_METRIC))
        .collect();
    let (evals, metric) = if selected.is_empty() {
        // An older log: the first split named, by accuracy.
        let first = records.iter().find(|r| r.kind.starts_with("eval:"));
        let kind = first.map(|r| r.kind.clone()).unwrap_or_default();
        let pts = records
            .iter()
            .filter(|r| r.kind == kind)
            .filter_map(|r| r.accuracy.map(|a| (r.step as f64, a)))
            .collect::<Points>();
        (pts, format!("{} accuracy", split_name(&kind)))
    } else {
        let pts = selected
            .iter()
            .filter_map(|r| {
                let v = r.extra.get(SELECTION_METRIC)?.as_f64()?;
                Some((r.step as f64, v))
            })
            .collect::<Points>();
        (
            pts,
            format!("{} selection metric", split_name(&selected[0].kind)),
        )
    };
    (loss, evals.into_iter().filter(finite).collect(), metric)
}

fn split_name(kind: &str) -> &str {
    kind.strip_prefix("eval:").unwrap_or("validation")
}

/// A padded range around `values` (never empty).
fn range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let pad = ((hi - lo) * 0.05).max(1e-6 * hi.abs().max(1.0));
    (lo - pad)..(hi + pad)
}

/// Draws the metrics log at `log` as an SVG at `svg`.
///
/// # Errors
/// The log cannot be read or the SVG written; the message says which.
pub(super) fn draw_curves(log: &Path, svg: &Path) -> Result<(), String> {
    let records = MetricsLog::new(log)
        .and_then(|l| l.read())
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let (loss, evals, metric) = series(&records);
    let x_max = loss.iter().chain(&evals).map(|p| p.0).fold(1.0, f64::max);
    let mut text = String::new();
    draw(&mut text, x_max, &loss, &evals, &metric).map_err(|e| format!("drawing: {e}"))?;
    // Written whole under a temporary name and renamed, so a reader never sees half a file.
    let tmp = svg.with_extension("svg.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, svg))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("{}: {e}", svg.display())
        })
}

fn draw(
    text: &mut String,
    x_max: f64,
    loss: &[(f64, f64)],
    evals: &[(f64, f64)],
    metric: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(text, (900, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let specs = [
        (&panels[0], "training loss", loss, BLUE),
        (&panels[1], metric, evals, RED),
    ];
    for (area, title, points, color) in specs {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, range(points.iter().map(|p| p.1)))?;
        chart.configure_mesh().x_desc("step").y_desc(title).draw()?;
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    root.present()?;
    Ok(())
}
