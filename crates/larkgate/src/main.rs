//! The `larkgate` command. Everything is in the library; see [`larkgate::main`].

#![forbid(unsafe_code)]

/// Counts every allocation: a script worker (this binary re-executed) caps it at the run's
/// memory limit; the server runs it uncapped.
#[global_allocator]
static ALLOCATOR: larkgate_script::memory::WorkerAllocator =
    larkgate_script::memory::WorkerAllocator;

fn main() -> std::process::ExitCode {
    larkgate::main()
}
