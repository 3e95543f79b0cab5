//! The `larkgate` command.

#![forbid(unsafe_code)]

mod cli;
mod config;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
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
