//! Timing: warm-up, repeated timed runs with the device synchronised inside the timed region,
//! peak memory, and one [`Record`] per workload and mode.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::system::{peak_rss_bytes, reset_peak_rss, RunInfo};

/// What a timed run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Evaluation mode: the inner backend (no autodiff graph), `valid()` modules, argmax
    /// decisions.
    Forward,
    /// Training mode: forward on the autodiff backend, then `backward()` of a scalar loss.
    ForwardBackward,
}

impl Mode {
    /// Both modes, forward first.
    pub const BOTH: [Mode; 2] = [Mode::Forward, Mode::ForwardBackward];

    /// `forward` or `forward+backward`.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Forward => "forward",
            Mode::ForwardBackward => "forward+backward",
        }
    }
}

/// One forward (or forward+backward) pass of a workload. It must end by reading back a scalar
/// that depends on everything it computed (a sum of the outputs, or of a gradient), so no
/// backend can skip or defer the work; the harness checks that scalar is finite.
pub type Run = Box<dyn FnMut(Mode) -> f64>;

/// Where a workload sits in a scaling sweep: it becomes one point of a plot of time against `x`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The plot's file stem (`gumbel-length` → `gumbel-length.svg`).
    pub plot: String,
    /// The line this point belongs to.
    pub series: String,
    /// The x coordinate (a sentence length).
    pub x: f64,
    /// The x axis's label.
    pub x_label: String,
}

/// A benchmark workload: fixed parameters, and a builder that allocates the model and the
/// seeded random input only when the workload is selected.
pub struct Workload {
    /// Unique name, `group/...`.
    pub name: String,
    /// The suite it belongs to (`cells`, `gumbel`, `spinn`, `r2d2`, ...).
    pub group: String,
    /// Every parameter that defines the workload, written into the output.
    pub params: serde_json::Value,
    /// Items processed by one run (sentences or tokens).
    pub items: usize,
    /// What an item is: `sentences` or `tokens`.
    pub unit: &'static str,
    /// The modes it is timed in.
    pub modes: Vec<Mode>,
    /// Its place in a scaling sweep, if it is part of one.
    pub sweep: Option<SweepPoint>,
    /// Allocates the model and the input and returns the run closure.
    pub build: Box<dyn FnOnce() -> Run>,
    /// Inputs the PyTorch twin needs to run on exactly this workload's data (lengths, trees),
    /// handed to `pytorch/twins.py` by `--versus pytorch`.
    pub twin_inputs: Option<serde_json::Value>,
    /// Where the run closure leaves the number of compositions its last run made (R2D2, whose
    /// pruned chart's work depends on its decisions), for the time per composition.
    pub compositions: Option<Rc<Cell<u64>>>,
}

impl Workload {
    /// A workload timed in both modes, outside any sweep.
    pub fn new(
        group: &str,
        name: impl Into<String>,
        params: serde_json::Value,
        items: usize,
        unit: &'static str,
        build: impl FnOnce() -> Run + 'static,
    ) -> Self {
        Self {
            name: format!("{group}/{}", name.into()),
            group: group.to_string(),
            params,
            items,
            unit,
            modes: Mode::BOTH.to_vec(),
            sweep: None,
            build: Box::new(build),
            twin_inputs: None,
            compositions: None,
        }
    }

    /// Reports the compositions of each run: the run closure stores them in `counter`.
    pub fn with_compositions(mut self, counter: Rc<Cell<u64>>) -> Self {
        self.compositions = Some(counter);
        self
    }

    /// Gives the PyTorch twin this workload's exact inputs (see `pytorch/twins.py`).
    pub fn with_twin_inputs(mut self, inputs: serde_json::Value) -> Self {
        self.twin_inputs = Some(inputs);
        self
    }

    /// Places the workload in a sweep.
    pub fn in_sweep(mut self, plot: &str, series: &str, x: f64, x_label: &str) -> Self {
        self.sweep = Some(SweepPoint {
            plot: plot.to_string(),
            series: series.to_string(),
            x,
            x_label: x_label.to_string(),
        });
        self
    }

    /// Restricts the modes it is timed in.
    pub fn modes(mut self, modes: &[Mode]) -> Self {
        self.modes = modes.to_vec();
        self
    }
}

/// How many times to run each workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Untimed runs before timing (kernel compilation, autotuning, allocator warm-up).
    pub warmup: usize,
    /// Timed runs at least.
    pub min_reps: usize,
    /// Timed runs at most.
    pub max_reps: usize,
    /// Keep repeating (up to `max_reps`) until this much time was spent timing.
    pub min_time_s: f64,
    /// A workload whose first timed run takes longer than this many seconds ...
    pub slow_run_s: f64,
    /// ... is timed only this many times (its spread is still reported).
    pub slow_reps: usize,
}

