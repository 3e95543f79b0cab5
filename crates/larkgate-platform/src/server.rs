//! The platform as an rmcp `ServerHandler`.
//!
//! A [`PlatformServer`] is one session's view of the platform. Who its caller is comes from one
//! of three places: a [`RunContext`](crate::RunContext) bound when an in-memory session was
//! opened (script runs), the identity the HTTP edge verified and put into each request, or a
//! token verified again at every request of a stdio session ([`PlatformServer::per_token`]), so
//! that a revoked token, changed roles or a removed principal count from the next request on
//! every edge. `StreamableHttpService` wants a plain `ServerHandler`, so the pipeline runs
//! inside `call_tool`.
//!
//! ## The tool list changing
//!
//! larkgate announces `tools.listChanged`. When the tool table changes (a script published,
//! an upstream's tools changed), clients are told `notifications/tools/list_changed`:
//! - in 2025-11-25 sessions (HTTP and stdio), by a task each session starts when it is
//!   initialized and that ends with the session (the handler holds it, and rmcp drops the
//!   handler when the session closes); over HTTP the notification travels on the session's
//!   standalone event stream (`GET /mcp`);
//! - in 2026-07-28, which has no sessions, on a `subscriptions/listen` stream that asks for
//!   `toolsListChanged` (only that category is accepted).
//!
//! In-memory sessions (script runs) are not told: a run reads the listing once.
//!
//! ## Resources and prompts
//!
//! The upstreams' resources, resource templates and prompts ([`crate::catalog`]) are listed
//! to each caller as the policy's resource and prompt patterns admit; `resources/read` and
//! `prompts/get` cross the pipeline as calls do ([`Platform::read_resource`]). A refusal is a
//! JSON-RPC error (these methods have no error result): `-32002` for a resource not found
//! (2025-11-25; rmcp answers 2026-07-28 clients `-32602`, as that revision asks), `-32602` for a
//! prompt not found or bad arguments, and for every other refusal the code of the one table in
//! `larkgate_caller::answer` (`-32001` unauthenticated, `-32003` forbidden, `-32005` a limit,
//! `-32603` larkgate's own failure, `-32000` the rest); its `data` carries the envelope under
//! `larkgate/envelope`, as a refused tool call's `_meta` does. Their lists changing is told
//! like the tool list's (`notifications/resources/list_changed`,
//! `notifications/prompts/list_changed`; in 2026-07-28 on `subscriptions/listen` streams that
//! ask for them).
//!
//! ## Questions to a 2026-07-28 client
//!
//! A client on 2026-07-28 that declares elicitation or sampling in its request's `_meta` is
//! asked what its call's upstreams ask in `input_required` rounds of the call itself: the call
//! runs in a task of its own, parked on the platform's desk between rounds, and the client's
//! retry (`requestState`, `inputResponses`) resumes it ([`crate::conversation::rounds`], whose
//! threat model says who may resume what). A call to a tool whose approval rule waits has the
//! rounds of its wait first (each ends with the wait's own `requestState`); once approved, it
//! goes on in the same round and may ask.
//!
//! ## Resource subscriptions
//!
//! larkgate declares `resources.subscribe`. A subscription crosses the pipeline as a read of its
//! URI does ([`Platform::subscribe`]: audited, rate limited, refused as not found where the
//! caller may not read it) and is held by the upstream that listed the resource, once however
//! many sessions hold it ([`crate::catalog::Watched`]). Each update is relayed while the
//! caller's roles still let it read the URI:
//! - in 2025-11-25 sessions, `resources/subscribe` and `resources/unsubscribe`, at most
//!   [`MAX_SUBSCRIPTIONS`] per session, ended with the session; the update comes as
//!   `notifications/resources/updated` with the larkgate URI (of a sub-resource, when the
//!   upstream named one);
//! - in 2026-07-28, the `resourceSubscriptions` of a `subscriptions/listen` stream (at most
//!   [`MAX_SUBSCRIPTIONS`]): every URI of larkgate's form is acknowledged, whether or not it
//!   exists or the caller may read it, so that the acknowledgement tells nothing; those the
//!   pipeline refuses are audited and never fire. Updates are told for the URIs the stream
//!   asked for, as that revision wants. rmcp acknowledges a stream before larkgate can
//!   subscribe at the upstreams, so once it has, the client is told one update of each URI
//!   subscribed: whatever changed in between is covered.

use std::sync::Arc;

use larkgate_caller::ENVELOPE_META_KEY;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResultType,
    ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::RunKind;
use crate::approvals::wait::{Progress, Rounds, Waiting};
use crate::conversation::{Accepts, Conversation, ResponseGone, rounds};
use crate::envelope::{Code, Refusal};
use crate::identity::{RunContext, SessionIdentity};
use crate::observe::Exchange;
use crate::platform::Platform;
use crate::policy::TargetKind;
use crate::registry::ToolOutput;
use crate::tokens;
use tracing::Instrument;

