//! `larkgate policy explain TOOL [--args JSON] [--arg key=value ...]`: how the policy would
//! decide a direct call by the operator or `--as NAME`, rule by rule, without making it (see
//! `larkgate_platform::explain`).

use std::io::Write;

use larkgate_binding::map_to_json;

use super::context::Context;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// How the policy would decide a call of TOOL by the operator or `--as NAME`: what the
    /// roles grant, every rule with its result, and the decision. Nothing is called, and
    /// rate limits and approvals already granted are not consulted.
    Explain {
        /// The tool's name.
        tool: String,
        /// The arguments, as one JSON object; `--arg` values are added to it.
        #[arg(long = "args", value_name = "JSON")]
        args_json: Option<String>,
        /// An argument, `key=value` (as `larkgate call` reads it).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
    },
}

pub(crate) async fn run(
    command: Command,
    context: &Context,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Command::Explain {
        tool,
        args_json,
        args,
    } = command;
    let shape = context
        .platform
        .tool_table()
        .snapshot()
        .get(&tool)
        .and_then(|t| t.spec.input_shape.clone());
    let arguments = super::call::arguments_from(args_json.as_deref(), &args, shape.as_deref())?;
    let explanation = larkgate_platform::explain::explain(
        &context.platform,
        &context.actor,
        &tool,
        &map_to_json(&arguments),
    );
    writeln!(out, "{} calling {tool}:", context.actor.id)?;
    for line in &explanation.lines {
        writeln!(out, "  {line}")?;
    }
    writeln!(out, "decision: {}", explanation.decision)?;
    Ok(())
}