impl Settings {
    /// The full suite: 1 warm-up, then 3–10 runs and at least 1.5 s per workload and mode;
    /// 2 runs when the first takes over 3 s.
    pub fn full() -> Self {
        Self {
            warmup: 1,
            min_reps: 3,
            max_reps: 10,
            min_time_s: 1.5,
            slow_run_s: 3.0,
            slow_reps: 2,
        }
    }

    /// Smoke runs: no warm-up and one timed run (the numbers include first-run costs such as
    /// kernel compilation; use them only to check that everything runs).
    pub fn quick() -> Self {
        Self {
            warmup: 0,
            min_reps: 1,
            max_reps: 1,
            min_time_s: 0.0,
            slow_run_s: 0.0,
            slow_reps: 1,
        }
    }
}

/// What the backend can tell the harness: how to wait for the device, and how much device
/// memory is held.
pub struct Probe {
    /// Blocks until every queued operation on the device has finished.
    pub sync: Box<dyn Fn() -> Result<()>>,
    /// Bytes the backend's allocator holds on the device, where it reports them.
    pub device_memory: Box<dyn Fn() -> Option<u64>>,
    /// Frees cached device memory between workloads.
    pub cleanup: Box<dyn Fn()>,
}

/// The measurement of one workload in one mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Workload name.
    pub name: String,
    /// Suite.
    pub group: String,
    /// Mode.
    pub mode: Mode,
    /// The workload's parameters.
    pub params: serde_json::Value,
    /// Items per run.
    pub items: usize,
    /// What an item is.
    pub unit: String,
    /// Backend, device, machine, arbor version and git commit.
    pub run: RunInfo,
    /// Warm-up runs.
    pub warmup: usize,
    /// Every timed run, in milliseconds, in order.
    pub times_ms: Vec<f64>,
    /// Median of `times_ms`.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
    /// Spread: `(max − min) / median`, in percent.
    pub spread_pct: f64,
    /// Items per second at the median time.
    pub items_per_s: f64,
    /// Peak resident set size of the process while timing this workload and mode (Linux),
    /// model and inputs included.
    pub peak_rss_bytes: Option<u64>,
    /// Device memory held by the backend's allocator after the timed runs, where reported.
    pub device_memory_bytes: Option<u64>,
    /// Its place in a sweep.
    pub sweep: Option<SweepPoint>,
    /// Compositions of the last timed run (R2D2), and the median time per composition in
    /// microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compositions: Option<u64>,
    /// `median_ms` per composition, in microseconds (R2D2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub us_per_composition: Option<f64>,
    /// The PyTorch twin's timing (`--versus pytorch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch: Option<crate::versus::TorchTiming>,
    /// arbor throughput / PyTorch throughput (PyTorch median / arbor median; above 1, arbor is
    /// faster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_vs_pytorch: Option<f64>,
    /// The authors' own module's timing, where one runs (`pytorch/authors.py`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch_authors: Option<crate::versus::TorchTiming>,
    /// arbor throughput / the authors' module's throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_vs_authors: Option<f64>,
}

impl Record {
    /// Sets `times_ms` and everything computed from them: the median, fastest and slowest
    /// runs, the spread, the throughput and the time per composition.
    fn set_times(&mut self, times_ms: Vec<f64>) {
        self.median_ms = median(&times_ms);
        self.min_ms = times_ms.iter().copied().fold(f64::INFINITY, f64::min);
        self.max_ms = times_ms.iter().copied().fold(0.0, f64::max);
        self.spread_pct = 100.0 * (self.max_ms - self.min_ms) / self.median_ms;
        self.items_per_s = self.items as f64 / (self.median_ms / 1e3);
        self.us_per_composition = self.compositions.map(|c| self.median_ms * 1e3 / c as f64);
        self.times_ms = times_ms;
    }
}

/// The records of several rounds of the same workloads (`arbor-bench --rounds`) as one record
/// per workload and mode, in the order they first appear: the timed runs of every round in
/// order, the statistics over all of them, and the highest peak memory of any round.
pub fn merge_rounds(records: Vec<Record>) -> Vec<Record> {
    let mut merged: Vec<Record> = Vec::new();
    for r in records {
        match merged
            .iter_mut()
            .find(|m| m.name == r.name && m.mode == r.mode)
        {
            Some(m) => {
                let mut times = std::mem::take(&mut m.times_ms);
                times.extend(&r.times_ms);
                m.peak_rss_bytes = m.peak_rss_bytes.max(r.peak_rss_bytes);
                m.device_memory_bytes = m.device_memory_bytes.max(r.device_memory_bytes);
                m.compositions = r.compositions.or(m.compositions);
                m.set_times(times);
            }
            None => merged.push(r),
        }
    }
    merged
}

