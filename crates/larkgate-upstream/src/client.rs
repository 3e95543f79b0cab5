//! One connection to a third-party MCP server over Streamable HTTP.
//!
//! The client negotiates 2026-07-28 where the server offers it and falls back to 2025-11-25
//! (`initialize`, `Mcp-Session-Id`, `MCP-Protocol-Version`, a 404 for an expired session
//! answered by one re-initialisation, `DELETE` on close — rmcp's transport does these). It
//! lists tools with its own pagination loop (a repeating cursor or more than
//! [`UpstreamLimits::max_pages`] pages is an error), keeps at most
//! [`UpstreamLimits::max_tools`] tools and counts the rest, bounds every call by a round-trip
//! timeout that progress notifications reset up to a total, and cancels a call that times
//! out. It advertises no client capabilities: no sampling, no elicitation, no roots — an
//! upstream can never ask larkgate's callers anything.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use larkgate_platform::trace_context;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, GetPromptRequestParams, GetPromptResult, Implementation, JsonObject,
    PaginatedRequestParams, Prompt, ProtocolVersion, ReadResourceRequestParams, ReadResourceResult,
    RequestParamsMeta, Resource, ResourceTemplate, ServerResult, Tool,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RunningService,
    ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::auth::{AuthClient, AuthorizationManager};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpClientTransportConfig,
};
use rmcp::{ClientHandler, RoleClient};

use crate::command::{self, CommandTarget, Launcher, ServerProcess};
use crate::guard::{Resolve, UrlGuard};
use crate::http::{GuardedHttp, HttpError, build_client};

/// The limits of one upstream (defaults from larkgate's limits table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamLimits {
    /// Time for one round trip; a progress notification starts it again.
    pub call_timeout: Duration,
    /// Time for a whole call, progress or not.
    pub total_timeout: Duration,
    /// Bytes of one response: a JSON body, an error body, or a whole SSE stream.
    pub max_response_bytes: usize,
    /// Tools kept from the listing; the rest are dropped and counted.
    pub max_tools: usize,
    /// Pages of `tools/list` read before the listing is refused.
    pub max_pages: usize,
    /// Time to connect (TCP and TLS).
    pub connect_timeout: Duration,
    /// Time for a command-launched server to start and complete the handshake.
    pub start_timeout: Duration,
}

impl Default for UpstreamLimits {
    fn default() -> Self {
        UpstreamLimits {
            call_timeout: Duration::from_secs(30),
            total_timeout: Duration::from_secs(300),
            max_response_bytes: 4 * 1024 * 1024,
            max_tools: 1000,
            max_pages: 100,
            connect_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// Why an upstream could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The server cannot be reached or the connection broke.
    #[error("the upstream is unavailable: {0}")]
    Unavailable(String),
    /// No answer within the round-trip or total timeout (the call was cancelled).
    #[error("the upstream did not answer within {0:?} (the call was cancelled)")]
    Timeout(Duration),
    /// A response over the byte limit.
    #[error("the upstream's response exceeded the response-bytes limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The server answered with an error or broke the protocol.
    #[error("the upstream answered with an error: {0}")]
    Protocol(String),
    /// The configuration cannot be used (URL refused by the guard, bad header).
    #[error("{0}")]
    Config(String),
    /// The server answered 401 Unauthorized inside a session it had accepted: it no longer
    /// takes the credentials larkgate sends (a revoked key; for OAuth, a token that expired
    /// and could not be refreshed). The upstream must be connected again, which says why.
    #[error(
        "the server answered 401 Unauthorized: it refused the credentials larkgate sends (the \
         upstream's headers, or its OAuth sign-in)"
    )]
    Unauthorized,
    /// The server answered 403 `insufficient_scope` (OAuth): the token larkgate holds lacks a
    /// scope this request needs. `challenge` is the server's `WWW-Authenticate`, which a new
    /// sign-in ([`crate::oauth::sign_in`]) takes to ask for the scopes it names.
    #[error(
        "the server answered 403 Forbidden: the token larkgate holds lacks a scope this needs \
         (sign in to the upstream again)"
    )]
    InsufficientScope {
        /// The server's `WWW-Authenticate` header.
        challenge: String,
    },
}

