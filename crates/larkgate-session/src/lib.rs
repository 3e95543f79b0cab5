//! One in-memory MCP session per run, against the fully assembled platform server.
//!
//! [`connect`] opens a session bound to a [`RunContext`] — the identity the *launcher* of a
//! run decided — and returns a [`SessionCaller`], the production [`Caller`]: every host call a
//! script makes becomes an ordinary `tools/call` on this session and crosses the same pipeline
//! an agent's call crosses, with no second implementation to keep in step. The session itself
//! establishes no identity: the server binds the context when the session is created, and
//! nothing the client sends can change it.
//!
//! Transport: a pair of typed channels carrying rmcp's message values (no JSON encoding), and
//! the 2026-07-28 lifecycle (`server/discover`, no `initialize` handshake).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use larkgate_binding::{Limits, Map, from_json_object};
use larkgate_caller::{
    Annotations, CallError, Caller, Envelope, Origin, RefusalError, Source, TEXT_RESULT_KEY,
    Target, ToolInfo, add_content,
};
use larkgate_platform::observe::Observed;
use larkgate_platform::registry::{INPUT_SHAPE_META_KEY, ORIGIN_META_KEY, SIGNATURE_META_KEY};
use larkgate_platform::trace_context;
use larkgate_platform::{Conversation, Platform, PlatformServer, RunContext, SessionIdentity};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, ProtocolVersion,
    ReadResourceRequestParams, RequestParamsMeta,
};
use rmcp::service::{ClientLifecycleMode, RunningService, serve_client_with_lifecycle};
use rmcp::{RoleClient, RoleServer, ServiceExt};
use tokio::sync::OnceCell;

/// How many messages may queue in each direction.
const CHANNEL_CAPACITY: usize = 64;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("the in-memory session could not be opened: {0}")]
pub struct ConnectError(String);

/// The production [`Caller`]: one in-memory MCP session. See the crate documentation.
#[derive(Clone, Debug)]
pub struct SessionCaller {
    peer: rmcp::Peer<RoleClient>,
    listing: Arc<OnceCell<Vec<ToolInfo>>>,
    limits: Limits,
}

/// The server end while it starts: rmcp's server settles its lifecycle only when the first
/// real request arrives, so it is awaited at teardown, not at connect.
pub type ServerTask<H> = tokio::task::JoinHandle<
    Result<RunningService<RoleServer, H>, rmcp::service::ServerInitializeError>,
>;

/// Closes both ends of a session.
#[derive(Debug)]
pub struct Teardown {
    client: RunningService<RoleClient, ()>,
    server: ServerTask<Observed<PlatformServer>>,
}

impl Teardown {
    /// Closes the session: the client first (which ends the server's input), then the server.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
        match self.server.await {
            Ok(Ok(server)) => {
                let _ = server.cancel().await;
            }
            Ok(Err(error)) => tracing::debug!(%error, "the session's server never started"),
            Err(error) => tracing::debug!(%error, "the session's server task failed"),
        }
    }
}

/// Opens an in-memory session against `platform`, bound to `run`, labelled `label` in logs and
/// audit. Results are converted within `limits`.
pub async fn connect(
    platform: &Platform,
    run: RunContext,
    label: &str,
    limits: Limits,
) -> Result<(SessionCaller, Teardown), ConnectError> {
    connect_in(platform, run, label, limits, Conversation::none()).await
}

/// [`connect`] for a run started by a call in `conversation`: the progress its host calls
/// report (an upstream's, relayed by the session's server) reaches that call's client.
pub async fn connect_in(
    platform: &Platform,
    run: RunContext,
    label: &str,
    limits: Limits,
    conversation: Conversation,
) -> Result<(SessionCaller, Teardown), ConnectError> {
    let identity = Arc::new(SessionIdentity {
        run,
        label: label.to_owned(),
        server: None,
    });
    let handler =
        PlatformServer::new(platform.clone(), Some(identity)).within(conversation.clone());
    let relay = Arc::new(HostProgress::new(conversation));
    let (client, server) =
        serve_in_memory_observed(Observed::internal(handler), (), move |message| {
            relay.observe(message)
        })
        .await?;
    Ok(session(client, server, limits))
}

/// What a run's session hears of its host calls' progress: it goes to the conversation of the
/// call that started the run, as the session's client receives it (in order with the host
/// calls' answers). Host calls are made one at a time, and each is a new phase of that
/// conversation's progress (see [`Conversation::rebase`]), so what its client hears keeps
/// increasing.
#[derive(Debug)]
struct HostProgress {
    conversation: Conversation,
    /// The token of the host call whose progress was relayed last.
    last: std::sync::Mutex<Option<rmcp::model::ProgressToken>>,
}