/// One session's handler. See the module documentation.
#[derive(Clone, Debug)]
pub struct PlatformServer {
    platform: Platform,
    identity: Identity,
    /// The task telling this session's client about tool list changes, once initialized;
    /// aborted when the last clone of the handler (the session's) is dropped.
    notifier: Arc<std::sync::OnceLock<AbortOnDrop>>,
    /// For a script run's session: the conversation of the call that started the run. Its
    /// cancellation cancels every call of the session, and what they say joins it through
    /// the session's client.
    within: Conversation,
    /// The level of log messages the session's client asked for.
    log_level: crate::conversation::SessionLogLevel,
    /// The resources this 2025-11-25 session subscribed to (by larkgate URI), each relayed
    /// by a task of its own.
    subscriptions: Subscriptions,
    /// The virtual server this handler serves (`/mcp/NAME`), by name: its definition is read
    /// at each request, so a reload reaches sessions already open. `None`: `/mcp`.
    through: Option<Arc<str>>,
}

/// A session's resource subscriptions ([`PlatformServer::subscribe`]).
type Subscriptions = Arc<std::sync::Mutex<std::collections::HashMap<String, AbortOnDrop>>>;

/// The most resources one session (or one `subscriptions/listen` stream) subscribes to.
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// A task aborted when this is dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
            notifier: Arc::default(),
            within: Conversation::none(),
            log_level: Default::default(),
            subscriptions: Subscriptions::default(),
            through: None,
        }
    }

    /// This handler, for a script run's session started by a call in `conversation`: the
    /// caller's cancellation of that call cancels the session's calls under way.
    pub fn within(mut self, conversation: Conversation) -> Self {
        self.within = conversation;
        self
    }

    /// A handler for Streamable HTTP: each request's caller is the [`SessionIdentity`] the
    /// HTTP authentication layer inserted into the request's extensions.
    pub fn per_request(platform: Platform) -> Self {
        PlatformServer {
            platform,
            identity: Identity::FromRequest,
            notifier: Arc::default(),
            within: Conversation::none(),
            log_level: Default::default(),
            subscriptions: Subscriptions::default(),
            through: None,
        }
    }

    /// This handler, for the virtual server `name` (`/mcp/NAME`): each request's caller is
    /// held to what the server serves, under the names it shows ([`crate::servers`]).
    pub fn through(mut self, name: &str) -> Self {
        self.through = Some(name.into());
        self
    }

    /// The definition now of the virtual server this handler serves, if any.
    fn served(&self) -> Option<Arc<crate::servers::VirtualServer>> {
        let name = self.through.as_deref()?;
        self.platform.servers().get(name)
    }

    /// The larkgate name of the tool or prompt this handler's client calls `shown`.
    fn larkgate_name(&self, shown: &str) -> String {
        match self.served() {
            Some(server) => server.larkgate_name(shown),
            None => shown.to_owned(),
        }
    }

    /// The larkgate URI of what this handler's client reads as `shown`.
    fn larkgate_uri(&self, shown: &str) -> String {
        match self.served() {
            Some(server) => server.larkgate_uri(shown),
            None => shown.to_owned(),
        }
    }

    /// A function giving the URI this handler's client knows a larkgate URI by.
    fn shown_uris(&self) -> impl Fn(String) -> String + Send + Sync + 'static {
        let server = self.served();
        move |uri| match &server {
            Some(server) => server.shown_uri(&uri),
            None => uri,
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
            notifier: Arc::default(),
            within: Conversation::none(),
            log_level: Default::default(),
            subscriptions: Subscriptions::default(),
            through: None,
        }
    }

    /// The caller of this request; `Err` when it cannot be decided (the store failed).
    async fn identity(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Arc<SessionIdentity>>, Refusal> {
        match &self.identity {
            Identity::Bound(identity) => Ok(identity.clone()),
            Identity::FromRequest => {
                let identity = context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|parts| parts.extensions.get::<Arc<SessionIdentity>>())
                    .cloned();
                let Some(name) = &self.through else {
                    return Ok(identity);
                };
                let Some(server) = self.served() else {
                    return Err(Refusal::new(
                        Code::NotFound,
                        format!("larkgate no longer serves a server named {name}"),
                    )
                    .with_hint("connect to /mcp, or to a server larkgate serves"));
                };
                Ok(identity.map(|identity| {
                    Arc::new(SessionIdentity {
                        label: format!("{} /mcp/{name}", identity.label),
                        server: Some(server),
                        run: identity.run.clone(),
                    })
                }))
            }
            Identity::Token { token, label } => {
                let store = self.platform.services().store.as_ref();
                match tokens::verify(store, &token.0, larkgate_store::now_ms()).await {
                    Ok(principal) => Ok(Some(Arc::new(SessionIdentity {
                        run: RunContext::direct(principal),
                        label: label.clone(),
                        server: None,
                    }))),
                    Err(tokens::TokenError::Invalid) => Ok(None),
                    Err(tokens::TokenError::Store(error)) => Err(Refusal::store(
                        "the session's token could not be checked",
                        error,
                    )),
                }
            }
        }
    }
}

