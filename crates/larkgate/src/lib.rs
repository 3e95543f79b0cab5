//! larkgate, the command and its edges, as a library: the command line ([`cli`]), the
//! configuration ([`config`]), the HTTP edge ([`http`]) and the stdio edge (`larkgate stdio`,
//! in [`cli`]). The `larkgate` binary is [`main`]; tests and fuzz targets reach the edges here.

#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod http;

use std::process::ExitCode;

use clap::Parser;

/// The `larkgate` command: a script worker's branch first (before argument parsing, before
/// any runtime or thread starts), else the command line.
pub fn main() -> ExitCode {
    // A script worker re-executes this binary. Its branch comes first: before argument
    // parsing, before any runtime or thread starts.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == larkgate_script::worker::WORKER_ARG)
    {
        return larkgate_script::worker::worker_main();
    }
    let args = cli::Cli::parse();
    // Diagnostics go to stderr: warnings (an upstream down, a tool quarantined or dropped) and
    // the upstreams' allow-lists at start. `RUST_LOG` overrides, e.g. `RUST_LOG=debug`.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(args.default_log_filter()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A closed stdout (`larkgate ... | head`) is not a failure worth reporting.
            let broken_pipe = error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("larkgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}
