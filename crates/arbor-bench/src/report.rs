//! Turning records into the outputs: JSON, a markdown table, derived ratios, scaling fits and
//! SVG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{Mode, Record};

/// A derived ratio: `median time of numerator / median time of denominator`, per mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatioSpec {
    /// What the ratio means, e.g. `recursive / thin-stack time (thin-stack speed-up)`.
    pub label: &'static str,
    /// Workload whose time is the numerator.
    pub numerator: &'static str,
    /// Workload whose time is the denominator.
    pub denominator: &'static str,
}

/// A computed ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// What it means.
    pub label: String,
    /// Mode.
    pub mode: Mode,
    /// The value.
    pub value: f64,
}

/// Computes every ratio whose two workloads were measured.
pub fn ratios(specs: &[RatioSpec], records: &[Record]) -> Vec<Ratio> {
    let time = |name: &str, mode: Mode| {
        records
            .iter()
            .find(|r| r.name == name && r.mode == mode)
            .map(|r| r.median_ms)
    };
    let mut out = Vec::new();
    for spec in specs {
        for mode in Mode::BOTH {
            if let (Some(a), Some(b)) = (time(spec.numerator, mode), time(spec.denominator, mode)) {
                out.push(Ratio {
                    label: spec.label.to_string(),
                    mode,
                    value: a / b,
                });
            }
        }
    }
    out
}

/// A least-squares fit of `time ∝ xᵏ` over one line of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingFit {
    /// The plot.
    pub plot: String,
    /// The line.
    pub series: String,
    /// Mode.
    pub mode: Mode,
    /// The fitted exponent `k` (1: linear, 2: quadratic).
    pub exponent: f64,
    /// `(x, median ms)` points.
    pub points: Vec<(f64, f64)>,
}

type SweepLines = BTreeMap<(String, String, Mode), Vec<(f64, f64)>>;
/// One line of a plot: series name, mode, points.
type Line = (String, Mode, Vec<(f64, f64)>);

fn sweep_lines(records: &[Record]) -> SweepLines {
    let mut lines: SweepLines = BTreeMap::new();
    for r in records {
        if let Some(s) = &r.sweep {
            lines
                .entry((s.plot.clone(), s.series.clone(), r.mode))
                .or_default()
                .push((s.x, r.median_ms));
        }
    }
    for points in lines.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// The exponent of `y ∝ xᵏ` by least squares on `log y = a + k log x`.
pub fn fit_exponent(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    let n = logs.len() as f64;
    if logs.len() < 2 {
        return f64::NAN;
    }
    let mx = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let my = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = logs.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = logs.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    sxy / sxx
}

/// Scaling fits for every sweep line with at least two points.
pub fn scaling_fits(records: &[Record]) -> Vec<ScalingFit> {
    sweep_lines(records)
        .into_iter()
        .filter(|(_, p)| p.len() >= 2)
        .map(|((plot, series, mode), points)| ScalingFit {
            plot,
            series,
            mode,
            exponent: fit_exponent(&points),
            points,
        })
        .collect()
}

/// Everything one suite run produced, as written to `bench.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// Harness settings.
    pub settings: crate::harness::Settings,
    /// One record per workload and mode.
    pub records: Vec<Record>,
    /// Derived ratios.
    pub ratios: Vec<Ratio>,
    /// Scaling fits.
    pub scaling: Vec<ScalingFit>,
    /// The PyTorch comparison (`--versus pytorch`), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus: Option<crate::versus::Versus>,
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("–".to_string(), |b| {
        format!("{:.0}", b as f64 / 1048576.0)
    })
}

fn rate(items_per_s: f64, unit: &str) -> String {
    let v = if items_per_s >= 1e6 {
        format!("{:.2}M", items_per_s / 1e6)
    } else if items_per_s >= 1e3 {
        format!("{:.1}k", items_per_s / 1e3)
    } else {
        format!("{items_per_s:.1}")
    };
    format!("{v} {unit}/s")
}

