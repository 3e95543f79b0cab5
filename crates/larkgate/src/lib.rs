//! larkgate, the command, as a library: the command line ([`cli`]), the configuration file
//! ([`config`], which aggregates each section's own type and locates the file), the stdio edge
//! (`larkgate stdio`, in [`cli`]) and the composition root where every tool source registers
//! (`cli::context`). The HTTP edge and the console are `larkgate_edge`. The `larkgate` binary
//! is [`main`]; fuzz targets reach the configuration here.

#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod logging;
mod telemetry;

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
    // Anything else is no worker: its allocations are not counted (the count is for a run's
    // memory limit, and costs every allocation an atomic update the threads contend for).
    larkgate_script::memory::stop_counting();
    // So does the launcher of a command-launched upstream (see larkgate_upstream::launcher).
    let mut args = std::env::args_os().skip(1);
    if args
        .next()
        .is_some_and(|a| a == larkgate_upstream::launcher::LAUNCHER_ARG)
    {
        return larkgate_upstream::launcher::launcher_main(args);
    }
    let args = cli::Cli::parse();
    let settings = match args.log_settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("larkgate: {error}");
            return ExitCode::from(2);
        }
    };
    // Traces, for the commands that serve MCP, when the configuration asks for them.
    let tracer = match settings.telemetry.as_ref().map(telemetry::start) {
        Some(Ok(tracer)) => Some(tracer),
        Some(Err(error)) => {
            eprintln!("larkgate: {error}");
            return ExitCode::from(2);
        }
        None => None,
    };
    logging::set_access_lines(settings.access_lines);
    logging::init(
        settings.format,
        settings.format_chosen,
        args.default_log_filter(),
        tracer,
    );
    let code = run(args);
    telemetry::shutdown();
    code
}

fn run(args: cli::Cli) -> ExitCode {
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A closed stdout (`larkgate ... | head`) is not a failure worth reporting.
            if broken_pipe(&error) {
                return ExitCode::SUCCESS;
            }
            logging::fail(&format!("{error:#}"));
            ExitCode::FAILURE
        }
    }
}

/// Whether `error` is a write to a reader that went away: an I/O error, or JSON written through
/// serde, that failed with a broken pipe, at any depth of its causes.
fn broken_pipe(error: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(BrokenPipe))
    })
}
