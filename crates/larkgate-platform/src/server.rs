//! The platform as an rmcp `ServerHandler`.
//!
//! A [`PlatformServer`] is one session's view of the platform. Who its caller is comes from one
//! of three places: a [`RunContext`](crate::RunContext) bound when an in-memory session was
//! opened (script runs), the identity the HTTP edge verified and put into each request, or a
//! token verified again at every request of a stdio session ([`PlatformServer::per_token`]), so
//! that a revoked token, changed roles or a removed principal count from the next request on
//! every edge. `StreamableHttpService` wants a plain `ServerHandler`, so the pipeline runs
//! inside `call_tool`.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::envelope::Refusal;
use crate::identity::{RunContext, RunKind, SessionIdentity};
use crate::platform::Platform;
use crate::tokens;

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
    /// Per request of a session a token opened (stdio): the token is verified again and its
    /// principal read as it is now.
    Token {
        /// The bearer token.
        token: Secret,
        /// The session's label in logs and audit.
        label: String,
    },
}

/// A token held for the life of a session; never printed.
#[derive(Clone)]
struct Secret(Arc<str>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
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

    /// A handler for a session opened with `token` (stdio): every request is made as the
    /// principal the token names at that moment, with that principal's roles then. A token
    /// revoked or expired since, or a principal removed, makes the next call `unauthenticated`
    /// and the listing empty.
    pub fn per_token(platform: Platform, token: &str, label: &str) -> Self {
        PlatformServer {
            platform,
            identity: Identity::Token {
                token: Secret(token.into()),
                label: label.to_owned(),
            },
        }
    }

    /// The caller of this request; `Err` when it cannot be decided (the store failed).
    async fn identity(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Arc<SessionIdentity>>, Refusal> {
        match &self.identity {
            Identity::Bound(identity) => Ok(identity.clone()),
            Identity::FromRequest => Ok(context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Arc<SessionIdentity>>())
                .cloned()),
            Identity::Token { token, label } => {
                let store = self.platform.services().store.as_ref();
                match tokens::verify(store, &token.0, larkgate_store::now_ms()).await {
                    Ok(principal) => Ok(Some(Arc::new(SessionIdentity {
                        run: RunContext {
                            principal,
                            run_id: None,
                            kind: RunKind::Direct,
                            depth: 0,
                        },
                        label: label.clone(),
                    }))),
                    Err(tokens::TokenError::Invalid) => Ok(None),
                    Err(tokens::TokenError::Store(error)) => Err(Refusal::internal(
                        "the session's token could not be checked",
                        error,
                    )),
                }
            }
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
        // A listing whose caller cannot be decided is empty: it lists nothing it may not.
        let identity = self.identity(&context).await.ok().flatten();
        Ok(ListToolsResult {
            tools: self.platform.list(identity.as_deref()),
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
        let result = match self.identity(&context).await {
            Ok(identity) => {
                self.platform
                    .call(identity, &request.name, request.arguments)
                    .await
            }
            Err(refusal) => Err(refusal),
        };
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
