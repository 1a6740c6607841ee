//! Runs one workload of the suite repeatedly under a counting global allocator and prints, after
//! each phase, the bytes live, the live peak of the phase, the resident set (`VmRSS`, `VmHWM`),
//! the resident `[heap]` mapping and glibc's arena statistics: where a peak-RSS row's memory is
//! live data and where it is heap the allocator could not reuse.
//!
//! ```sh
//! PROBE_NAME=gumbel/length/d100-affine-n8 PROBE_REPS=100 RAYON_NUM_THREADS=2 \
//!     cargo run --release -p arbor-bench --example memprobe
//! ```
//!
//! Evaluation runs first and training second, as in the bench's child process (each once
//! untimed, then `PROBE_REPS` times, 30 by default); `PROBE_MODE=fb` runs training only.
//! Linux with glibc (reads `/proc/self` and calls `mallinfo2`).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use arbor_bench::{workloads, Mode};
use burn::backend::flex::Flex;

/// The system allocator, counting the bytes live and their peak (the standard library has no
/// allocation statistics; the counters are two atomics per call).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; the counters do not touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_sub(l.size(), Relaxed);
        grew(n);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One line: live and peak bytes (the peak is reset), RSS, the heap's resident size, glibc's
/// arena size, bytes in use and free in it.
fn report(phase: &str) {
    let kib = |b: usize| b / 1024;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_string()
    };
    // The `Rss:` line of the `[heap]` mapping in smaps.
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let heap = smaps
        .split_once("[heap]")
        .and_then(|(_, rest)| rest.lines().find(|l| l.starts_with("Rss:")))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("0")
        .to_string();
    // SAFETY: `mallinfo2` only reads glibc's statistics.
    let mi = unsafe { libc::mallinfo2() };
    println!(
        "{phase:<24} live {:>7} KiB, peak {:>7} | VmRSS {:>7} VmHWM {:>7} heap RSS {:>7} | \
         arena {:>7} in use {:>7} free {:>7} KiB",
        kib(LIVE.load(Relaxed)),
        kib(PEAK.swap(LIVE.load(Relaxed), Relaxed)),
        field("VmRSS:"),
        field("VmHWM:"),
        heap,
        kib(mi.arena),
        kib(mi.uordblks),
        kib(mi.fordblks),
    );
}

fn main() {
    arbor_train::device::set_up_cpu_process();
    let dev = Default::default();
    let name =
        std::env::var("PROBE_NAME").expect("PROBE_NAME: a workload name (arbor-bench --list)");
    let reps: usize = std::env::var("PROBE_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let modes = if std::env::var("PROBE_MODE").as_deref() == Ok("fb") {
        vec![Mode::ForwardBackward]
    } else {
        vec![Mode::Forward, Mode::ForwardBackward]
    };
    let w = workloads::suite::<Flex>(&dev)
        .into_iter()
        .find(|w| w.name == name)
        .unwrap_or_else(|| panic!("no workload named {name} (arbor-bench --list)"));
    let mut run = (w.build)();
    report("built");
    for mode in modes {
        run(mode);
        report(&format!("{} once", mode.label()));
        for _ in 0..reps {
            run(mode);
        }
        report(&format!("{} after {reps}", mode.label()));
    }
}
