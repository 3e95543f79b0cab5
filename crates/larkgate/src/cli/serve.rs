//! `larkgate serve [--listen ADDR]`: the MCP endpoint over Streamable HTTP at `/mcp` (the edge
//! itself — tokens, sessions, Host and Origin, JSON-RPC errors — is [`larkgate_edge`]), with
//! `/healthz`, `/readyz` and `/metrics`, a graceful shutdown, and the first start on a data
//! directory without tokens, which creates an `admin` principal and prints its token once,
//! with a client configuration to paste.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::http::header;
use larkgate_edge::server::OpsListen;
use larkgate_platform::audit::{AuditEntry, AuditSink, EventKind};
use larkgate_platform::policy::ROLE_ADMIN;
use larkgate_platform::tokens;
use larkgate_store::{AuditKind, IssuerBinding, Principal, PrincipalKind, now_ms};

use super::context::Context;
use larkgate_edge as http;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to listen, as IP:PORT (default: the configuration's `[server] listen`, else
    /// 127.0.0.1:8940).
    #[arg(long, value_parser = larkgate_edge::server::parse_socket_address)]
    pub(crate) listen: Option<SocketAddr>,
    /// Where /healthz, /readyz and /metrics are served, as IP:PORT, or `beside-mcp` (default:
    /// the configuration's `[server] ops_listen`, else 127.0.0.1:8941).
    #[arg(long, value_parser = larkgate_edge::server::parse_ops_listen)]
    pub(crate) ops_listen: Option<larkgate_edge::server::OpsListen>,
}

/// `/metrics`: the platform's metrics plus what only the endpoint knows, refreshed at each
/// scrape: open 2025-11-25 sessions and each upstream's health.
struct Scrape {
    platform: larkgate_platform::Platform,
    scripts: Arc<larkgate_scripts::Scripts>,
    idle_workers: prometheus_client::metrics::gauge::Gauge,
    federation: Arc<larkgate_upstream::federation::Federation>,
    sessions: Arc<http::sessions::Registry>,
    upstream_up: prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
    upstream_tools: prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
    /// The store, for readiness and its connection pool's gauges.
    store: Arc<dyn larkgate_store::Store>,
    /// The audit log, for readiness: its anchors, when `anchors_required` makes a failing one
    /// refuse calls.
    audit: Arc<larkgate_platform::audit::AuditLog>,
    /// `store_pool_connections{state="open"|"idle"|"max"}` and `store_pool_waiting`, for
    /// stores with a pool (PostgreSQL).
    store_pool: prometheus_client::metrics::family::Family<
        Vec<(String, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
    store_pool_waiting: prometheus_client::metrics::gauge::Gauge,
    /// Requests waiting for an approver's decision.
    approvals_pending: prometheus_client::metrics::gauge::Gauge,
    /// Calls held open here for their approval's decision.
    approvals_held_calls: prometheus_client::metrics::gauge::Gauge,
}

impl Scrape {
    fn new(context: &Context, sessions: Arc<http::sessions::Registry>) -> Self {
        let scrape = Scrape {
            platform: context.platform.clone(),
            scripts: Arc::clone(&context.scripts),
            idle_workers: Default::default(),
            federation: Arc::clone(&context.federation),
            sessions,
            upstream_up: Default::default(),
            upstream_tools: Default::default(),
            store: context.store.clone(),
            audit: Arc::clone(&context.audit),
            store_pool: Default::default(),
            store_pool_waiting: Default::default(),
            approvals_pending: Default::default(),
            approvals_held_calls: Default::default(),
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
            "approvals_pending",
            "Approval requests waiting for an approver's decision",
            scrape.approvals_pending.clone(),
        );
        metrics.register(
            "approvals_held_calls",
            "Calls held open in this process for their approval's decision (require rules with \
             wait_seconds)",
            scrape.approvals_held_calls.clone(),
        );
        metrics.register(
            "upstream_tools",
            "Tools federated from an upstream",
            scrape.upstream_tools.clone(),
        );
        if let larkgate_platform::ratelimit::Limiter::Shared(shared) =
            &*scrape.platform.services().limiter()
        {
            metrics.register(
                "ratelimit_unreachable",
                "Rate-limit checks that could not reach the shared budgets in Redis (refused, or \
                 counted in this process, as [ratelimit] when_unreachable says)",
                shared.unreachable(),
            );
        }
        if scrape.store.pool_status().is_some() {
            metrics.register(
                "store_pool_connections",
                "Database connections of the store's pool: open now, idle of those, and the most \
                 it keeps",
                scrape.store_pool.clone(),
            );
            metrics.register(
                "store_pool_waiting",
                "Calls waiting for a free database connection",
                scrape.store_pool_waiting.clone(),
            );
        }
        scrape
    }

