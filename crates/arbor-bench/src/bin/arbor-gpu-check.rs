//! `arbor-gpu-check OUT`: checks arbor on a CUDA GPU and writes `OUT/report.json` and
//! `OUT/report.md` (see `arbor_bench::gpu_check`). Built into the folder of `cargo xtask
//! gpu-pack` with the programs it runs; needs an NVIDIA GPU and its driver, not Rust.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arbor_bench::gpu_check::{
    self, gpu_info, markdown, read_train_side, run_limited, GpuReport, Manifest, StepStatus,
    TrainComparison,
};
use arbor_train::device::DeviceSpec;
use clap::{Parser, ValueEnum};

/// The parts of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    /// Every fused op and encoder on CUDA against the CPU.
    Parity,
    /// `snli` and a gold-tree `logic` run on CUDA and on the CPU with one seed.
    Train,
    /// `arbor-bench` on CUDA, with the PyTorch twins on the same GPU.
    Bench,
}

/// Check arbor on a CUDA GPU: parity of every op and encoder with the CPU, two training runs
/// beside the CPU, the benchmark beside PyTorch. Writes OUT/report.json and OUT/report.md.
#[derive(Parser, Debug, Clone)]
#[command(name = "arbor-gpu-check", version)]
struct Args {
    /// Folder for the report and the runs' outputs (created).
    out: PathBuf,
    /// The GPU to check.
    #[arg(long, default_value = "cuda:0")]
    device: String,
    /// The pack's folder (holds bin/, data/, twins.py, manifest.json); default: the folder
    /// above this binary's bin/.
    #[arg(long)]
    pack: Option<PathBuf>,
    /// Which parts to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "parity,train,bench"
    )]
    parts: Vec<Part>,
    /// Parity sizes.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "small,bench")]
    sizes: Vec<arbor_bench::parity::Size>,
    /// Optimizer steps of each training run.
    #[arg(long, default_value_t = 200)]
    train_steps: u64,
    /// Time limit of each training run, s.
    #[arg(long, default_value_t = 100)]
    train_limit: u64,
    /// Run the bench with its full timing policy (3–10 timed runs per mode) instead of
    /// `--quick` (one warm-up, two timed runs), which keeps the whole check under 6 minutes.
    #[arg(long)]
    full_bench: bool,
    /// Untimed warm-up runs per bench workload and mode (the bench's default on CUDA: 1).
    #[arg(long)]
    bench_warmup: Option<usize>,
    /// Only bench workloads whose names contain one of these.
    #[arg(long, value_delimiter = ',')]
    bench_filter: Vec<String>,
    /// Leave out bench workloads whose names contain one of these. The default leaves out
    /// `spinn/recursive`, the per-node Tree-LSTM that exists to show, on the CPU, what SPINN's
    /// thin stack saves: node by node on a GPU it takes 4.8 s per forward (H100, docs/gpu.md
    /// run 5) and alone spent the bench's time limit. `--bench-skip ''` keeps it.
    #[arg(long, value_delimiter = ',', default_value = "spinn/recursive")]
    bench_skip: Vec<String>,
    /// Time limit of the bench (arbor and PyTorch together, every family), s. The bench runs
    /// one workload family at a time (`cells`, `gumbel`, `transformer`, `spinn`, `r2d2`); a
    /// family that does not finish in what is left is reported as not finished, and the others
    /// keep their results (and one killed halfway keeps the workloads it finished). On an H100
    /// (docs/gpu.md, run 5) parity and training took 186 s, so 165 s keeps the check under 6
    /// minutes; `--bench-limit 600` gives the whole bench room.
    #[arg(long, default_value_t = 165)]
    bench_limit: u64,
}

fn main() {
    let args = Args::parse();
    // A machine without a GPU (or a binary without CUDA) gets one line and exit status 2.
    let spec = match check_device(&args.device) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("arbor-gpu-check: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args, spec) {
        eprintln!("arbor-gpu-check: {e:#}");
        std::process::exit(1);
    }
}

