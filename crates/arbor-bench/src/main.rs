//! `arbor-bench`: the benchmark suite's command line (`cargo xtask bench` builds and runs it).

use arbor_cells::ArborBackend;

/// With the `mimalloc` feature the benchmark allocates through mimalloc instead of the tuned glibc
/// `malloc` (docs/log/bench.md, "Allocator": measured, not the default).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use arbor_bench::harness;
use arbor_bench::versus::{self, TwinSpec, Versus};
use arbor_bench::{
    run_suite, selected, twin_workloads, workload_names, write_outputs, Mode, Probe, Record,
    Report, Settings,
};
use arbor_train::device::{DeviceError, DeviceSpec};
use clap::{Parser, ValueEnum};

/// What `--versus` compares arbor with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Against {
    /// The PyTorch twins in `crates/arbor-bench/pytorch/twins.py` and, where they run, the
    /// authors' own modules (`pytorch/authors.py`); needs `import torch`.
    Pytorch,
}

/// Measures every encoder's speed, memory and scaling on one backend.
#[derive(Parser, Debug)]
#[command(name = "arbor-bench", version)]
struct Args {
    /// Backend and device: auto (the first CUDA GPU when built with `cuda` and one answers, else
    /// the default CPU backend), flex, ndarray, cuda, cuda:N.
    #[arg(long, default_value = arbor_train::device::DEFAULT_DEVICE)]
    device: String,
    /// Only workloads whose name contains one of these (repeatable, or comma-separated).
    #[arg(long, value_delimiter = ',')]
    filter: Vec<String>,
    /// One timed run per workload and mode, without a warm-up on the CPU backends: a smoke run.
    #[arg(long)]
    quick: bool,
    /// Where to write bench.json, bench.md and the plots.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// List the workloads and exit.
    #[arg(long)]
    list: bool,
    /// Untimed warm-up runs per workload and mode, on both sides of `--versus` (default: 3 on
    /// CUDA, with or without `--quick`, where the first runs compile and autotune kernels; 1 on
    /// the CPU backends, 0 with `--quick`).
    #[arg(long, allow_negative_numbers = true)]
    warmup: Option<usize>,
    /// Workloads measured at the same time, each in its own process (default: 2 with
    /// `--quick`, whose timings only show that everything runs; 1 otherwise, for clean timings).
    #[arg(long, value_parser = at_least_one, allow_negative_numbers = true)]
    jobs: Option<usize>,
    /// Run every workload in the same process instead of one child process per workload
    /// (the peak RSS then includes what the allocator kept from earlier workloads).
    #[arg(long)]
    no_isolate: bool,
    /// Also time each workload's PyTorch twin (`crates/arbor-bench/pytorch/twins.py`, run with
    /// `$ARBOR_PYTHON` or `python3`, the same thread count and timing policy) and add a PyTorch
    /// column and the arbor/PyTorch throughput ratio. Skipped, with a note, when `import torch`
    /// fails.
    #[arg(long, value_enum)]
    versus: Option<Against>,
    /// Measure each workload this many times, each time in a fresh child process and, with
    /// `--versus pytorch`, each time followed by its twins, and report every workload once,
    /// over the timed runs of all its rounds (the peak memory: the highest). On a machine whose
    /// speed drifts, both sides of a row then sample the same minutes.
    #[arg(long, default_value_t = 1, value_parser = at_least_one, conflicts_with = "no_isolate")]
    rounds: usize,
    /// With `--versus pytorch`: time the twins only, not the authors' own modules
    /// (`crates/arbor-bench/pytorch/authors.py`, which imports them from the checkouts that
    /// `cargo xtask references` fetches).
    #[arg(long, requires = "versus")]
    no_authors: bool,
    /// Internal: measure exactly this workload and print its records as JSON.
    #[arg(long, hide = true)]
    worker: Option<String>,
}

/// A count flag's parser: a whole number of at least 1 (clap names the flag in its error).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks, before anything is measured, that the report can be written into `out` (created if
/// needed): a bench of minutes must not fail at its last step.
fn check_out(out: &std::path::Path) -> Result<()> {
    let probe = out.join(".arbor-bench-write-probe");
    std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe))
        .with_context(|| format!("--out {}: cannot write the report there", out.display()))
}

/// Warm-up runs on CUDA. Measured on an H100 (docs/gpu.md): with none, Gumbel Tree-LSTM d300's
/// timed run took 3.1 s (NVRTC compiles and CubeCL's autotune still running); after 3, 114 ms.
const CUDA_WARMUP: usize = 3;

