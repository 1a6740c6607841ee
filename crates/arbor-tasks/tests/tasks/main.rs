//! The tasks through the engine: training steps read nothing back from the device
//! (`host_reads`), data-parallel training equals one worker (`parallel`), and a tree encoder
//! learns a small tree task (`tree_task`). `common` holds the shared data.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and
//! every binary links and monomorphises Burn again. The backend's generator and Burn's
//! collective server are process-global, so every test holds [`serial`] from its first line:
//! no two runs interleave, as when each module had a process of its own.

mod common;
mod host_reads;
mod parallel;
mod tree_task;

/// The lock every test of this binary holds while it runs.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