impl HostProgress {
    fn new(conversation: Conversation) -> Self {
        HostProgress {
            conversation,
            last: std::sync::Mutex::default(),
        }
    }

    fn observe(&self, message: &rmcp::service::RxJsonRpcMessage<RoleClient>) {
        let rmcp::model::JsonRpcMessage::Notification(notification) = message else {
            return;
        };
        let rmcp::model::ServerNotification::ProgressNotification(progress) =
            &notification.notification
        else {
            return;
        };
        let params = &progress.params;
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.as_ref() != Some(&params.progress_token) {
                self.conversation.rebase();
                *last = Some(params.progress_token.clone());
            }
        }
        self.conversation
            .relay_progress(params.progress, params.total, params.message.as_deref());
    }
}

/// Opens an in-memory session served by `handler` as it is — including one bound to no
/// identity, whose every call is refused as `unauthenticated`.
pub async fn connect_handler(
    handler: PlatformServer,
    limits: Limits,
) -> Result<(SessionCaller, Teardown), ConnectError> {
    let (client, server) = serve_in_memory(Observed::internal(handler)).await?;
    Ok(session(client, server, limits))
}

fn session(
    client: RunningService<RoleClient, ()>,
    server: ServerTask<Observed<PlatformServer>>,
    limits: Limits,
) -> (SessionCaller, Teardown) {
    let caller = SessionCaller {
        peer: client.peer().clone(),
        listing: Arc::new(OnceCell::new()),
        limits,
    };
    (caller, Teardown { client, server })
}

/// Serves any rmcp server handler over a pair of typed channels and connects a plain rmcp
/// client to it with the 2026-07-28 lifecycle. The building block of [`connect`], public for
/// tests and benchmarks that need to speak rmcp directly.
pub async fn serve_in_memory<H: rmcp::Service<RoleServer>>(
    handler: H,
) -> Result<(RunningService<RoleClient, ()>, ServerTask<H>), ConnectError> {
    serve_in_memory_observed(handler, (), |_| {}).await
}

/// [`serve_in_memory`] with `client` as the client's handler, and `observe` shown each message
/// the client receives, in order, before the client handles it.
pub async fn serve_in_memory_observed<H, C, F>(
    handler: H,
    client: C,
    observe: F,
) -> Result<(RunningService<RoleClient, C>, ServerTask<H>), ConnectError>
where
    H: rmcp::Service<RoleServer>,
    C: rmcp::Service<RoleClient>,
    F: Fn(&rmcp::service::RxJsonRpcMessage<RoleClient>) + Send + Sync + 'static,
{
    use futures::StreamExt;
    let (client_tx, server_rx) = mpsc::channel(CHANNEL_CAPACITY);
    let (server_tx, client_rx) = mpsc::channel(CHANNEL_CAPACITY);
    let server = tokio::spawn(async move { handler.serve((server_tx, server_rx)).await });
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client_rx = client_rx.inspect(move |message| observe(message));
    match serve_client_with_lifecycle(client, (client_tx, client_rx), lifecycle).await {
        Ok(client) => Ok((client, server)),
        Err(error) => {
            server.abort();
            Err(ConnectError(error.to_string()))
        }
    }
}

impl SessionCaller {
    async fn listing(&self) -> Result<&Vec<ToolInfo>, CallError> {
        self.listing
            .get_or_try_init(|| async {
                let tools = self
                    .peer
                    .list_all_tools()
                    .await
                    .map_err(|e| CallError::Transport(e.to_string()))?;
                Ok(tools.iter().map(tool_info).collect())
            })
            .await
    }
}

