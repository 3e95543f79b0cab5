//! A small MCP client for the official MCP conformance suite's client scenarios.
//!
//! `npx @modelcontextprotocol/conformance client --command larkgate-conformance-client
//! --scenario NAME` starts a scenario server, then runs this program with the server's URL as
//! its last argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`. It uses
//! larkgate's upstream client exactly as larkgate does — the strict URL guard, with an
//! allow-list naming only `localhost` (the suite's loopback server) — and exits non-zero when
//! anything fails. `scripts/test` runs the scenarios `initialize`, `tools_call` and
//! `sse-retry`, and the `auth/...` ones: for those the program signs in as larkgate does
//! ([`larkgate_upstream::oauth`], every OAuth request through the same guard), standing in for
//! the person at the browser by fetching the authorization URL and reading where it redirects.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use larkgate_upstream::client::{
    Endpoint, Revisions, UpstreamClient, UpstreamError, UpstreamLimits,
};
use larkgate_upstream::http::{Redirects, build_client_with};
use larkgate_upstream::oauth::{self, ClientIdentity, GuardedOAuthHttp};
use larkgate_upstream::{Allowed, Resolve, SystemResolver, UrlGuard};
use rmcp::transport::auth::{AuthError, AuthorizationManager};

/// Where the suite's authorization server sends the browser back to (never fetched).
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The client ID metadata document URL the suite's `auth/basic-cimd` expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// What the suite passes in `MCP_CONFORMANCE_CONTEXT`.
#[derive(Debug, Default, serde::Deserialize)]
struct Context {
    client_id: Option<String>,
    client_secret: Option<String>,
}

/// Signs in for an `auth/...` scenario: client credentials for the machine-account scenario,
/// the pre-registered client when the suite names one, else a client ID metadata document or
/// dynamic registration.
async fn sign_in(
    url: &str,
    scenario: &str,
    guard: &Arc<UrlGuard>,
    resolver: &Arc<dyn Resolve>,
    step_up: Option<String>,
) -> Result<AuthorizationManager, String> {
    let context: Context = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let http = GuardedOAuthHttp::new(
        Arc::clone(guard),
        Arc::clone(resolver),
        std::time::Duration::from_secs(10),
    );
    let signed_in = if scenario == "auth/client-credentials-basic" {
        let (Some(id), Some(secret)) = (&context.client_id, &context.client_secret) else {
            return Err("the suite named no client credentials".into());
        };
        oauth::client_credentials(http, None, url, id, secret, &[]).await
    } else {
        let identity = match context.client_id {
            Some(client_id) => ClientIdentity::Registered {
                client_id,
                client_secret: context.client_secret,
            },
            None => ClientIdentity::Dynamic {
                client_name: "larkgate".into(),
                metadata_url: Some(CLIENT_METADATA_URL.into()),
            },
        };
        let challenge = match step_up {
            Some(challenge) => Some(challenge),
            None => oauth::challenge(&http, url)
                .await
                .map_err(|e| format!("asking for the challenge failed: {e}"))?,
        };
        let consent = |authorization_url: String| browse(authorization_url, guard, resolver);
        oauth::sign_in(
            http,
            None,
            url,
            REDIRECT_URI,
            &identity,
            &[],
            challenge.as_deref(),
            consent,
        )
        .await
    };
    signed_in.map_err(|e| format!("signing in failed: {e}"))
}

/// The person at the browser: the suite's authorization endpoint consents at once and
/// redirects to the redirect URI, which is read from `Location` and not followed.
async fn browse(
    authorization_url: String,
    guard: &Arc<UrlGuard>,
    resolver: &Arc<dyn Resolve>,
) -> Result<String, AuthError> {
    let failed = |e: String| AuthError::AuthorizationFailed(e);
    let parsed = reqwest::Url::parse(&authorization_url).map_err(|e| failed(e.to_string()))?;
    let client = build_client_with(
        Arc::clone(guard),
        Arc::clone(resolver),
        &parsed,
        std::time::Duration::from_secs(10),
        Redirects::None,
    )
    .map_err(|e| failed(e.to_string()))?;
    let response = client
        .get(parsed)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|location| location.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| {
            failed(format!(
                "the authorization endpoint answered {} without a redirect",
                response.status()
            ))
        })
}

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
    let guard = Arc::new(guard);
    let resolver: Arc<dyn Resolve> = Arc::new(SystemResolver);
    let auth = scenario.starts_with("auth/");
    // A 403 `insufficient_scope` is answered by signing in again for the scopes its challenge
    // names, a bounded number of times.
    let mut step_up: Option<String> = None;
    for attempt in 0..=MAX_STEP_UPS {
        let client = if auth {
            let manager = sign_in(url, scenario, &guard, &resolver, step_up.take()).await?;
            let (guard, resolver) = (Arc::clone(&guard), Arc::clone(&resolver));
            UpstreamClient::connect_authorized(&endpoint, guard, resolver, manager).await
        } else {
            let (guard, resolver) = (Arc::clone(&guard), Arc::clone(&resolver));
            UpstreamClient::connect(&endpoint, guard, resolver).await
        }
        .map_err(|e| e.to_string())?;
        let exercised = exercise(&client, scenario).await;
        client.close().await;
        match exercised {
            Err(UpstreamError::InsufficientScope { challenge })
                if auth && attempt < MAX_STEP_UPS =>
            {
                step_up = Some(challenge);
            }
            other => return other.map_err(|e| e.to_string()),
        }
    }
    Err("the server still wanted more scopes after signing in again".into())
}

/// How often one run signs in again for more scopes.
const MAX_STEP_UPS: usize = 2;

/// Lists the tools and calls what the scenario wants called.
async fn exercise(client: &UpstreamClient, scenario: &str) -> Result<(), UpstreamError> {
    let tools = client.list_tools().await?;
    let call = |name: &str, arguments: serde_json::Value| {
        let name = name.to_owned();
        async move {
            let arguments = arguments.as_object().cloned().unwrap_or_default();
            let result = client.call_tool(&name, arguments).await?;
            if result.is_error == Some(true) {
                return Err(UpstreamError::Protocol(format!(
                    "{name} failed: {:?}",
                    result.content
                )));
            }
            Ok(())
        }
    };
    match scenario {
        "tools_call" => call("add_numbers", serde_json::json!({"a": 2, "b": 3})).await,
        "sse-retry" => call("test_reconnection", serde_json::json!({})).await,
        _ => {
            for tool in tools.iter().take(1) {
                call(&tool.name, serde_json::json!({})).await?;
            }
            Ok(())
        }
    }
}