/// An MCP client with no capabilities that notes `tools/list_changed`, and
/// `resources/list_changed` and `prompts/list_changed` together.
#[derive(Debug, Default)]
struct Handler {
    tools_changed: Arc<AtomicBool>,
    catalog_changed: Arc<AtomicBool>,
    /// The version `initialize` offers: 2025-11-25 when only that revision is wanted.
    legacy: bool,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::SeqCst);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.catalog_changed.store(true, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.catalog_changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("larkgate", env!("CARGO_PKG_VERSION")),
        );
        if self.legacy {
            config.protocol_version = ProtocolVersion::V_2025_11_25;
        }
        config
    }
}

/// Which protocol revisions to speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Revisions {
    /// 2026-07-28 where the server offers it, 2025-11-25 otherwise.
    #[default]
    Latest,
    /// 2025-11-25 only (`initialize` and sessions).
    Legacy,
}

/// What to connect to.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The MCP endpoint's URL.
    pub url: String,
    /// Which protocol revisions to speak.
    pub revisions: Revisions,
    /// Headers sent with every request (values already expanded).
    pub headers: BTreeMap<String, String>,
    /// The limits.
    pub limits: UpstreamLimits,
}

/// A connected upstream.
pub struct UpstreamClient {
    service: RunningService<RoleClient, Handler>,
    limits: UpstreamLimits,
    overflowed: Arc<AtomicBool>,
    tools_changed: Arc<AtomicBool>,
    catalog_changed: Arc<AtomicBool>,
    dropped: AtomicUsize,
    /// A command-launched server's process group, killed when the client goes.
    process: Option<ServerProcess>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("server", &self.server_info())
            .finish_non_exhaustive()
    }
}

impl UpstreamClient {
    /// Connects through `guard` (required: there is no unguarded client) and `resolver`.
    pub async fn connect(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
    ) -> Result<Self, UpstreamError> {
        Self::connect_http(endpoint, guard, resolver, None).await
    }

    /// Connects like [`UpstreamClient::connect`], sending the access tokens `manager` holds
    /// (built by [`crate::oauth::GuardedOAuthHttp::manager`], so its own requests pass the same
    /// guard). A token the server rejects is refreshed once and the request retried; a server
    /// that still answers 401 or 403 is an error naming that answer.
    pub async fn connect_authorized(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        manager: AuthorizationManager,
    ) -> Result<Self, UpstreamError> {
        Self::connect_http(endpoint, guard, resolver, Some(manager)).await
    }

    async fn connect_http(
        endpoint: &Endpoint,
        guard: Arc<UrlGuard>,
        resolver: Arc<dyn Resolve>,
        manager: Option<AuthorizationManager>,
    ) -> Result<Self, UpstreamError> {
        let (url, _) = guard
            .parse(&endpoint.url)
            .map_err(|e| UpstreamError::Config(e.to_string()))?;
        let limits = endpoint.limits;
        let client = build_client(guard.clone(), resolver, &url, limits.connect_timeout)
            .map_err(|e| UpstreamError::Config(e.to_string()))?;
        let http = GuardedHttp::new(client, guard, limits.max_response_bytes);
        let overflowed = http.overflowed();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        config.custom_headers = headers(&endpoint.headers)?;
        config.max_json_response_size = limits.max_response_bytes;
        config.max_sse_event_size = limits.max_response_bytes;
        config.max_error_response_size = 64 * 1024;
        config.reinit_on_expired_session = true;
        match manager {
            None => {
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Self::start(transport, endpoint.revisions, limits, overflowed, None).await
            }
            Some(manager) => {
                let http = AuthClient::new(http, manager);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Self::start(transport, endpoint.revisions, limits, overflowed, None).await
            }
        }
    }

