//! A run's turn: a run slot (`[scripts] max_concurrent_runs`) and its share of the memory
//! budget (`[scripts] memory_budget_bytes`), waited for together and for a bounded time
//! (`[scripts] start_wait_ms`).
//!
//! Each run reserves what its worker may use before the worker is handed the script: its
//! memory limit (`max_memory_bytes`, which the worker's allocator enforces on every allocation)
//! plus [`WORKER_FOOTPRINT`], what a worker's process takes beyond its allocations (program
//! pages, stack, the allocator's own bookkeeping). So the workers of the runs going at once
//! never hold more than the budget. A run that cannot get its turn in time is refused with
//! `limit_exceeded`, saying what holds the budget: the bound also keeps a published script
//! that calls scripts from waiting forever on a budget its own callers hold.

use std::time::Duration;

use larkgate_platform::envelope::{Code, Refusal};
use tokio::sync::{Semaphore, SemaphorePermit};

/// What a worker process takes beyond what it allocates, counted in each run's reservation:
/// its native stack (up to 8 MiB), the program's pages it maps (9.4 MiB resident for a release
/// `larkgate` worker, shared with every other larkgate process) and the C allocator's own
/// bookkeeping, rounded up.
pub const WORKER_FOOTPRINT: u64 = 32 * 1024 * 1024;

/// The budget when none is configured, when the machine's memory cannot be read.
const FALLBACK_BUDGET: u64 = 4 * 1024 * 1024 * 1024;

/// Memory is reserved in units of this many bytes (a semaphore's permits are counted in
/// `u32` per acquisition).
const UNIT: u64 = 1024;

/// The default memory budget: half of the memory this process may use — the machine's
/// (`MemTotal`), or its control group's limit (`memory.max`, cgroup v2) when that is lower.
pub fn default_memory_budget() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_total(&text));
    let group = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (total, group) {
        (Some(total), Some(group)) => total.min(group) / 2,
        (Some(one), None) | (None, Some(one)) => one / 2,
        (None, None) => FALLBACK_BUDGET,
    }
}

/// `MemTotal` from `/proc/meminfo`, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    larkgate_script::memory::proc_figure(text, "MemTotal")
}

/// What one run reserves: its memory limit and a worker's footprint.
pub fn reservation(max_memory_bytes: usize) -> u64 {
    max_memory_bytes as u64 + WORKER_FOOTPRINT
}

/// The run slots and the memory budget.
#[derive(Debug)]
pub(crate) struct Turns {
    slots: Semaphore,
    max_concurrent_runs: usize,
    memory: Semaphore,
    budget: u64,
    /// One run's reservation, in units.
    reservation: u32,
    wait: Duration,
}

/// A run's turn, given back when dropped.
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    _slot: SemaphorePermit<'a>,
    _memory: SemaphorePermit<'a>,
}

/// Why a turn was not given.
#[derive(Debug)]
pub(crate) enum NoTurn {
    /// The wait ran out: what the caller reads.
    Waited(Refusal),
    /// larkgate is stopping.
    Closed,
}

impl Turns {
    /// `max_concurrent_runs` slots and a `budget` of bytes, of which each run reserves
    /// [`reservation`] of `max_memory_bytes`; a run waits at most `wait` for both. The
    /// configuration is checked beforehand (`larkgate::config`): a budget below one run's
    /// reservation still lets one run go at a time.
    pub(crate) fn new(
        max_concurrent_runs: usize,
        max_memory_bytes: usize,
        budget: u64,
        wait: Duration,
    ) -> Self {
        let units = |bytes: u64| bytes.div_ceil(UNIT);
        let reservation = u32::try_from(units(reservation(max_memory_bytes))).unwrap_or(u32::MAX);
        let budget_units = usize::try_from(units(budget))
            .unwrap_or(usize::MAX)
            .clamp(reservation as usize, Semaphore::MAX_PERMITS);
        Turns {
            slots: Semaphore::new(max_concurrent_runs.max(1)),
            max_concurrent_runs: max_concurrent_runs.max(1),
            memory: Semaphore::new(budget_units),
            budget: budget_units as u64 * UNIT,
            reservation,
            wait,
        }
    }