/// The markdown report: run facts, one table row per workload and mode, ratios, scaling fits.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    if let Some(first) = report.records.first() {
        let info = &first.run;
        let _ = writeln!(s, "- command: `{}`", report.command);
        let _ = writeln!(
            s,
            "- backend: {} (`--device {}`), machine: {}",
            info.backend, info.device, info.machine
        );
        // The binary's commit, and the checkout's where another binary ran in it.
        let commit = if info.build_commit.is_empty() || info.build_commit == info.git_commit {
            format!("at commit {}", info.git_commit)
        } else {
            format!(
                "built from commit {}, run in a checkout at {}",
                info.build_commit, info.git_commit
            )
        };
        let _ = writeln!(
            s,
            "- arbor {} {}; {} warm-up run(s), then {}–{} timed runs (at least {} s) per workload and mode, {} when the first takes over {} s",
            info.arbor_version,
            commit,
            report.settings.warmup,
            report.settings.min_reps,
            report.settings.max_reps,
            report.settings.min_time_s,
            report.settings.slow_reps,
            report.settings.slow_run_s
        );
        let _ = writeln!(s);
    }
    let compared = report.versus.as_ref().is_some_and(|v| v.skipped.is_none());
    if let Some(v) = &report.versus {
        match &v.skipped {
            Some(why) => {
                let _ = writeln!(s, "- versus PyTorch: skipped ({why})\n");
            }
            None => {
                let _ = writeln!(
                    s,
                    "- versus PyTorch {} (`{}`): the twins (`crates/arbor-bench/pytorch/twins.py`) and, where they run, the authors' own modules (`pytorch/authors.py`, the repository and commit in `bench.json`); {} thread(s) on both sides (arbor's rayon pool; `torch.set_num_threads({})`), each side timed as often as arbor was, {}; {}; arbor/X = arbor throughput ÷ X's throughput (above 1: arbor is faster); *fastest* is against the faster of the two\n",
                    v.torch_version.as_deref().unwrap_or("?"),
                    v.python,
                    v.threads,
                    v.threads,
                    if v.interleaved {
                        "each workload's twins right after its arbor runs"
                    } else {
                        "every twin after every arbor run"
                    },
                    match &v.omp_wait_policy {
                        None => "PyTorch's default OpenMP wait policy (`OMP_WAIT_POLICY` unset)".to_string(),
                        Some(p) => format!("`OMP_WAIT_POLICY={p}` (not PyTorch's default: `PASSIVE` slows its many-small-op workloads on a quiet machine)"),
                    }
                );
            }
        }
    }
    let (extra_head, extra_rule) = if compared {
        (
            " twin ms | authors' ms | arbor/twin | arbor/authors | arbor/fastest |",
            "---:|---:|---:|---:|---:|",
        )
    } else {
        ("", "")
    };
    let _ = writeln!(
        s,
        "| workload | mode | median ms | min–max ms | spread | throughput | peak RSS MiB | device MiB |{extra_head}"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|{extra_rule}");
    for r in &report.records {
        let extra = if compared {
            let ms = |t: &Option<crate::versus::TorchTiming>| {
                t.as_ref()
                    .map_or("—".to_string(), |t| format!("{:.2}", t.median_s * 1e3))
            };
            format!(
                " {} | {} | {} | {} | {} |",
                ms(&r.pytorch),
                ms(&r.pytorch_authors),
                crate::versus::format_ratio(r.ratio_vs_pytorch),
                crate::versus::format_ratio(r.ratio_vs_authors),
                crate::versus::format_ratio(crate::versus::ratio_vs_fastest(r))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2}–{:.2} | {:.0}% | {} | {} | {} |{extra}",
            r.name,
            r.mode.label(),
            r.median_ms,
            r.min_ms,
            r.max_ms,
            r.spread_pct,
            rate(r.items_per_s, &r.unit),
            mib(r.peak_rss_bytes),
            mib(r.device_memory_bytes)
        );
    }
    if let Some(v) = report.versus.as_ref().filter(|v| !v.notes.is_empty()) {
        let _ = writeln!(s, "\n**PyTorch notes**:\n");
        for note in &v.notes {
            let _ = writeln!(s, "- {note}");
        }
    }
    if !report.ratios.is_empty() {
        let _ = writeln!(s, "\n**Derived ratios** (ratios of median times):\n");
        for r in &report.ratios {
            let _ = writeln!(s, "- {} [{}]: **{:.2}**", r.label, r.mode.label(), r.value);
        }
    }
    let per_composition: Vec<&Record> = report
        .records
        .iter()
        .filter(|r| r.us_per_composition.is_some())
        .collect();
    if !per_composition.is_empty() {
        let _ = writeln!(
            s,
            "\n**Time per composition** (R2D2: median time ÷ the compositions of a run; a constant \
             column is work that grows as the compositions do):\n"
        );
        let _ = writeln!(s, "| workload | mode | compositions | µs per composition |");
        let _ = writeln!(s, "|---|---|---:|---:|");
        for r in per_composition {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} |",
                r.name,
                r.mode.label(),
                r.compositions.unwrap_or(0),
                r.us_per_composition.unwrap_or(f64::NAN)
            );
        }
    }
    if !report.scaling.is_empty() {
        let _ = writeln!(
            s,
            "\n**Scaling** (least-squares exponent k of time ∝ nᵏ; 1 is linear):\n"
        );
        for f in &report.scaling {
            let pts: Vec<String> = f
                .points
                .iter()
                .map(|(x, y)| format!("{x}: {y:.1} ms"))
                .collect();
            let _ = writeln!(
                s,
                "- {} / {} [{}]: k = **{:.2}** ({})",
                f.plot,
                f.series,
                f.mode.label(),
                f.exponent,
                pts.join(", ")
            );
        }
    }
    let _ = writeln!(s, "\n**Parameters**\n");
    let mut seen = std::collections::BTreeSet::new();
    for r in &report.records {
        if seen.insert(r.name.clone()) {
            let _ = writeln!(
                s,
                "- `{}`: {} per run; {}",
                r.name,
                format_args!("{} {}", r.items, r.unit),
                r.params
            );
        }
    }
    s
}

