//! `larkgate client ... list | call TOOL`: a small MCP client for a running `larkgate serve`
//! (or any Streamable HTTP MCP server), for trying larkgate from a terminal the way an agent
//! uses it. It opens no data directory: everything it does crosses the server's pipeline as the
//! token's principal.
//!
//! The token comes from `LARKGATE_TOKEN` or `--token-file` (never a flag, which would show in
//! process listings and shell history).

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use larkgate_binding::{FieldShape, Value, to_json};
use larkgate_platform::registry::INPUT_SHAPE_META_KEY;
use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};

use super::call::arguments_from;
use super::credentials::TokenArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server's MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8940/mcp")]
    url: String,
    #[command(flatten)]
    token: TokenArgs,
    /// Speak the 2025-11-25 revision (sessions) instead of 2026-07-28.
    #[arg(long)]
    legacy: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// List the tools the token's principal may see, with their signatures.
    List {
        /// Print the MCP listings as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool; the structured result (or the refusal's envelope) goes to stdout as JSON,
    /// and a refusal exits non-zero.
    Call {
        /// The tool's name.
        tool: String,
        /// An argument, `key=value` (text for `str` fields, JSON otherwise).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// An argument whose value is a file's text, `key=PATH` (a script's source).
        #[arg(long = "arg-file", value_name = "KEY=PATH")]
        arg_files: Vec<String>,
        /// All arguments as one JSON object; the others are added to it.
        #[arg(long, value_name = "JSON")]
        args_json: Option<String>,
    },
}

async fn connect(args: &Args) -> anyhow::Result<UpstreamClient> {
    let url =
        reqwest::Url::parse(&args.url).with_context(|| format!("{:?} is not a URL", args.url))?;
    let host = url
        .host_str()
        .with_context(|| format!("{:?} has no host", args.url))?
        .trim_start_matches('[')
        .trim_end_matches(']');
    // The operator names the server, so its address is allowed whatever it is; redirects and
    // everything else still go through the guard.
    let allowed: Allowed = host
        .parse()
        .map_err(|e| anyhow::anyhow!("cannot use the host {host:?}: {e}"))?;
    let guard = UrlGuard::strict().allow([allowed]);
    let endpoint = Endpoint {
        url: args.url.clone(),
        revisions: if args.legacy {
            Revisions::Legacy
        } else {
            Revisions::Latest
        },
        headers: [(
            "Authorization".to_owned(),
            format!("Bearer {}", args.token.read()?),
        )]
        .into(),
        limits: UpstreamLimits::default(),
    };
    UpstreamClient::connect(&endpoint, Arc::new(guard), Arc::new(SystemResolver))
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", args.url))
}

pub(crate) fn run(args: Args, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = connect(&args).await?;
        let result = command(&args, &client, out).await;
        client.close().await;
        result
    })
}

async fn command(args: &Args, client: &UpstreamClient, out: &mut impl Write) -> anyhow::Result<()> {
    let tools = client.list_tools().await?;
    match &args.command {
        Command::List { json } => {
            if *json {
                serde_json::to_writer_pretty(&mut *out, &tools)?;
                writeln!(out)?;
                return Ok(());
            }
            for tool in &tools {
                let signature = tool
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(larkgate_platform::registry::SIGNATURE_META_KEY))
                    .and_then(|s| s.as_str())
                    .map_or_else(|| format!("{}(...)", tool.name), str::to_owned);
                let description = tool.description.as_deref().unwrap_or("");
                let first = description
                    .split_inclusive(". ")
                    .next()
                    .unwrap_or("")
                    .trim_end();
                writeln!(out, "{signature}\n    {first}")?;
            }
            Ok(())
        }
        Command::Call {
            tool,
            args: pairs,
            arg_files,
            args_json,
        } => {
            let shape: Option<Vec<FieldShape>> = tools
                .iter()
                .find(|t| t.name == tool.as_str())
                .and_then(|t| t.meta.as_ref())
                .and_then(|m| m.get(INPUT_SHAPE_META_KEY))
                .and_then(|s| serde_json::from_value(s.clone()).ok());
            let mut arguments = arguments_from(args_json.as_deref(), pairs, shape.as_deref())?;
            for pair in arg_files {
                let Some((key, path)) = pair.split_once('=') else {
                    bail!("--arg-file {pair:?} must look like key=path");
                };
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
                arguments.insert(key.to_owned(), Value::from(text.as_str()));
            }
            let arguments = match to_json(&Value::Map(arguments)) {
                serde_json::Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            let result = client.call_tool(tool, arguments).await?;
            let text = || {
                result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if result.is_error == Some(true) {
                // larkgate's envelope, from `_meta`; another server's error is its text.
                let envelope =
                    larkgate_caller::Envelope::from_meta(result.meta.as_ref().map(|m| &m.0))
                        .and_then(Result::ok);
                let Some(envelope) = envelope else {
                    bail!("{tool} failed: {}", text());
                };
                serde_json::to_writer_pretty(&mut *out, &envelope)?;
                writeln!(out)?;
                bail!(
                    "{tool} was refused ({}): {}",
                    envelope.code,
                    envelope.message
                );
            }
            let structured = result
                .structured_content
                .clone()
                .unwrap_or_else(|| serde_json::json!({"text": text()}));
            serde_json::to_writer_pretty(&mut *out, &structured)?;
            writeln!(out)?;
            Ok(())
        }
    }
}