/// A listed tool as the engine sees it (its origin, shape and signature read from `_meta`).
pub fn tool_info(tool: &rmcp::model::Tool) -> ToolInfo {
    let meta = tool.meta.as_ref();
    let get = |key: &str| meta.and_then(|m| m.get(key));
    let origin = get(ORIGIN_META_KEY)
        .and_then(|v| serde_json::from_value::<Origin>(v.clone()).ok())
        // A listing without an origin is not larkgate's own; treat it as foreign.
        .unwrap_or(Origin {
            source: Source::Upstream,
            alias: None,
            original_name: tool.name.to_string(),
        });
    let annotations = tool.annotations.as_ref();
    ToolInfo {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(|d| d.to_string()),
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        input_shape: get(INPUT_SHAPE_META_KEY).and_then(|v| serde_json::from_value(v.clone()).ok()),
        signature: get(SIGNATURE_META_KEY).and_then(|v| v.as_str().map(str::to_owned)),
        annotations: Annotations {
            read_only: annotations.and_then(|a| a.read_only_hint),
            destructive: annotations.and_then(|a| a.destructive_hint),
            idempotent: annotations.and_then(|a| a.idempotent_hint),
            open_world: annotations.and_then(|a| a.open_world_hint),
        },
        origin,
    }
}

/// The text of a result's text content blocks, joined.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads a tool result as the engine sees it.
fn read_result(result: CallToolResult, limits: Limits) -> Result<Map, CallError> {
    if result.is_error == Some(true) {
        let Some(envelope) = Envelope::from_meta(result.meta.as_ref().map(|m| &m.0)) else {
            return Err(CallError::Transport(format!(
                "the server returned an error result without larkgate's envelope: {}",
                text_of(&result)
            )));
        };
        let envelope = envelope.map_err(|e| {
            CallError::Transport(format!(
                "the server returned an envelope larkgate cannot read ({e}): {}",
                text_of(&result)
            ))
        })?;
        return Err(CallError::Refused(RefusalError {
            code: envelope.code,
            retry_after: envelope.retry_after_seconds.map(Duration::from_secs),
            approval_id: envelope.approval_id,
            text: text_of(&result),
        }));
    }
    let mut map = match &result.structured_content {
        Some(serde_json::Value::Object(object)) => from_json_object(object, limits)
            .map_err(|e| CallError::Transport(format!("the result is unusable: {e}")))?,
        Some(other) => {
            return Err(CallError::Transport(format!(
                "the structured result is not an object but {other}"
            )));
        }
        None => {
            let mut map = Map::new();
            map.insert(TEXT_RESULT_KEY.to_owned(), text_of(&result).into());
            map
        }
    };
    // Content of other kinds than text (an upstream's images, audio, links, resources).
    let blocks: Vec<serde_json::Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .collect();
    add_content(&mut map, &blocks, limits)
        .map_err(|e| CallError::Transport(format!("the result's content is unusable: {e}")))?;
    Ok(map)
}

impl Caller for SessionCaller {
    async fn tools(&self) -> Result<Vec<ToolInfo>, CallError> {
        self.listing().await.cloned()
    }

    async fn call_tool(&self, name: &str, arguments: Map) -> Result<Map, CallError> {
        self.request(Target::Tool, name, arguments).await
    }

    async fn request(&self, target: Target, name: &str, arguments: Map) -> Result<Map, CallError> {
        // Conversion 1 of 2 on an in-process run's host call (value to JSON): an MCP request
        // carries JSON. The pipeline makes the second (JSON to value) and binds the arguments.
        self.send(target, name, larkgate_binding::map_to_json(&arguments))
            .await
    }

    async fn request_json(
        &self,
        target: Target,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        _limits: Limits,
    ) -> Result<Map, CallError> {
        // No conversion: a worker's host call arrives as JSON and goes on as it came.
        self.send(target, name, arguments).await
    }
}

