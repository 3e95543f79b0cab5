//! The `larkgate` command.

#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("larkgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}
