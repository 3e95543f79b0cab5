//! The client configurations an operator pastes into an MCP client: printed at the first
//! start with its token, and by `larkgate client-config` at any time.
//!
//! Two forms, because clients differ: one that reaches `serve` over HTTP (`url` and an
//! `Authorization` header: Cursor, VS Code, agent frameworks), and one that starts `larkgate
//! stdio` as a program (`command`, `args`, `env`: Claude Desktop, whose configuration takes no
//! `url`). The stdio form names the data directory by its absolute path and this binary by its
//! own: a desktop client starts its servers from a working directory of its choosing, where
//! `./larkgate-data` would be another, empty, directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// What `client-config` prints in place of a token it was not given.
pub(crate) const TOKEN_PLACEHOLDER: &str = "<TOKEN>";

/// The HTTP form, for the `/mcp` at `url`.
pub(crate) fn http(url: &str, token: &str) -> Value {
    json!({
        "mcpServers": {
            "larkgate": {
                "type": "http",
                "url": url,
                "headers": {"Authorization": format!("Bearer {token}")}
            }
        }
    })
}

/// The stdio form: this binary, started with `--data-dir DATA_DIR stdio`.
pub(crate) fn stdio(data_dir: &Path, token: &str) -> anyhow::Result<Value> {
    let program = std::env::current_exe()?;
    Ok(json!({
        "mcpServers": {
            "larkgate": {
                "command": program.display().to_string(),
                "args": ["--data-dir", data_dir.display().to_string(), "stdio"],
                "env": {"LARKGATE_TOKEN": token}
            }
        }
    }))
}

/// `data_dir` as an absolute path (it need not exist yet, and then its `.` parts are left out).
pub(crate) fn absolute(data_dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(match data_dir.canonicalize() {
        Ok(path) => path,
        Err(_) => std::env::current_dir()?
            .join(data_dir)
            .components()
            .filter(|part| *part != std::path::Component::CurDir)
            .collect(),
    })
}

/// Writes both forms, each under a line saying which clients take it.
pub(crate) fn write_both(
    out: &mut impl Write,
    url: &str,
    data_dir: &Path,
    token: &str,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "For a client that connects to a URL (Cursor, VS Code, an agent framework):\n\n{}\n",
        serde_json::to_string_pretty(&http(url, token))?
    )?;
    writeln!(
        out,
        "For a client that starts its servers as programs (Claude Desktop): it runs `larkgate \
         stdio` on this data directory, relaying to `serve` while it runs:\n\n{}\n",
        serde_json::to_string_pretty(&stdio(data_dir, token)?)?
    )?;
    Ok(())
}

/// `larkgate client-config`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only the form for clients that connect to a URL.
    #[arg(long, conflicts_with = "stdio")]
    http: bool,
    /// Only the form for clients that start their servers as programs.
    #[arg(long)]
    stdio: bool,
    #[command(flatten)]
    token: super::credentials::TokenArgs,
}

/// `larkgate client-config`: the forms for the data directory `located` names, with the token
/// of LARKGATE_TOKEN or `--token-file` when there is one, else a placeholder (a token is shown
/// only when it is created).
pub(crate) fn run(
    args: Args,
    located: &crate::config::Located,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let token = args.token.read().ok();
    let shown = token.as_deref().unwrap_or(TOKEN_PLACEHOLDER);
    let data_dir = absolute(&located.data_dir)?;
    // `[server] public_url` when set; else a running serve's own address (it may listen on a
    // port the file does not name), else the one the configuration gives clients.
    let server = &located.config.server;
    let url = match super::endpoint::read(&located.data_dir) {
        Ok(url) if server.public_url.is_none() => url.to_string(),
        _ => server.public_mcp_url(server.listen),
    };
    match (args.http, args.stdio) {
        (true, _) => writeln!(out, "{}", serde_json::to_string_pretty(&http(&url, shown))?)?,
        (_, true) => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&stdio(&data_dir, shown)?)?
        )?,
        _ => write_both(out, &url, &data_dir, shown)?,
    }
    if token.is_none() {
        crate::logging::say(&format!(
            "{TOKEN_PLACEHOLDER} stands for a bearer token: a token is shown only when it is \
             created (`larkgate token create --principal NAME`); set LARKGATE_TOKEN or pass \
             --token-file to have it written in"
        ));
    }
    if !data_dir.exists() {
        crate::logging::say(&format!(
            "{} does not exist yet: `larkgate serve` creates it at its first start",
            data_dir.display()
        ));
    }
    Ok(())
}
