//! The routes the HTTP edge serves, assembled in one place: `/mcp` behind its layers in the
//! order the crate documentation lists them, the protected resource metadata (with
//! `[sign_in]`), the admin console, and a fallback that names both. The operational routes
//! (`/healthz`, `/readyz`, `/metrics`) are the binary's, since they read its state; it merges
//! them in or serves them on a listener of their own.
//!
//! [`assemble`] builds the whole edge from the services behind it: `larkgate serve` serves
//! what it returns, and so do the tests that drive the edge in their own process.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use tower::Service;

use crate::access;
use crate::address::{self, AddressPolicy};
use crate::console::{self, Console};
use crate::server::ServerConfig;
use crate::sign_in::{self, Providers};
use crate::{Auth, authenticate, json_rpc_shape};

/// `/mcp`: `service` (rmcp's Streamable HTTP service), and `/mcp/NAME`: the virtual servers
/// of `servers`, behind the access log, the address check, authentication and the JSON-RPC
/// shape, in that order.
pub fn mcp<S>(
    service: S,
    servers: Arc<crate::servers::Endpoints>,
    server: &ServerConfig,
    auth: Auth,
    policy: Arc<AddressPolicy>,
) -> Router
where
    S: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse + 'static,
    S::Future: Send + 'static,
{
    let virtual_servers = Router::new()
        .route("/mcp/{name}", axum::routing::any(crate::servers::serve))
        .with_state(servers);
    Router::new()
        .route_service("/mcp", service)
        .merge(virtual_servers)
        .layer(from_fn_with_state(server.bodies(), json_rpc_shape))
        .layer(from_fn_with_state(auth, authenticate))
        .layer(from_fn_with_state(policy, address::check_address))
        .layer(from_fn(access::observe))
}

/// What the edge serves beside `/mcp` (already in `app`): the protected resource metadata at
/// each path a client looks for it (while providers are in force), the console (with its own
/// `Origin` rules, see [`crate::console`]) behind the access log, and the fallback.
pub fn beside_mcp(
    app: Router,
    sign_in: &Providers,
    public_url: &str,
    servers: Arc<larkgate_platform::servers::ServerTable>,
    console: Arc<Console>,
) -> Router {
    let console = console::router(console);
    app.merge(metadata(sign_in, public_url, servers))
        .merge(console.layer(from_fn(access::observe)))
        .fallback(|| async { not_found() })
}

/// The answer to a path the edge does not serve.
fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Body::from(
            "not found; MCP is at /mcp (and each virtual server at /mcp/NAME), the admin \
             console at /admin\n",
        ),
    )
        .into_response()
}

/// The protected resource metadata (RFC 9728) at each path a client looks for it, without a
/// token and without the `Origin` check of `/mcp`: it is public, and browser clients read it.
/// Without providers in force, these paths are not found, as any other.
/// Each virtual server's own document is at the same paths with `/NAME` added, while the
/// server exists.
fn metadata(
    sign_in: &Providers,
    public_url: &str,
    servers: Arc<larkgate_platform::servers::ServerTable>,
) -> Router {
    let mut router = Router::new();
    for path in sign_in::metadata::paths(public_url) {
        let providers = sign_in.clone();
        router = router.route(
            &path,
            axum::routing::any(move |method: axum::http::Method| async move {
                match providers.current() {
                    Some(current) => sign_in::metadata::serve(current, method, None).await,
                    None => not_found(),
                }
            }),
        );
        // The root's document has no server's beside it: a server's path has `/mcp` in it.
        if path == sign_in::metadata::WELL_KNOWN {
            continue;
        }
        let (sign_in, servers) = (sign_in.clone(), Arc::clone(&servers));
        router = router.route(
            &format!("{path}/{{name}}"),
            axum::routing::any(
                move |method: axum::http::Method,
                      axum::extract::Path(name): axum::extract::Path<String>| async move {
                    match (sign_in.current(), servers.get(&name)) {
                        (Some(current), Some(_)) => {
                            sign_in::metadata::serve(current, method, Some(&name)).await
                        }
                        _ => not_found(),
                    }
                },
            ),
        );
    }
    router
}