    /// Whether the gateway can serve: its store answers within a second, and no failing audit
    /// anchor makes it refuse calls (`[audit] anchors_required`). The cause goes to the log;
    /// the probe is told only what is wrong, not where (it may be served beside `/mcp`, to
    /// anyone).
    async fn ready(&self) -> Result<(), &'static str> {
        if let Some(anchor) = self.audit.anchors().and_then(|a| a.refusing()) {
            tracing::warn!(%anchor, "not ready: an audit anchor is failing and anchors_required refuses calls");
            return Err("an audit anchor is failing, and [audit] anchors_required refuses calls");
        }
        match tokio::time::timeout(std::time::Duration::from_secs(1), self.store.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::warn!(%error, "not ready: the store is not answering");
                Err("the store is not answering")
            }
            Err(_) => {
                tracing::warn!("not ready: the store did not answer within 1 s");
                Err("the store is not answering")
            }
        }
    }

    async fn render(&self) -> String {
        let metrics = &self.platform.services().metrics;
        let services = self.platform.services();
        let counted = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            larkgate_platform::approvals::pending_count(
                self.store.as_ref(),
                services.policy().approvals.pending_ttl_seconds,
                services.clock.now_ms(),
            ),
        )
        .await;
        self.approvals_held_calls
            .set(i64::try_from(services.decisions.held()).unwrap_or(i64::MAX));
        match counted {
            Ok(Ok(pending)) => {
                self.approvals_pending.set(pending as i64);
            }
            // The gauge keeps its last value; readiness says when the store is not answering.
            Ok(Err(error)) => tracing::debug!(%error, "pending approvals could not be counted"),
            Err(_) => tracing::debug!("pending approvals were not counted within 1 s"),
        }
        metrics.active_sessions.set(self.sessions.len() as i64);
        if let Some(pool) = self.scripts.pool() {
            self.idle_workers.set(pool.idle() as i64);
        }
        // Upstreams come and go while serving: a removed one's series go with it.
        self.upstream_up.clear();
        self.upstream_tools.clear();
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
        if let Some(pool) = self.store.pool_status() {
            for (state, value) in [
                ("open", pool.size),
                ("idle", pool.available),
                ("max", pool.max_size),
            ] {
                self.store_pool
                    .get_or_create(&vec![("state".to_owned(), state.to_owned())])
                    .set(value as i64);
            }
            self.store_pool_waiting.set(pool.waiting as i64);
        }
        metrics.encode()
    }
}

/// On a data directory without tokens: an `admin` principal and its first token, printed once.
async fn bootstrap(context: &Context, url: &str, out: &mut impl Write) -> anyhow::Result<()> {
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
                issuer: IssuerBinding::Local,
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
    let console = format!("{}/admin", url.trim_end_matches("/mcp"));
    writeln!(
        out,
        "First start: created the principal `admin` and its token (shown only now):\n\n  {}\n\n\
         The admin console: {console} (sign in with the token)\n",
        new.token,
    )?;
    let data_dir = super::client_config::absolute(&context.data_dir)?;
    super::client_config::write_both(out, url, &data_dir, &new.token)?;
    writeln!(
        out,
        "`larkgate client-config` prints these again (with a token you give it)."
    )?;
    out.flush()?;
    Ok(())
}