/// What larkgate says of itself at initialization: its name and version, and that it serves
/// tools, resources and prompts, and tells when their lists change.
#[allow(deprecated)] // Logging is deprecated in the 2026-07-28 revision, but still in it.
pub fn server_config() -> ServerConfig {
    let mut config = ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_logging()
            .enable_completions()
            .build(),
    );
    config.server_info.name = "larkgate".into();
    config.server_info.version = env!("CARGO_PKG_VERSION").into();
    config
}

impl PlatformServer {
    /// The caller of a listing request, noted on its exchange; `None` (an empty listing: it
    /// lists nothing it may not) when it cannot be decided.
    async fn lister(&self, context: &RequestContext<RoleServer>) -> Option<Arc<SessionIdentity>> {
        let exchange = Exchange::of(context);
        let span = exchange.map_or_else(tracing::Span::none, |e| e.span().clone());
        let identity = self.identity(context).instrument(span).await.ok().flatten();
        if let Some(exchange) = exchange {
            if let Some(identity) = &identity {
                exchange.principal(&identity.run.principal.id);
            }
            exchange.outcome("ok");
        }
        identity
    }

    /// Runs `run`, given the caller, in the request's span (the pipeline's steps are its
    /// children), noting its caller and outcome on the exchange. The identity is the
    /// session's, or the verified token's: nothing the client wrote in the request is
    /// consulted.
    async fn observed<T, F, Fut>(
        &self,
        context: &RequestContext<RoleServer>,
        run: F,
    ) -> Result<T, Refusal>
    where
        F: FnOnce(Option<Arc<SessionIdentity>>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Refusal>>,
    {
        let exchange = Exchange::of(context);
        let span = exchange.map_or_else(tracing::Span::none, |e| e.span().clone());
        let result = async {
            let identity = self.identity(context).await?;
            if let (Some(exchange), Some(identity)) = (exchange, &identity) {
                exchange.principal(&identity.run.principal.id);
            }
            run(identity).await
        }
        .instrument(span)
        .await;
        if let Some(exchange) = exchange {
            exchange.outcome(match &result {
                Ok(_) => "ok",
                Err(refusal) => refusal.code.as_str(),
            });
        }
        result
    }

    /// A read or get, [`Self::observed`]; a refusal becomes the JSON-RPC error for `kind`.
    async fn dispatch<F, Fut>(
        &self,
        context: &RequestContext<RoleServer>,
        kind: TargetKind,
        run: F,
    ) -> Result<serde_json::Value, ErrorData>
    where
        F: FnOnce(Option<Arc<SessionIdentity>>) -> Fut,
        Fut: std::future::Future<Output = Result<larkgate_binding::Map, Refusal>>,
    {
        match self.observed(context, run).await {
            Ok(value) => Ok(serde_json::Value::Object(larkgate_binding::map_to_json(
                &value,
            ))),
            Err(refusal) => Err(refusal_error(kind, &refusal)),
        }
    }
}

impl PlatformServer {
    /// The subscriptions of a `subscriptions/listen` stream to `uris`, each made through the
    /// pipeline (audited; one the caller may not read is refused there, and never fires):
    /// the updates that may be relayed, and the tasks relaying them, which end when dropped.
    async fn subscribe_listened(
        &self,
        context: &RequestContext<RoleServer>,
        uris: Vec<String>,
    ) -> (tokio::sync::mpsc::Receiver<String>, Vec<AbortOnDrop>) {
        let (sender, updated) = tokio::sync::mpsc::channel(MAX_SUBSCRIPTIONS);
        let mut relays = Vec::new();
        if uris.is_empty() {
            return (updated, relays);
        }
        let identity = self.identity(context).await.ok().flatten();
        let Some(caller) = identity.clone() else {
            return (updated, relays);
        };
        let shown = Arc::new(self.shown_uris());
        for uri in uris {
            let uri = self.larkgate_uri(&uri);
            let Ok(watched) = self.platform.subscribe(identity.clone(), &uri).await else {
                continue;
            };
            // The stream was acknowledged before this subscription was made: what changed in
            // between is unknown, so the client hears that it may have changed. (At most
            // `MAX_SUBSCRIPTIONS` URIs, so the channel has room.)
            let _ = sender.try_send(shown(watched.uri()));
            let sender = sender.clone();
            let shown = Arc::clone(&shown);
            let relayed = relay(
                self.platform.clone(),
                Arc::clone(&caller),
                watched,
                true,
                move |uri| {
                    let sender = sender.clone();
                    let uri = shown(uri);
                    async move { sender.send(uri).await.is_ok() }
                },
            );
            relays.push(AbortOnDrop(tokio::spawn(relayed).abort_handle()));
        }
        (updated, relays)
    }
}

/// The error for one subscription more than a session may hold ([`MAX_SUBSCRIPTIONS`]).
pub fn too_many_subscriptions() -> ErrorData {
    let refusal = Refusal::new(
        Code::LimitExceeded,
        format!("this session holds {MAX_SUBSCRIPTIONS} subscriptions, its most"),
    )
    .with_hint("unsubscribe from one (resources/unsubscribe) first");
    refusal_error(TargetKind::Resource, &refusal)
}

/// What larkgate accepts of a `subscriptions/listen` stream's filter: the list changes asked
/// for, and every URI of larkgate's form (at most [`MAX_SUBSCRIPTIONS`]; see the module
/// documentation).
pub fn accepted_filter(requested: &SubscriptionFilter) -> SubscriptionFilter {
    accepted_filter_by(requested, |uri| uri.starts_with(crate::catalog::URI_PREFIX))
}

/// [`accepted_filter`], with `ours` saying which URIs could be a federated resource's (a
/// prefix-less virtual server's are the upstream's own).
fn accepted_filter_by(
    requested: &SubscriptionFilter,
    ours: impl Fn(&str) -> bool,
) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed.filter(|wanted| *wanted);
    accepted.resources_list_changed = requested.resources_list_changed.filter(|wanted| *wanted);
    accepted.prompts_list_changed = requested.prompts_list_changed.filter(|wanted| *wanted);
    // Every URI that could be a federated resource's is accepted, whether or not it is
    // one the caller may read (who the caller is is not known here, and an answer that
    // differed would tell what exists): only those it may read are subscribed, in
    // `listen`, and the others never fire.
    let mut uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|uri| ours(uri) && uri.len() <= crate::catalog::MAX_URI_BYTES)
        .cloned()
        .collect();
    uris.sort();
    uris.dedup();
    uris.truncate(MAX_SUBSCRIPTIONS);
    accepted.resource_subscriptions = (!uris.is_empty()).then_some(uris);
    accepted
}

