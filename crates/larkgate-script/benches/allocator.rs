//! What the counting allocator costs: an allocation and its free through [`WorkerAllocator`]
//! while it counts (as in a script worker) against the same through the system allocator it
//! wraps, measured in the same run, on one thread and on two threads at once (the count is one
//! atomic every thread updates, so two threads contend for it). Then the same through
//! [`WorkerAllocator`] once counting is stopped, as `larkgate serve` runs it
//! ([`larkgate_script::memory::stop_counting`]): what carrying it costs a process that does not
//! count.
//!
//! Not a test: it prints a table of medians and ratios for a person to read. The whole-server
//! figure is wrk's (see the notes of issue 15): this isolates the allocator.
//!
//! Run with `cargo bench -p larkgate-script --bench allocator`.

// Calling an allocator directly is `unsafe`; this benchmark does nothing else unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::{Duration, Instant};

use larkgate_script::memory::WorkerAllocator;

/// Pairs of allocation and free per sample, per thread.
const PAIRS: u32 = 1_000_000;
/// Samples per figure; the median is reported.
const SAMPLES: usize = 9;

/// Allocates and frees `size` bytes `PAIRS` times through `allocator`, keeping a few blocks
/// alive at once as real code does (so the free is not always of the block just allocated).
fn churn(allocator: &impl GlobalAlloc, size: usize) {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let mut held = [std::ptr::null_mut::<u8>(); 8];
    for i in 0..PAIRS as usize {
        let slot = i % held.len();
        // SAFETY: a non-zero-size layout; each block is freed once, with its own layout.
        unsafe {
            if !held[slot].is_null() {
                allocator.dealloc(held[slot], layout);
            }
            held[slot] = black_box(allocator.alloc(layout));
            assert!(!held[slot].is_null());
        }
    }
    for block in held {
        // SAFETY: as above.
        unsafe { allocator.dealloc(block, layout) };
    }
}

/// The median time per pair of `threads` threads churning at once.
fn per_pair(allocator: &(impl GlobalAlloc + Sync), size: usize, threads: usize) -> Duration {
    let mut samples: Vec<Duration> = (0..SAMPLES)
        .map(|_| {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| churn(allocator, size));
                }
            });
            started.elapsed() / PAIRS
        })
        .collect();
    samples.sort();
    samples[SAMPLES / 2]
}

fn main() {
    println!("allocation + free, median of {SAMPLES} samples of {PAIRS} pairs per thread");
    println!("| size | threads | system | counting | ratio | stopped | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let sizes = [16, 64, 512, 4096, 65536];
    let mut rows = Vec::new();
    for threads in [1, 2] {
        for size in sizes {
            // Alternate, so drift on a shared machine falls on both; the better of two each.
            let mut system = Duration::MAX;
            let mut counting = Duration::MAX;
            for _ in 0..2 {
                system = system.min(per_pair(&System, size, threads));
                counting = counting.min(per_pair(&WorkerAllocator, size, threads));
            }
            rows.push((size, threads, system, counting));
        }
    }
    // One-way: every figure after this is of the allocator as the server carries it.
    larkgate_script::memory::stop_counting();
    for (size, threads, system, counting) in rows {
        let mut stopped = Duration::MAX;
        let mut system_again = system;
        for _ in 0..2 {
            system_again = system_again.min(per_pair(&System, size, threads));
            stopped = stopped.min(per_pair(&WorkerAllocator, size, threads));
        }
        let ns = |d: Duration| d.as_secs_f64() * 1e9;
        println!(
            "| {size} B | {threads} | {:.1} ns | {:.1} ns | {:.2}x | {:.1} ns | {:.2}x |",
            ns(system),
            ns(counting),
            counting.as_secs_f64() / system.as_secs_f64(),
            ns(stopped),
            stopped.as_secs_f64() / system_again.as_secs_f64()
        );
    }
}