    /// Starts the server `target` names through `launcher` and connects to it over its
    /// standard input and output. Its messages are capped like an HTTP server's responses;
    /// the server's process group dies with the client.
    pub async fn connect_command(
        target: &CommandTarget,
        launcher: &Launcher,
        revisions: Revisions,
        limits: UpstreamLimits,
    ) -> Result<Self, UpstreamError> {
        let overflowed = Arc::new(AtomicBool::new(false));
        let started = command::start(
            launcher,
            target,
            limits.max_response_bytes,
            Arc::clone(&overflowed),
        )
        .map_err(|e| {
            UpstreamError::Unavailable(format!("the launcher could not be started: {e}"))
        })?;
        let transport = AsyncRwTransport::new_client(started.stdout, started.stdin)
            .with_max_line_length(limits.max_response_bytes);
        let process = started.process;
        match Self::start(transport, revisions, limits, overflowed, None).await {
            Ok(mut client) => {
                client.process = Some(process);
                Ok(client)
            }
            Err(error) => {
                // Say how the process ended, when it did (it may still be writing its last
                // words: give it a moment). It may have ended because the handshake failed
                // first and its pipes were closed, so the handshake's error is logged too.
                for _ in 0..20 {
                    if let Some(ended) = process.ended() {
                        tracing::warn!(
                            alias = %target.alias,
                            handshake = %error,
                            %ended,
                            "a command-launched server ended without completing the MCP handshake"
                        );
                        return Err(UpstreamError::Unavailable(ended));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(error)
            }
        }
    }

    async fn start<T, E, A>(
        transport: T,
        revisions: Revisions,
        limits: UpstreamLimits,
        overflowed: Arc<AtomicBool>,
        process: Option<ServerProcess>,
    ) -> Result<Self, UpstreamError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let catalog_changed = Arc::new(AtomicBool::new(false));
        let handler = Handler {
            tools_changed: tools_changed.clone(),
            catalog_changed: catalog_changed.clone(),
            legacy: revisions == Revisions::Legacy,
        };
        let lifecycle = match revisions {
            Revisions::Latest => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Revisions::Legacy => ClientLifecycleMode::Initialize,
        };
        let service = tokio::time::timeout(
            limits.call_timeout,
            handler.serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .map_err(|_| UpstreamError::Timeout(limits.call_timeout))?
        .map_err(|e| {
            if overflowed.swap(false, Ordering::SeqCst) {
                UpstreamError::TooLarge {
                    limit: limits.max_response_bytes,
                }
            } else if let Some(cause) = plain_cause(&e) {
                tracing::debug!(error = %e, "an upstream could not be connected");
                UpstreamError::Unavailable(cause)
            } else {
                classify_text(&e.to_string(), limits)
            }
        })?;
        Ok(UpstreamClient {
            service,
            limits,
            overflowed,
            tools_changed,
            catalog_changed,
            dropped: AtomicUsize::new(0),
            process,
        })
    }

    /// For a command-launched server that has ended: how, with its last line on stderr.
    pub fn process_ended(&self) -> Option<String> {
        self.process.as_ref().and_then(ServerProcess::ended)
    }

    /// Whether the server is a program larkgate started (whose end it can tell).
    pub fn is_command(&self) -> bool {
        self.process.is_some()
    }

    /// The server's name and version, when it gave them.
    pub fn server_info(&self) -> Option<Implementation> {
        self.service
            .peer_info()
            .and_then(|info| info.server_info.clone())
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.service
            .peer_info()
            .map(|info| info.protocol_version.clone())
    }

    /// Whether the connection is gone (the server closed it, or a response broke a limit and
    /// the transport was closed): the upstream must be connected again.
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Whether the server said its tools changed since the last listing.
    pub fn tools_changed(&self) -> bool {
        self.tools_changed.load(Ordering::SeqCst)
    }

    /// Whether the server said its resources or prompts changed since
    /// [`UpstreamClient::take_catalog_changed`] last asked.
    pub fn catalog_changed(&self) -> bool {
        self.catalog_changed.load(Ordering::SeqCst)
    }

    /// Clears [`UpstreamClient::catalog_changed`] before the listings are read again.
    pub fn take_catalog_changed(&self) -> bool {
        self.catalog_changed.swap(false, Ordering::SeqCst)
    }

    /// Whether the server said at initialization that it serves resources, and prompts.
    pub fn serves_resources_and_prompts(&self) -> (bool, bool) {
        self.service.peer_info().map_or((false, false), |info| {
            (
                info.capabilities.resources.is_some(),
                info.capabilities.prompts.is_some(),
            )
        })
    }

    /// Tools dropped from the last listing for being over [`UpstreamLimits::max_tools`].
    pub fn dropped_tools(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Lists the server's tools, page by page.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, UpstreamError> {
        self.tools_changed.store(false, Ordering::SeqCst);
        let (tools, dropped) = self
            .paginate("tools/list", |params| async move {
                let request = ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                });
                match self.send(request, false).await? {
                    ServerResult::ListToolsResult(page) => Ok((page.tools, page.next_cursor)),
                    other => Err(answered_with("tools/list", &other)),
                }
            })
            .await?;
        if dropped > 0 {
            tracing::warn!(
                dropped,
                kept = tools.len(),
                "an upstream listed more tools than its max_tools limit; the rest were dropped"
            );
        }
        self.dropped.store(dropped, Ordering::SeqCst);
        Ok(tools)
    }