/// Relays `watched`'s updates by `send` while `identity` may read what it relays, until
/// `send` fails or the upstream is gone. `exact`: each as an update of the subscribed URI
/// itself (2026-07-28 relays only the URIs a stream asked for).
async fn relay<F, Fut>(
    platform: Platform,
    identity: Arc<SessionIdentity>,
    mut watched: crate::catalog::Watched,
    exact: bool,
    send: F,
) where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    while let Some(uri) = watched.next().await {
        let uri = if exact { watched.uri() } else { uri };
        if platform.may_read_resource(&identity, &uri) && !send(uri).await {
            return;
        }
    }
}

/// A read's or get's value as the MCP result it came as.
fn answer_as<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|error| {
        let refusal = Refusal::internal("the upstream's answer could not be passed on", error);
        refusal_error(TargetKind::Tool, &refusal)
    })
}

/// A refused read or get as a JSON-RPC error; see the module documentation.
pub fn refusal_error(kind: TargetKind, refusal: &Refusal) -> ErrorData {
    let envelope = refusal.envelope();
    // The one table (`larkgate_caller::answer`); a resource not found has the spec's own code.
    let code = match (refusal.code, kind) {
        (Code::NotFound, TargetKind::Resource) => ErrorCode::RESOURCE_NOT_FOUND,
        (code, _) => ErrorCode(code.json_rpc_code() as i32),
    };
    let data = serde_json::to_value(&envelope)
        .ok()
        .map(|envelope| serde_json::json!({ ENVELOPE_META_KEY: envelope }));
    ErrorData::new(code, envelope.text(), data)
}

/// One `ServerHandler` listing: what the session's principal may see of one
/// kind of entry. The four listings differ only in their result type, its
/// field and the platform's method, so they are written once here.
macro_rules! listing {
    ($method:ident, $result:ident, $field:ident, $list:ident) => {
        async fn $method(
            &self,
            _request: Option<PaginatedRequestParams>,
            context: RequestContext<RoleServer>,
        ) -> Result<$result, ErrorData> {
            let identity = self.lister(&context).await;
            Ok($result {
                $field: self.platform.$list(identity.as_deref()),
                ..Default::default()
            })
        }
    };
}

