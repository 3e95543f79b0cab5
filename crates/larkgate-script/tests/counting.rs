//! The counting allocator in a process of its own, as the `larkgate` binary carries it: counting
//! from the first allocation, then turned off for good as a process that is not a worker turns
//! it off ([`memory::stop_counting`]). The switch is one-way, so it is tried in one test, in
//! order; the worker's side (a capped run ends as exactly the limit it hit) is tried through the
//! worker binary in the `it` tests and through `larkgate serve` in the larkgate crate's.

use larkgate_script::memory::{self, WorkerAllocator};

#[global_allocator]
static ALLOCATOR: WorkerAllocator = WorkerAllocator;

const MIB: usize = 1024 * 1024;

#[test]
fn counting_stops_for_good_memory_counted_before_is_freed_safely_and_no_worker_runs_after() {
    assert!(memory::installed(), "counting is on from the start");
    let before = memory::in_use();
    let mut counted = vec![1u8; MIB];
    assert!(
        memory::in_use() >= before + MIB,
        "a MiB allocated while counting is counted"
    );

    memory::stop_counting();
    assert!(!memory::installed(), "nothing is counted any more");
    let frozen = memory::in_use();
    let uncounted = vec![2u8; 4 * MIB];
    assert_eq!(memory::in_use(), frozen, "an allocation moves no count");

    // Blocks from before the switch are grown and freed through the system allocator alone.
    counted.resize(8 * MIB, 3);
    assert!(counted[..MIB].iter().all(|&b| b == 1) && counted[MIB..].iter().all(|&b| b == 3));
    drop(counted);
    assert_eq!(memory::in_use(), frozen, "a free moves no count either");
    assert!(uncounted.iter().all(|&b| b == 2));
    drop(uncounted);
    // Many small blocks of both eras, interleaved, as a server's would be.
    let blocks: Vec<Box<[u8; 48]>> = (0..10_000).map(|i| Box::new([i as u8; 48])).collect();
    assert!(blocks.iter().enumerate().all(|(i, b)| b[47] == i as u8));
    drop(blocks);

    // A process that stopped counting cannot run a script: its memory limit could not hold.
    assert_eq!(
        larkgate_script::worker::worker_main(),
        std::process::ExitCode::from(5)
    );
    let refused = std::panic::catch_unwind(|| memory::limit_to(64 * MIB));
    assert!(refused.is_err(), "limit_to refuses an uncounted process");
}