    /// Lists the server's prompts, page by page, within the limits of a tool listing.
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, UpstreamError> {
        let (prompts, _) = self
            .paginate("prompts/list", |params| async move {
                let request = ClientRequest::ListPromptsRequest(rmcp::model::ListPromptsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                });
                match self.send(request, false).await? {
                    ServerResult::ListPromptsResult(page) => Ok((page.prompts, page.next_cursor)),
                    other => Err(answered_with("prompts/list", &other)),
                }
            })
            .await?;
        Ok(prompts)
    }

    /// Lists the server's resources, page by page, within the limits of a tool listing.
    pub async fn list_resources(&self) -> Result<Vec<Resource>, UpstreamError> {
        let (resources, _) = self
            .paginate("resources/list", |params| async move {
                let request =
                    ClientRequest::ListResourcesRequest(rmcp::model::ListResourcesRequest {
                        method: Default::default(),
                        params,
                        extensions: Default::default(),
                    });
                match self.send(request, false).await? {
                    ServerResult::ListResourcesResult(page) => {
                        Ok((page.resources, page.next_cursor))
                    }
                    other => Err(answered_with("resources/list", &other)),
                }
            })
            .await?;
        Ok(resources)
    }

    /// Lists the server's resource templates, page by page, within the limits of a tool
    /// listing.
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, UpstreamError> {
        let (templates, _) = self
            .paginate("resources/templates/list", |params| async move {
                let request = ClientRequest::ListResourceTemplatesRequest(
                    rmcp::model::ListResourceTemplatesRequest {
                        method: Default::default(),
                        params,
                        extensions: Default::default(),
                    },
                );
                match self.send(request, false).await? {
                    ServerResult::ListResourceTemplatesResult(page) => {
                        Ok((page.resource_templates, page.next_cursor))
                    }
                    other => Err(answered_with("resources/templates/list", &other)),
                }
            })
            .await?;
        Ok(templates)
    }

    /// Gets prompt `name` with `arguments`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, UpstreamError> {
        let mut params = GetPromptRequestParams::new(name);
        params.arguments = arguments;
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::GetPromptResult(result) => Ok(result),
            other => Err(answered_with("prompts/get", &other)),
        }
    }

    /// Reads the resource at `uri` (the server's own URI).
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, UpstreamError> {
        let params = ReadResourceRequestParams::new(uri);
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::ReadResourceResult(result) => Ok(result),
            other => Err(answered_with("resources/read", &other)),
        }
    }

    /// A whole paginated listing of `method`: `page` asks for one page (after the cursor it is
    /// given) and answers its items and next cursor. At most [`UpstreamLimits::max_pages`]
    /// pages and [`UpstreamLimits::max_tools`] items are kept (answered with how many were
    /// dropped over that); a cursor seen before is a listing that would never end.
    async fn paginate<T, F, Fut>(
        &self,
        method: &str,
        page: F,
    ) -> Result<(Vec<T>, usize), UpstreamError>
    where
        F: Fn(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, Option<String>), UpstreamError>>,
    {
        let mut items = Vec::new();
        let mut dropped = 0usize;
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for _page in 0..self.limits.max_pages {
            let params = cursor
                .clone()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let (listed, next) = page(params).await?;
            for item in listed {
                if items.len() < self.limits.max_tools {
                    items.push(item);
                } else {
                    dropped += 1;
                }
            }
            match next {
                None => return Ok((items, dropped)),
                Some(next) => {
                    if !cursors.insert(next.clone()) {
                        return Err(UpstreamError::Protocol(format!(
                            "{method} repeated the cursor {next:?}; the listing would never end"
                        )));
                    }
                    cursor = Some(next);
                }
            }
        }
        Err(UpstreamError::Protocol(format!(
            "{method} did not end within {} pages",
            self.limits.max_pages
        )))
    }

    /// Calls a tool. The result may be the server's own error (`is_error`): telling that apart
    /// is the caller's business.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, UpstreamError> {
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        // When traces are exported, the server is told which span called it: in `_meta`
        // (SEP-414) and, over HTTP, in the `traceparent` header too (see `crate::http`).
        if let Some((parent, state)) = trace_context::traceparent_of(&tracing::Span::current()) {
            params.set_traceparent(&parent);
            if let Some(state) = state {
                params.set_tracestate(&state);
            }
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        match self.send(request, true).await? {
            ServerResult::CallToolResult(result) => Ok(result),
            other => Err(UpstreamError::Protocol(format!(
                "tools/call was answered with {}",
                short_kind(&other)
            ))),
        }
    }

    /// Checks the server is alive: `ping` on 2025-11-25, `server/discover` on 2026-07-28
    /// (which has no `ping`).
    pub async fn ping(&self) -> Result<(), UpstreamError> {
        let request = if self.protocol_version() == Some(ProtocolVersion::V_2026_07_28) {
            ClientRequest::DiscoverRequest(Default::default())
        } else {
            ClientRequest::PingRequest(Default::default())
        };
        self.send(request, false).await.map(|_| ())
    }

    async fn send(
        &self,
        request: ClientRequest,
        progress: bool,
    ) -> Result<ServerResult, UpstreamError> {
        let mut options = PeerRequestOptions::with_timeout(self.limits.call_timeout);
        options.reset_timeout_on_progress = progress;
        options.max_total_timeout = Some(self.limits.total_timeout);
        let limits = self.limits;
        let named = |error: ServiceError| {
            if self.overflowed.swap(false, Ordering::SeqCst) {
                UpstreamError::TooLarge {
                    limit: limits.max_response_bytes,
                }
            } else {
                classify(error, limits)
            }
        };
        let handle = self
            .service
            .peer()
            .send_request_with_option(request, options)
            .await
            .map_err(named)?;
        handle.await_response().await.map_err(named)
    }

    /// Closes the connection (a 2025-11-25 session is deleted; a command-launched server's
    /// standard input is closed, and its process group killed).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
        if let Some(process) = &self.process {
            // A server that exits when its input closes has a moment to do so.
            for _ in 0..20 {
                if process.ended().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            process.kill();
        }
    }
}