impl ServerHandler for PlatformServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = server_config();
        if let Some(server) = self.served() {
            config.instructions = server.description().map(str::to_owned);
        }
        config
    }

    /// The session's level of log messages from now on: what its calls' upstreams, and
    /// larkgate about its calls, say at that level or above reaches it.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A script run's in-memory session reads the listing once; the others are told.
        if matches!(self.identity, Identity::Bound(_)) {
            return;
        }
        let mut tools = self.platform.tool_table().changes();
        let mut resources = self.platform.catalog().resource_changes();
        let mut prompts = self.platform.catalog().prompt_changes();
        // A virtual server's own change may change every list it serves.
        let mut servers = self.platform.servers().changes();
        let through = self.through.is_some();
        let peer = context.peer;
        let task = tokio::spawn(async move {
            loop {
                let told = tokio::select! {
                    changed = servers.changed(), if through => match changed {
                        Ok(()) => {
                            peer.notify_tool_list_changed().await.is_ok()
                                && peer.notify_resource_list_changed().await.is_ok()
                                && peer.notify_prompt_list_changed().await.is_ok()
                        }
                        Err(_) => false,
                    },
                    changed = tools.changed() => match changed {
                        Ok(()) => peer.notify_tool_list_changed().await.is_ok(),
                        Err(_) => false,
                    },
                    changed = resources.changed() => match changed {
                        Ok(()) => peer.notify_resource_list_changed().await.is_ok(),
                        Err(_) => false,
                    },
                    changed = prompts.changed() => match changed {
                        Ok(()) => peer.notify_prompt_list_changed().await.is_ok(),
                        Err(_) => false,
                    },
                };
                if !told {
                    return;
                }
            }
        });
        let _ = self.notifier.set(AbortOnDrop(task.abort_handle()));
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        match self.served() {
            Some(server) => Some(accepted_filter_by(requested, |uri| {
                server
                    .larkgate_uri(uri)
                    .starts_with(crate::catalog::URI_PREFIX)
            })),
            None => Some(accepted_filter(requested)),
        }
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let mut tools = self.platform.tool_table().changes();
        let mut resources = self.platform.catalog().resource_changes();
        let mut prompts = self.platform.catalog().prompt_changes();
        let accepted = subscription.accepted();
        let wants_tools = accepted.tools_list_changed == Some(true);
        let wants_resources = accepted.resources_list_changed == Some(true);
        let wants_prompts = accepted.prompts_list_changed == Some(true);
        let sink = subscription.sink();
        let mut servers = self.platform.servers().changes();
        let through = self.through.is_some();
        let uris = accepted.resource_subscriptions.clone().unwrap_or_default();
        let (mut updated, _relays) = self
            .subscribe_listened(subscription.request_context(), uris)
            .await;
        let mut wants_updates = true;
        loop {
            let told = tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                changed = servers.changed(), if through => {
                    changed.is_ok()
                        && (!wants_tools || sink.notify_tool_list_changed().await.is_ok())
                        && (!wants_resources || sink.notify_resource_list_changed().await.is_ok())
                        && (!wants_prompts || sink.notify_prompt_list_changed().await.is_ok())
                }
                uri = updated.recv(), if wants_updates => match uri {
                    Some(uri) => sink.notify_resource_updated(uri).await.is_ok(),
                    None => {
                        wants_updates = false;
                        true
                    }
                },
                changed = tools.changed(), if wants_tools => {
                    changed.is_ok() && sink.notify_tool_list_changed().await.is_ok()
                }
                changed = resources.changed(), if wants_resources => {
                    changed.is_ok() && sink.notify_resource_list_changed().await.is_ok()
                }
                changed = prompts.changed(), if wants_prompts => {
                    changed.is_ok() && sink.notify_prompt_list_changed().await.is_ok()
                }
            };
            if !told {
                return Ok(());
            }
        }
    }

    listing!(list_tools, ListToolsResult, tools, list);
    listing!(
        list_resources,
        ListResourcesResult,
        resources,
        list_resources
    );
    listing!(
        list_resource_templates,
        ListResourceTemplatesResult,
        resource_templates,
        list_resource_templates
    );
    listing!(list_prompts, ListPromptsResult, prompts, list_prompts);

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let platform = self.platform.clone();
        let uri = self.larkgate_uri(&request.uri);
        let value = self
            .dispatch(&context, TargetKind::Resource, |identity| async move {
                platform.read_resource(identity, &uri).await
            })
            .await?;
        let mut read: ReadResourceResult = answer_as(value)?;
        if self.through.is_some() {
            let shown = self.shown_uris();
            for contents in &mut read.contents {
                match contents {
                    rmcp::model::ResourceContents::TextResourceContents { uri, .. }
                    | rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                        *uri = shown(std::mem::take(uri));
                    }
                    // A kind rmcp adds later keeps its URI as the upstream gave it.
                    _ => {}
                }
            }
        }
        // Complete, whatever revision the upstream spoke (rmcp leaves it out for 2025-11-25
        // clients); cache hints are rmcp's defaults for 2026-07-28: private, no lifetime.
        read.result_type = Some(ResultType::COMPLETE);
        Ok(read.into())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let platform = self.platform.clone();
        let (name, arguments) = (self.larkgate_name(&request.name), request.arguments);
        let value = self
            .dispatch(&context, TargetKind::Prompt, |identity| async move {
                platform.get_prompt(identity, &name, arguments).await
            })
            .await?;
        let mut prompt: GetPromptResult = answer_as(value)?;
        prompt.result_type = Some(ResultType::COMPLETE);
        Ok(prompt.into())
    }

    /// A completion of a federated prompt's or resource template's argument, answered by the
    /// upstream that listed it (see [`Platform::complete`]).
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        let platform = self.platform.clone();
        let (kind, target) = match request.r#ref {
            rmcp::model::Reference::Prompt(prompt) => {
                (TargetKind::Prompt, self.larkgate_name(&prompt.name))
            }
            rmcp::model::Reference::Resource(template) => {
                (TargetKind::Resource, self.larkgate_uri(&template.uri))
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion/complete: larkgate completes prompts (ref/prompt) and resource \
                     templates (ref/resource) only",
                    None,
                ));
            }
        };
        let completing = crate::catalog::Completing {
            argument: request.argument,
            known: request.context,
        };
        let value = self
            .dispatch(&context, kind, |identity| async move {
                platform.complete(identity, kind, &target, completing).await
            })
            .await?;
        let mut completed: rmcp::model::CompleteResult = answer_as(value)?;
        completed.result_type = Some(ResultType::COMPLETE);
        Ok(completed)
    }

    /// A 2025-11-25 session's subscription to a federated resource's updates, made through
    /// the pipeline ([`Platform::subscribe`]) and relayed to the session by a task of its own
    /// while the caller may still read what it relays. Subscribing again to a URI already
    /// subscribed is no new subscription.
    #[allow(deprecated)] // `resources/subscribe` is 2025-11-25's.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self.larkgate_uri(&request.uri);
        {
            let subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
            if subscriptions.contains_key(&uri) {
                return Ok(());
            }
            if subscriptions.len() >= MAX_SUBSCRIPTIONS {
                return Err(too_many_subscriptions());
            }
        }
        let platform = self.platform.clone();
        let (watched, identity) = self
            .observed(&context, |identity| async move {
                let watched = platform.subscribe(identity.clone(), &uri).await?;
                Ok((watched, identity))
            })
            .await
            .map_err(|refusal| refusal_error(TargetKind::Resource, &refusal))?;
        let Some(identity) = identity else {
            return Ok(());
        };
        let peer = context.peer.clone();
        let uri = watched.uri();
        let shown = Arc::new(self.shown_uris());
        let relayed = relay(
            self.platform.clone(),
            identity,
            watched,
            false,
            move |uri| {
                let peer = peer.clone();
                let uri = shown(uri);
                async move {
                    let updated = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    peer.notify_resource_updated(updated).await.is_ok()
                }
            },
        );
        let task = tokio::spawn(relayed);
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uri, AbortOnDrop(task.abort_handle()));
        Ok(())
    }

    /// Ends a subscription of this session (one it does not hold is no error).
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ended = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.larkgate_uri(&request.uri));
        drop(ended);
        Ok(())
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let platform = &self.platform;
        // Through a server with tool search, its two tools ([`crate::search`]): a search is
        // answered here, as a listing is; a `call_tool` is the call it names from here on.
        if self.served().is_some_and(|server| server.tool_search()) {
            if request.name == crate::search::FIND_TOOLS {
                let arguments = request.arguments;
                let found = self.observed(&context, |identity| async move {
                    platform.find_tools(identity.as_deref(), arguments.as_ref())
                });
                return Ok(answer_of(found.await));
            }
            if request.name == crate::search::CALL_TOOL {
                match crate::search::unwrap_call(request.arguments.take()) {
                    Ok((name, arguments)) => {
                        request.name = name.into();
                        request.arguments = arguments;
                    }
                    Err(refusal) => return Ok(noted(Exchange::of(&context), Err(refusal))),
                }
            }
        }
        if self.through.is_some() {
            request.name = self.larkgate_name(&request.name).into();
        }
        let stateless = is_stateless(&context);
        // A 2026-07-28 client's next round of a call that asked it something.
        if let Some(state) = request
            .request_state
            .as_deref()
            .filter(|state| stateless && state.starts_with(rounds::STATE_PREFIX))
        {
            let state = state.to_owned();
            return Ok(self.resume(&state, request, &context).await);
        }
        // A client's own call over an edge (HTTP, stdio) to a tool whose rule waits may wait
        // for an approval; a call in a session opened in this process is refused at once: a
        // script's (its run holds a worker and has a deadline of its own) and the command
        // line's one-shot `call`.
        let may_wait = !matches!(self.identity, Identity::Bound(_))
            && platform
                .services()
                .policy()
                .approval_wait(TargetKind::Tool, &request.name)
                .is_some();
        let accepts = accepts(&context);
        if stateless && accepts.anything() {
            return Ok(self
                .call_in_rounds(request, &context, accepts, may_wait)
                .await);
        }
        let (conversation, outbox) = Conversation::open_within(
            context.meta.get_progress_token(),
            self.log_level.of(&context.meta),
            accepts,
            context.ct.clone(),
            &self.within,
        );
        if let Some(gone) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ResponseGone>())
        {
            conversation.answered_through(gone);
        }
        let waiting = may_wait.then(|| waiting(&context, request.request_state, &conversation));
        let call = self.observed(&context, |identity| async move {
            run_call(
                platform,
                identity,
                &request.name,
                request.arguments,
                waiting,
                conversation,
            )
            .await
        });
        // What the call says (an upstream's progress) is sent in this task, before its answer.
        Ok(answer_of(outbox.carry(&context.peer, call).await))
    }
}