/// What the edge is assembled from: the services behind it, its configuration, and the
/// address it listens on (the public URL and the address check are derived from it).
#[derive(Debug)]
pub struct EdgeParts<'a> {
    /// The platform every call crosses.
    pub platform: larkgate_platform::Platform,
    /// Where tokens, principals and (across replicas) sessions are kept.
    pub store: Arc<dyn larkgate_store::Store>,
    /// Where refused authentications are recorded.
    pub audit: Arc<dyn larkgate_platform::audit::AuditSink>,
    /// The script service, for the console.
    pub scripts: Arc<larkgate_scripts::Scripts>,
    /// The federated upstreams, for the console.
    pub federation: Arc<larkgate_upstream::federation::Federation>,
    /// `[server]`.
    pub server: &'a ServerConfig,
    /// The identity providers (`[sign_in]`), put in force for this edge's resource URL.
    pub sign_in: &'a Providers,
    /// The address the edge's listener is bound to.
    pub listen: std::net::SocketAddr,
}

/// The assembled edge, ready to serve with [`crate::accept::serve`]: `/mcp` behind its
/// layers, the protected resource metadata, the console and the fallback. `larkgate serve`
/// merges its operational routes in; a test serves it as it is, on `127.0.0.1:0`.
pub struct Edge {
    /// Every route.
    pub router: Router,
    /// The 2025-11-25 sessions open.
    pub sessions: Arc<crate::sessions::Registry>,
    /// The `/mcp` URL clients are told.
    pub public_url: String,
    /// Ends every MCP stream: at shutdown, once the calls in flight have finished (ending
    /// them at once would answer a call still running with an error).
    pub end_streams: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge")
            .field("public_url", &self.public_url)
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

/// Assembles the edge from `parts`, as `larkgate serve` serves it (in a tokio runtime: the
/// identity providers' keys are fetched in the background from here). Fails with a sentence
/// for the operator when `[server]` cannot work on this address.
pub fn assemble(parts: EdgeParts<'_>) -> Result<Edge, String> {
    let EdgeParts {
        platform,
        store,
        audit,
        scripts,
        federation,
        server,
        sign_in,
        listen,
    } = parts;
    let public_url = server.public_mcp_url(listen);
    let policy = Arc::new(server.address_policy(listen)?);
    let mut config = crate::mcp_config(&server.allowed_origins);
    let streams = config.cancellation_token.clone();
    let end_streams = Box::new(move || streams.cancel());
    // Replicas sharing a store share their sessions through it too.
    let shared = store.shared_by_replicas().then(|| Arc::clone(&store));
    let clock = Arc::clone(&platform.services().clock);
    if let Some(store) = &shared {
        config.session_store = Some(Arc::new(crate::sessions::SharedSessions::new(
            Arc::clone(store),
            Arc::clone(&clock),
        )));
    }
    let sessions = crate::sessions::Registry::new(server.sessions(), shared.clone(), clock.clone());
    let endpoints = Arc::new(crate::servers::Endpoints::new(
        platform.clone(),
        Arc::clone(&sessions),
        config.clone(),
        shared.map(|store| (store, clock)),
    ));
    let served = platform.clone();
    let service = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || {
            Ok(larkgate_platform::PlatformServer::per_request(
                served.clone(),
            ))
        },
        Arc::new(crate::sessions::RegisteredSessions::new(Arc::clone(
            &sessions,
        ))),
        config,
    );
    // The identity providers, with `/mcp`'s public URL as the resource their tokens name.
    sign_in.start(&public_url);
    let auth = Auth::new(
        Arc::clone(&store),
        Arc::clone(&sessions),
        crate::throttle::FailureThrottle::new(server.max_failed_authentications_per_minute),
        audit,
    )
    .with_sign_in(sign_in.clone());
    platform.services().metrics.register(
        "failed_authentications",
        "Requests to /mcp refused for a missing, unknown, revoked or expired token",
        auth.failures(),
    );
    let app = mcp(
        service,
        endpoints,
        server,
        auth.clone(),
        Arc::clone(&policy),
    );
    let servers = Arc::clone(platform.servers());
    // The admin console, for browsers (its own Origin rules: see `crate::console`).
    let console = Console::new(
        platform,
        scripts,
        federation,
        Arc::clone(&policy),
        auth,
        public_url.starts_with("https://"),
    );
    let router = beside_mcp(app, sign_in, &public_url, servers, console);
    Ok(Edge {
        router,
        sessions,
        public_url,
        end_streams,
    })
}