fn check_device(device: &str) -> Result<DeviceSpec> {
    let spec = arbor_train::device::resolve(device)?;
    anyhow::ensure!(
        matches!(spec, DeviceSpec::Cuda(_)),
        "--device {device}: the GPU check runs on a CUDA device (cuda or cuda:N)"
    );
    Ok(spec)
}

fn step<T>(
    report: &mut GpuReport,
    name: &str,
    f: impl FnOnce(&mut GpuReport) -> Result<T>,
) -> Option<T> {
    let start = Instant::now();
    eprintln!("arbor-gpu-check: {name} ...");
    let result = f(report);
    let seconds = start.elapsed().as_secs_f64();
    let (ok, error, value) = match result {
        Ok(v) => (true, None, Some(v)),
        Err(e) => (false, Some(format!("{e:#}")), None),
    };
    eprintln!(
        "arbor-gpu-check: {name}: {} in {seconds:.1} s{}",
        if ok { "done" } else { "FAILED" },
        error.as_deref().map_or(String::new(), |e| format!(": {e}"))
    );
    report.steps.push(StepStatus {
        step: name.into(),
        ok,
        seconds,
        error,
    });
    value
}

fn write_report(out: &Path, report: &GpuReport) -> Result<()> {
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(out.join("report.md"), markdown(report))?;
    Ok(())
}

