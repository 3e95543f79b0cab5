//! The script worker as a program of its own (the `larkgate` binary takes the same branch).

fn main() -> std::process::ExitCode {
    larkgate_script::worker::worker_main()
}
