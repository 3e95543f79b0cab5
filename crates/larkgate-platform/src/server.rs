//! The platform as an rmcp `ServerHandler`.
//!
//! A [`PlatformServer`] is one session's view of the platform: it carries the identity bound
//! to the session when the session was opened. `StreamableHttpService` wants a plain
//! `ServerHandler`, so the pipeline runs inside `call_tool`.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::identity::SessionIdentity;
use crate::platform::Platform;

/// One session's handler. See the module documentation.
#[derive(Clone, Debug)]
pub struct PlatformServer {
    platform: Platform,
    identity: Identity,
}

/// Where a handler's caller comes from.
#[derive(Clone, Debug)]
enum Identity {
    /// Bound when the session was opened (in-memory sessions, stdio).
    Bound(Option<Arc<SessionIdentity>>),
    /// Per HTTP request: the identity the authentication layer put into the request's
    /// extensions after verifying its bearer token. A request without one is unauthenticated.
    FromRequest,
}

impl PlatformServer {
    /// A handler for a session bound to `identity` (`None`: an unauthenticated session, whose
    /// every call is refused as `unauthenticated`).
    pub fn new(platform: Platform, identity: Option<Arc<SessionIdentity>>) -> Self {
        PlatformServer {
            platform,
            identity: Identity::Bound(identity),
        }
    }

    /// A handler for Streamable HTTP: each request's caller is the [`SessionIdentity`] the
    /// HTTP authentication layer inserted into the request's extensions.
    pub fn per_request(platform: Platform) -> Self {
        PlatformServer {
            platform,
            identity: Identity::FromRequest,
        }
    }

    fn identity(&self, context: &RequestContext<RoleServer>) -> Option<Arc<SessionIdentity>> {
        match &self.identity {
            Identity::Bound(identity) => identity.clone(),
            Identity::FromRequest => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Arc<SessionIdentity>>())
                .cloned(),
        }
    }
}

/// What larkgate says of itself at initialization: its name and version, and that it serves
/// tools.
pub fn server_config() -> ServerConfig {
    let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    config.server_info.name = "larkgate".into();
    config.server_info.version = env!("CARGO_PKG_VERSION").into();
    config
}

impl ServerHandler for PlatformServer {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: self.platform.list(self.identity(&context).as_deref()),
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The identity is the session's, or the verified token's: nothing the client wrote in
        // `request` is consulted.
        let identity = self.identity(&context);
        let result = self
            .platform
            .call(identity, &request.name, request.arguments)
            .await;
        let result = match result {
            Ok(map) => {
                let json = serde_json::Value::Object(larkgate_binding::map_to_json(&map));
                CallToolResult::structured(json)
            }
            Err(refusal) => refusal.to_result(),
        };
        Ok(result.into())
    }
}