impl PlatformServer {
    /// A 2026-07-28 client's call that its upstreams may ask questions in: it runs in a task
    /// of its own, and each round of the client's ends with its answer or with what it asked
    /// ([`rounds`]). When `may_wait` (its approval rule waits), the rounds of its wait come
    /// first: each ends with the wait's own `requestState` while nobody has decided, and the
    /// round in which an approver approves goes on with the call, which may then ask.
    async fn call_in_rounds(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        accepts: Accepts,
        may_wait: bool,
    ) -> CallToolResponse {
        let exchange = Exchange::of(context);
        let span = exchange.map_or_else(tracing::Span::none, |e| e.span().clone());
        let identity = match self.identity(context).instrument(span.clone()).await {
            Ok(identity) => identity,
            Err(refusal) => return noted(exchange, Err(refusal)),
        };
        if let (Some(exchange), Some(identity)) = (exchange, &identity) {
            exchange.principal(&identity.run.principal.id);
        }
        // The call's own cancellation: a round's request ends with the round, not the call.
        let cancel = tokio_util::sync::CancellationToken::new();
        let (conversation, outbox) = Conversation::open_within(
            context.meta.get_progress_token(),
            self.log_level.of(&context.meta),
            accepts,
            cancel.clone(),
            &self.within,
        );
        let caller = identity.as_ref().map(|identity| rounds::Caller {
            principal: identity.run.principal.id.clone(),
            tool: request.name.to_string(),
            arguments: request.arguments.clone(),
        });
        // The wait ends early as the client's round does (the wait's rounds are the client's
        // own, one request each); once approved, the call is the rounds' own.
        let waiting = may_wait.then(|| waiting(context, request.request_state, &conversation));
        let platform = self.platform.clone();
        let (name, arguments) = (request.name, request.arguments);
        let call = async move {
            run_call(&platform, identity, &name, arguments, waiting, conversation).await
        };
        let rounds = rounds::Rounds::start(outbox, cancel, call.instrument(span));
        self.rounds(rounds, caller, context).await
    }

