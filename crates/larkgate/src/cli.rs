//! Command-line interface: one subcommand per module under `cli/`.

mod capabilities;

use clap::{Parser, Subcommand};

/// larkgate: one governed MCP endpoint in front of typed capabilities, federated MCP servers
/// and Starlark scripts.
#[derive(Debug, Parser)]
#[command(name = "larkgate", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the built-in capabilities with their Starlark signatures and JSON schemas.
    Capabilities(capabilities::Args),
}

pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Capabilities(args) => capabilities::run(args, &mut std::io::stdout().lock()),
    }
}
