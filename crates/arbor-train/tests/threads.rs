//! `threads::join_rayon_pool` in fresh processes (this binary runs itself as a child per case;
//! `harness = false`, so `main` is the process's main thread, as in arbor's programs).

use std::process::Command;

use arbor_train::threads::{join_rayon_pool, pool_setup, PoolSetup};

/// The case a child runs, from `ARBOR_THREADS_TEST_CASE`.
fn child(case: &str) {
    match case {
        "main" => {
            let got = join_rayon_pool();
            assert_eq!(pool_setup(), Some(got), "pool_setup repeats the answer");
            assert_eq!(
                join_rayon_pool(),
                got,
                "a second call gives the first answer"
            );
            println!("setup {got:?}");
            println!("index {:?}", rayon::current_thread_index());
            println!("threads {}", rayon::current_num_threads());
            if let PoolSetup::Joined { .. } = got {
                // Parallel work started on the main thread runs and is right.
                let sum: u64 = rayon::join(|| (0..1000u64).sum::<u64>(), || 7u64).0;
                assert_eq!(sum, 499_500);
                // A thread outside the pool hands its work to the pool while the main thread
                // waits for it outside rayon (the data-parallel engine's pattern): it finishes
                // when another pool thread exists (with one, the engine refuses several
                // workers: tests/train/parallel.rs).
                if rayon::current_num_threads() < 2 {
                    println!("work ok");
                    return;
                }
                let other = std::thread::spawn(|| {
                    let (a, b) = rayon::join(|| 1 + 1, || 2 + 2);
                    a + b
                });
                assert_eq!(other.join().expect("the other thread"), 6);
                println!("work ok");
            }
        }
        "spawned" => {
            let got = std::thread::spawn(join_rayon_pool)
                .join()
                .expect("a thread");
            println!("setup {got:?}");
        }
        "built" => {
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build_global()
                .expect("the global pool");
            println!("setup {:?}", join_rayon_pool());
        }
        other => panic!("unknown case {other}"),
    }
}

/// Runs this binary as a child for `case` with `env`, and returns its output.
fn run(case: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("this test's path");
    let mut cmd = Command::new(exe);
    cmd.env("ARBOR_THREADS_TEST_CASE", case)
        .env_remove("ARBOR_POOL")
        .env_remove("RAYON_NUM_THREADS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the child runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "case {case} {env:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn main() {
    if let Ok(case) = std::env::var("ARBOR_THREADS_TEST_CASE") {
        child(&case);
        return;
    }
    let two = run("main", &[("RAYON_NUM_THREADS", "2")]);
    assert!(two.contains("setup Joined { threads: 2 }"), "{two}");
    assert!(
        two.contains("index Some(0)"),
        "the main thread is thread 0: {two}"
    );
    assert!(two.contains("threads 2"), "{two}");
    assert!(two.contains("work ok"), "{two}");

    let three = run("main", &[("RAYON_NUM_THREADS", "3")]);
    assert!(three.contains("setup Joined { threads: 3 }"), "{three}");

    let one = run("main", &[("RAYON_NUM_THREADS", "1")]);
    assert!(one.contains("setup OneThread"), "{one}");
    assert!(one.contains("index None"), "{one}");

    // Asked for: the main thread is the pool's only thread (no work from other threads here).
    let asked = run(
        "main",
        &[("RAYON_NUM_THREADS", "1"), ("ARBOR_POOL", "main")],
    );
    assert!(asked.contains("setup Joined { threads: 1 }"), "{asked}");
    assert!(asked.contains("index Some(0)"), "{asked}");

    let plain = run(
        "main",
        &[("RAYON_NUM_THREADS", "2"), ("ARBOR_POOL", "plain")],
    );
    assert!(plain.contains("setup OptedOut"), "{plain}");
    assert!(plain.contains("index None"), "{plain}");

    let bogus = run(
        "main",
        &[("RAYON_NUM_THREADS", "2"), ("ARBOR_POOL", "mian")],
    );
    assert!(bogus.contains("setup Unrecognised"), "{bogus}");
    assert!(bogus.contains("index None"), "{bogus}");

    let spawned = run("spawned", &[("RAYON_NUM_THREADS", "2")]);
    assert!(spawned.contains("setup NotMainThread"), "{spawned}");

    let built = run("built", &[("RAYON_NUM_THREADS", "2")]);
    assert!(built.contains("setup AlreadyBuilt"), "{built}");
    println!("threads: 8 cases passed");
}