/// Warm-up runs on the CPU backends. A process's first run of a workload pays for its fresh
/// memory (page faults, the allocator's arenas growing) and, on PyTorch's side, for oneDNN's
/// primitives. On the 2-core Zen 4 VM (docs/bench.md, "One warm-up run on the CPU") the Gumbel
/// sweep's first timed run was the slowest of its row in 47 of 60 row runs without a warm-up
/// (up to 7.7× the median), and the full suite's median spread halved with one (43% → 20%).
const CPU_WARMUP: usize = 1;

/// The warm-up count when `--warmup` is not given: [`CUDA_WARMUP`] on a GPU, else
/// [`CPU_WARMUP`], or none for a CPU smoke run (`--quick`).
fn default_warmup(on_gpu: bool, quick: bool) -> usize {
    match (on_gpu, quick) {
        (true, _) => CUDA_WARMUP,
        (false, false) => CPU_WARMUP,
        (false, true) => 0,
    }
}

const RECORDS_PREFIX: &str = "arbor-bench-records: ";

/// Measures each workload in a child process of this binary, so its peak memory is its own, and
/// calls `after(records)` with each workload's records as soon as its child has finished (with
/// `--versus pytorch`, that runs the workload's twins before the next child starts, under
/// `--jobs 1`).
fn run_isolated(
    args: &Args,
    names: &[String],
    settings: &Settings,
    mut after: impl FnMut(&[Record]),
) -> Result<Vec<Record>> {
    let exe = std::env::current_exe()?;
    // A partial file left by an earlier, killed run into this folder is not this run's.
    let _ = std::fs::remove_file(args.out.join(arbor_bench::PARTIAL_FILE));
    let jobs = args.jobs.unwrap_or(if args.quick { 2 } else { 1 }).max(1);
    let spawn = |name: &str| -> Result<std::process::Child> {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["--device", &args.device, "--worker", name]);
        if args.quick {
            cmd.arg("--quick");
        }
        cmd.args(["--warmup", &settings.warmup.to_string()]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))
    };
    // Up to `jobs` children at a time; a new one starts as soon as one finishes.
    let mut results: Vec<Option<Vec<Record>>> = vec![None; names.len()];
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut next = 0;
    while next < names.len() || !running.is_empty() {
        while running.len() < jobs && next < names.len() {
            running.push((next, spawn(&names[next])?));
            next += 1;
        }
        let finished = running
            .iter_mut()
            .position(|(_, c)| matches!(c.try_wait(), Ok(Some(_))));
        let Some(pos) = finished else {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        };
        let (i, child) = running.swap_remove(pos);
        let name = &names[i];
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("workload {name} failed ({})", out.status);
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(RECORDS_PREFIX))
            .with_context(|| format!("workload {name} printed no records"))?;
        let mut got: Vec<Record> = serde_json::from_str(line)?;
        for r in &mut got {
            r.warmup = settings.warmup;
        }
        results[i] = Some(got);
        let done: Vec<&Record> = results.iter().flatten().flatten().collect();
        arbor_bench::write_partial(&args.out, &done)?;
        after(results[i].as_deref().unwrap_or_default());
    }
    Ok(results.into_iter().flatten().flatten().collect())
}

fn print_row(r: &Record) {
    let rss = r.peak_rss_bytes.map_or(String::new(), |b| {
        format!("  rss {:.0} MiB", b as f64 / 1048576.0)
    });
    let dev = r.device_memory_bytes.map_or(String::new(), |b| {
        format!("  device {:.0} MiB", b as f64 / 1048576.0)
    });
    let mode = match r.mode {
        Mode::Forward => "fwd",
        Mode::ForwardBackward => "fwd+bwd",
    };
    eprintln!(
        "{:<40} {:<7} {:>10.2} ms (±{:>3.0}%) {:>12.0} {}/s{rss}{dev}",
        r.name, mode, r.median_ms, r.spread_pct, r.items_per_s, r.unit
    );
}

