//! The CPU allocator settings (src/alloc.rs) take effect: a large block comes from the heap, not
//! from a fresh `mmap` that would be page-faulted in again on every tensor op.

use arbor_train::alloc::{tune_for_cpu_tensors, AllocTuning};

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn large_blocks_come_from_the_heap_after_tuning() {
    let mapped = || unsafe { libc::mallinfo2() }.hblks;
    // 16 MiB is above glibc's initial mmap threshold (128 KiB): by default it is mmapped. (A
    // thread's arena cannot hold blocks of 64 MiB or more, so those are mapped regardless.)
    let before = mapped();
    match tune_for_cpu_tensors() {
        AllocTuning::Applied => {}
        other => {
            eprintln!("skipped: the allocator was left alone ({other:?}), e.g. MALLOC_* is set");
            return;
        }
    }
    let block = vec![1u8; 16 << 20];
    let during = mapped();
    assert_eq!(
        during, before,
        "a 16 MiB block was mmapped after tuning ({before} → {during} mapped blocks)"
    );
    assert_eq!(block.iter().map(|&b| b as usize).sum::<usize>(), 16 << 20);
    // Asking again does nothing new and gives the same answer.
    assert_eq!(tune_for_cpu_tensors(), AllocTuning::Applied);
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
#[test]
fn tuning_is_a_no_op_elsewhere() {
    assert_ne!(tune_for_cpu_tensors(), AllocTuning::Applied);
}
