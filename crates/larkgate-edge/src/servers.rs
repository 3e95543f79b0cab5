//! `/mcp/NAME`: the virtual servers ([`larkgate_platform::servers`]), behind the same layers as
//! `/mcp` (access log, address check, authentication, JSON-RPC shape).
//!
//! Each server is a Streamable HTTP service of its own, made the first time it is asked for:
//! its 2025-11-25 sessions are its own (a session id opened at one endpoint is unknown at
//! another, and across replicas is never restored at another, see
//! [`crate::sessions::SharedSessions::of_server`]), while every session counts against the
//! one set of caps. A server's definition is read at each request, so a reload that changes
//! it reaches sessions already open; one that removes it answers 404 from then on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use larkgate_platform::{Platform, PlatformServer};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::sessions::{RegisteredSessions, Registry, SharedSessions};

type Served = StreamableHttpService<PlatformServer, RegisteredSessions>;

/// The virtual servers' endpoints. See the module documentation.
pub struct Endpoints {
    platform: Platform,
    sessions: Arc<Registry>,
    config: StreamableHttpServerConfig,
    shared: Option<(
        Arc<dyn larkgate_store::Store>,
        Arc<dyn larkgate_platform::clock::WallClock>,
    )>,
    made: Mutex<HashMap<String, Served>>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").finish_non_exhaustive()
    }
}

impl Endpoints {
    /// The endpoints of `platform`'s servers, with `/mcp`'s configuration (`config`, without
    /// its session store: each server has its own) and session caps (`sessions`); `shared`:
    /// the store and clock sessions are shared across replicas by, when they are.
    pub fn new(
        platform: Platform,
        sessions: Arc<Registry>,
        mut config: StreamableHttpServerConfig,
        shared: Option<(
            Arc<dyn larkgate_store::Store>,
            Arc<dyn larkgate_platform::clock::WallClock>,
        )>,
    ) -> Self {
        config.session_store = None;
        Endpoints {
            platform,
            sessions,
            config,
            shared,
            made: Mutex::default(),
        }
    }

    /// The service of server `name`, made the first time.
    fn service(&self, name: &str) -> Served {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(service) = made.get(name) {
            return service.clone();
        }
        let mut config = self.config.clone();
        if let Some((store, clock)) = &self.shared {
            config.session_store = Some(Arc::new(
                SharedSessions::new(Arc::clone(store), Arc::clone(clock)).of_server(name),
            ));
        }
        let platform = self.platform.clone();
        let served = name.to_owned();
        let service = StreamableHttpService::new(
            move || Ok(PlatformServer::per_request(platform.clone()).through(&served)),
            Arc::new(RegisteredSessions::new(Arc::clone(&self.sessions))),
            config,
        );
        made.insert(name.to_owned(), service.clone());
        service
    }
}

/// Serves a request to `/mcp/NAME`.
pub async fn serve(
    State(endpoints): State<Arc<Endpoints>>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    if endpoints.platform.servers().get(&name).is_none() {
        return not_served(&name, &endpoints.platform);
    }
    endpoints
        .service(&name)
        .handle(request)
        .await
        .into_response()
}

/// The answer to `/mcp/NAME` for a name no server has: which ones there are. (Only an
/// authenticated caller gets this far.)
fn not_served(name: &str, platform: &Platform) -> Response {
    let servers = platform.servers().load();
    let names = servers
        .iter()
        .map(|server| format!("/mcp/{}", server.name()))
        .collect::<Vec<_>>();
    let shown: String = name
        .chars()
        .take(64)
        .flat_map(char::escape_default)
        .collect();
    let known = if names.is_empty() {
        "larkgate serves no virtual servers; MCP is at /mcp".to_owned()
    } else {
        format!("MCP is at /mcp, and at {}", names.join(", "))
    };
    (
        StatusCode::NOT_FOUND,
        Body::from(format!("no server is named \"{shown}\"; {known}\n")),
    )
        .into_response()
}
