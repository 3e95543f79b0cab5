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

use crate::platform::Platform;
use crate::session::SessionIdentity;

/// One session's handler. See the module documentation.
#[derive(Clone, Debug)]
pub struct PlatformServer {
    platform: Platform,
    identity: Option<Arc<SessionIdentity>>,
}

impl PlatformServer {
    /// A handler for a session bound to `identity` (`None`: an unauthenticated session, whose
    /// every call is refused as `unauthenticated`).
    pub fn new(platform: Platform, identity: Option<Arc<SessionIdentity>>) -> Self {
        PlatformServer { platform, identity }
    }
}

impl ServerHandler for PlatformServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info.name = "larkgate".into();
        config.server_info.version = env!("CARGO_PKG_VERSION").into();
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: self.platform.list(self.identity.as_deref()),
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The identity is the session's: nothing in `request` or `_context` is consulted.
        let result = self
            .platform
            .call(self.identity.clone(), &request.name, request.arguments)
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
