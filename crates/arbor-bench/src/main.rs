//! `arbor-bench`: the benchmark suite's command line (`cargo xtask bench` builds and runs it).

use arbor_cells::ArborBackend;

/// With the `mimalloc` feature the benchmark allocates through mimalloc instead of the tuned glibc
/// `malloc` (docs/log/bench.md, "Allocator": measured, not the default).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
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
    /// Fewer repetitions (1 warm-up, 2 timed runs): a smoke run.
    #[arg(long)]
    quick: bool,
    /// Where to write bench.json, bench.md and the plots.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// List the workloads and exit.
    #[arg(long)]
    list: bool,
    /// Untimed warm-up runs per workload and mode (default: 3 on CUDA, with or without
    /// `--quick`, where the first runs compile and autotune kernels; 0 on the CPU backends).
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

const RECORDS_PREFIX: &str = "arbor-bench-records: ";

/// Measures each workload in a child process of this binary, so its peak memory is its own.
fn run_isolated(args: &Args, names: &[String], settings: &Settings) -> Result<Vec<Record>> {
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
    settings.warmup = args.warmup.unwrap_or(if on_gpu { CUDA_WARMUP } else { 0 });
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
    let report = if args.no_isolate {
        run_suite::<B>(
            &device,
            &args.device,
            &settings,
            |n| selected(n, &args.filter),
            &probe,
            &command,
            print_row,
        )?
    } else {
        let names: Vec<String> = workload_names::<B>(&device)
            .into_iter()
            .filter(|n| selected(n, &args.filter))
            .collect();
        if names.is_empty() {
            bail!(
                "no workload matches {:?}; `--list` shows the names",
                args.filter
            );
        }
        let records = run_isolated(args, &names, &settings)?;
        Report::from_records(&command, settings, records)
    };
    let mut report = report;
    if args.versus == Some(Against::Pytorch) {
        compare_with_pytorch::<B>(args, &device, &settings, &mut report);
    }
    let md = write_outputs(&report, &args.out)?;
    // The whole report is written: the partial one (isolated runs) has served its purpose.
    let _ = std::fs::remove_file(args.out.join(arbor_bench::PARTIAL_FILE));
    println!("{md}");
    eprintln!("wrote {}/bench.{{json,md}}", args.out.display());
    Ok(())
}

/// Runs the PyTorch twins of the measured workloads and attaches their timings; on any problem
/// the report says why the comparison was skipped and the arbor results stand.
fn compare_with_pytorch<B: ArborBackend>(
    args: &Args,
    device: &B::Device,
    settings: &Settings,
    report: &mut Report,
) {
    let python = versus::python();
    let threads = versus::arbor_threads();
    let mut outcome = Versus {
        framework: "pytorch".to_string(),
        python: python.clone(),
        torch_version: None,
        threads,
        omp_wait_policy: versus::omp_wait_policy(),
        skipped: None,
        notes: Vec::new(),
    };
    let skip = |outcome: &mut Versus, report: &mut Report, reason: String| {
        eprintln!("{}", versus::skip_message(&reason));
        outcome.skipped = Some(reason);
        report.versus = Some(outcome.clone());
    };
    let torch_version = match versus::probe_torch(&python) {
        Ok(v) => v,
        Err(reason) => return skip(&mut outcome, report, reason),
    };
    outcome.torch_version = Some(torch_version.clone());
    let script = match versus::twins_script() {
        Ok(p) => p,
        Err(reason) => return skip(&mut outcome, report, reason),
    };
    let mut names: Vec<String> = Vec::new();
    for r in &report.records {
        if !names.contains(&r.name) {
            names.push(r.name.clone());
        }
    }
    let on_gpu = args.device.to_ascii_lowercase().starts_with("cuda");
    let mut workloads = twin_workloads::<B>(device, &names);
    versus::match_repetitions(&mut workloads, &report.records);
    let spec = TwinSpec {
        settings: *settings,
        threads,
        device: if on_gpu { "cuda" } else { "cpu" }.to_string(),
        workloads,
        authors: !args.no_authors,
    };
    eprintln!(
        "--versus pytorch: torch {torch_version} via `{python}`, {threads} thread(s), {} workload(s)",
        names.len()
    );
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        let reason = format!("cannot create {} ({e})", args.out.display());
        return skip(&mut outcome, report, reason);
    }
    let spec_path = args.out.join("pytorch-spec.json");
    match versus::run_twins(&python, &script, &spec, &spec_path) {
        Ok(lines) => {
            outcome.notes = versus::attach(&mut report.records, &lines);
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
                outcome.notes.push(format!(
                    "not a speed comparison: {}; run without `--quick` and with `--jobs 1` for ratios to quote",
                    why.join(", and ")
                ));
            }
            report.versus = Some(outcome);
        }
        Err(e) => skip(
            &mut outcome,
            report,
            format!("the PyTorch twins failed: {e:#}"),
        ),
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
