//! The `larkgate` command. Everything is in the library; see [`larkgate::main`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    larkgate::main()
}
