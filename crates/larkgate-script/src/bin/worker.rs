//! The script worker as a program of its own (the `larkgate` binary takes the same branch).

/// Counts every allocation, so a run's memory limit bounds them all.
#[global_allocator]
static ALLOCATOR: larkgate_script::memory::WorkerAllocator =
    larkgate_script::memory::WorkerAllocator;

fn main() -> std::process::ExitCode {
    larkgate_script::worker::worker_main()
}
