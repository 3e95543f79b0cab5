//! `larkgate serve [--listen ADDR]`: the MCP endpoint over Streamable HTTP at `/mcp`, with
//! `/healthz` and `/readyz`.
//!
//! Every request to `/mcp` must carry `Authorization: Bearer <token>` (401 with
//! `WWW-Authenticate` otherwise); the token's principal, with its roles as they are now, is
//! the caller of whatever the request does. `Host` must name this server (loopback by
//! default) and a browser `Origin` is refused (403; rmcp's own validation). A 2025-11-25
//! session is bound to the principal that opened it: another principal's token on it is
//! refused (403). Malformed JSON-RPC is answered in JSON-RPC (-32700, -32600; rmcp answers
//! unknown methods with -32601). The first start on a data directory without tokens creates an `admin`
//! principal and prints its token once, with a client configuration to paste.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use larkgate_platform::audit::{AuditEntry, AuditSink, EventKind};
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::policy::ROLE_ADMIN;
use larkgate_platform::{PlatformServer, RunContext, RunKind, SessionIdentity, tokens};
use larkgate_store::now_ms;
use larkgate_store::{AuditKind, Principal, PrincipalKind, Store};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::context::Context;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to listen (default: the configuration's `listen`, else 127.0.0.1:8940).
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
}

/// What the authentication layer shares between requests.
#[derive(Clone)]
struct Auth {
    store: Arc<dyn Store>,
    /// 2025-11-25 sessions and the principal that opened each.
    sessions: Arc<Mutex<HashMap<String, String>>>,
}

fn json_rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    json_rpc_error_with(status, code, message, None)
}

/// A JSON-RPC error answer; `data` carries larkgate's envelope where there is one.
fn json_rpc_error_with(
    status: StatusCode,
    code: i64,
    message: &str,
    data: Option<serde_json::Value>,
) -> Response {
    let mut error = serde_json::json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": error});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Verifies the bearer token, binds sessions to principals, and hands the handler the caller.
async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let principal = match token {
        Some(token) => tokens::verify(auth.store.as_ref(), &token, now_ms()).await,
        None => Err(tokens::TokenError::Invalid),
    };
    let principal = match principal {
        Ok(principal) => principal,
        Err(tokens::TokenError::Store(e)) => {
            tracing::error!(%e, "tokens could not be read");
            return json_rpc_error(StatusCode::SERVICE_UNAVAILABLE, -32603, "larkgate failed");
        }
        Err(tokens::TokenError::Invalid) => {
            let refusal = Refusal::new(
                Code::Unauthenticated,
                "no valid bearer token: send `Authorization: Bearer <token>` with a larkgate \
                 token",
            )
            .with_hint("an admin creates one with `larkgate token create --principal NAME`");
            let mut response = json_rpc_error_with(
                StatusCode::UNAUTHORIZED,
                -32001,
                &format!("unauthenticated: {}", refusal.message),
                serde_json::to_value(refusal.envelope()).ok(),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"larkgate\""),
            );
            return response;
        }
    };
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &session {
        let owner = auth
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned();
        if owner.as_ref().is_some_and(|o| *o != principal.id) {
            tracing::warn!(session, principal = %principal.id, "a session was presented with another principal's token");
            return json_rpc_error(
                StatusCode::FORBIDDEN,
                -32001,
                "this session belongs to another principal",
            );
        }
    }
    let id = principal.id.clone();
    request.extensions_mut().insert(Arc::new(SessionIdentity {
        run: RunContext {
            principal,
            run_id: None,
            kind: RunKind::Direct,
            depth: 0,
        },
        label: "http".into(),
    }));
    let deleting = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    if deleting && response.status().is_success() {
        if let Some(session) = &session {
            auth.sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(session);
        }
    } else if session.is_none()
        && let Some(opened) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        auth.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(opened.to_owned(), id);
    }
    response
}

