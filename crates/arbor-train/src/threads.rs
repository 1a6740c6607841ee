//! The main thread as one of rayon's threads, for CPU tensor work.
//!
//! The CPU backends and arbor's own kernels run their parallel work on rayon's global pool. A
//! thread outside the pool that calls `rayon::join` (or any parallel iterator) hands the job to
//! the pool and sleeps until a worker has finished it: a program whose model runs on its main
//! thread pays that handoff (a futex wake-up and a context switch each way) on every op, and
//! its main thread never computes. PyTorch's main thread is one of its OpenMP team's threads.
//!
//! [`join_rayon_pool`] builds rayon's global pool with the calling thread as its thread 0
//! (`ThreadPoolBuilder::use_current_thread`), as many threads in all as rayon would otherwise
//! start (`RAYON_NUM_THREADS`, else one per CPU), so the same number of threads run but the
//! main thread's ops start their parallel work in place. Measured on the 2-core VM, two
//! threads, three alternated rounds (docs/bench.md, "The main thread in rayon's pool"): the
//! in256 LSTM cell, the in128 FastTrees cell, the Transformer, the Gumbel Tree-LSTM and R2D2
//! ran 0–20% faster in evaluation and training.
//!
//! It changes nothing (and says why) when
//! - `ARBOR_POOL=plain` is set, or `ARBOR_POOL` has a value other than `plain` or `main` (with a
//!   warning on stderr),
//! - the pool would have one thread, unless `ARBOR_POOL=main` is set: a one-thread pool with the
//!   main thread in it has no other thread to run jobs handed to it by other threads (the
//!   data-parallel engine's workers), and a main thread waiting for such a worker would wait for
//!   ever, so the data-parallel engine refuses to start several workers in such a pool. With one
//!   thread and without `ARBOR_POOL=main`, arbor's kernels run their work inline (`arbor_kernels`'
//!   splitting checks the pool's size) while `flex`'s own parallel loops still go to the pool's
//!   thread,
//! - the calling thread is not the process's main thread (a pool's thread 0 must live as long as
//!   the pool, which lives as long as the process), or
//! - rayon's global pool already exists (something used rayon before).

use std::sync::OnceLock;

/// What [`join_rayon_pool`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolSetup {
    /// Rayon's global pool now has the main thread as thread 0, and this many threads in all.
    Joined {
        /// Threads in the pool, the main thread included.
        threads: usize,
    },
    /// Left alone: `ARBOR_POOL=plain`.
    OptedOut,
    /// Left alone: `ARBOR_POOL` has another value (a warning on stderr names it).
    Unrecognised,
    /// Left alone: the pool would have one thread and `ARBOR_POOL=main` is not set (see the
    /// module documentation).
    OneThread,
    /// Left alone: not called from the process's main thread.
    NotMainThread,
    /// Left alone: rayon's global pool was already built.
    AlreadyBuilt,
}

impl std::fmt::Display for PoolSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolSetup::Joined { threads } => {
                write!(f, "main thread in rayon's pool ({threads} threads)")
            }
            PoolSetup::OptedOut => write!(f, "rayon's own pool (ARBOR_POOL=plain)"),
            PoolSetup::Unrecognised => write!(f, "rayon's own pool (ARBOR_POOL not understood)"),
            PoolSetup::OneThread => {
                write!(f, "rayon's own pool (one thread; ARBOR_POOL=main joins it)")
            }
            PoolSetup::NotMainThread => write!(f, "rayon's own pool (not on the main thread)"),
            PoolSetup::AlreadyBuilt => write!(f, "rayon's own pool (built before)"),
        }
    }
}

/// The number of threads rayon's global pool starts with: `RAYON_NUM_THREADS` when it is a
/// positive integer, else one per CPU (rayon's own rule; its builder has no getter for it).
pub fn rayon_default_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Makes the calling (main) thread one of the threads of rayon's global pool, once per process,
/// and says what happened (later calls return the first call's answer). See the module
/// documentation.
pub fn join_rayon_pool() -> PoolSetup {
    *DONE.get_or_init(|| {
        let asked = std::env::var("ARBOR_POOL").ok();
        match asked.as_deref() {
            None | Some("") | Some("main") => {}
            Some("plain") => return PoolSetup::OptedOut,
            Some(other) => {
                eprintln!(
                    "arbor: ARBOR_POOL={other:?} is neither \"plain\" nor \"main\"; rayon's pool \
                     is left as rayon builds it"
                );
                return PoolSetup::Unrecognised;
            }
        }
        let threads = rayon_default_threads();
        if threads < 2 && asked.as_deref() != Some("main") {
            return PoolSetup::OneThread;
        }
        if std::thread::current().name() != Some("main") {
            return PoolSetup::NotMainThread;
        }
        match rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .use_current_thread()
            .build_global()
        {
            Ok(()) => PoolSetup::Joined { threads },
            Err(_) => PoolSetup::AlreadyBuilt,
        }
    })
}

/// What [`join_rayon_pool`] did in this process, or `None` when it was not called.
pub fn pool_setup() -> Option<PoolSetup> {
    DONE.get().copied()
}

/// The first call's answer.
static DONE: OnceLock<PoolSetup> = OnceLock::new();