fn run<B: ArborBackend>(args: &Args, device: B::Device, probe: Probe) -> Result<()> {
    if args.list {
        for name in workload_names::<B>(&device) {
            println!("{name}");
        }
        return Ok(());
    }
    let mut settings = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let on_gpu = args.device.to_ascii_lowercase().starts_with("cuda");
    settings.warmup = args.warmup.unwrap_or(default_warmup(on_gpu, args.quick));
    if let Some(name) = &args.worker {
        let report = run_suite::<B>(
            &device,
            &args.device,
            &settings,
            |n| n == name,
            &probe,
            "",
            print_row,
        )?;
        let mine: Vec<&Record> = report.records.iter().filter(|r| &r.name == name).collect();
        println!("{RECORDS_PREFIX}{}", serde_json::to_string(&mine)?);
        return Ok(());
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // The PyTorch side is checked before anything is measured, so a missing `torch` is said
    // at once, not after an hour of arbor runs.
    let mut twins = (args.versus == Some(Against::Pytorch)).then(|| Twins::prepare(args, settings));
    let mut report = if args.no_isolate {
        let report = run_suite::<B>(
            &device,
            &args.device,
            &settings,
            |n| selected(n, &args.filter),
            &probe,
            &command,
            print_row,
        )?;
        if let Some(t) = twins.as_mut() {
            t.run_for::<B>(&device, &report.records);
        }
        report
    } else {
        let names: Vec<String> = workload_names::<B>(&device)
            .into_iter()
            .filter(|n| selected(n, &args.filter))
            .flat_map(|n| std::iter::repeat_n(n, args.rounds))
            .collect();
        if names.is_empty() {
            bail!(
                "no workload matches {:?}; `--list` shows the names",
                args.filter
            );
        }
        // Each workload's twins run right after its arbor runs, so both sides of a row are
        // timed seconds apart, not an hour apart on a machine whose speed drifts.
        let records = run_isolated(args, &names, &settings, |done| {
            if let Some(t) = twins.as_mut() {
                t.run_for::<B>(&device, done);
            }
        })?;
        Report::from_records(&command, settings, harness::merge_rounds(records))
    };
    if let Some(t) = twins {
        t.finish(args, &mut report);
    }
    let md = write_outputs(&report, &args.out)?;
    // The whole report is written: the partial one (isolated runs) has served its purpose.
    let _ = std::fs::remove_file(args.out.join(arbor_bench::PARTIAL_FILE));
    println!("{md}");
    eprintln!("wrote {}/bench.{{json,md}}", args.out.display());
    Ok(())
}

/// The PyTorch side of `--versus pytorch`: checked once before anything is measured, then run
/// for each workload right after arbor's runs of it ([`Twins::run_for`]), and its timings
/// attached to the report at the end ([`Twins::finish`]). On any problem the report says why
/// the comparison was skipped (or which workloads lack a PyTorch time) and the arbor results
/// stand.
struct Twins {
    outcome: Versus,
    /// The twins script; `None` when the comparison is skipped (`outcome.skipped` says why).
    script: Option<PathBuf>,
    python: String,
    settings: Settings,
    device: String,
    authors: bool,
    /// Where each run's spec is written.
    spec_path: PathBuf,
    /// Every workload asked for so far, with its repetitions (written out at the end).
    asked: Vec<serde_json::Value>,
    /// Every result line so far.
    lines: Vec<versus::TwinLine>,
    /// Failed runs of the twins script, one note each.
    failures: Vec<String>,
}

impl Twins {
    fn prepare(args: &Args, settings: Settings) -> Self {
        let python = versus::python();
        let threads = versus::arbor_threads();
        let on_gpu = args.device.to_ascii_lowercase().starts_with("cuda");
        let mut twins = Twins {
            outcome: Versus {
                framework: "pytorch".to_string(),
                python: python.clone(),
                torch_version: None,
                threads,
                omp_wait_policy: versus::omp_wait_policy(),
                interleaved: !args.no_isolate,
                skipped: None,
                notes: Vec::new(),
            },
            script: None,
            python,
            settings,
            device: if on_gpu { "cuda" } else { "cpu" }.to_string(),
            authors: !args.no_authors,
            spec_path: args.out.join(versus::SPEC_FILE),
            asked: Vec::new(),
            lines: Vec::new(),
            failures: Vec::new(),
        };
        let ready = versus::probe_torch(&twins.python).and_then(|version| {
            twins.outcome.torch_version = Some(version.clone());
            versus::twins_script().map(|script| (version, script))
        });
        match ready {
            Ok((version, script)) => {
                eprintln!(
                    "--versus pytorch: torch {version} via `{}`, {threads} thread(s), {}",
                    twins.python,
                    if twins.outcome.interleaved {
                        "each workload's twins right after its arbor runs"
                    } else {
                        "the twins after every arbor run (`--no-isolate`)"
                    }
                );
                twins.script = Some(script);
            }
            Err(reason) => {
                eprintln!("{}", versus::skip_message(&reason));
                twins.outcome.skipped = Some(reason);
            }
        }
        twins
    }

    /// Times the twins (and the authors' modules) of the workloads of `records`, as often as
    /// arbor timed each.
    fn run_for<B: ArborBackend>(&mut self, device: &B::Device, records: &[Record]) {
        let Some(script) = self.script.as_ref() else {
            return;
        };
        let mut names: Vec<String> = Vec::new();
        for r in records {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
        if names.is_empty() {
            return;
        }
        let mut workloads = twin_workloads::<B>(device, &names);
        versus::match_repetitions(&mut workloads, records);
        let spec = TwinSpec {
            settings: self.settings,
            threads: self.outcome.threads,
            device: self.device.clone(),
            workloads,
            authors: self.authors,
        };
        match versus::run_twins(&self.python, script, &spec, &self.spec_path) {
            Ok(lines) => self.lines.extend(lines),
            Err(e) => self.failures.push(format!(
                "{}: the PyTorch twins failed: {e:#}",
                names.join(", ")
            )),
        }
        self.asked.extend(spec.workloads);
    }

    /// Attaches the timings to `report`'s records and sets its `versus` section; the spec file
    /// is left holding every workload asked for, for the record.
    fn finish(mut self, args: &Args, report: &mut Report) {
        if self.outcome.skipped.is_none() {
            if !self.failures.is_empty() && self.lines.is_empty() {
                // Not one workload ran: the comparison as a whole failed.
                self.outcome.skipped = Some(self.failures.join("; "));
            } else {
                let spec = TwinSpec {
                    settings: self.settings,
                    threads: self.outcome.threads,
                    device: self.device.clone(),
                    workloads: std::mem::take(&mut self.asked),
                    authors: self.authors,
                };
                if let Ok(text) = serde_json::to_string(&spec) {
                    let _ = std::fs::write(&self.spec_path, text);
                }
                self.outcome.notes = self.failures;
                let lines = versus::merge_rounds(std::mem::take(&mut self.lines));
                self.outcome
                    .notes
                    .extend(versus::attach(&mut report.records, &lines));
                let jobs = args.jobs.unwrap_or(if args.quick { 2 } else { 1 });
                let mut why = Vec::new();
                if args.quick {
                    why.push("`--quick` times one cold run per side".to_string());
                }
                if jobs > 1 && !args.no_isolate {
                    why.push(format!(
                        "arbor ran {jobs} workloads at a time, the twins one at a time"
                    ));
                }
                if !why.is_empty() {
                    self.outcome.notes.push(format!(
                        "not a speed comparison: {}; run without `--quick` and with `--jobs 1` for ratios to quote",
                        why.join(", and ")
                    ));
                }
            }
        }
        report.versus = Some(self.outcome);
    }
}

#[allow(dead_code)]
fn host_probe<B: ArborBackend>(device: B::Device) -> Probe {
    let d2 = device.clone();
    Probe {
        sync: Box::new(move || B::sync(&device).map_err(|e| anyhow::anyhow!("{e}"))),
        device_memory: Box::new(|| None),
        cleanup: Box::new(move || B::memory_cleanup(&d2)),
    }
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.worker.is_none() {
        check_out(&args.out)?;
    }
    // `auto` becomes the device it picked, so the header, the workers and bench.json name it.
    let spec: DeviceSpec = arbor_train::device::resolve(&args.device)?;
    args.device = spec.to_string();
    match spec {
        #[cfg(feature = "flex")]
        DeviceSpec::Flex => {
            // The CPU allocator settings and thread pool the programs use too (`device::run_on`).
            arbor_train::device::set_up_cpu_process();
            type B = burn::backend::Flex;
            run::<B>(
                &args,
                Default::default(),
                host_probe::<B>(Default::default()),
            )
        }
        #[cfg(feature = "ndarray")]
        DeviceSpec::NdArray => {
            arbor_train::device::set_up_cpu_process();
            type B = burn::backend::NdArray<f32>;
            run::<B>(
                &args,
                Default::default(),
                host_probe::<B>(Default::default()),
            )
        }
        #[cfg(feature = "cuda")]
        DeviceSpec::Cuda(index) => {
            use burn::cubecl::cuda::CudaRuntime;
            use burn::cubecl::Runtime;
            type B = burn::backend::Cuda<f32>;
            let device = burn::backend::cuda::CudaDevice { index };
            let mut probe = host_probe::<B>(device.clone());
            let d = device.clone();
            probe.device_memory = Box::new(move || {
                CudaRuntime::client(&d)
                    .memory_usage()
                    .ok()
                    .map(|m| m.bytes_reserved)
            });
            run::<B>(&args, device, probe)
        }
        #[allow(unreachable_patterns)]
        other => Err(DeviceError::NotCompiled {
            backend: other.backend_name(),
            feature: other.backend_name(),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timing policy the docs state (docs/bench.md, "What is measured"): 3 warm-ups on
    /// CUDA whatever the mode, 1 on the CPU backends, none in a CPU smoke run; `--warmup`
    /// overrides each.
    #[test]
    fn the_default_warm_up_follows_the_device_and_the_mode() {
        assert_eq!(default_warmup(true, false), CUDA_WARMUP);
        assert_eq!(default_warmup(true, true), CUDA_WARMUP);
        assert_eq!(default_warmup(false, false), 1);
        assert_eq!(default_warmup(false, true), 0);
        let args = Args::try_parse_from(["arbor-bench", "--warmup", "4"]).expect("valid flags");
        assert_eq!(args.warmup, Some(4));
    }
}