/// `/metrics`: the platform's metrics plus what only the endpoint knows, refreshed at each
/// scrape: open 2025-11-25 sessions and each upstream's health.
struct Scrape {
    platform: larkgate_platform::Platform,
    scripts: Arc<larkgate_scripts::Scripts>,
    idle_workers: prometheus_client::metrics::gauge::Gauge,
    federation: Arc<larkgate_upstream::federation::Federation>,
    sessions: Arc<Mutex<HashMap<String, String>>>,
    upstream_up: prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
    upstream_tools: prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
}

impl Scrape {
    fn new(context: &Context, sessions: Arc<Mutex<HashMap<String, String>>>) -> Self {
        let scrape = Scrape {
            platform: context.platform.clone(),
            scripts: Arc::clone(&context.scripts),
            idle_workers: Default::default(),
            federation: Arc::clone(&context.federation),
            sessions,
            upstream_up: Default::default(),
            upstream_tools: Default::default(),
        };
        let metrics = &scrape.platform.services().metrics;
        metrics.register(
            "upstream_up",
            "Whether an upstream is connected (1) or down (0)",
            scrape.upstream_up.clone(),
        );
        metrics.register(
            "idle_workers",
            "Script workers started and waiting for a run",
            scrape.idle_workers.clone(),
        );
        metrics.register(
            "upstream_tools",
            "Tools federated from an upstream",
            scrape.upstream_tools.clone(),
        );
        scrape
    }

    fn render(&self) -> String {
        let metrics = &self.platform.services().metrics;
        let open = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        metrics.active_sessions.set(open as i64);
        if let Some(pool) = self.scripts.pool() {
            self.idle_workers.set(pool.idle() as i64);
        }
        for upstream in self.federation.upstreams() {
            let status = upstream.status();
            let labels = vec![("alias".to_owned(), status.alias.clone())];
            self.upstream_up
                .get_or_create(&labels)
                .set(i64::from(status.connected));
            self.upstream_tools
                .get_or_create(&labels)
                .set(status.tools as i64);
        }
        metrics.encode()
    }
}

/// The largest request body `/mcp` reads (the platform's own argument limit is smaller).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Answers malformed JSON-RPC in JSON-RPC, before rmcp (which answers some of it with plain
/// text): unparsable JSON is a parse error (-32700); a batch, a message that is not an object,
/// or one without `"jsonrpc": "2.0"` is an invalid request (-32600). Unknown methods are left
/// to rmcp (-32601). The server keeps serving whatever it receives.
async fn json_rpc_shape(request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return json_rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                &format!("the request body exceeds {MAX_BODY} bytes"),
            );
        }
    };
    let message: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            return json_rpc_error(
                StatusCode::BAD_REQUEST,
                -32700,
                &format!("parse error: the body is not JSON ({e})"),
            );
        }
    };
    let problem = match &message {
        serde_json::Value::Array(_) => {
            Some("batches are not supported; send one message per request")
        }
        serde_json::Value::Object(object) => {
            if object.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
                Some("a JSON-RPC message needs \"jsonrpc\": \"2.0\"")
            } else if object.contains_key("method") && !object["method"].is_string() {
                Some("\"method\" must be a string")
            } else if !object.contains_key("method")
                && !object.contains_key("result")
                && !object.contains_key("error")
            {
                Some("a JSON-RPC message needs a \"method\" (or a \"result\" or \"error\")")
            } else {
                None
            }
        }
        _ => Some("a JSON-RPC message must be an object"),
    };
    if let Some(problem) = problem {
        let id = message
            .get("id")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32600, "message": format!("invalid request: {problem}")}
        });
        let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// On a data directory without tokens: an `admin` principal and its first token, printed once.
