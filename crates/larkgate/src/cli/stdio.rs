//! `larkgate stdio`: one MCP session over standard input and output, for desktop MCP clients
//! that start their servers as processes.
//!
//! The session is authenticated once, at start, by a token from `LARKGATE_TOKEN` or
//! `--token-file` (a file, so the token stays out of process listings and shell history); the
//! token's principal is the caller of every request in the session. Standard output carries
//! only MCP messages: diagnostics go to standard error.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use larkgate_platform::platform::now_ms;
use larkgate_platform::{PlatformServer, RunContext, RunKind, SessionIdentity, tokens};
use rmcp::ServiceExt;

use super::context::Context;

/// The environment variable a token may come from.
pub(crate) const TOKEN_ENV: &str = "LARKGATE_TOKEN";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A file holding the token (instead of `LARKGATE_TOKEN`).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub(crate) async fn run(args: Args, context: &Context) -> anyhow::Result<()> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?,
        None => std::env::var(TOKEN_ENV).map_err(|_| {
            anyhow::anyhow!(
                "no token: set {TOKEN_ENV} or pass --token-file (an admin creates one with \
                 `larkgate token create --principal NAME`)"
            )
        })?,
    };
    let principal = match tokens::verify(context.store.as_ref(), token.trim(), now_ms()).await {
        Ok(principal) => principal,
        Err(tokens::TokenError::Invalid) => bail!("the token is not valid"),
        Err(e) => return Err(e.into()),
    };
    let identity = Arc::new(SessionIdentity {
        run: RunContext {
            principal,
            run_id: None,
            kind: RunKind::Direct,
            depth: 0,
        },
        label: "stdio".into(),
    });
    let maintenance = context.federation.maintain();
    let server = PlatformServer::new(context.platform.clone(), Some(identity))
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP session over stdio could not start")?;
    let _ = server.waiting().await;
    maintenance.abort();
    Ok(())
}