/// The median of a non-empty slice.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times one workload in each of its modes.
///
/// # Errors
/// When the device cannot be synchronised or a run's check scalar is not finite.
pub fn measure(
    workload: Workload,
    settings: &Settings,
    probe: &Probe,
    run_info: &RunInfo,
    mut progress: impl FnMut(&Record),
) -> Result<Vec<Record>> {
    let Workload {
        name,
        group,
        params,
        items,
        unit,
        modes,
        sweep,
        build,
        twin_inputs: _,
        compositions,
    } = workload;
    (probe.cleanup)();
    let mut run = build();
    let mut records = Vec::new();
    for mode in modes {
        let once = |run: &mut Run| -> Result<Duration> {
            let start = Instant::now();
            let check = run(mode);
            (probe.sync)().with_context(|| format!("{name} ({}): device sync", mode.label()))?;
            let elapsed = start.elapsed();
            if !check.is_finite() {
                bail!("{name} ({}): the run produced {check}", mode.label());
            }
            Ok(elapsed)
        };
        for _ in 0..settings.warmup {
            once(&mut run)?;
        }
        reset_peak_rss();
        let mut times: Vec<f64> = Vec::new();
        let timing = Instant::now();
        loop {
            let slow = times
                .first()
                .is_some_and(|&ms| ms > settings.slow_run_s * 1e3);
            let done = if slow {
                times.len() >= settings.slow_reps.max(1)
            } else {
                times.len() >= settings.min_reps.max(1)
                    && (times.len() >= settings.max_reps
                        || timing.elapsed().as_secs_f64() >= settings.min_time_s)
            };
            if done {
                break;
            }
            times.push(once(&mut run)?.as_secs_f64() * 1e3);
        }
        let composed = compositions.as_ref().map(|c| c.get()).filter(|&c| c > 0);
        let mut record = Record {
            name: name.clone(),
            group: group.clone(),
            mode,
            params: params.clone(),
            items,
            unit: unit.to_string(),
            run: run_info.clone(),
            warmup: settings.warmup,
            times_ms: Vec::new(),
            median_ms: 0.0,
            min_ms: 0.0,
            max_ms: 0.0,
            spread_pct: 0.0,
            items_per_s: 0.0,
            peak_rss_bytes: peak_rss_bytes(),
            device_memory_bytes: (probe.device_memory)(),
            sweep: sweep.clone(),
            compositions: composed,
            us_per_composition: None,
            pytorch: None,
            ratio_vs_pytorch: None,
            pytorch_authors: None,
            ratio_vs_authors: None,
        };
        record.set_times(times);
        progress(&record);
        records.push(record);
    }
    Ok(records)
}

