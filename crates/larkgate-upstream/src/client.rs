//! One connection to a third-party MCP server over Streamable HTTP.
//!
//! The client negotiates 2026-07-28 where the server offers it and falls back to 2025-11-25
//! (`initialize`, `Mcp-Session-Id`, `MCP-Protocol-Version`, a 404 for an expired session
//! answered by one re-initialisation, `DELETE` on close — rmcp's transport does these). It
//! lists tools with its own pagination loop (a repeating cursor or more than
//! [`UpstreamLimits::max_pages`] pages is an error), keeps at most
//! [`UpstreamLimits::max_tools`] tools and counts the rest, bounds every call by a round-trip
//! timeout that progress notifications reset up to a total, and cancels a call that times
//! out. It declares elicitation and sampling as far as the operator lets the server ask
//! ([`MayAsk`]), and passes each question the server asks during a call to the client that
//! made it ([`asking`]); it declares no roots, and a server that asks for them is answered
//! "method not found" (never a made-up empty list). A call made in a caller's
//! [`Conversation`] ([`UpstreamClient::call_tool_in`]) relays the server's progress reports and
//! log messages to that caller ([`routes`]) and is cancelled at the server when the caller
//! cancels it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use larkgate_platform::conversation::Accepts;
use larkgate_platform::{Conversation, trace_context};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientConfig, ClientRequest, Implementation, InputRequiredResult,
    JsonObject, ProtocolVersion, RequestParamsMeta, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient};

use crate::command::ServerProcess;

mod asking;
mod connect;
mod error;
mod list;
mod routes;
mod subscribing;

pub use asking::{MAX_INPUT_REQUESTS, MayAsk};
pub use error::{UpstreamError, plain_cause};
use error::{classify, short_kind};

/// How many times a call answered "still working" (`input_required` with only a
/// `requestState`) is sent again: the official SDKs' default.
pub const STILL_WAITING_ROUNDS: usize = 10;

/// The most characters of an upstream's name and version shown to people.
pub const MAX_SERVER_SHOWN: usize = 200;

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
    /// How long a connected upstream may say nothing before larkgate asks whether it is
    /// still there (a `ping`); a down one is tried again at least this often.
    pub probe_interval: Duration,
    /// What the server may ask the client of a call made to it.
    pub may_ask: MayAsk,
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
            probe_interval: Duration::from_secs(30),
            may_ask: MayAsk::default(),
        }
    }
}

/// An MCP client with no capabilities that notes `tools/list_changed`, and
/// `resources/list_changed` and `prompts/list_changed` together, and tells each to whoever
/// listens ([`UpstreamClient::list_changes`]). (Progress reports are routed as they are
/// received, by [`routes::Observing`], not here: rmcp runs notification handlers in tasks of
/// their own, so a handler could hear a call's last report after its answer.)
#[derive(Debug)]
struct Handler {
    tools_changed: Arc<AtomicBool>,
    catalog_changed: Arc<AtomicBool>,
    changes: tokio::sync::broadcast::Sender<ListChanged>,
    /// The version `initialize` offers: 2025-11-25 when only that revision is wanted.
    legacy: bool,
    /// What the server may ask the client of a call.
    may_ask: MayAsk,
    /// The calls under way, which the server's questions are about.
    routes: Arc<std::sync::Mutex<routes::Routes>>,
    /// Where the URIs the server says were updated go ([`UpstreamClient::resource_updates`]).
    updates: tokio::sync::broadcast::Sender<String>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::SeqCst);
        // Nobody listening is no error.
        let _ = self.changes.send(ListChanged::Tools);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.catalog_changed.store(true, Ordering::SeqCst);
        let _ = self.changes.send(ListChanged::Resources);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.catalog_changed.store(true, Ordering::SeqCst);
        let _ = self.changes.send(ListChanged::Prompts);
    }

    /// A subscribed resource updated (2025-11-25; on 2026-07-28 it comes on the
    /// subscription's own stream, see [`subscribing`]).
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updates.send(params.uri);
    }

    /// An elicitation during a call: to the client that made it (see [`asking`]).
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let conversation = routes::asked_about(&self.routes, context.extensions.get());
        asking::elicit(self.may_ask, conversation, request).await
    }

    /// A sampling request during a call: to the client that made it (see [`asking`]).
    #[allow(deprecated)] // Sampling is deprecated in the 2026-07-28 revision, but still in it.
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let conversation = routes::asked_about(&self.routes, context.extensions.get());
        asking::sample(self.may_ask, conversation, request).await
    }

    /// As for elicitation: larkgate declared no roots, so it lists none rather than an empty
    /// list that would say the client has no roots.
    #[allow(deprecated)] // Roots are deprecated in the 2026-07-28 revision, but still in it.
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        Err(not_declared("roots/list", "roots"))
    }

    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::new(
            self.may_ask.capabilities(asking::EVERYTHING),
            Implementation::new("larkgate", env!("CARGO_PKG_VERSION")),
        );
        if self.legacy {
            config.protocol_version = ProtocolVersion::V_2025_11_25;
        }
        config
    }
}

