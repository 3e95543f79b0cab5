//! `larkgate stdio`: one MCP session over standard input and output, for desktop MCP clients
//! that start their servers as processes.
//!
//! The session is opened with a token from `LARKGATE_TOKEN` or `--token-file` (a file, so the
//! token stays out of process listings and shell history), refused at start if the token is not
//! valid, and the token is verified again at every request, as `serve` verifies each request's
//! bearer: a revoked token, changed roles or a removed principal count from the next request. Standard output carries
//! only MCP messages: diagnostics go to standard error.
//!
//! Beside a running `larkgate serve` on the same data directory (which owns the audit log, so
//! this process cannot record calls), the session relays to that server instead: every request
//! crosses its pipeline as the token's principal, and its audit chain records them. The server
//! announces where it listens ([`super::endpoint`]); the relay sends the token only to a
//! loopback address. What the server says around a call (its progress, its log messages) and
//! of its lists (that they changed) reaches the desktop client as it would directly. Resources,
//! prompts and completions are the server's answers, its errors passed on whole; a resource
//! subscription is a `subscriptions/listen` stream to the server for its URI (at most
//! [`MAX_SUBSCRIPTIONS`] a session), whose updates reach the desktop client as
//! `notifications/resources/updated`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use larkgate_platform::conversation::{Accepts, SessionLogLevel};
use larkgate_platform::envelope::ENVELOPE_META_KEY;
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::observe::Observed;
use larkgate_platform::policy::TargetKind;
use larkgate_platform::server::{MAX_SUBSCRIPTIONS, refusal_error, too_many_subscriptions};
use larkgate_platform::{Conversation, PlatformServer};
use larkgate_store::{Principal, Store};
use larkgate_upstream::client::Listening;
use larkgate_upstream::client::{Endpoint, ListChanged, Revisions, UpstreamClient, UpstreamLimits};
use larkgate_upstream::{Allowed, SystemResolver, UrlGuard};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientRequest, ListToolsResult,
    PaginatedRequestParams, ServerConfig, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::context::{Context, StoreContext};
use super::credentials::TokenArgs;
use super::endpoint::{self, EndpointError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    token: TokenArgs,
}

/// Refuses to start on a data directory that does not exist, saying which one was looked for
/// and how to name the right one: a desktop client starts `stdio` from a working directory of
/// its choosing, and a new empty directory there would only answer "the token is not valid".
/// Nothing is created.
pub(crate) fn require_data_dir(flag: Option<&std::path::Path>) -> anyhow::Result<()> {
    let from_env = std::env::var(crate::config::DATA_DIR_ENV)
        .ok()
        .filter(|v| !v.is_empty());
    let data_dir = crate::config::Located::data_dir(flag, |_| from_env.clone());
    if data_dir.is_dir() {
        return Ok(());
    }
    let chosen = match (flag, &from_env) {
        (Some(_), _) => "given by --data-dir".to_owned(),
        (None, Some(_)) => format!("given by {}", crate::config::DATA_DIR_ENV),
        (None, None) => format!(
            "the default, {} in the working directory {}",
            crate::config::DEFAULT_DATA_DIR,
            std::env::current_dir().map_or_else(|_| "?".to_owned(), |d| d.display().to_string())
        ),
    };
    let shown = super::client_config::absolute(&data_dir)?;
    bail!(
        "there is no data directory at {} ({chosen}), and stdio creates none: give the one \
         `larkgate serve` uses by its absolute path, `larkgate --data-dir \
         /path/to/larkgate-data stdio` (or set {}); `larkgate client-config --stdio`, run where \
         serve runs, prints the configuration with it",
        shown.display(),
        crate::config::DATA_DIR_ENV
    )
}

/// The token's principal, by the same check as every HTTP request's.
async fn principal(store: &dyn Store, token: &str) -> anyhow::Result<Principal> {
    match larkgate_edge::verify_token(store, token).await {
        Ok(principal) => Ok(principal),
        Err(larkgate_edge::EdgeError::Unauthenticated) => bail!("the token is not valid"),
        Err(other) => Err(other.into()),
    }
}

pub(crate) async fn run(args: Args, context: &Context) -> anyhow::Result<()> {
    let token = args.token.read()?;
    // Refused at start, so a client with a bad token gets no session at all; after that the
    // token is checked again at every request.
    principal(context.store.as_ref(), &token).await?;
    let maintenance = context.federation.maintain().await;
    let handler = PlatformServer::per_token(context.platform.clone(), &token, "stdio");
    // Its access lines are written while `[server] access_log` says so (see
    // `crate::logging::set_access_lines`).
    let server = Observed::edge(handler, "stdio")
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP session over stdio could not start")?;
    let _ = server.waiting().await;
    maintenance.abort();
    Ok(())
}