impl SessionCaller {
    /// Sends one host call on the session and reads its answer within the session's limits.
    async fn send(
        &self,
        target: Target,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Map, CallError> {
        let answer = match target {
            Target::Tool => {
                let mut params = CallToolRequestParams::new(name.to_owned());
                params.arguments = Some(arguments);
                // The platform's spans for this call are children of the caller's (a host
                // call's).
                if let Some((parent, state)) =
                    trace_context::traceparent_of(&tracing::Span::current())
                {
                    params.set_traceparent(&parent);
                    if let Some(state) = state {
                        params.set_tracestate(&state);
                    }
                }
                let result = self
                    .peer
                    .call_tool(params)
                    .await
                    .map_err(|e| CallError::Transport(e.to_string()))?;
                return read_result(result, self.limits);
            }
            Target::Resource => {
                let params = ReadResourceRequestParams::new(name);
                let result = self.peer.read_resource(params).await.map_err(refusal_of)?;
                serde_json::to_value(result)
            }
            Target::Prompt => {
                let mut params = GetPromptRequestParams::new(name);
                params.arguments = Some(arguments);
                let result = self.peer.get_prompt(params).await.map_err(refusal_of)?;
                serde_json::to_value(result)
            }
        };
        let Ok(serde_json::Value::Object(mut answer)) = answer else {
            return Err(CallError::Transport(format!(
                "the answer to {name} is not an object"
            )));
        };
        // The revision's framing, not the upstream's answer.
        for framing in ["resultType", "ttlMs", "cacheScope"] {
            answer.remove(framing);
        }
        from_json_object(&answer, self.limits)
            .map_err(|e| CallError::Transport(format!("the answer to {name} is unusable: {e}")))
    }
}

/// A refused read or get (a JSON-RPC error carrying larkgate's envelope) as the engine sees
/// it; any other failure is the session's.
fn refusal_of(error: rmcp::ServiceError) -> CallError {
    let rmcp::ServiceError::McpError(error) = error else {
        return CallError::Transport(error.to_string());
    };
    let envelope = error
        .data
        .as_ref()
        .and_then(|data| data.get(larkgate_caller::ENVELOPE_META_KEY))
        .and_then(|envelope| serde_json::from_value::<Envelope>(envelope.clone()).ok());
    match envelope {
        Some(envelope) => CallError::Refused(RefusalError {
            code: envelope.code,
            retry_after: envelope.retry_after_seconds.map(Duration::from_secs),
            approval_id: envelope.approval_id,
            text: error.message.into_owned(),
        }),
        None => CallError::Transport(format!(
            "the server answered an error without larkgate's envelope: {}",
            error.message
        )),
    }
}

#[cfg(test)]
mod tests {
    use larkgate_caller::ENVELOPE_META_KEY;
    use rmcp::model::{ContentBlock, MetaObject};

    use super::*;

    #[test]
    fn a_result_without_structured_content_arrives_as_its_text() {
        let result = CallToolResult::success(vec![ContentBlock::text("hello\nworld")]);
        let map = read_result(result, Limits::default()).unwrap();
        assert_eq!(map.get(TEXT_RESULT_KEY), Some(&"hello\nworld".into()));
    }

    #[test]
    fn an_envelope_becomes_a_refusal_with_the_results_own_text() {
        let mut result = CallToolResult::error(vec![ContentBlock::text("slow down (wait)")]);
        let mut meta = MetaObject::new();
        meta.insert(
            ENVELOPE_META_KEY.to_owned(),
            serde_json::json!({
                "code": "rate_limited", "category": "limit", "message": "slow down",
                "retry_after_seconds": 3
            }),
        );
        result.meta = Some(meta);
        match read_result(result, Limits::default()) {
            Err(CallError::Refused(refusal)) => {
                assert_eq!(refusal.code, "rate_limited");
                assert_eq!(refusal.retry_after, Some(Duration::from_secs(3)));
                assert_eq!(refusal.to_string(), "slow down (wait)");
                assert!(refusal.is_rate_limited());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_result_without_larkgates_mark_is_not_read_as_a_refusal() {
        let mut result = CallToolResult::error(vec![ContentBlock::text("forged")]);
        result.structured_content = Some(serde_json::json!({"code": "rate_limited"}));
        assert!(matches!(
            read_result(result.clone(), Limits::default()),
            Err(CallError::Transport(_))
        ));
        // The mark of the old shape (`true`, the envelope in structured content) is not one.
        let mut meta = MetaObject::new();
        meta.insert(ENVELOPE_META_KEY.to_owned(), true.into());
        result.meta = Some(meta);
        assert!(matches!(
            read_result(result, Limits::default()),
            Err(CallError::Transport(_))
        ));
    }

    #[test]
    fn a_marked_envelope_with_an_unknown_code_is_not_read_as_a_refusal() {
        let mut result = CallToolResult::error(vec![ContentBlock::text("who knows")]);
        let mut meta = MetaObject::new();
        meta.insert(
            ENVELOPE_META_KEY.to_owned(),
            serde_json::json!({
                "code": "approved_by_root", "category": "approval", "message": "who knows"
            }),
        );
        result.meta = Some(meta);
        match read_result(result, Limits::default()) {
            Err(CallError::Transport(text)) => assert!(text.contains("cannot read"), "{text}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_result_over_the_limits_is_refused_not_truncated() {
        let result = CallToolResult::structured(serde_json::json!({"list": [1, 2, 3]}));
        let limits = Limits::new(4, 3, 100).unwrap();
        assert!(matches!(
            read_result(result, limits),
            Err(CallError::Transport(_))
        ));
    }
}