/// Resolves at Ctrl-C (SIGINT) or SIGTERM, naming which.
/// Ctrl-C (SIGINT) and SIGTERM, caught from the moment [`Shutdown::listen`] returns: a signal
/// that arrives before anything waits for it is kept, never left to its default action (which
/// would kill the process without its graceful stop).
pub(crate) struct Shutdown {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Shutdown {
    /// Installs the handlers now. Must be called within a tokio runtime.
    pub(crate) fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Shutdown {
                interrupt: signal(SignalKind::interrupt())
                    .expect("a SIGINT handler can be installed"),
                terminate: signal(SignalKind::terminate())
                    .expect("a SIGTERM handler can be installed"),
            }
        }
        #[cfg(not(unix))]
        {
            Shutdown {}
        }
    }

    /// Waits for the first of them; names it.
    pub(crate) async fn signalled(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "Ctrl-C",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

pub(crate) async fn run(args: Args, context: &Context, out: &mut impl Write) -> anyhow::Result<()> {
    // `--listen`, else the configuration's: decided when the context opened.
    let address = context.listen.context("serve has a listen address")?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let listen = listener.local_addr()?;
    // The operational endpoints live on a listener of their own unless told to live beside
    // `/mcp`; bound before anything is written, so a port in use changes nothing.
    let ops_listener = match args.ops_listen.unwrap_or(context.server.ops_listen) {
        OpsListen::Apart(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| {
                    format!(
                        "cannot listen on {address} for /healthz, /readyz and /metrics \
                         (server.ops_listen): if another larkgate on this machine uses it, give \
                         each its own ([server] ops_listen or --ops-listen IP:PORT), or serve \
                         them beside /mcp with ops_listen = \"beside-mcp\""
                    )
                })?,
        ),
        OpsListen::BesideMcp => None,
    };
    let server = &context.server;
    http::accept::make_room_for(server.max_connections + OPS_MAX_CONNECTIONS);
    let edge = http::routes::assemble(http::routes::EdgeParts {
        platform: context.platform.clone(),
        store: Arc::clone(&context.store),
        audit: context.audit.clone(),
        scripts: Arc::clone(&context.scripts),
        federation: Arc::clone(&context.federation),
        server,
        sign_in: &context.sign_in,
        listen,
    })
    .map_err(anyhow::Error::msg)?;
    let public_url = edge.public_url.clone();
    bootstrap(context, &public_url, out).await?;
    let maintenance = context.federation.maintain().await;
    let following = follow_changes(context);
    let following_servers = follow_servers(context);
    let metrics = Arc::new(Scrape::new(context, Arc::clone(&edge.sessions)));
    let ops = ops_routes(metrics);
    let end_streams = edge.end_streams;
    let (app, ops) = match ops_listener {
        Some(listener) => (edge.router, Some((listener, ops))),
        None => (edge.router.merge(ops), None),
    };
    let connections = register_connection_metrics(context, "");
    // `larkgate stdio` and `larkgate client` started beside this process find it here (removed
    // when it stops). Written before the line below, which says the server is ready.
    let _announced = super::endpoint::announce(&context.data_dir, listen)
        .with_context(|| format!("cannot write {}", super::endpoint::FILE))?;
    // Said before the line below, which says the server is ready.
    match &ops {
        Some((listener, _)) => crate::logging::say(&format!(
            "serving /healthz, /readyz and /metrics at http://{}",
            listener.local_addr()?
        )),
        None => crate::logging::say(&format!(
            "serving /healthz, /readyz and /metrics beside /mcp at http://{listen}"
        )),
    }
    // Caught from before the line below, which says the server is ready: a signal sent as soon
    // as it is read stops the server gracefully.
    let shutdown = Shutdown::listen();
    crate::logging::say(&format!("serving MCP at http://{listen}/mcp"));
    crate::logging::say(&context.scripts.memory_budget());
    crate::logging::say(&worker_threads(
        tokio::runtime::Handle::current().metrics().num_workers(),
    ));
    if listen.ip().is_unspecified() && server.public_url.is_none() {
        crate::logging::say(&format!(
            "listening on every interface; clients are told {public_url}: set \
             [server] public_url to the URL they use"
        ));
    }
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let ops_server = match ops {
        Some((listener, ops)) => {
            let limits = http::accept::SocketLimits {
                max_connections: OPS_MAX_CONNECTIONS,
                ..server.sockets()
            };
            let metrics = register_connection_metrics(context, "ops_");
            Some(tokio::spawn(http::accept::serve(
                listener,
                ops,
                limits,
                metrics,
                stopped.clone(),
            )))
        }
        None => None,
    };
    let grace = std::time::Duration::from_millis(server.shutdown_grace_ms);
    let calls = context.platform.services().metrics.active_calls.clone();
    let services = Arc::clone(context.platform.services());
    let served = http::accept::serve(
        listener,
        app,
        server.sockets(),
        connections,
        stopped.clone(),
    );
    let signalled = async move {
        shutdown.signalled().await;
        crate::logging::say(&format!(
            "shutting down; in-flight calls have {} s to finish",
            grace.as_secs_f64()
        ));
        // New connections are refused from here, and each connection closes after the
        // request it serves. The calls in flight finish (within the grace period, enforced
        // below); only then are the MCP streams ended: ending them at once would answer a call
        // still running with an error.
        let _ = stopping.send(true);
        // Calls held for an approval's decision answer `approval_required` now (their requests
        // stay pending): a stop is never held up by a wait.
        services.decisions.stop();
        while calls.get() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        end_streams();
        std::future::pending::<()>().await;
    };
    let mut stopped = stopped;
    let grace = async move {
        let _ = stopped.wait_for(|stopping| *stopping).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        () = served => {}
        () = signalled => {}
        () = grace => crate::logging::say("the grace period is over; stopping now"),
    }
    if let Some(ops_server) = ops_server {
        ops_server.abort();
    }
    maintenance.abort();
    following_servers.abort();
    if let Some(following) = following {
        following.abort();
    }
    // Runs still going are recorded as cancelled; their workers die with this process.
    context.scripts.cancel_active().await;
    Ok(())
}