/// How long the relay waits for one answer. The server enforces its own limits (script wall
/// time, upstream timeouts); this only ends a session whose server stopped answering.
const RELAY_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The session over stdio, relayed to the running `larkgate serve` that owns this data
/// directory's audit log.
pub(crate) async fn relay(args: Args, context: &StoreContext) -> anyhow::Result<()> {
    let token = args.token.read()?;
    // Refused here, as without a server, rather than by the server after connecting.
    let principal = principal(context.store.as_ref(), &token).await?;
    let url = endpoint::read(&context.data_dir).map_err(|error| match error {
        EndpointError::Missing(_) => anyhow::anyhow!(
            "another larkgate process owns the audit log in {} and no running `larkgate \
             serve` announced an endpoint there (another `larkgate stdio` session, or a \
             serve not listening on loopback): stop it, or connect this client to that \
             server over HTTP",
            context.data_dir.display()
        ),
        other => anyhow::anyhow!("{other}; refusing to send the token there"),
    })?;
    let host = url.host_str().unwrap_or_default();
    let allowed: Allowed = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|e| anyhow::anyhow!("cannot use the host {host:?}: {e}"))?;
    let endpoint = Endpoint {
        url: url.to_string(),
        revisions: Revisions::Latest,
        headers: [("Authorization".to_owned(), format!("Bearer {token}"))].into(),
        limits: UpstreamLimits {
            call_timeout: RELAY_TIMEOUT,
            total_timeout: RELAY_TIMEOUT,
            max_response_bytes: 64 * 1024 * 1024,
            ..UpstreamLimits::default()
        },
    };
    let guard = Arc::new(UrlGuard::strict().allow([allowed]));
    let client = UpstreamClient::connect(&endpoint, guard, Arc::new(SystemResolver))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "another larkgate process owns the audit log in {}, and its announced endpoint \
                 {url} cannot be reached: {e}",
                context.data_dir.display()
            )
        })?;
    crate::logging::say(&format!(
        "relaying this stdio session as {} to the running larkgate serve at {url}",
        principal.id
    ));
    let changes = client.list_changes();
    let updates = client.resource_updates();
    let subscriptions = Subscriptions::default();
    let server = Relay {
        client,
        log_level: SessionLogLevel::default(),
        subscriptions: Arc::clone(&subscriptions),
    }
    .serve(rmcp::transport::stdio())
    .await
    .context("the MCP session over stdio could not start")?;
    let forwarding = tokio::spawn(forward_list_changes(changes, server.peer().clone()));
    let updating = tokio::spawn(forward_updates(
        updates,
        subscriptions,
        server.peer().clone(),
    ));
    let _ = server.waiting().await;
    forwarding.abort();
    updating.abort();
    Ok(())
}

/// The resources a relayed session subscribed to, each held by its stream to the server
/// (`None` while it is being opened).
type Subscriptions = Arc<std::sync::Mutex<std::collections::HashMap<String, Option<Listening>>>>;

/// Tells the desktop client each update the server tells the relay of a resource it
/// subscribed to. Having fallen behind, it says that each may have been updated.
async fn forward_updates(
    mut updates: tokio::sync::broadcast::Receiver<String>,
    subscriptions: Subscriptions,
    peer: rmcp::Peer<RoleServer>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let subscribed = |uri: &str| {
        subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(uri)
    };
    loop {
        let uris = match updates.recv().await {
            Ok(uri) if subscribed(&uri) => vec![uri],
            Ok(_) => continue,
            Err(RecvError::Lagged(_)) => subscriptions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .cloned()
                .collect(),
            Err(RecvError::Closed) => return,
        };
        for uri in uris {
            let updated = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
            if peer.notify_resource_updated(updated).await.is_err() {
                // The desktop client has gone; the session ends with it.
                return;
            }
        }
    }
}

/// Tells the desktop client each list change the server tells the relay, as the server would
/// tell it directly (a reload, an upstream's tools changing, a script published). Having
/// fallen behind, it says that every listing changed.
async fn forward_list_changes(
    mut changes: tokio::sync::broadcast::Receiver<ListChanged>,
    peer: rmcp::Peer<RoleServer>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let told = match changes.recv().await {
            Ok(ListChanged::Tools) => peer.notify_tool_list_changed().await,
            Ok(ListChanged::Resources) => peer.notify_resource_list_changed().await,
            Ok(ListChanged::Prompts) => peer.notify_prompt_list_changed().await,
            Err(RecvError::Lagged(_)) => {
                let _ = peer.notify_tool_list_changed().await;
                let _ = peer.notify_resource_list_changed().await;
                peer.notify_prompt_list_changed().await
            }
            Err(RecvError::Closed) => return,
        };
        if told.is_err() {
            // The desktop client has gone; the session ends with it.
            return;
        }
    }
}

