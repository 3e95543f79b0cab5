//! A small MCP client for the official MCP conformance suite's client scenarios.
//!
//! `npx @modelcontextprotocol/conformance client --command larkgate-conformance-client
//! --scenario NAME` starts a scenario server, then runs this program with the server's URL as
//! its last argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`. It uses
//! larkgate's upstream client exactly as larkgate does — the strict URL guard, with an
//! allow-list naming only `localhost` (the suite's loopback server) — and exits non-zero when
//! anything fails. `scripts/test` runs the scenarios `initialize`, `tools_call` and
//! `sse-retry`.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use larkgate_upstream::client::{Endpoint, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: larkgate-conformance-client URL (scenario in MCP_CONFORMANCE_SCENARIO)");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    match run(&url, &scenario).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{scenario}: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str, scenario: &str) -> Result<(), String> {
    let guard = UrlGuard::strict().allow([
        "localhost".parse::<Allowed>()?,
        "127.0.0.1".parse::<Allowed>()?,
        "::1".parse::<Allowed>()?,
    ]);
    let endpoint = Endpoint {
        url: url.to_owned(),
        // The suite's client scenarios are 2025-11-25 servers that answer any unknown
        // method, `server/discover` included, with an empty result, so the 2026-07-28 probe
        // cannot tell them from a broken modern server: name the revision, as an operator
        // would for such a server.
        revisions: Revisions::Legacy,
        headers: BTreeMap::new(),
        limits: UpstreamLimits::default(),
    };
    let client = UpstreamClient::connect(&endpoint, Arc::new(guard), Arc::new(SystemResolver))
        .await
        .map_err(|e| e.to_string())?;
    let tools = client.list_tools().await.map_err(|e| e.to_string())?;
    let call = |name: &str, arguments: serde_json::Value| {
        let name = name.to_owned();
        let client = &client;
        async move {
            let arguments = arguments.as_object().cloned().unwrap_or_default();
            let result = client
                .call_tool(&name, arguments)
                .await
                .map_err(|e| e.to_string())?;
            if result.is_error == Some(true) {
                return Err(format!("{name} failed: {:?}", result.content));
            }
            Ok::<_, String>(())
        }
    };
    match scenario {
        "tools_call" => call("add_numbers", serde_json::json!({"a": 2, "b": 3})).await?,
        "sse-retry" => call("test_reconnection", serde_json::json!({})).await?,
        _ => {
            for tool in tools.iter().take(1) {
                call(&tool.name, serde_json::json!({})).await?;
            }
        }
    }
    client.close().await;
    Ok(())
}