/// The error a server gets for asking larkgate's client for what it did not declare: the
/// protocol's "method not found", saying that nobody was asked.
fn not_declared(method: &str, capability: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!(
            "{method}: larkgate did not declare the {capability} capability and does not relay \
             this request to its clients; nobody was asked"
        ),
        None,
    )
}

/// Which of its listings a server said changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListChanged {
    /// `notifications/tools/list_changed`.
    Tools,
    /// `notifications/resources/list_changed`.
    Resources,
    /// `notifications/prompts/list_changed`.
    Prompts,
}

/// How many list changes a slow listener may fall behind by before it misses some (it is
/// told that it lagged, and should then read every listing again).
const LIST_CHANGES_KEPT: usize = 16;

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
    /// The severity of the log level this session asked a 2025-11-25 server for
    /// (`u8::MAX`: none yet; see [`UpstreamClient::ask_for_logs`]).
    log_level: std::sync::atomic::AtomicU8,
    /// The task holding a 2026-07-28 server's `subscriptions/listen` stream open, if any.
    _listening: Option<Listening>,
    limits: UpstreamLimits,
    overflowed: Arc<AtomicBool>,
    tools_changed: Arc<AtomicBool>,
    catalog_changed: Arc<AtomicBool>,
    changes: tokio::sync::broadcast::Sender<ListChanged>,
    /// Where the server's progress reports go (shared with the handler).
    routes: Arc<std::sync::Mutex<routes::Routes>>,
    /// The URIs the server says were updated (shared with the handler).
    updates: tokio::sync::broadcast::Sender<String>,
    dropped: AtomicUsize,
    /// A command-launched server's process group, killed when the client goes.
    process: Option<ServerProcess>,
    /// When the server last answered anything.
    heard: Heard,
}

/// A task that ends when this is dropped.
#[derive(Debug)]
pub struct Listening(tokio::task::JoinHandle<()>);