    /// A 2026-07-28 client's next round of a call parked with `state`: its answers go to the
    /// call's questions, and the round goes on.
    async fn resume(
        &self,
        state: &str,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let exchange = Exchange::of(context);
        let span = exchange.map_or_else(tracing::Span::none, |e| e.span().clone());
        let identity = match self.identity(context).instrument(span).await {
            Ok(Some(identity)) => identity,
            Ok(None) => {
                let refusal = Refusal::new(Code::Unauthenticated, "this call is not authenticated");
                return noted(exchange, Err(refusal));
            }
            Err(refusal) => return noted(exchange, Err(refusal)),
        };
        if let Some(exchange) = exchange {
            exchange.principal(&identity.run.principal.id);
        }
        let caller = rounds::Caller {
            principal: identity.run.principal.id.clone(),
            tool: request.name.to_string(),
            arguments: request.arguments,
        };
        let Some(mut parked) = self.platform.parked().take(state, &caller) else {
            let refusal = Refusal::new(
                Code::InvalidArguments,
                format!(
                    "this call's requestState names no call of {} waiting for its answers here: \
                     they came already, the call waited longer than {} s for them, or another \
                     larkgate server asked its questions",
                    request.name,
                    rounds::PARKED_TTL.as_secs()
                ),
            )
            .with_hint("call the tool again, without a requestState");
            return noted(exchange, Err(refusal));
        };
        parked.answer(request.input_responses.unwrap_or_default());
        self.rounds(parked, Some(caller), context).await
    }

    /// Carries rounds of a call to the client of `context` until one ends with its answer or
    /// with questions: those are the answer, the call parked for `caller`'s next round.
    async fn rounds(
        &self,
        mut call: rounds::Rounds<crate::platform::CallOutcome>,
        caller: Option<rounds::Caller>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let exchange = Exchange::of(context);
        loop {
            let progress_token = context.meta.get_progress_token();
            match call
                .round(&context.peer, context.ct.clone(), progress_token)
                .await
            {
                rounds::Round::Answered(Some(outcome)) => return noted(exchange, outcome),
                rounds::Round::Answered(None) => {
                    let refusal = Refusal::internal(
                        "the call ended without an answer",
                        "a call's task ended before it answered",
                    );
                    return noted(exchange, Err(refusal));
                }
                rounds::Round::Asking(questions, asking) => {
                    let parked = match &caller {
                        Some(caller) => {
                            self.platform
                                .parked()
                                .park(caller.clone(), asking, rounds::PARKED_TTL)
                        }
                        None => Err(asking),
                    };
                    match parked {
                        Ok(state) => {
                            if let Some(exchange) = exchange {
                                exchange.outcome("input_required");
                            }
                            return InputRequiredResult::new(Some(questions), Some(state)).into();
                        }
                        Err(mut asking) => {
                            asking.refuse(
                                "larkgate holds as many calls waiting for their clients' answers \
                                 as it may; nobody was asked",
                            );
                            call = asking;
                        }
                    }
                }
            }
        }
    }
}

