//! `larkgate client ... list | call TOOL`: a small MCP client for a running `larkgate serve`
//! (or any Streamable HTTP MCP server), for trying larkgate from a terminal the way an agent
//! uses it. It opens no data directory: everything it does crosses the server's pipeline as the
//! token's principal.
//!
//! The token comes from `LARKGATE_TOKEN` or `--token-file` (never a flag, which would show in
//! process listings and shell history). The server is `--url`, else the one a running `larkgate
//! serve` announces in its data directory (`serve.url`, read with the same checks as
//! `larkgate stdio`'s relay: loopback only), else `http://127.0.0.1:8940/mcp`; `--server NAME`
//! connects to that larkgate's virtual server `NAME` (`/mcp/NAME`) instead. Every message
//! it prints says what failed in larkgate's words: a refused token with the server's own
//! message, nothing listening, a broken connection; never a library's error chain.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use larkgate_binding::{FieldShape, Value, to_json};
use larkgate_platform::registry::INPUT_SHAPE_META_KEY;
use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};

use super::call::arguments_from;
use super::credentials::TokenArgs;

/// Where the client connects when neither `--url` nor a running `serve` names a server.
const DEFAULT_URL: &str = "http://127.0.0.1:8940/mcp";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server's MCP endpoint (default: the one a running `larkgate serve` on the data
    /// directory announces, else http://127.0.0.1:8940/mcp).
    #[arg(long, global = true)]
    url: Option<String>,
    #[command(flatten)]
    token: TokenArgs,
    /// Speak the 2025-11-25 revision (sessions) instead of 2026-07-28.
    #[arg(long, global = true)]
    legacy: bool,
    /// A virtual server of that larkgate (a `[[servers]]` entry): connect to its endpoint,
    /// `/mcp/NAME`, instead of `/mcp`.
    #[arg(long, global = true, value_name = "NAME")]
    server: Option<String>,
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

/// The URL to connect to: `--url`, else what a running `serve` on `data_dir` announces,
/// else [`DEFAULT_URL`]; with `--server NAME`, that endpoint's `/NAME`.
fn server_url(args: &Args, data_dir: &std::path::Path) -> anyhow::Result<String> {
    let url = match &args.url {
        Some(url) => url.clone(),
        None => match super::endpoint::read(data_dir) {
            Ok(url) => url.to_string(),
            Err(super::endpoint::EndpointError::Missing(_)) => DEFAULT_URL.to_owned(),
            Err(error) => bail!("{error}; pass --url to name the server"),
        },
    };
    let Some(name) = &args.server else {
        return Ok(url);
    };
    if let Err(why) = larkgate_platform::servers::check_name(name) {
        bail!("--server {name:?}: {why} (a server is named as in its [[servers]] entry)");
    }
    Ok(with_server(&url, name))
}

/// The endpoint of virtual server `name` beside the MCP endpoint `url`: `url`'s path and
/// `/NAME`, its query kept.
fn with_server(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut joined = format!("{}/{name}", base.trim_end_matches('/'));
    if let Some(query) = query {
        joined.push('?');
        joined.push_str(query);
    }
    joined
}

async fn connect(url: &str, args: &Args, token: &str) -> anyhow::Result<UpstreamClient> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    let host = parsed
        .host_str()
        .with_context(|| format!("{url:?} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']');
    // The operator names the server, so its address is allowed whatever it is; redirects and
    // everything else still go through the guard.
    let allowed: Allowed = host
        .parse()
        .map_err(|e| anyhow::anyhow!("cannot use the host {host:?}: {e}"))?;
    let guard = UrlGuard::strict().allow([allowed]);
    let endpoint = Endpoint {
        url: url.to_owned(),
        revisions: if args.legacy {
            Revisions::Legacy
        } else {
            Revisions::Latest
        },
        headers: [("Authorization".to_owned(), format!("Bearer {token}"))].into(),
        limits: UpstreamLimits::default(),
    };
    match UpstreamClient::connect(&endpoint, Arc::new(guard), Arc::new(SystemResolver)).await {
        Ok(client) => Ok(client),
        Err(larkgate_upstream::client::UpstreamError::Config(problem)) => bail!("{problem}"),
        Err(_) => Err(anyhow::anyhow!(diagnose(url, token).await)),
    }
}

/// Why connecting to `url` failed, in larkgate's words: asks the server once more with a plain
/// request and reads its answer (a refused token is told with the server's own message).
async fn diagnose(url: &str, token: &str) -> String {
    let http = match reqwest::Client::builder()
        // The request carries the token: it goes to the URL given, never to a proxy named in
        // the environment.
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(10))
        .build()
    {
        Ok(http) => http,
        Err(_) => return format!("cannot connect to {url}"),
    };
    let ping = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "ping"});
    let answer = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&ping)
        .send()
        .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) if error.is_connect() => {
            return format!(
                "nothing answers at {url}: is `larkgate serve` running there? (start it, or \
                 name another server with --url)"
            );
        }
        Err(error) if error.is_timeout() => {
            return format!("{url} did not answer within 10 s");
        }
        Err(_) => return format!("cannot connect to {url}: the connection failed"),
    };
    let status = answer.status();
    let body: Option<serde_json::Value> = answer.json().await.ok();
    let message = body
        .as_ref()
        .and_then(|b| b["error"]["message"].as_str())
        .map(|m| m.chars().take(500).collect::<String>());
    match (status.as_u16(), message) {
        (401, Some(message)) => format!("the server refused the token: {message}"),
        (401, None) => "the server refused the token (HTTP 401)".to_owned(),
        (_, Some(message)) => format!("{url} refused the connection (HTTP {status}): {message}"),
        _ => format!("{url} did not answer as an MCP server (HTTP {status})"),
    }
}

pub(crate) fn run(
    args: Args,
    data_dir: &std::path::Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let url = server_url(&args, data_dir)?;
    let token = args.token.read()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = connect(&url, &args, &token).await?;
        let result = command(&args, &client, out)
            .await
            .map_err(|error| readable(error, &url));
        client.close().await;
        result
    })
}

/// An error as the user reads it: a broken connection is said so, without the transport's
/// own chain of errors.
fn readable(error: anyhow::Error, url: &str) -> anyhow::Error {
    use larkgate_upstream::client::UpstreamError;
    match error.downcast_ref::<UpstreamError>() {
        Some(UpstreamError::Unavailable(_)) => {
            anyhow::anyhow!("the connection to {url} broke: is the server still running?")
        }
        _ => error,
    }
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
                    .map_or_else(|| larkgate_platform::search::signature(tool), str::to_owned);
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
