//! The routes the HTTP edge serves, assembled in one place: `/mcp` behind its layers in the
//! order the crate documentation lists them, the protected resource metadata (with
//! `[sign_in]`), the admin console, and a fallback that names both. The operational routes
//! (`/healthz`, `/readyz`, `/metrics`) are the binary's, since they read its state; it merges
//! them in or serves them on a listener of their own.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use tower::Service;

use crate::access::{self, AccessLog};
use crate::address::{self, AddressPolicy};
use crate::console::{self, Console};
use crate::server::ServerConfig;
use crate::sign_in::{self, SignIn};
use crate::{Auth, authenticate, json_rpc_shape};

/// `/mcp`: `service` (rmcp's Streamable HTTP service) behind the access log, the address
/// check, authentication and the JSON-RPC shape, in that order.
pub fn mcp<S>(service: S, server: &ServerConfig, auth: Auth, policy: Arc<AddressPolicy>) -> Router
where
    S: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse + 'static,
    S::Future: Send + 'static,
{
    Router::new()
        .route_service("/mcp", service)
        .layer(from_fn_with_state(server.bodies(), json_rpc_shape))
        .layer(from_fn_with_state(auth, authenticate))
        .layer(from_fn_with_state(policy, address::check_address))
        .layer(from_fn_with_state(access_log(server), access::observe))
}

/// What the edge serves beside `/mcp` (already in `app`): the protected resource metadata at
/// each path a client looks for it when there is a `sign_in`, the console (with its own
/// `Origin` rules, see [`crate::console`]) behind the access log, and the fallback.
pub fn beside_mcp(
    app: Router,
    server: &ServerConfig,
    sign_in: Option<&Arc<SignIn>>,
    public_url: &str,
    console: Arc<Console>,
) -> Router {
    let app = match sign_in {
        Some(sign_in) => app.merge(metadata(sign_in, public_url)),
        None => app,
    };
    let console = console::router(console);
    app.merge(console.layer(from_fn_with_state(access_log(server), access::observe)))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Body::from("not found; MCP is at /mcp, the admin console at /admin\n"),
            )
        })
}

/// The access log's settings.
fn access_log(server: &ServerConfig) -> AccessLog {
    AccessLog {
        lines: server.access_log,
    }
}

/// The protected resource metadata (RFC 9728) at each path a client looks for it, without a
/// token and without the `Origin` check of `/mcp`: it is public, and browser clients read it.
fn metadata(sign_in: &Arc<SignIn>, public_url: &str) -> Router {
    let mut router = Router::new();
    for path in sign_in::metadata::paths(public_url) {
        let sign_in = Arc::clone(sign_in);
        router = router.route(
            &path,
            axum::routing::any(move |method: axum::http::Method| {
                sign_in::metadata::serve(Arc::clone(&sign_in), method)
            }),
        );
    }
    router
}
