//! `larkgate capabilities`: the built-in tools — capabilities and platform tools — with their
//! signatures, annotations and schemas, exactly as the registry serves them.

use std::io::Write;

use anyhow::Context;
use larkgate_platform::registry::{McpTool, RegisteredTool, Registry, Source};
use larkgate_platform::{approvals, capabilities};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the MCP tool listings as JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args, out: &mut impl Write) -> anyhow::Result<()> {
    let mut registry = Registry::new();
    capabilities::register(&mut registry).context("a built-in capability is invalid")?;
    approvals::tools::register(&mut registry).context("a platform tool is invalid")?;
    // Capabilities first (reads, then writes), then platform tools, each by name.
    let mut tools: Vec<&std::sync::Arc<RegisteredTool>> = registry.iter().collect();
    tools.sort_by_key(|t| {
        (
            t.spec.origin.source == Source::Platform,
            !t.spec.read_only,
            t.spec.name.clone(),
        )
    });
    if args.json {
        let listings: Vec<McpTool> = tools.iter().map(|t| t.to_mcp()).collect();
        serde_json::to_writer_pretty(&mut *out, &listings)?;
        writeln!(out)?;
        return Ok(());
    }
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        write_text(tool, out)?;
    }
    Ok(())
}

fn write_text(tool: &RegisteredTool, out: &mut impl Write) -> anyhow::Result<()> {
    let spec = &tool.spec;
    let kind = if spec.read_only { "read-only" } else { "write" };
    let source = match spec.origin.source {
        Source::Platform => ", platform tool for approvers",
        _ => "",
    };
    writeln!(out, "{}", spec.signature.as_deref().unwrap_or(&spec.name))?;
    writeln!(
        out,
        "  {} ({kind}{source})",
        spec.title.as_deref().unwrap_or(&spec.name)
    )?;
    writeln!(out, "  {}", spec.description)?;
    let a = &spec.annotations;
    let hint = |v: Option<bool>| v.map_or("unset".to_owned(), |b| b.to_string());
    writeln!(
        out,
        "  annotations: readOnlyHint={} destructiveHint={} idempotentHint={} openWorldHint={}",
        hint(a.read_only),
        hint(a.destructive),
        hint(a.idempotent),
        hint(a.open_world)
    )?;
    writeln!(
        out,
        "  input schema:  {}",
        serde_json::Value::Object(spec.input_schema.clone())
    )?;
    if let Some(schema) = &spec.output_schema {
        writeln!(
            out,
            "  output schema: {}",
            serde_json::Value::Object(schema.clone())
        )?;
    }
    Ok(())
}