fn headers(
    configured: &BTreeMap<String, String>,
) -> Result<std::collections::HashMap<HeaderName, HeaderValue>, UpstreamError> {
    let mut headers = std::collections::HashMap::new();
    for (name, value) in configured {
        let header = HeaderName::try_from(name.as_str())
            .map_err(|e| UpstreamError::Config(format!("header {name:?}: {e}")))?;
        let mut value = HeaderValue::try_from(value.as_str())
            .map_err(|e| UpstreamError::Config(format!("header {name:?}: {e}")))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// A request answered with the wrong kind of result.
fn answered_with(method: &str, other: &ServerResult) -> UpstreamError {
    UpstreamError::Protocol(format!("{method} was answered with {}", short_kind(other)))
}

fn short_kind(result: &ServerResult) -> String {
    let text = serde_json::to_string(result).unwrap_or_default();
    text.chars().take(120).collect()
}

fn classify(error: ServiceError, limits: UpstreamLimits) -> UpstreamError {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = next {
        if let Some(scope) = e.downcast_ref::<InsufficientScopeError>() {
            return UpstreamError::InsufficientScope {
                challenge: scope.www_authenticate_header.clone(),
            };
        }
        if e.is::<AuthRequiredError>() {
            return UpstreamError::Unauthorized;
        }
        next = e.source();
    }
    match error {
        ServiceError::Timeout { timeout } => UpstreamError::Timeout(timeout),
        ServiceError::McpError(error) => UpstreamError::Protocol(error.message.to_string()),
        other => match plain_cause(&other) {
            Some(cause) => UpstreamError::Unavailable(cause),
            None => classify_text(&other.to_string(), limits),
        },
    }
}

/// What the URL guard says of an address it refuses (see [`crate::guard::GuardError`]).
const NOT_PUBLIC: &str = "which is not a public address";

/// Why a server could not be reached, in plain words, read from `error` and its causes
/// (rmcp and the HTTP stack say it in their own types); `None` when nothing is recognised.
/// The words name no URL and no library: they are shown to callers and in `upstream list`.
pub fn plain_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut chain = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        chain.push_str(&format!("{e} {e:?} "));
        next = e.source();
    }
    // The guard refusing every address a name resolves to surfaces as a failed lookup: say
    // what the guard said (which address, which range), not that the name did not resolve.
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if let Some(at) = text.find(NOT_PUBLIC) {
            let start = text[..at].rfind(": ").map_or(0, |i| i + 2);
            let end = text[at..].find(';').map_or(text.len(), |i| at + i);
            return Some(text[start..end].to_owned());
        }
        next = e.source();
    }
    let chain = chain.to_ascii_lowercase();
    let has = |w: &str| chain.contains(w);
    let cause = if has("notpublic {") {
        // Only the guard's error type in a library's debug text.
        "its host name resolves only to addresses that are not public; larkgate reaches \
         those only when the upstream allows them"
    } else if has("connectionrefused") || has("connection refused") {
        "the connection was refused: nothing listens at that address"
    } else if has("dns error")
        || has("failed to lookup address")
        || has("could not be resolved")
        || has("name or service not known")
    {
        "its host name could not be resolved"
    } else if has("invalidcertificate") || has("certificate") || has("tls handshake") {
        "the TLS connection failed: its certificate or protocol was not accepted"
    } else if has("token refresh failed") || has("tokenrefreshrejected") {
        "the authorization server refused to refresh larkgate's OAuth token: an operator signs \
         in again with `larkgate upstream login`"
    } else if has("auth error") {
        "larkgate's OAuth sign-in for it cannot be used (the log says why): an operator signs in \
         again with `larkgate upstream login`"
    } else if has("401 unauthorized") || has("authrequired") || has("auth required") {
        "the server answered 401 Unauthorized: it refused the credentials larkgate sends (the \
         upstream's headers, or its OAuth sign-in)"
    } else if has("403 forbidden") || has("insufficientscope") || has("insufficient scope") {
        "the server answered 403 Forbidden: the credentials larkgate sends may not do this"
    } else if has("timed out") || has("elapsed") {
        "the server did not answer in time"
    } else if has("connectionreset") || has("connection reset") || has("broken pipe") {
        "the server closed the connection"
    } else {
        return None;
    };
    Some(cause.to_owned())
}

/// Transport failures arrive as text through rmcp; the byte cap and the guard are recognised
/// by their own messages (pinned by tests).
fn classify_text(text: &str, limits: UpstreamLimits) -> UpstreamError {
    if text.contains("exceeded the maximum size")
        || text.contains("response-bytes limit")
        || text.contains("too large")
    {
        return UpstreamError::TooLarge {
            limit: limits.max_response_bytes,
        };
    }
    UpstreamError::Unavailable(text.to_owned())
}

impl From<HttpError> for UpstreamError {
    fn from(error: HttpError) -> Self {
        UpstreamError::Unavailable(error.to_string())
    }
}
