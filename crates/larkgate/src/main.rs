//! The `larkgate` command. Everything is in the library; see [`larkgate::main`].

#![forbid(unsafe_code)]

/// Counts every allocation of a script worker (this binary re-executed), capped at the run's
/// memory limit; every other command turns the count off as it starts (see [`larkgate::main`]).
#[global_allocator]
static ALLOCATOR: larkgate_script::memory::WorkerAllocator =
    larkgate_script::memory::WorkerAllocator;

fn main() -> std::process::ExitCode {
    larkgate::main()
}
