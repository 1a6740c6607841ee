//! Runs one workload of the suite in one mode, repeatedly, in this process: a target for
//! `perf record` (the bench runs both modes and several workloads per process).
//!
//! ```sh
//! PROBE_NAME=gumbel/d100-affine PROBE_MODE=fb PROBE_REPS=10 \
//!     perf record -g cargo run --release -p arbor-bench --example profile
//! ```
//!
//! `PROBE_MODE` is `f` (evaluation, the default) or `fb` (training); Flex, with the allocator
//! settings and the thread pool the programs use (`ARBOR_POOL=plain` for rayon's own pool).
use arbor_bench::{workloads, Mode};
use burn::backend::flex::Flex;
fn main() {
    arbor_train::device::set_up_cpu_process();
    let dev = Default::default();
    let name =
        std::env::var("PROBE_NAME").expect("PROBE_NAME: a workload name (arbor-bench --list)");
    let mode = if std::env::var("PROBE_MODE").as_deref() == Ok("fb") {
        Mode::ForwardBackward
    } else {
        Mode::Forward
    };
    let reps: usize = std::env::var("PROBE_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let w = workloads::suite::<Flex>(&dev)
        .into_iter()
        .find(|w| w.name == name)
        .unwrap_or_else(|| panic!("no workload named {name} (arbor-bench --list)"));
    let mut run = (w.build)();
    run(mode);
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = std::time::Instant::now();
            run(mode);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / reps.max(1) as f64;
    println!(
        "{name} {:?} mean {mean:.1} ms, median {:.1}, fastest {:.1}",
        mode,
        times.get(reps / 2).copied().unwrap_or(f64::NAN),
        times.first().copied().unwrap_or(f64::NAN),
    );
}