    /// Waits (at most the configured time) for a run slot and the run's memory.
    pub(crate) async fn take(&self) -> Result<Turn<'_>, NoTurn> {
        let both = async {
            let slot = self.slots.acquire().await?;
            let memory = self.memory.acquire_many(self.reservation).await?;
            Ok::<_, tokio::sync::AcquireError>(Turn {
                _slot: slot,
                _memory: memory,
            })
        };
        match tokio::time::timeout(self.wait, both).await {
            Ok(Ok(turn)) => Ok(turn),
            Ok(Err(_)) => Err(NoTurn::Closed),
            Err(_) => Err(NoTurn::Waited(self.refusal())),
        }
    }

    /// Bytes one run reserves.
    pub(crate) fn reservation(&self) -> u64 {
        u64::from(self.reservation) * UNIT
    }

    /// Bytes reserved by the runs going now.
    pub(crate) fn reserved(&self) -> u64 {
        let free = self.memory.available_permits() as u64 * UNIT;
        self.budget.saturating_sub(free)
    }

    fn refusal(&self) -> Refusal {
        let going = self.max_concurrent_runs - self.slots.available_permits();
        let reservation = self.reservation();
        Refusal::new(
            Code::LimitExceeded,
            format!(
                "the run did not get its turn within {}: runs going: {going} of at most {}, \
                 holding {} of the {} script memory budget; each run reserves {} (its memory \
                 limit and its worker's own {})",
                seconds(self.wait),
                self.max_concurrent_runs,
                mib(self.reserved()),
                mib(self.budget),
                mib(reservation),
                mib(WORKER_FOOTPRINT),
            ),
        )
        .with_hint(
            "try again when fewer runs are going, or raise [scripts] memory_budget_bytes or \
             max_concurrent_runs, or lower max_memory_bytes",
        )
    }

    /// How runs share memory, in a sentence for an operator.
    pub(crate) fn describe(&self) -> String {
        let room = (self.budget / self.reservation()).min(self.max_concurrent_runs as u64);
        format!(
            "script runs reserve {} each (max_memory_bytes and a worker's own {}) from a \
             memory budget of {} (memory_budget_bytes): {room} can go at once",
            mib(self.reservation()),
            mib(WORKER_FOOTPRINT),
            mib(self.budget),
        )
    }

    /// Closes both: every waiting and later run is refused as larkgate stops.
    pub(crate) fn close(&self) {
        self.slots.close();
        self.memory.close();
    }
}

/// Bytes as MiB for messages, e.g. `272 MiB`.
fn mib(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib.fract() == 0.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

fn seconds(wait: Duration) -> String {
    format!("{} s", wait.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_total_is_read_in_bytes() {
        let text = "MemTotal:       24567892 kB\nMemFree:         1234 kB\n";
        assert_eq!(meminfo_total(text), Some(24_567_892 * 1024));
        assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(meminfo_total("MemTotal: lots\n"), None);
    }

    #[test]
    fn the_default_budget_is_half_of_what_this_machine_has() {
        let budget = default_memory_budget();
        let total = meminfo_total(&std::fs::read_to_string("/proc/meminfo").unwrap()).unwrap();
        assert!(budget <= total / 2, "{budget} of {total}");
        assert!(budget > 0);
    }

    #[tokio::test]
    async fn runs_that_do_not_fit_wait_and_are_refused_saying_what_holds_the_budget() {
        let limit = 64 * 1024 * 1024;
        // Room for two runs' reservations and a little.
        let budget = 2 * reservation(limit) + 1024 * 1024;
        let turns = Turns::new(8, limit, budget, Duration::from_millis(200));
        let first = turns.take().await.unwrap();
        let second = turns.take().await.unwrap();
        assert_eq!(turns.reserved(), 2 * reservation(limit));
        let refused = match turns.take().await {
            Err(NoTurn::Waited(refusal)) => refusal,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused.code, Code::LimitExceeded);
        assert!(
            refused.message.contains("runs going: 2 of at most 8")
                && refused
                    .message
                    .contains("holding 192 MiB of the 193 MiB script memory budget")
                && refused.message.contains("each run reserves 96 MiB"),
            "{}",
            refused.message
        );
        // A turn given back is the next run's.
        drop(first);
        let third = turns.take().await.unwrap();
        drop((second, third));
        assert_eq!(turns.reserved(), 0);
        turns.close();
        assert!(matches!(turns.take().await, Err(NoTurn::Closed)));
    }

    #[tokio::test]
    async fn a_budget_below_one_run_still_lets_one_run_go_at_a_time() {
        let turns = Turns::new(8, 64 * 1024 * 1024, 1024, Duration::from_millis(100));
        let only = turns.take().await.unwrap();
        assert!(matches!(turns.take().await, Err(NoTurn::Waited(_))));
        drop(only);
        assert!(turns.take().await.is_ok());
    }
}
