//! The worker's memory limit: a counting global allocator with a cap.
//!
//! starlark-rust's own heap limit does not count container storage (a dict's entries live in
//! separate allocations), so it is no bound on what a script can take. [`WorkerAllocator`]
//! counts every allocation of the process — the interpreter's heap, containers, strings, the
//! frames to the parent, the worker's own start-up — through [`cap`]'s counting allocator, and
//! refuses the one that would pass the limit set by [`limit_to`]. In a worker a refusal ends
//! the process there and then (`abort`), inside the allocator: the code that asked for the
//! memory never sees a null pointer, so neither its way of handling one (the interpreter's
//! arena panics, and some of its release-built paths do not check at all and crash) nor a
//! fallback it might take decides what happens.
//!
//! Threat model: the script is hostile and may allocate in any way the interpreter offers. What
//! it cannot do is write to the worker's stderr or allocate outside the global allocator (the
//! interpreter has no such primitive); memory that is not allocated — the 8 MiB native stack,
//! the program's own pages — is outside the count and bounded by the address-space limit.
//!
//! Before the abort the parent must learn the real cause, so a refusal in a worker
//! ([`limit_to`] has been called) writes one line to stderr, [`REPORT`] followed by the limit's
//! name (`memory`, or `address space` when the cap had room but the system refused — the
//! worker's `RLIMIT_AS`) and the sizes. It is written with one `write(2)` from a stack buffer:
//! the allocator must not allocate. The parent reads it after the worker dies of `SIGABRT`
//! ([`crate::parent`]). Outside a worker a failed allocation is returned to its caller as the
//! system allocator's would be, and nothing is written.
//!
//! The server is the same binary (a worker is it re-executed), so it carries the allocator too,
//! and counting costs it an atomic update every thread contends for on every allocation. A
//! process that is not a worker therefore calls [`stop_counting`] as it starts: from then on
//! every allocation goes straight to the system allocator. The count is on from the process's
//! first allocation and can only be turned off, never back on, so a worker's count is exact
//! and a process that stopped counting cannot become a worker ([`installed`] is then false).
//! Memory allocated while counting and freed after is freed by the same system allocator (the
//! count wraps it, it is no other allocator), so the switch frees nothing wrongly; only the
//! count, which nothing reads any more, stops being true.
//!
//! A binary that runs workers declares the allocator as its global allocator:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: larkgate_script::memory::WorkerAllocator = larkgate_script::memory::WorkerAllocator;
//! ```
//!
//! and [`crate::worker::worker_main`] refuses to run a script in a binary that did not
//! ([`installed`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// The count and the cap: every allocation of a process whose global allocator is
/// [`WorkerAllocator`]. Uncapped until [`limit_to`].
static CAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Whether a refusal is reported on stderr and ends the process (set by [`limit_to`], in
/// workers only).
static IN_WORKER: AtomicBool = AtomicBool::new(false);

/// Whether allocations go through [`CAP`]: from the first, until [`stop_counting`].
static COUNTING: AtomicBool = AtomicBool::new(true);

/// What a worker's report line starts with; the limit's name and a colon follow.
pub const REPORT: &str = "larkgate worker limit ";

/// The counting allocator (zero-sized: its state is this module's). See the module
/// documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerAllocator;

// SAFETY: every method forwards to `cap::Cap<System>` (while counting) or to `System` (after
// `stop_counting`), both `GlobalAlloc`s over the same system allocator, with the caller's own
// arguments: a block allocated through either may be freed or resized through the other.
// `refused` only reads counters, writes to stderr from the stack and may abort.
unsafe impl GlobalAlloc for WorkerAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !COUNTING.load(Ordering::Relaxed) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.alloc(layout) };
        }
        // SAFETY: forwarded with the caller's guarantees.
        let pointer = unsafe { CAP.alloc(layout) };
        if pointer.is_null() {
            refused(layout.size());
        }
        pointer
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !COUNTING.load(Ordering::Relaxed) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: forwarded with the caller's guarantees.
        let pointer = unsafe { CAP.alloc_zeroed(layout) };
        if pointer.is_null() {
            refused(layout.size());
        }
        pointer
    }

    #[inline]
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if !COUNTING.load(Ordering::Relaxed) {
            // SAFETY: forwarded with the caller's guarantees (see the impl's comment).
            return unsafe { System.dealloc(pointer, layout) };
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { CAP.dealloc(pointer, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !COUNTING.load(Ordering::Relaxed) {
            // SAFETY: forwarded with the caller's guarantees (see the impl's comment).
            return unsafe { System.realloc(pointer, layout, new_size) };
        }
        // SAFETY: forwarded with the caller's guarantees.
        let moved = unsafe { CAP.realloc(pointer, layout, new_size) };
        if moved.is_null() {
            refused(new_size.saturating_sub(layout.size()));
        }
        moved
    }
}

/// A refused allocation of `size` more bytes: in a worker, says on stderr which limit refused
/// it and ends the process.
fn refused(size: usize) {
    if !IN_WORKER.load(Ordering::Relaxed) {
        return;
    }
    let limit = CAP.limit();
    let remaining = CAP.remaining();
    let in_use = limit.saturating_sub(remaining);
    let mut line = [0u8; 256];
    let mut out = &mut line[..];
    // `write!` into a slice formats integers without allocating.
    let written = if remaining < size {
        std::io::Write::write_fmt(
            &mut out,
            format_args!(
                "\n{REPORT}memory: an allocation of {size} bytes would take the worker past its \
                 {limit}-byte limit ({in_use} bytes in use)\n"
            ),
        )
    } else {
        std::io::Write::write_fmt(
            &mut out,
            format_args!(
                "\n{REPORT}address space: the system refused an allocation of {size} bytes \
                 ({in_use} bytes in use, under the {limit}-byte memory limit)\n"
            ),
        )
    };
    let length = 256 - out.len();
    if written.is_ok() {
        let _ = rustix::io::write(rustix::stdio::stderr(), &line[..length]);
    }
    std::process::abort();
}

/// Caps this process's allocations at `bytes` in all, counted from its first allocation, and
/// makes a refusal report itself and end the process. Only a worker calls it. `Err` carries
/// what is already in use when that is more (and nothing is capped).
pub fn limit_to(bytes: usize) -> Result<(), usize> {
    assert!(
        COUNTING.load(Ordering::Relaxed),
        "a process that stopped counting its allocations cannot be limited"
    );
    IN_WORKER.store(true, Ordering::Relaxed);
    CAP.set_limit(bytes).map_err(|()| in_use())
}

/// Turns counting off for good: a process that is not a script worker (the server, any other
/// command) calls it first thing, so its allocations cost what the system allocator's do. A
/// worker never calls it; after it, [`installed`] is false and the process cannot run one.
pub fn stop_counting() {
    COUNTING.store(false, Ordering::Relaxed);
}

/// Bytes this process has allocated and not freed (0 when [`WorkerAllocator`] is not its
/// global allocator; what it was when counting stopped, after [`stop_counting`]).
pub fn in_use() -> usize {
    CAP.allocated()
}

/// Whether [`WorkerAllocator`] is this process's global allocator and counts (an allocation
/// moves the count): false in a binary without it and after [`stop_counting`].
pub fn installed() -> bool {
    let before = in_use();
    let probe = std::hint::black_box(Box::new([0u8; 64]));
    let after = in_use();
    drop(probe);
    after >= before + 64
}

/// A `Key:   N kB` figure of a `/proc` file (`/proc/self/status`, `/proc/meminfo`), in bytes.
pub fn proc_figure(text: &str, key: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}