fn run(args: &Args, spec: DeviceSpec) -> Result<()> {
    let start = Instant::now();
    let pack = args.pack.clone().unwrap_or_else(gpu_check::pack_dir);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let manifest: Option<Manifest> = std::fs::read_to_string(pack.join("manifest.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let mut report = GpuReport {
        device: spec.to_string(),
        gpu: gpu_info(),
        manifest,
        steps: Vec::new(),
        parity: Vec::new(),
        training: Vec::new(),
        bench: None,
        seconds: 0.0,
    };
    eprintln!(
        "arbor-gpu-check: {} on {}, pack {}",
        report.gpu.name.as_deref().unwrap_or("unknown GPU"),
        spec,
        pack.display()
    );
    if args.parts.contains(&Part::Parity) {
        step(&mut report, "parity", |r| parity(args, spec, r));
        write_report(&args.out, &report)?;
    }
    if args.parts.contains(&Part::Train) {
        // Both programs at once (each on the GPU and on the CPU): their timings are only
        // indicative; the bench measures speed alone on the machine.
        step(&mut report, "train", |r| {
            let runs = training_runs(&pack, args.train_steps);
            let handles: Vec<_> = runs
                .into_iter()
                .map(|(name, extra)| {
                    let (args, pack) = (args.clone(), pack.clone());
                    std::thread::spawn(move || train(&args, &pack, spec, name, &extra))
                })
                .collect();
            let mut failed = Vec::new();
            for h in handles {
                let t = h
                    .join()
                    .map_err(|_| anyhow::anyhow!("a training thread panicked"))??;
                for s in [&t.cuda, &t.cpu] {
                    if !s.ok {
                        failed.push(format!("{} on {}", t.name, s.device));
                    }
                }
                r.training.push(t);
            }
            anyhow::ensure!(failed.is_empty(), "failed: {}", failed.join(", "));
            Ok(())
        });
        write_report(&args.out, &report)?;
    }
    if args.parts.contains(&Part::Bench) {
        step(&mut report, "bench", |r| {
            let (merged, unfinished) = bench(args, &pack, spec)?;
            r.bench = Some(merged);
            anyhow::ensure!(
                unfinished.is_empty(),
                "not finished: {}",
                unfinished.join("; ")
            );
            Ok(())
        });
    }
    report.seconds = start.elapsed().as_secs_f64();
    write_report(&args.out, &report)?;
    eprintln!(
        "arbor-gpu-check: wrote {} and report.md in {:.0} s",
        args.out.join("report.json").display(),
        report.seconds
    );
    Ok(())
}

#[cfg(feature = "cuda")]
fn parity(args: &Args, spec: DeviceSpec, report: &mut GpuReport) -> Result<()> {
    use arbor_bench::parity::{compare_all, Case};
    let DeviceSpec::Cuda(index) = spec else {
        anyhow::bail!("not a CUDA device: {spec}");
    };
    arbor_train::alloc::tune_for_cpu_tensors();
    let device = burn::backend::cuda::CudaDevice { index };
    report.parity = compare_all::<burn::backend::Cuda<f32>, burn::backend::Flex>(
        &Case::all(),
        &args.sizes,
        &device,
        &Default::default(),
        |r| {
            eprintln!(
                "  {:<8} {:<26} {:<6} ‖Δ‖/‖cpu‖ {:.2e}  max |Δ| {:.2e}  {}",
                r.group,
                r.name,
                r.size,
                r.rel_l2,
                r.max_abs,
                match (&r.error, r.passed) {
                    (Some(e), _) => format!("ERROR {e}"),
                    (None, true) => "ok".into(),
                    (None, false) => "DIFFERS".into(),
                }
            )
        },
    );
    let failed: Vec<String> = report
        .parity
        .iter()
        .filter(|r| !r.passed)
        .map(|r| format!("{} ({})", r.name, r.size))
        .collect();
    anyhow::ensure!(failed.is_empty(), "differs or fails: {}", failed.join(", "));
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn parity(_: &Args, _: DeviceSpec, _: &mut GpuReport) -> Result<()> {
    anyhow::bail!("built without the `cuda` feature")
}

/// The training runs: program and its flags (without --device and --out).
fn training_runs(pack: &Path, steps: u64) -> Vec<(&'static str, Vec<String>)> {
    let every = (steps / 2).max(1).to_string();
    let steps = steps.to_string();
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "--max-steps",
            steps.as_str(),
            "--eval-every",
            every.as_str(),
            "--log-every",
            "25",
            "--seed",
            "0",
            "--overwrite",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let logic_dir = pack.join("data/propositional_logic");
    vec![
        // The main job: Gumbel Tree-LSTM on the built-in SNLI sample (the download is pointed
        // at a closed local port, so it falls back at once on a machine without network).
        (
            "snli",
            common(&[
                "--snli-url",
                "http://127.0.0.1:9/snli.zip",
                "--show-trees",
                "0",
            ]),
        ),
        (
            "logic",
            common(&[
                "--data-dir",
                &logic_dir.to_string_lossy(),
                "--encoder",
                "spinn-pi-nt",
                "--dim",
                "128",
                "--lr",
                "2e-3",
                "--show-trees",
                "0",
            ]),
        ),
    ]
}

fn train(
    args: &Args,
    pack: &Path,
    spec: DeviceSpec,
    name: &str,
    extra: &[String],
) -> Result<TrainComparison> {
    let exe = pack.join("bin").join(name);
    anyhow::ensure!(exe.is_file(), "{} is missing from the pack", exe.display());
    let limit = Duration::from_secs(args.train_limit);
    let side = |device: String| {
        let out = args
            .out
            .join("train")
            .join(format!("{name}-{}", device.replace(':', "")));
        let exe = exe.clone();
        let mut extra = extra.to_vec();
        extra.extend(["--device".into(), device.clone()]);
        extra.extend(["--out".into(), out.to_string_lossy().into_owned()]);
        std::thread::spawn(move || -> Result<_> {
            let mut cmd = Command::new(&exe);
            cmd.args(&extra);
            // Two CPU runs share the host with the GPU runs' launches: a quarter of the cores
            // each.
            if device == "flex" {
                let quarter =
                    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).max(1));
                cmd.env("RAYON_NUM_THREADS", quarter.to_string());
            }
            let (ok, tail, secs) = run_limited(cmd, limit)?;
            Ok(read_train_side(&device, &out, ok, tail, secs))
        })
    };
    let cuda = side(spec.to_string());
    let cpu = side("flex".to_string());
    let join = |h: std::thread::JoinHandle<Result<_>>| {
        h.join()
            .map_err(|_| anyhow::anyhow!("the run's thread panicked"))?
    };
    Ok(TrainComparison {
        name: name.into(),
        args: extra.to_vec(),
        cuda: join(cuda)?,
        cpu: join(cpu)?,
    })
}