/// Runs a client's call in `conversation`: held for an approval's decision as `waiting` says,
/// when the caller's own (a direct session's; a script's run never waits), else through the
/// pipeline at once.
async fn run_call(
    platform: &Platform,
    identity: Option<Arc<SessionIdentity>>,
    name: &str,
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
    waiting: Option<Waiting>,
    conversation: Conversation,
) -> crate::platform::CallOutcome {
    match (identity.as_ref().map(|i| i.run.kind), waiting) {
        (Some(RunKind::Direct), Some(waiting)) => {
            platform
                .call_waiting(identity, name, arguments, waiting, conversation)
                .await
        }
        _ => {
            platform
                .call_in(identity, name, arguments, conversation)
                .await
        }
    }
}

/// `outcome` as the answer to the call, noted on its exchange.
fn noted(exchange: Option<&Exchange>, outcome: crate::platform::CallOutcome) -> CallToolResponse {
    if let Some(exchange) = exchange {
        exchange.outcome(match &outcome {
            Ok(_) => "ok",
            Err(refusal) => refusal.code.as_str(),
        });
    }
    answer_of(outcome)
}

/// How a call ended, as its answer.
fn answer_of(outcome: crate::platform::CallOutcome) -> CallToolResponse {
    let result = match outcome {
        // Another server's answer, as it came: every kind of content, text as text.
        Ok(ToolOutput {
            content: Some(content),
            ..
        }) => {
            let mut answer = CallToolResult::success(content.blocks);
            answer.structured_content = content.structured;
            answer
        }
        Ok(ToolOutput { value, .. }) => {
            let json = serde_json::Value::Object(larkgate_binding::map_to_json(&value));
            CallToolResult::structured(json)
        }
        // 2026-07-28: the wait for an approval goes on in the client's next round.
        Err(Refusal {
            wait_state: Some(state),
            ..
        }) => return InputRequiredResult::from_request_state(*state).into(),
        Err(refusal) => refusal.to_result(),
    };
    result.into()
}

/// Whether the client of `context` speaks a revision without sessions (2026-07-28).
fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// What the client of `context` accepts being asked during its call: as it declared at
/// `initialize`, or on 2026-07-28 in the request's `_meta` (asked then in rounds of the call,
/// see [`rounds`]).
fn accepts(context: &RequestContext<RoleServer>) -> Accepts {
    if is_stateless(context) {
        return context
            .meta
            .client_capabilities()
            .map_or(Accepts::NOTHING, |capabilities| Accepts::of(&capabilities));
    }
    context
        .peer
        .peer_info()
        .map_or(Accepts::NOTHING, |info| Accepts::of(&info.capabilities))
}

/// How the client of `context` waits for an approval's decision: until it cancels the call
/// (or, over HTTP, goes away); told of the wait by progress notifications when it asked for
/// them; a round at a time on 2026-07-28, whose retry echoes `request_state`.
fn waiting(
    context: &RequestContext<RoleServer>,
    request_state: Option<String>,
    conversation: &Conversation,
) -> Waiting {
    let cancelled = context.ct.clone();
    let progress =
        (conversation.wants_progress() || conversation.log_level().is_some()).then(|| {
            Box::new(ConversationProgress {
                conversation: conversation.clone(),
                logged: std::sync::atomic::AtomicBool::new(false),
            }) as Box<dyn Progress>
        });
    let stateless = context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize());
    Waiting {
        cancelled: Box::pin(async move { cancelled.cancelled_owned().await }),
        progress,
        rounds: stateless.then_some(Rounds {
            echoed: request_state,
        }),
    }
}

/// An approval's wait, told to the waiting client: as progress (seconds waited) when it asked
/// for progress, and once as a log message (`notice`, from `larkgate`) when it asked for logs.
struct ConversationProgress {
    conversation: Conversation,
    logged: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Progress for ConversationProgress {
    async fn tell(&self, progress: f64, total: f64, message: String) {
        self.conversation
            .progress(progress, Some(total), Some(&message));
        if !self.logged.swap(true, std::sync::atomic::Ordering::Relaxed) {
            #[allow(deprecated)]
            self.conversation.log(
                rmcp::model::LoggingLevel::Notice,
                crate::conversation::LARKGATE_LOGGER,
                serde_json::Value::String(message),
            );
        }
    }
}