/// Follows what other processes sharing the store commit (on PostgreSQL: other replicas, and
/// operators' commands elsewhere): a script published, a virtual server or an upstream, pin
/// or quarantine changed through any of them is served here as soon as the database tells of it, and this
/// replica's clients are told (`notifications/tools/list_changed`). `None` for stores that do
/// not tell of changes.
fn follow_changes(context: &Context) -> Option<tokio::task::JoinHandle<()>> {
    use larkgate_store::Change;
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = context.store.watch_changes()?;
    let scripts = Arc::clone(&context.scripts);
    let federation = Arc::clone(&context.federation);
    let (platform, store) = (context.platform.clone(), Arc::clone(&context.store));
    Some(tokio::spawn(async move {
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                // Some were missed: read everything again.
                Err(RecvError::Lagged(_)) => Change::Everything,
                Err(RecvError::Closed) => return,
            };
            if matches!(change, Change::Scripts | Change::Everything)
                && let Err(error) = scripts.refresh_tools().await
            {
                tracing::warn!(%error, "published scripts could not be read again");
            }
            if matches!(change, Change::Upstreams | Change::Everything)
                && let Err(error) = federation.sync().await
            {
                tracing::warn!(%error, "upstream changes could not be followed");
            }
            if matches!(change, Change::Servers | Change::Everything)
                && let Err(error) = platform.servers().follow(store.as_ref()).await
            {
                tracing::warn!(%error, "virtual server changes could not be followed");
            }
        }
    }))
}

/// Follows the virtual servers added, replaced or removed in the store beside this process
/// (`larkgate server add` on the host, the `server_add` tool through another replica) every
/// second, until aborted; stores that tell of changes are also followed at once
/// ([`follow_changes`]).
fn follow_servers(context: &Context) -> tokio::task::JoinHandle<()> {
    let (platform, store) = (context.platform.clone(), Arc::clone(&context.store));
    tokio::spawn(async move {
        let mut failing = larkgate_platform::failing::Failing::default();
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            failing.note(
                platform.servers().follow(store.as_ref()).await,
                |error, failed| {
                    tracing::warn!(
                        %error,
                        failed_attempts_since_last_logged = failed,
                        "virtual server changes could not be followed"
                    );
                },
                || {
                    tracing::info!(
                        target: larkgate_platform::failing::RECOVERED,
                        "virtual server changes are followed again"
                    )
                },
            );
        }
    })
}

/// Connections the operational listener keeps open at once.
const OPS_MAX_CONNECTIONS: usize = 64;

/// `/healthz` (the process answers), `/readyz` (it can serve: 503 while its store is
/// unreachable, or an audit anchor fails under `anchors_required`) and `/metrics`.
fn ops_routes(metrics: Arc<Scrape>) -> axum::Router {
    let readiness = Arc::clone(&metrics);
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let readiness = Arc::clone(&readiness);
                async move {
                    match readiness.ready().await {
                        Ok(()) => (axum::http::StatusCode::OK, "ready\n".to_owned()),
                        Err(reason) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {reason}\n"),
                        ),
                    }
                }
            }),
        )
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
                        metrics.render().await,
                    )
                }
            }),
        )
}

/// A listener's connection metrics, registered as `larkgate_{prefix}connections_*`.
fn register_connection_metrics(context: &Context, prefix: &str) -> http::accept::ConnectionMetrics {
    let connections = http::accept::ConnectionMetrics::default();
    let metrics = &context.platform.services().metrics;
    metrics.register(
        &format!("{prefix}open_connections"),
        "Connections open now",
        connections.open.clone(),
    );
    metrics.register(
        &format!("{prefix}refused_connections"),
        "Connections closed on arrival because the connection cap was reached and every \
         connection was serving a request",
        connections.refused.clone(),
    );
    metrics.register(
        &format!("{prefix}timed_out_connections"),
        "Connections closed for a slow request head or for idling",
        connections.timed_out.clone(),
    );
    metrics.register(
        &format!("{prefix}evicted_connections"),
        "Idle connections closed, oldest first, to make room when the connection cap was \
         reached",
        connections.evicted.clone(),
    );
    connections
}

/// The line telling how many threads serve requests.
fn worker_threads(count: usize) -> String {
    let threads = if count == 1 {
        "thread serves"
    } else {
        "threads serve"
    };
    format!(
        "{count} worker {threads} requests (one per core unless TOKIO_WORKER_THREADS says \
         otherwise)"
    )
}