/// The CUDA bench, one `arbor-bench --versus pytorch` per workload family (see
/// [`gpu_check::bench_families`]) within `--bench-limit` seconds in all. Returns the merged
/// records of the families that finished and one line for each family that did not.
fn bench(args: &Args, pack: &Path, spec: DeviceSpec) -> Result<(serde_json::Value, Vec<String>)> {
    let exe = pack.join("bin").join("arbor-bench");
    anyhow::ensure!(exe.is_file(), "{} is missing from the pack", exe.display());
    let listed = Command::new(&exe)
        .args(["--device", &spec.to_string(), "--list"])
        .output()
        .with_context(|| format!("running {} --list", exe.display()))?;
    anyhow::ensure!(
        listed.status.success(),
        "arbor-bench --list failed: {}",
        last_line(&String::from_utf8_lossy(&listed.stderr))
    );
    let names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .filter(|n| arbor_bench::selected(n, &args.bench_filter))
        .filter(|n| {
            !args
                .bench_skip
                .iter()
                .any(|f| !f.is_empty() && n.contains(f.as_str()))
        })
        .map(String::from)
        .collect();
    anyhow::ensure!(
        !names.is_empty(),
        "no bench workload matches {:?}",
        args.bench_filter
    );
    let twins = pack.join("twins.py");
    let limit = Duration::from_secs(args.bench_limit);
    let start = Instant::now();
    let (mut parts, mut unfinished, mut log) = (Vec::new(), Vec::new(), String::new());
    for (family, members) in gpu_check::bench_families(&names) {
        let left = limit.saturating_sub(start.elapsed());
        if left < Duration::from_secs(5) {
            unfinished.push(format!(
                "{family} ({} workloads): not started, the {} s limit was spent",
                members.len(),
                args.bench_limit
            ));
            continue;
        }
        let out = args.out.join("bench").join(&family);
        let mut cmd = Command::new(&exe);
        // One workload at a time: they would share the GPU otherwise.
        cmd.args([
            "--device",
            &spec.to_string(),
            "--versus",
            "pytorch",
            "--jobs",
            "1",
        ])
        .args(["--filter", &members.join(",")])
        .arg("--out")
        .arg(&out);
        if !args.full_bench {
            cmd.arg("--quick");
        }
        if let Some(w) = args.bench_warmup {
            cmd.args(["--warmup", &w.to_string()]);
        }
        if twins.is_file() {
            cmd.env(arbor_bench::versus::TWINS_ENV, &twins);
        }
        let (ok, tail, seconds) = run_limited(cmd, left)?;
        eprintln!(
            "arbor-gpu-check: bench {family}: {} in {seconds:.0} s",
            if ok { "done" } else { "failed" }
        );
        let _ = writeln!(log, "== {family} ({seconds:.0} s)\n{tail}\n");
        let json = std::fs::read_to_string(out.join("bench.json")).ok();
        match (
            ok,
            json.and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok()),
        ) {
            (true, Some(v)) => parts.push(v),
            _ => {
                let (part, line) =
                    gpu_check::unfinished_family(&family, members.len(), &last_line(&tail), &out);
                parts.extend(part);
                unfinished.push(line);
            }
        }
    }
    std::fs::write(args.out.join("bench.log"), &log)?;
    Ok((gpu_check::merge_bench(&parts, &unfinished), unfinished))
}

fn last_line(s: &str) -> String {
    s.lines().next_back().unwrap_or("").to_string()
}