/// Answers a stdio session with the running server's answers.
struct Relay {
    client: UpstreamClient,
    /// The level of log messages the desktop client asked for.
    log_level: SessionLogLevel,
    /// The resources the desktop client subscribed to.
    subscriptions: Subscriptions,
}

/// A listing the relay passes on (`$request` and `$result` rmcp's types for it): the server's
/// page, with the client's cursor; an unauthenticated session lists nothing, as without a
/// server.
macro_rules! relayed_listing {
    ($method:ident, $request:ident, $result:ident) => {
        async fn $method(
            &self,
            request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<rmcp::model::$result, ErrorData> {
            let request = ClientRequest::$request(rmcp::model::$request {
                method: Default::default(),
                params: request,
                extensions: Default::default(),
            });
            match self.client.forward(request).await {
                Err(error) if error.is_unauthorized() => Ok(Default::default()),
                answer => match relayed(answer)? {
                    ServerResult::$result(page) => Ok(page),
                    _ => Err(another_kind()),
                },
            }
        }
    };
}

/// The server's answer to a relayed request: its own JSON-RPC error passed on whole; a token
/// it no longer takes, or a server that did not answer, said as without a server.
fn relayed(
    answer: Result<Result<ServerResult, ErrorData>, larkgate_upstream::client::UpstreamError>,
) -> Result<ServerResult, ErrorData> {
    match answer {
        Ok(answer) => answer,
        Err(error) if error.is_unauthorized() => {
            Err(refusal_error(TargetKind::Resource, &no_longer_valid()))
        }
        Err(error) => Err(ErrorData::internal_error(unreachable_server(&error), None)),
    }
}

/// The error for a server that answered with another kind of result than was asked for.
fn another_kind() -> ErrorData {
    ErrorData::internal_error(
        "the running larkgate serve this session relays to answered with another kind of \
         result than was asked for",
        None,
    )
}

/// The refusal for a session whose token the server no longer takes.
fn no_longer_valid() -> Refusal {
    Refusal::new(
        Code::Unauthenticated,
        "the token this session was opened with is no longer valid (revoked, expired, or its \
         principal removed)",
    )
    .with_hint(
        "start the session again with a valid token; an admin creates one with `larkgate token \
         create --principal NAME`",
    )
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        larkgate_platform::server::server_config()
    }

    /// The level of the log messages the server's calls say to this session from now on (the
    /// relay asks the server for them in each call's request).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = match self.client.list_tools().await {
            Ok(tools) => tools,
            // As without a server: an unauthenticated session lists nothing.
            Err(error) if error.is_unauthorized() => Vec::new(),
            Err(error) => {
                return Err(ErrorData::internal_error(unreachable_server(&error), None));
            }
        };
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(larkgate_platform::server::accepted_filter(requested))
    }

    /// A 2026-07-28 desktop client's stream: the same stream to the server, whose
    /// notifications pass on; it ends when either side ends it.
    async fn listen(
        &self,
        subscription: rmcp::service::SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let mut upstream = match self.client.listen(subscription.accepted().clone()).await {
            Ok(upstream) => upstream,
            Err(error) => return Err(ErrorData::internal_error(unreachable_server(&error), None)),
        };
        let sink = subscription.sink();
        loop {
            tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                heard = upstream.next() => match heard {
                    Ok(Some(notification)) => {
                        if sink.send(notification).await.is_err() {
                            return Ok(());
                        }
                    }
                    _ => return Ok(()),
                },
            }
        }
    }

    relayed_listing!(list_resources, ListResourcesRequest, ListResourcesResult);
    relayed_listing!(
        list_resource_templates,
        ListResourceTemplatesRequest,
        ListResourceTemplatesResult
    );
    relayed_listing!(list_prompts, ListPromptsRequest, ListPromptsResult);

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(request));
        match relayed(self.client.forward(request).await) {
            Ok(ServerResult::ReadResourceResult(read)) => Ok(read.into()),
            Ok(_) => Err(another_kind()),
            // The server speaks 2026-07-28 to the relay, which says a resource not found with
            // -32602; said with the protocol's own code here, rmcp gives each revision its own.
            Err(mut error) => {
                let envelope = error.data.as_ref().map(|d| &d[ENVELOPE_META_KEY]);
                if error.code == rmcp::model::ErrorCode::INVALID_PARAMS
                    && envelope.is_some_and(|e| e["code"] == "not_found")
                {
                    error.code = rmcp::model::ErrorCode::RESOURCE_NOT_FOUND;
                }
                Err(error)
            }
        }
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(request));
        match relayed(self.client.forward(request).await)? {
            ServerResult::GetPromptResult(prompt) => Ok(prompt.into()),
            _ => Err(another_kind()),
        }
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(request));
        match relayed(self.client.forward(request).await)? {
            ServerResult::CompleteResult(completed) => Ok(completed),
            _ => Err(another_kind()),
        }
    }

    /// A subscription: a `subscriptions/listen` stream to the server for the URI, which the
    /// server acknowledges for every URI of larkgate's form (and tells of only those the
    /// principal may read).
    #[allow(deprecated)] // `resources/subscribe` is 2025-11-25's, which this session speaks.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        {
            let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
            if subscriptions.contains_key(&uri) {
                return Ok(());
            }
            if subscriptions.len() >= MAX_SUBSCRIPTIONS {
                return Err(too_many_subscriptions());
            }
            // Held from now, so that an update told as the stream opens is passed on.
            subscriptions.insert(uri.clone(), None);
        }
        let opened = self.client.subscribe(&uri).await;
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        match opened {
            Ok(listening) => {
                subscriptions.insert(uri, listening);
                Ok(())
            }
            Err(error) => {
                subscriptions.remove(&uri);
                let refusal = if error.is_unauthorized() {
                    no_longer_valid()
                } else if matches!(error, larkgate_upstream::client::UpstreamError::Protocol(_)) {
                    // Not acknowledged: not a URI of larkgate's form.
                    larkgate_platform::catalog::not_found(
                        TargetKind::Resource,
                        &uri,
                        larkgate_platform::catalog::NotResolved::Missing,
                    )
                } else {
                    return Err(ErrorData::internal_error(unreachable_server(&error), None));
                };
                Err(refusal_error(TargetKind::Resource, &refusal))
            }
        }
    }

    /// Ends a subscription (its stream to the server closes); one not held is no error.
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
            .remove(&request.uri);
        drop(ended);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        // The call's conversation goes both ways: the server's progress reports reach the
        // desktop client, under its own progressToken, before the answer; the desktop client
        // cancelling its call cancels it at the server too (a call held for an approval then
        // withdraws its request).
        // What the server's upstreams ask during the call (an elicitation, say) reaches the
        // desktop client too, when it accepts it.
        // A 2026-07-28 desktop client says in each request what it accepts, and answers the
        // server's questions in rounds of its own call: they pass through.
        let stateless = context
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        let accepts = if stateless {
            context
                .meta
                .client_capabilities()
                .map_or(Accepts::NOTHING, |capabilities| Accepts::of(&capabilities))
        } else {
            context
                .peer
                .peer_info()
                .map_or(Accepts::NOTHING, |info| Accepts::of(&info.capabilities))
        };
        let (conversation, outbox) = Conversation::open_within(
            context.meta.get_progress_token(),
            self.log_level.of(&context.meta),
            accepts,
            context.ct.clone(),
            &Conversation::none(),
        );
        if stateless && accepts.anything() {
            let echoed = (request.request_state, request.input_responses);
            let call = self
                .client
                .call_tool_round(&request.name, arguments, echoed, &conversation);
            let answer = match outbox.carry(&context.peer, call).await {
                Some(Ok(ServerResult::CallToolResult(result))) => Ok(result),
                Some(Ok(ServerResult::InputRequiredResult(asking))) => return Ok(asking.into()),
                Some(Ok(_)) => return Err(another_kind()),
                Some(Err(error)) => Err(error),
                None => return Err(ErrorData::invalid_request("the call was cancelled", None)),
            };
            return Ok(relayed_call(answer).into());
        }
        let call = self
            .client
            .call_tool_in(&request.name, arguments, &conversation);
        let answer = outbox.carry(&context.peer, call).await;
        let Some(answer) = answer else {
            // Nobody reads the answer to a cancelled request.
            return Err(ErrorData::invalid_request("the call was cancelled", None));
        };
        Ok(relayed_call(answer).into())
    }
}

/// A relayed call's answer: the server's, or a refusal saying what became of the server.
fn relayed_call(
    answer: Result<rmcp::model::CallToolResult, larkgate_upstream::client::UpstreamError>,
) -> rmcp::model::CallToolResult {
    match answer {
        Ok(result) => result,
        // The server refused the session's token (revoked, expired, its principal removed):
        // the caller is told so, as without a server, not that serve is down.
        Err(error) if error.is_unauthorized() => no_longer_valid().to_result(),
        Err(error) => Refusal::new(Code::UpstreamUnavailable, unreachable_server(&error))
            .with_hint("check that `larkgate serve` is still running, then call again")
            .to_result(),
    }
}

fn unreachable_server(error: &larkgate_upstream::client::UpstreamError) -> String {
    format!("the running larkgate serve this session relays to did not answer: {error}")
}