async fn bootstrap(
    context: &Context,
    listen: SocketAddr,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if !context.store.tokens(None).await?.is_empty() {
        return Ok(());
    }
    if context.store.principal("admin").await?.is_none() {
        context
            .store
            .add_principal(Principal {
                id: "admin".into(),
                kind: PrincipalKind::User,
                roles: vec![ROLE_ADMIN.to_owned()],
            })
            .await?;
    }
    let new = tokens::create(context.store.as_ref(), "admin", "larkgate", None, now_ms()).await?;
    context.audit.record_event(AuditEntry {
        kind: Some(AuditKind::Event),
        principal: "larkgate".to_owned(),
        code: Some(EventKind::Token.into()),
        detail: Some(format!(
            "first start: created the principal admin and token {} for it",
            new.record.id
        )),
        ..AuditEntry::default()
    })?;
    let config = serde_json::json!({
        "mcpServers": {
            "larkgate": {
                "type": "http",
                "url": format!("http://{listen}/mcp"),
                "headers": {"Authorization": format!("Bearer {}", new.token)}
            }
        }
    });
    writeln!(
        out,
        "First start: created the principal `admin` and its token (shown only now):\n\n  {}\n\n\
         A client configuration to paste:\n\n{}\n",
        new.token,
        serde_json::to_string_pretty(&config)?
    )?;
    out.flush()?;
    Ok(())
}

/// Resolves at Ctrl-C (SIGINT) or SIGTERM, naming which.
pub(crate) async fn shutdown_signal() -> &'static str {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler can be installed");
        tokio::select! {
            _ = interrupt => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
        "Ctrl-C"
    }
}

pub(crate) async fn run(
    _args: Args,
    context: &Context,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // `--listen`, else the configuration's: decided when the context opened.
    let address = context.listen.context("serve has a listen address")?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let listen = listener.local_addr()?;
    bootstrap(context, listen, out).await?;
    let maintenance = context.federation.maintain();

    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
    ];
    hosts.push(listen.ip().to_string());
    // A plain JSON answer for a call that sends nothing before its result (the usual case);
    // rmcp switches to an event stream for one that sends progress or requests first.
    let config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_allowed_hosts(hosts)
        .enforce_origin_validation();
    let cancel = config.cancellation_token.clone();
    let platform = context.platform.clone();
    let service = StreamableHttpService::new(
        move || Ok(PlatformServer::per_request(platform.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let auth = Auth {
        store: context.store.clone(),
        sessions: Arc::default(),
    };
    let metrics = Arc::new(Scrape::new(context, Arc::clone(&auth.sessions)));
    let app = axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(json_rpc_shape))
        .layer(axum::middleware::from_fn_with_state(auth, authenticate))
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(|| async { "ready\n" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = Arc::clone(&metrics);
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.render(),
                    )
                }
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Body::from("not found; MCP is at /mcp\n"),
            )
        });
    eprintln!("larkgate: serving MCP at http://{listen}/mcp");
    // `larkgate stdio` started beside this process relays to it (removed when it stops).
    let _announced = super::endpoint::announce(&context.data_dir, listen)
        .with_context(|| format!("cannot write {}", super::endpoint::FILE))?;
    let grace = context.shutdown_grace;
    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    let calls = context.platform.services().metrics.active_calls.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        eprintln!(
            "larkgate: shutting down; in-flight calls have {} s to finish",
            grace.as_secs_f64()
        );
        let _ = stopping.send(true);
        // New connections are refused from here. The calls in flight finish (within the grace
        // period, enforced below); only then are the MCP streams ended: ending them at once
        // would answer a call still running with an error.
        tokio::spawn(async move {
            while calls.get() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            cancel.cancel();
        });
    });
    let grace = async move {
        let _ = stopped.wait_for(|stopping| *stopping).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        served = std::future::IntoFuture::into_future(server) => served?,
        () = grace => eprintln!("larkgate: the grace period is over; stopping now"),
    }
    maintenance.abort();
    // Runs still going are recorded as cancelled; their workers die with this process.
    context.scripts.cancel_active().await;
    Ok(())
}