/// Draws one SVG per sweep plot (time against `x`, a line per series and mode) into `dir`.
///
/// # Errors
/// When a file cannot be written.
pub fn plots(records: &[Record], dir: &Path) -> Result<Vec<PathBuf>> {
    let lines = sweep_lines(records);
    let mut by_plot: BTreeMap<String, Vec<Line>> = BTreeMap::new();
    let mut x_labels = BTreeMap::new();
    for r in records {
        if let Some(s) = &r.sweep {
            x_labels.insert(s.plot.clone(), s.x_label.clone());
        }
    }
    for ((plot, series, mode), points) in lines {
        by_plot
            .entry(plot)
            .or_default()
            .push((series, mode, points));
    }
    let mut written = Vec::new();
    for (plot, series) in by_plot {
        let path = dir.join(format!("{plot}.svg"));
        draw(
            &path,
            &plot,
            x_labels.get(&plot).map_or("x", |s| s),
            &series,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn draw(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[Line],
) -> Result<(), Box<dyn std::error::Error>> {
    let x_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{title}: median time per batch"),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max * 1.05, 0.0..y_max * 1.1)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("milliseconds")
        .draw()?;
    for (i, (name, mode, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let label = format!("{name} ({})", mode.label());
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Settings;
    use crate::system::RunInfo;
    use crate::versus::{TorchTiming, Versus};

    fn record(name: &str, median_ms: f64) -> Record {
        Record {
            name: name.into(),
            group: "g".into(),
            mode: Mode::Forward,
            params: serde_json::json!({}),
            items: 10,
            unit: "tokens".into(),
            run: RunInfo::collect("flex", "flex"),
            warmup: 0,
            times_ms: vec![median_ms],
            median_ms,
            min_ms: median_ms,
            max_ms: median_ms,
            spread_pct: 0.0,
            items_per_s: 10.0 / (median_ms / 1e3),
            peak_rss_bytes: None,
            device_memory_bytes: None,
            sweep: None,
            compositions: None,
            us_per_composition: None,
            pytorch: None,
            ratio_vs_pytorch: None,
            pytorch_authors: None,
            ratio_vs_authors: None,
        }
    }

    #[test]
    fn the_time_per_composition_is_reported_where_it_was_counted() {
        let mut r2d2 = record("r2d2/pruned-n16", 100.0);
        r2d2.compositions = Some(64);
        r2d2.us_per_composition = Some(100.0 * 1e3 / 64.0);
        let mut report = Report {
            command: "arbor-bench".into(),
            settings: Settings::quick(),
            records: vec![record("g/a", 10.0), r2d2],
            ratios: vec![],
            scaling: vec![],
            versus: None,
        };
        let text = markdown(&report);
        assert!(text.contains("**Time per composition**"), "{text}");
        assert!(
            text.contains("| r2d2/pruned-n16 | forward | 64 | 1562.5 |"),
            "{text}"
        );
        assert!(!text.contains("| g/a | forward | 0 |"), "{text}");
        report.records.pop();
        assert!(!markdown(&report).contains("Time per composition"));
    }

    #[test]
    fn markdown_gains_the_pytorch_columns_only_when_compared() {
        let mut report = Report {
            command: "arbor-bench".into(),
            settings: Settings::quick(),
            records: vec![record("g/a", 100.0), record("g/b", 50.0)],
            ratios: vec![],
            scaling: vec![],
            versus: None,
        };
        let plain = markdown(&report);
        assert!(!plain.contains("PyTorch"), "{plain}");

        let timing = |median_s: f64, source: Option<&str>| TorchTiming {
            median_s,
            min_s: median_s,
            max_s: median_s,
            items_per_s: 10.0 / median_s,
            threads: 2,
            torch_version: "2.15.0".into(),
            times_s: vec![median_s],
            compositions: None,
            source: source.map(str::to_string),
        };
        let lines = vec![
            crate::versus::TwinLine::Timed {
                name: "g/a".into(),
                mode: Mode::Forward,
                timing: timing(0.25, None),
            },
            crate::versus::TwinLine::Timed {
                name: "g/a".into(),
                mode: Mode::Forward,
                timing: timing(0.08, Some("o/r@1234567")),
            },
            crate::versus::TwinLine::Failed {
                name: "g/b".into(),
                error: "no checkout".into(),
                source: Some("r".into()),
            },
        ];
        let notes = crate::versus::attach(&mut report.records, &lines);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("g/b") && notes[0].contains("no PyTorch time"));
        assert!(notes[1].contains("g/b") && notes[1].contains("did not run: no checkout"));
        let a = &report.records[0];
        assert_eq!(a.ratio_vs_pytorch, Some(2.5));
        assert_eq!(a.ratio_vs_authors, Some(0.8));
        assert_eq!(
            a.pytorch_authors.as_ref().unwrap().source.as_deref(),
            Some("o/r@1234567")
        );
        assert_eq!(crate::versus::ratio_vs_fastest(a), Some(0.8));
        assert_eq!(report.records[1].pytorch_authors, None);
        report.versus = Some(Versus {
            framework: "pytorch".into(),
            python: "python3".into(),
            torch_version: Some("2.15.0".into()),
            threads: 2,
            omp_wait_policy: None,
            interleaved: true,
            skipped: None,
            notes,
        });
        let md = markdown(&report);
        assert!(
            md.contains("PyTorch's default OpenMP wait policy (`OMP_WAIT_POLICY` unset)"),
            "{md}"
        );
        if let Some(v) = report.versus.as_mut() {
            v.omp_wait_policy = Some("PASSIVE".into());
        }
        assert!(markdown(&report).contains("`OMP_WAIT_POLICY=PASSIVE` (not PyTorch's default"));
        if let Some(v) = report.versus.as_mut() {
            v.omp_wait_policy = None;
        }
        let md = markdown(&report);
        assert!(
            md.contains("| twin ms | authors' ms | arbor/twin | arbor/authors | arbor/fastest |"),
            "{md}"
        );
        assert!(
            md.contains("| 250.00 | 80.00 | 2.50× | 0.80× | 0.80× |"),
            "{md}"
        );
        assert!(md.contains("| — | — | — | — | — |"), "{md}");
        assert!(md.contains("2 thread(s) on both sides"), "{md}");
        assert!(
            md.contains("each workload's twins right after its arbor runs"),
            "{md}"
        );
        report.versus.as_mut().unwrap().interleaved = false;
        assert!(markdown(&report).contains("every twin after every arbor run"));
        report.versus.as_mut().unwrap().interleaved = true;
        assert!(md.contains("**PyTorch notes**"), "{md}");

        // JSON round trip keeps the new fields.
        let json = serde_json::to_string(&report).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);

        report.versus.as_mut().unwrap().skipped = Some("no torch".into());
        let md = markdown(&report);
        assert!(
            md.contains("skipped (no torch)") && !md.contains("arbor/PyTorch |"),
            "{md}"
        );
    }

    #[test]
    fn exponent_of_power_laws() {
        let lin: Vec<_> = [8.0, 16.0, 32.0].iter().map(|&x| (x, 3.0 * x)).collect();
        assert!((fit_exponent(&lin) - 1.0).abs() < 1e-12);
        let quad: Vec<_> = [8.0, 16.0, 32.0].iter().map(|&x| (x, x * x)).collect();
        assert!((fit_exponent(&quad) - 2.0).abs() < 1e-12);
        assert!(fit_exponent(&[(1.0, 1.0)]).is_nan());
    }
}