impl Listening {
    /// `task`, to end when this is dropped.
    pub(crate) fn of(task: tokio::task::JoinHandle<()>) -> Self {
        Listening(task)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// When a server last answered, for probing only an upstream that has been quiet
/// ([`UpstreamClient::quiet_for`]).
#[derive(Debug)]
pub(crate) struct Heard {
    since: tokio::time::Instant,
    /// Milliseconds after `since` of the last answer.
    last_ms: std::sync::atomic::AtomicU64,
    /// Whether a probe is under way.
    probing: AtomicBool,
}

impl Default for Heard {
    fn default() -> Self {
        Heard {
            since: tokio::time::Instant::now(),
            last_ms: Default::default(),
            probing: AtomicBool::new(false),
        }
    }
}

impl Heard {
    fn now(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// A probe under way ([`UpstreamClient::start_probe`]) of the client it holds; the next may
/// start once it is dropped.
#[derive(Debug)]
pub struct Probing(Arc<UpstreamClient>);

impl std::ops::Deref for Probing {
    type Target = UpstreamClient;
    fn deref(&self) -> &UpstreamClient {
        &self.0
    }
}

impl Drop for Probing {
    fn drop(&mut self) {
        self.0.heard.probing.store(false, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("server", &self.server_info())
            .finish_non_exhaustive()
    }
}

impl UpstreamClient {
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

    /// The server's name and version as people are shown them (`upstream add`, `upstream
    /// list`, the console): the server's own words, so at most [`MAX_SERVER_SHOWN`] characters
    /// with every character that would act on a terminal or hide written as an escape
    /// ([`larkgate_platform::display`]).
    pub fn server_shown(&self) -> Option<String> {
        let info = self.server_info()?;
        let said = format!("{} {}", info.name, info.version);
        let escaped = larkgate_platform::display::escaped(&said);
        if escaped.chars().count() <= MAX_SERVER_SHOWN {
            return Some(escaped.into_owned());
        }
        let mut shown: String = escaped.chars().take(MAX_SERVER_SHOWN).collect();
        shown.push('…');
        Some(shown)
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

    /// How long since the server last answered anything (or since it was connected).
    pub fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.heard.last_ms.load(Ordering::Relaxed));
        self.heard.since.elapsed().saturating_sub(last)
    }

    /// The upstream's limits.
    pub fn limits(&self) -> UpstreamLimits {
        self.limits
    }

    /// Starts a probe of `this` unless one is under way; it ends when the guard is dropped.
    pub fn start_probe(this: &Arc<Self>) -> Option<Probing> {
        let taken = this.heard.probing.swap(true, Ordering::SeqCst);
        (!taken).then(|| Probing(Arc::clone(this)))
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

    /// Asks the server for its log messages at `level` and above during the call `params`
    /// makes: on 2026-07-28 in the request's `_meta`; on 2025-11-25, where the level is the
    /// session's (which every caller shares), by lowering it with `logging/setLevel` when it
    /// is not that low yet (never raising it: each call's conversation drops what its client
    /// did not ask for). A server that declares no logging is not asked.
    #[allow(deprecated)]
    async fn ask_for_logs(
        &self,
        level: rmcp::model::LoggingLevel,
        params: &mut CallToolRequestParams,
    ) {
        if self.protocol_version() == Some(ProtocolVersion::V_2026_07_28) {
            params
                .meta
                .get_or_insert_with(Default::default)
                .set_log_level(level);
            return;
        }
        let serves_logs = self
            .service
            .peer_info()
            .is_some_and(|info| info.capabilities.logging.is_some());
        let wanted = larkgate_platform::conversation::severity(level);
        if !serves_logs || self.log_level.fetch_min(wanted, Ordering::SeqCst) <= wanted {
            return;
        }
        let request = ClientRequest::SetLevelRequest(rmcp::model::SetLevelRequest::new(
            rmcp::model::SetLevelRequestParams::new(level),
        ));
        if let Err(error) = self.send(request, false).await {
            tracing::debug!(%error, "an upstream did not take logging/setLevel");
        }
    }

    /// This client, naming `alias` in the `logger` of each log message it relays (see
    /// [`routes`]).
    pub fn speaking_for(self, alias: &str) -> Self {
        routes::speaking_for(&self.routes, alias);
        self
    }

    /// Each list change the server says from now on, as it says it (a listener that falls
    /// more than a few behind is told it lagged: then every listing may have changed).
    pub fn list_changes(&self) -> tokio::sync::broadcast::Receiver<ListChanged> {
        self.changes.subscribe()
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

    /// Calls a tool. The result may be the server's own error (`is_error`): telling that apart
    /// is the caller's business.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, UpstreamError> {
        match self
            .call_tool_until(name, arguments, std::future::pending())
            .await
        {
            Some(answer) => answer,
            None => unreachable!("a call that is never cancelled"),
        }
    }

    /// [`Self::call_tool`] in a caller's `conversation`: the server's progress reports reach
    /// the caller, and when the caller cancels, so is the call at the server (the answer is
    /// then `None`).
    pub async fn call_tool_in(
        &self,
        name: &str,
        arguments: JsonObject,
        conversation: &Conversation,
    ) -> Option<Result<CallToolResult, UpstreamError>> {
        self.call_tool_routed(
            name,
            arguments,
            conversation.cancelled(),
            Some(conversation),
        )
        .await
    }

    /// [`Self::call_tool`] for a caller that may cancel: when `cancelled` finishes first, the
    /// server is told (`notifications/cancelled`; on 2026-07-28 the request's stream is
    /// closed) and the answer is `None`.
    pub async fn call_tool_until(
        &self,
        name: &str,
        arguments: JsonObject,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Option<Result<CallToolResult, UpstreamError>> {
        self.call_tool_routed(name, arguments, cancelled, None)
            .await
    }

    async fn call_tool_routed(
        &self,
        name: &str,
        arguments: JsonObject,
        cancelled: impl std::future::Future<Output = ()>,
        conversation: Option<&Conversation>,
    ) -> Option<Result<CallToolResult, UpstreamError>> {
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        // When traces are exported, the server is told which span called it: in `_meta`
        // (SEP-414) and, over HTTP, in the `traceparent` header too (see `crate::http`).
        if let Some((parent, state)) = trace_context::traceparent_of(&tracing::Span::current()) {
            params.set_traceparent(&parent);
            if let Some(state) = state {
                params.set_tracestate(&state);
            }
        }
        if let Some(level) = conversation.and_then(Conversation::log_level) {
            self.ask_for_logs(level, &mut params).await;
        }
        let mut cancelled = std::pin::pin!(cancelled);
        // A 2026-07-28 server still working on the call (waiting for a person, say) answers
        // `input_required` with only a `requestState`: the call is sent again with it, after a
        // pause of 50 ms doubling to 250 ms, as the official SDKs do, at most
        // `STILL_WAITING_ROUNDS` times. One that asks for input (an elicitation, a sampling
        // request) is sent again with the answers of the call's client (see `asking`).
        let mut pause = Duration::from_millis(50);
        // The client's answers count against the call's total as well.
        let ends = tokio::time::Instant::now() + self.limits.total_timeout;
        for _ in 0..=STILL_WAITING_ROUNDS {
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
            let answer = match self
                .send_until(request, true, cancelled.as_mut(), conversation)
                .await?
            {
                Ok(answer) => answer,
                Err(error) => return Some(Err(error)),
            };
            match answer {
                ServerResult::CallToolResult(result) => return Some(Ok(result)),
                ServerResult::InputRequiredResult(InputRequiredResult {
                    input_requests: None,
                    request_state: Some(state),
                    ..
                }) => {
                    params.request_state = Some(state);
                    params.input_responses = None;
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = cancelled.as_mut() => return None,
                    }
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                ServerResult::InputRequiredResult(InputRequiredResult {
                    input_requests: Some(questions),
                    request_state,
                    ..
                }) => {
                    let answers = tokio::select! {
                        answers = asking::answer_rounds(
                            self.limits.may_ask,
                            conversation,
                            questions,
                        ) => answers,
                        () = cancelled.as_mut() => return None,
                        () = tokio::time::sleep_until(ends) => {
                            return Some(Err(UpstreamError::Timeout(self.limits.total_timeout)));
                        }
                    };
                    match answers {
                        Ok(answers) => {
                            params.input_responses = Some(answers);
                            params.request_state = request_state;
                        }
                        Err(error) => return Some(Err(error)),
                    }
                }
                other => {
                    return Some(Err(UpstreamError::Protocol(format!(
                        "tools/call was answered with {}",
                        short_kind(&other)
                    ))));
                }
            }
        }
        Some(Err(UpstreamError::Protocol(format!(
            "tools/call was still not answered after {STILL_WAITING_ROUNDS} rounds of \
             `input_required`"
        ))))
    }

    /// One round of a call, for a relay whose own client speaks 2026-07-28 and answers the
    /// server's questions itself: the call `name` with `arguments`, echoing the client's
    /// `request_state` and `input_responses`; the server's progress and log messages go to
    /// `conversation`, and its answer comes back as it gave it, `input_required` included.
    /// `None` when the conversation was cancelled first (the server is told).
    pub async fn call_tool_round(
        &self,
        name: &str,
        arguments: JsonObject,
        echoed: (Option<String>, Option<rmcp::model::InputResponses>),
        conversation: &Conversation,
    ) -> Option<Result<ServerResult, UpstreamError>> {
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        (params.request_state, params.input_responses) = echoed;
        if let Some(level) = conversation.log_level() {
            self.ask_for_logs(level, &mut params).await;
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let cancelled = std::pin::pin!(conversation.cancelled());
        self.send_until(request, true, cancelled, Some(conversation))
            .await
    }

    /// Sends `request` as it is and answers the server's result, for a relay that passes
    /// requests on: the server's own JSON-RPC error comes back whole (its code, message and
    /// `data`) as `Ok(Err(..))`; `Err` is the connection's failure. Bounded by the round-trip
    /// timeout and the response-bytes limit, as every request is.
    pub async fn forward(
        &self,
        request: ClientRequest,
    ) -> Result<Result<ServerResult, rmcp::ErrorData>, UpstreamError> {
        let options = PeerRequestOptions::with_timeout(self.limits.call_timeout);
        let answer = match self
            .service
            .peer()
            .send_request_with_option(request, options)
            .await
        {
            Ok(handle) => handle.await_response().await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(result) => {
                self.heard.now();
                Ok(Ok(result))
            }
            Err(ServiceError::McpError(error)) => {
                self.heard.now();
                Ok(Err(error))
            }
            Err(_) if self.overflowed.swap(false, Ordering::SeqCst) => {
                Err(UpstreamError::TooLarge {
                    limit: self.limits.max_response_bytes,
                })
            }
            Err(error) => Err(classify(error, self.limits)),
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
        match self
            .send_until(
                request,
                progress,
                std::pin::pin!(std::future::pending()),
                None,
            )
            .await
        {
            Some(answer) => answer,
            None => unreachable!("a request that is never cancelled"),
        }
    }

    /// [`Self::send`] until `cancelled` finishes: then the server is told the request is
    /// cancelled, and the answer is `None`. The server's progress reports on the request go
    /// to `conversation`, when there is one that wants them.
    async fn send_until(
        &self,
        mut request: ClientRequest,
        progress: bool,
        cancelled: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        conversation: Option<&Conversation>,
    ) -> Option<Result<ServerResult, UpstreamError>> {
        let mut options = PeerRequestOptions::with_timeout(self.limits.call_timeout);
        if self.protocol_version() == Some(ProtocolVersion::V_2026_07_28) {
            // Each request says what may be asked in it: as much as the operator lets the
            // server ask and the calling client accepts (nothing outside a call).
            let accepts = conversation.map_or(Accepts::NOTHING, Conversation::accepts);
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_client_capabilities(self.limits.may_ask.capabilities(accepts));
            options.meta = Some(meta);
        }
        options.reset_timeout_on_progress = progress;
        options.max_total_timeout = Some(self.limits.total_timeout);
        // A 2025-11-25 server asks its questions mid-call: while a person answers one, the
        // call's round trip waits (larkgate keeps that timeout itself; a 2026-07-28 server
        // asks between rounds, each with rmcp's).
        let asks_mid_call = conversation.is_some_and(|c| c.accepts().anything())
            && self.protocol_version() != Some(ProtocolVersion::V_2026_07_28);
        if asks_mid_call {
            options.timeout = Some(self.limits.total_timeout);
            options.reset_timeout_on_progress = false;
        }
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
        // The route opens as the transport sends the request (see `routes`), and closes
        // when this call ends.
        let _route = conversation.filter(|c| !c.is_none()).map(|c| {
            let (listener, route) = routes::listen(&self.routes, c.clone());
            rmcp::model::GetExtensions::extensions_mut(&mut request).insert(listener);
            route
        });
        let handle = match self
            .service
            .peer()
            .send_request_with_option(request, options)
            .await
        {
            Ok(handle) => handle,
            Err(error) => return Some(Err(named(error))),
        };
        let round_trip = round_trip(
            self.limits.call_timeout,
            conversation
                .filter(|_| asks_mid_call)
                .zip(_route.as_ref().map(routes::Route::progress_heard)),
            progress,
        );
        // Until it is answered, the request is cancelled at the server if this call ends
        // another way: its caller cancelled, or the caller's whole request was dropped.
        let mut unanswered = Unanswered(Some((handle.peer.clone(), handle.id.clone())));
        tokio::select! {
            answer = handle.await_response() => {
                unanswered.0 = None;
                // Any answer, the server's own error too, says it is there.
                if matches!(&answer, Ok(_) | Err(ServiceError::McpError(_))) {
                    self.heard.now();
                }
                Some(answer.map_err(named))
            }
            () = cancelled => {
                // Told now, before the caller hears the call is over.
                if let Some((peer, id)) = unanswered.0.take() {
                    cancel(&peer, id).await;
                }
                None
            }
            () = round_trip => {
                if let Some((peer, id)) = unanswered.0.take() {
                    cancel(&peer, id).await;
                }
                Some(Err(UpstreamError::Timeout(self.limits.call_timeout)))
            }
        }
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

/// Finishes when `limit` passes with nothing heard about the request: no progress report
/// (`progress`, when `resets`) and no question of `conversation`'s opening or closing, and
/// none open. Never, for a call that keeps no timeout of its own (`None`).
async fn round_trip(
    limit: Duration,
    watching: Option<(&Conversation, tokio::sync::watch::Receiver<()>)>,
    resets: bool,
) {
    let Some((conversation, mut progress)) = watching else {
        return std::future::pending().await;
    };
    let Some((_, mut questions)) = conversation.questions() else {
        return std::future::pending().await;
    };
    // A sender gone (the call ending) says nothing more: that side is then only waited on.
    let (mut progress_open, mut questions_open) = (resets, true);
    loop {
        tokio::select! {
            changed = progress.changed(), if progress_open => progress_open = changed.is_ok(),
            changed = questions.changed(), if questions_open => questions_open = changed.is_ok(),
            () = tokio::time::sleep(limit) => {
                if conversation.questions().is_none_or(|(open, _)| open == 0) {
                    return;
                }
            }
        }
    }
}

/// A request sent and not answered: dropped so, it tells the server the request is cancelled
/// (`notifications/cancelled`; on 2026-07-28 over HTTP rmcp closes the request's stream).
struct Unanswered(Option<(rmcp::Peer<RoleClient>, rmcp::model::RequestId)>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move { cancel(&peer, id).await });
    }
}

/// Tells the server request `id` is cancelled.
async fn cancel(peer: &rmcp::Peer<RoleClient>, id: rmcp::model::RequestId) {
    let notification = CancelledNotification::new(CancelledNotificationParam::new(
        Some(id),
        Some("the caller cancelled the call".to_owned()),
    ));
    if let Err(error) = peer.send_notification(notification.into()).await {
        tracing::debug!(%error, "a cancellation could not be sent on");
    }
}