/// The best of 7 rounds of 5 calls of `f`, in milliseconds per call, after one untimed call:
/// the timer of the op-level examples (`examples/linear_vs_burn.rs`,
/// `examples/layer_norm_vs_burn.rs`), which compare two implementations of one op.
pub fn best_of_rounds_ms(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for _ in 0..5 {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / 5.0);
    }
    best * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    fn probe() -> Probe {
        Probe {
            sync: Box::new(|| Ok(())),
            device_memory: Box::new(|| None),
            cleanup: Box::new(|| {}),
        }
    }

    /// Two timed runs per mode, no warm-up.
    fn two_runs() -> Settings {
        Settings {
            warmup: 0,
            min_reps: 2,
            max_reps: 2,
            min_time_s: 0.0,
            slow_run_s: 10.0,
            slow_reps: 1,
        }
    }

    #[test]
    fn rounds_merge_into_one_record_per_workload_and_mode() {
        let workload = |name: &'static str| {
            Workload::new("t", name, serde_json::json!({}), 10, "tokens", || {
                Box::new(|_| 1.0)
            })
        };
        let settings = two_runs();
        let info = RunInfo::collect("test", "cpu");
        let run = |name| measure(workload(name), &settings, &probe(), &info, |_| {}).unwrap();
        // Two rounds of `a`, one of `b`, the rounds' times and peaks set by hand.
        let (mut a1, b, mut a2) = (run("a"), run("b"), run("a"));
        let set = |r: &mut Record, times: Vec<f64>, peak: u64| {
            r.set_times(times);
            r.peak_rss_bytes = Some(peak);
        };
        set(&mut a1[0], vec![3.0, 1.0], 5);
        set(&mut a1[1], vec![8.0, 8.0], 9);
        set(&mut a2[0], vec![2.0, 10.0], 7);
        set(&mut a2[1], vec![6.0, 4.0], 2);
        let merged = merge_rounds([a1, b, a2].concat());
        let names: Vec<(&str, Mode)> = merged.iter().map(|r| (r.name.as_str(), r.mode)).collect();
        assert_eq!(
            names,
            [
                ("t/a", Mode::Forward),
                ("t/a", Mode::ForwardBackward),
                ("t/b", Mode::Forward),
                ("t/b", Mode::ForwardBackward)
            ]
        );
        let (f, fb) = (&merged[0], &merged[1]);
        assert_eq!(f.times_ms, [3.0, 1.0, 2.0, 10.0]);
        assert_eq!((f.median_ms, f.min_ms, f.max_ms), (2.5, 1.0, 10.0));
        assert_eq!(f.spread_pct, 100.0 * 9.0 / 2.5);
        assert_eq!(f.items_per_s, 10.0 / 2.5e-3);
        assert_eq!(f.peak_rss_bytes, Some(7));
        assert_eq!(fb.times_ms, [8.0, 8.0, 6.0, 4.0]);
        assert_eq!((fb.median_ms, fb.peak_rss_bytes), (7.0, Some(9)));
        assert_eq!(merged[2].times_ms.len(), 2);
    }

    #[test]
    fn measure_reports_the_compositions_of_a_counted_workload() {
        let counter = Rc::new(Cell::new(0));
        let c = counter.clone();
        let workload = Workload::new(
            "r2d2",
            "counted",
            serde_json::json!({}),
            10,
            "tokens",
            move || {
                Box::new(move |_| {
                    c.set(40);
                    std::thread::sleep(Duration::from_millis(2));
                    1.0
                })
            },
        )
        .with_compositions(counter);
        let settings = two_runs();
        let info = RunInfo::collect("test", "cpu");
        let records = measure(workload, &settings, &probe(), &info, |_| {}).unwrap();
        assert_eq!(records.len(), 2);
        for r in &records {
            assert_eq!(r.compositions, Some(40));
            let per = r.us_per_composition.unwrap();
            assert!((per - r.median_ms * 1e3 / 40.0).abs() < 1e-9, "{per}");
        }
    }

    #[test]
    fn measure_counts_warmup_and_reps_and_rejects_non_finite_checks() {
        let calls = Rc::new(Cell::new(0));
        let c = calls.clone();
        let workload = Workload::new(
            "t",
            "count",
            serde_json::json!({}),
            10,
            "tokens",
            move || {
                Box::new(move |_| {
                    c.set(c.get() + 1);
                    std::thread::sleep(Duration::from_millis(2));
                    1.0
                })
            },
        );
        let mut settings = Settings {
            warmup: 2,
            min_reps: 3,
            max_reps: 3,
            min_time_s: 0.0,
            slow_run_s: 10.0,
            slow_reps: 1,
        };
        let info = RunInfo::collect("test", "cpu");
        let records = measure(workload, &settings, &probe(), &info, |_| {}).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(calls.get(), 2 * (2 + 3));
        for r in &records {
            assert_eq!(r.times_ms.len(), 3);
            assert!(r.median_ms >= 2.0 && r.min_ms <= r.median_ms && r.median_ms <= r.max_ms);
            assert!((r.items_per_s - 10.0 / (r.median_ms / 1e3)).abs() < 1e-9);
            assert_eq!(r.name, "t/count");
        }
        let bad = Workload::new("t", "nan", serde_json::json!({}), 1, "tokens", || {
            Box::new(|_| f64::NAN)
        });
        let err = measure(bad, &settings, &probe(), &info, |_| {}).unwrap_err();
        assert!(err.to_string().contains("t/nan"), "{err}");

        // A workload slower than `slow_run_s` is timed `slow_reps` times.
        settings.slow_run_s = 0.001;
        settings.warmup = 0;
        let slow = Workload::new("t", "slow", serde_json::json!({}), 1, "tokens", || {
            Box::new(|_| {
                std::thread::sleep(Duration::from_millis(3));
                1.0
            })
        });
        let records = measure(slow, &settings, &probe(), &info, |_| {}).unwrap();
        assert!(records.iter().all(|r| r.times_ms.len() == 1));
    }
}
