//! The engine: training and evaluation (`engine`), steps that read nothing back from the device
//! (`host_reads`), data parallelism (`parallel`), learning-rate schedules (`schedule`) and its
//! robustness (`robustness`: warm-up, plateau, clipping, budgets, checkpoints, non-finite
//! stops, resume checks, curves, damaged files).
//!
//! One test binary for these (issue 34, item 8): each was a binary of its own, and every binary
//! links and monomorphises Burn again. The backend's generator and Burn's collective server are
//! process-global, so the runs that draw from them hold [`serial`], the one lock of this binary,
//! as each file's own lock did. (`alloc.rs` stays a binary of its own: it counts the process's
//! mapped blocks, which other tests' allocations would change.)

mod engine;
mod host_reads;
mod parallel;
mod robustness;
mod schedule;

/// The lock of this binary: see the module documentation.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
