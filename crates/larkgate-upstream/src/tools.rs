//! Upstream tools as platform tools.
//!
//! An upstream's tool `t` joins the registry as `<alias>__t` (characters that LLM
//! function-calling APIs refuse, such as MCP's `.`, become `_`: see [`federated_name`]), its
//! `_meta` origin recording the alias and the original name (the way back). A name listed
//! twice, or one whose mapped name another tool has, drops that one tool, counted and
//! reported; the rest are federated. Its schemas and annotations are kept. It is
//! classified read-only — callable by drafts — only when the upstream declares
//! `readOnlyHint: true`; and an upstream configured `approval = "always"` (the default) gates
//! every one of its tools, read-only or not: a server's claims about its own tools never lower
//! the operator's gate.
//!
//! Failures are larkgate's own envelopes: `upstream_unavailable` (not connected, connection
//! lost), `timeout`, `limit_exceeded` (response bytes), `upstream_error` (a protocol error, or
//! the upstream's own `isError` result, whose text is quoted but never parsed — an upstream
//! cannot forge `rate_limited` or `approval_required`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use larkgate_binding::{Limits, Map, from_json_object};
use larkgate_platform::registry::{
    McpContent, Origin, Source, ToolAnnotations, ToolHandler, ToolOutput, ToolSpec, prefixed_name,
};
use larkgate_platform::{CallContext, Code, Refusal};
use rmcp::model::{CallToolResult, Tool};
use tracing::Instrument;

use crate::client::{UpstreamClient, UpstreamError};

/// Whether an upstream's tools need an approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Every call needs an approver's approval (the default).
    #[default]
    Always,
    /// Calls of the tools that do not declare themselves read-only need one: the operator's
    /// explicit choice to believe the upstream's `readOnlyHint`. The hint is part of each
    /// tool's pinned definition, so a tool that starts claiming to be read-only is
    /// quarantined until an admin reviews it, as for any change.
    Writes,
    /// The policy's approval patterns decide, as for any tool.
    Never,
}

impl Approval {
    /// Whether a call of a tool that does (`read_only`) or does not declare itself read-only
    /// needs an approval by this setting (the policy's own patterns apply besides).
    pub fn gates(self, read_only: bool) -> bool {
        match self {
            Approval::Always => true,
            Approval::Writes => !read_only,
            Approval::Never => false,
        }
    }

    /// The setting as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Always => "always",
            Approval::Writes => "writes",
            Approval::Never => "never",
        }
    }

    /// What it means, in a sentence for an operator.
    pub fn describe(self) -> &'static str {
        match self {
            Approval::Always => "every call needs an approver's approval",
            Approval::Writes => {
                "calls of the tools that do not declare themselves read-only need an approver's \
                 approval"
            }
            Approval::Never => "the policy's approval patterns decide",
        }
    }
}

/// The separator between an upstream's alias and its tool's name.
pub use larkgate_platform::registry::SEPARATOR;

/// What became of an upstream's listing.
#[derive(Debug, Default)]
pub struct Adoption {
    /// The tools as registered.
    pub specs: Vec<ToolSpec>,
    /// Original names dropped, with why: a name that makes no valid tool name even mapped
    /// (empty, too long), or one whose mapped name another tool of the listing has.
    pub invalid: Vec<(String, String)>,
}

impl Adoption {
    /// The names of the adopted tools its upstream's `approval` setting gates.
    pub fn gated(&self) -> Vec<String> {
        self.specs
            .iter()
            .filter(|spec| spec.requires_approval)
            .map(|spec| spec.name.clone())
            .collect()
    }
}

/// The MCP-facing name of upstream `alias`'s tool `original`: `<alias>__<original>`, with each
/// character outside `A-Z a-z 0-9 _ -` replaced by `_` — MCP allows `.` (and servers send
/// more), but the function-calling APIs of language models do not. The original name stays in
/// the tool's `_meta` origin, and calls reach the upstream under it. An error says why the
/// name cannot be used even so (empty, or longer than 128 characters).
pub fn federated_name(alias: &str, original: &str) -> Result<String, String> {
    let mapped: String = original
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = prefixed_name(alias, &mapped);
    if original.is_empty() {
        return Err("it has no name".to_owned());
    }
    larkgate_platform::registry::check_tool_name(&name)?;
    Ok(name)
}

/// `tools` with each name once: a name listed again is dropped (its first definition is the
/// one used), and reported with why.
pub fn distinct(tools: Vec<Tool>) -> (Vec<Tool>, Vec<(String, String)>) {
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::with_capacity(tools.len());
    let mut dropped = Vec::new();
    for tool in tools {
        if seen.insert(tool.name.to_string()) {
            kept.push(tool);
        } else {
            dropped.push((
                tool.name.to_string(),
                "the upstream lists this name more than once; its first definition is used"
                    .to_owned(),
            ));
        }
    }
    (kept, dropped)
}

/// The registry entries for an upstream's tools (names given once, see [`distinct`]). A name
/// that is valid as it is keeps it; a mapped name (see [`federated_name`]) that another tool
/// already has is dropped, whatever the order of the listing, so a server cannot push a tool
/// out by listing a look-alike first.
pub fn adopt(alias: &str, tools: &[Tool], approval: Approval) -> Adoption {
    let mut adoption = Adoption::default();
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    let exact = |tool: &&Tool| {
        federated_name(alias, &tool.name).ok() == Some(prefixed_name(alias, &tool.name))
    };
    let (unmapped, mapped): (Vec<&Tool>, Vec<&Tool>) = tools.iter().partition(exact);
    for tool in unmapped.into_iter().chain(mapped) {
        let original = tool.name.to_string();
        let name = match federated_name(alias, &original) {
            Ok(name) => name,
            Err(reason) => {
                tracing::warn!(alias, tool = %original, %reason, "an upstream tool was dropped");
                adoption.invalid.push((original, reason));
                continue;
            }
        };
        if let Some(other) = taken.get(&name) {
            let reason = format!("its name maps to {name}, which the tool {other:?} has");
            tracing::warn!(alias, tool = %original, %reason, "an upstream tool was dropped");
            adoption.invalid.push((original, reason));
            continue;
        }
        taken.insert(name.clone(), original.clone());
        let declared = tool.annotations.as_ref();
        let annotations = ToolAnnotations {
            read_only: declared.and_then(|a| a.read_only_hint),
            destructive: declared.and_then(|a| a.destructive_hint),
            idempotent: declared.and_then(|a| a.idempotent_hint),
            open_world: declared.and_then(|a| a.open_world_hint),
        };
        let origin = Origin {
            source: Source::Upstream,
            alias: Some(alias.to_owned()),
            original_name: original,
        };
        adoption.specs.push(ToolSpec {
            title: tool
                .title
                .clone()
                .or_else(|| declared.and_then(|a| a.title.clone())),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            input_schema: (*tool.input_schema).clone(),
            output_schema: tool.output_schema.as_ref().map(|s| (**s).clone()),
            read_only: annotations.read_only == Some(true),
            annotations,
            requires_approval: approval.gates(annotations.read_only == Some(true)),
            definition: Some(Arc::new(tool.clone())),
            ..ToolSpec::new(name, origin)
        });
    }
    adoption
}

/// The connection a federated upstream's tools call through; absent while it is down.
///
/// Whether an upstream is up is this and nothing else: `upstream list`, the console and
/// `larkgate_upstream_up` read it, calls of a down upstream are refused here at once, and
/// each change (connected, down, up again, down for another reason) is logged here, once.
#[derive(Debug, Default)]
pub struct Link {
    alias: String,
    state: RwLock<LinkState>,
    /// The resource subscriptions held at the upstream, whichever connection it has.
    watches: Arc<crate::watches::Watches>,
}

#[derive(Debug, Default)]
struct LinkState {
    client: Option<Arc<UpstreamClient>>,
    /// Why it is down (URLs without their secrets); `None` before the first try and while up.
    down_because: Option<String>,
}

impl Link {
    /// The link of upstream `alias`, with nothing connected yet.
    pub fn new(alias: &str) -> Arc<Self> {
        Arc::new(Link {
            alias: alias.to_owned(),
            state: RwLock::default(),
            watches: Arc::default(),
        })
    }

    fn state(&self) -> std::sync::RwLockWriteGuard<'_, LinkState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Uses `client` from now on.
    pub fn connected(&self, client: Arc<UpstreamClient>) {
        self.watches.attach(&client);
        let mut state = self.state();
        let was = state.client.replace(client);
        let before = state.down_because.take();
        drop(state);
        match (was, before) {
            (Some(_), _) => {}
            (None, None) => tracing::info!(alias = %self.alias, "an upstream is connected"),
            (None, Some(why)) => tracing::info!(
                alias = %self.alias,
                was_down_because = %why,
                "an upstream is up again"
            ),
        }
    }

    /// The resource subscriptions held at the upstream.
    pub fn watches(&self) -> &Arc<crate::watches::Watches> {
        &self.watches
    }

    /// Marks the upstream down, for `why`, logging it when that is news: it was up, or it is
    /// down for another reason than before (a retry that fails as the last one did is not).
    pub fn down(&self, why: String) {
        let why = crate::redact::urls(&why);
        let mut state = self.state();
        let was = state.client.take();
        let before = state.down_because.replace(why.clone());
        drop(state);
        if was.is_some() {
            tracing::warn!(alias = %self.alias, %why, "an upstream went down");
        } else if before.as_deref() != Some(why.as_str()) {
            tracing::warn!(alias = %self.alias, %why, "an upstream is down");
        } else {
            tracing::debug!(alias = %self.alias, %why, "an upstream is still down");
        }
    }

    /// Marks the upstream down for `why` if `client` is still the one in use (a call that
    /// failed on a connection already replaced says nothing of the new one); whether it did.
    pub fn lost(&self, client: &Arc<UpstreamClient>, why: String) -> bool {
        let current = self.client();
        if !current.is_some_and(|current| Arc::ptr_eq(&current, client)) {
            return false;
        }
        self.down(why);
        true
    }

    /// Takes the client away without a word in the log: the upstream was removed, or larkgate
    /// is stopping.
    pub fn close(&self, why: &str) -> Option<Arc<UpstreamClient>> {
        let mut state = self.state();
        state.down_because = Some(why.to_owned());
        state.client.take()
    }

    /// The client, when connected.
    pub fn client(&self) -> Option<Arc<UpstreamClient>> {
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .client
            .clone()
    }

    /// Why it is down, when it is.
    pub fn down_because(&self) -> Option<String> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        match state.client {
            Some(_) => None,
            None => state.down_because.clone(),
        }
    }
}

/// One upstream tool's handler.
#[derive(Debug)]
pub struct UpstreamTool {
    alias: String,
    original: String,
    link: Arc<Link>,
    limits: Limits,
}

impl UpstreamTool {
    /// The handler for `spec` (from [`adopt`]) calling through `link`.
    pub fn new(spec: &ToolSpec, link: Arc<Link>, limits: Limits) -> Self {
        UpstreamTool {
            alias: spec.origin.alias.clone().unwrap_or_default(),
            original: spec.origin.original_name.clone(),
            link,
            limits,
        }
    }
}

/// Handlers for `specs`, keyed for [`larkgate_platform::registry::ToolTable::replace_upstream`].
pub fn handlers(
    specs: Vec<ToolSpec>,
    link: &Arc<Link>,
    limits: Limits,
) -> Vec<(ToolSpec, Arc<dyn ToolHandler>)> {
    specs
        .into_iter()
        .map(|spec| {
            let handler: Arc<dyn ToolHandler> =
                Arc::new(UpstreamTool::new(&spec, Arc::clone(link), limits));
            (spec, handler)
        })
        .collect()
}

#[async_trait::async_trait]
impl ToolHandler for UpstreamTool {
    async fn call(&self, context: &CallContext, arguments: Map) -> Result<Map, Refusal> {
        self.call_for_client(context, arguments)
            .await
            .map(|output| output.value)
    }

    /// The upstream's answer goes to MCP clients as it came (every content kind, text as
    /// text, its structured content); scripts get its value ([`result_map`]).
    async fn call_for_client(
        &self,
        context: &CallContext,
        arguments: Map,
    ) -> Result<ToolOutput, Refusal> {
        let name = prefixed_name(&self.alias, &self.original);
        let client = connected(&self.link, &self.alias, &name)?;
        // The canonical form: what an approver was shown is what the upstream gets (a caller's
        // `1.0` arrives as `1`, as the approval showed it), and every caller's encoding of the
        // same arguments reaches the upstream alike.
        let arguments = larkgate_binding::canonical_map_to_json(&arguments);
        // The upstream's own spans join this trace: the client sends this span's context.
        let span = tracing::info_span!(
            "upstream.call",
            otel.name = format!("tools/call {}", self.original),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = %self.original,
            larkgate.upstream = %self.alias,
        );
        // The caller hears the upstream's progress; a caller's cancellation reaches it.
        let called = client
            .call_tool_in(&self.original, arguments, &context.conversation)
            .instrument(span);
        let result = match called.await {
            Some(Ok(result)) => result,
            Some(Err(error)) => {
                return Err(failed(&self.link, &self.alias, &name, &client, error).await);
            }
            None => return Err(cancelled(&name)),
        };
        let value = result_map(&name, &result, self.limits)?;
        Ok(ToolOutput {
            value,
            content: Some(McpContent {
                blocks: result.content,
                // An object only: what every protocol revision's clients accept (2025-11-25
                // allows nothing else). The text of another value is in the content, as the
                // specification asks of servers.
                structured: result.structured_content.filter(|value| value.is_object()),
            }),
        })
    }
}

/// The refusal of a request to `name` (a tool, resource or prompt of upstream `alias`) that
/// failed with `error` on `client`. When the connection is gone or its credentials are no
/// longer accepted, the upstream is marked down first, so that it is reconnected (and `upstream
/// list` says why), with how a command-launched server ended when it did.
pub(crate) async fn failed(
    link: &Link,
    alias: &str,
    name: &str,
    client: &Arc<UpstreamClient>,
    error: UpstreamError,
) -> Refusal {
    let refused = matches!(error, UpstreamError::Unauthorized);
    if client.is_closed() || refused || error.is_unreachable() {
        let mut ended = client.process_ended();
        for _ in 0..10 {
            if ended.is_some() || !client.is_command() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            ended = client.process_ended();
        }
        let why = match ended {
            Some(ended) => ended,
            None if refused => error.to_string(),
            None => error.why_down(),
        };
        link.lost(client, why.clone());
        if !matches!(error, UpstreamError::TooLarge { .. }) {
            return down_refusal(alias, name, &why);
        }
    }
    refusal(alias, name, error)
}

/// The answer to a call of `name` its caller cancelled (the upstream was told): nobody reads
/// it, but the audit records the call's outcome as this.
fn cancelled(name: &str) -> Refusal {
    Refusal::new(
        Code::Timeout,
        format!("{name}: the caller cancelled the call, and the upstream was told"),
    )
}

/// The client of `link` for a request to `name`, or the refusal of a down upstream.
pub(crate) fn connected(
    link: &Link,
    alias: &str,
    name: &str,
) -> Result<Arc<UpstreamClient>, Refusal> {
    link.client().ok_or_else(|| {
        let why = link
            .down_because()
            .unwrap_or_else(|| "not connected yet".to_owned());
        down_refusal(alias, name, &why)
    })
}

fn refusal(alias: &str, name: &str, error: UpstreamError) -> Refusal {
    match error {
        UpstreamError::Timeout(after) => Refusal::new(
            Code::Timeout,
            format!("{name}: the upstream {alias:?} did not answer within {after:?}"),
        ),
        UpstreamError::TooLarge { limit } => Refusal::new(
            Code::LimitExceeded,
            format!(
                "{name}: the upstream's response exceeded the response-bytes limit ({limit} bytes)"
            ),
        ),
        // (`Unauthorized` marks the upstream down before it gets here.)
        UpstreamError::InsufficientScope { .. } | UpstreamError::Unauthorized => Refusal::new(
            Code::UpstreamUnavailable,
            format!("{name}: the upstream {alias:?} refused it: {error}"),
        )
        .with_hint(UNAVAILABLE_HINT),
        UpstreamError::Unavailable(why) | UpstreamError::Config(why) => Refusal::logged(
            Code::UpstreamUnavailable,
            format_args!("{name}: the upstream {alias:?} is unavailable"),
            crate::redact::urls(&why),
        )
        .with_hint(UNAVAILABLE_HINT),
        // The upstream's own words, as for an `isError` result (URLs without their secrets).
        UpstreamError::Protocol(why) => Refusal::new(
            Code::UpstreamError,
            format!(
                "{name}: the upstream {alias:?} answered with an error: {}",
                crate::redact::urls(&why)
            ),
        ),
    }
}

/// What a caller is told of why an upstream is down: the cause when it is one larkgate put in
/// plain words (see [`crate::client::plain_cause`] and [`crate::command`]), without a
/// server's own last words on stderr (they may hold anything); otherwise only that it cannot be
/// reached. The whole cause is in the log and in `larkgate upstream list`.
pub fn told(why: &str) -> &str {
    const PLAIN: &[&str] = &[
        "the connection was refused",
        "its host name could not be resolved",
        "the TLS connection failed",
        "the server answered 401",
        "the server answered 403",
        "nobody has signed in to it yet",
        "OAuth credentials need a key",
        "the server did not answer in time",
        "the server closed the connection",
        "the server did not complete the MCP handshake",
        "the process exited with status",
        "the process was killed by a signal",
        "the program was not found",
        "larkgate is shutting down",
        "not connected yet",
    ];
    let why = why
        .strip_prefix("the upstream is unavailable: ")
        .unwrap_or(why);
    let why = why.split("; its last line on stderr").next().unwrap_or(why);
    if PLAIN.iter().any(|plain| why.starts_with(plain)) {
        why
    } else {
        "it cannot be reached"
    }
}

/// The refusal of a call to `name` while upstream `alias` is down for `why`: the cause as
/// [`told`] to the caller, the whole of it in the log.
fn down_refusal(alias: &str, name: &str, why: &str) -> Refusal {
    Refusal::logged(
        Code::UpstreamUnavailable,
        format_args!(
            "{name}: the upstream {alias:?} is unavailable: {}",
            told(why)
        ),
        why,
    )
    .with_hint(UNAVAILABLE_HINT)
}

/// What a caller of a down upstream is told to expect.
const UNAVAILABLE_HINT: &str = "larkgate reconnects by itself; the operator finds the cause in \
     the log under the correlation id, and the upstream's state with `larkgate upstream list`";

/// A successful result as a map: the structured content when there is an object of it, else
/// the text content under `text`. An `isError` result becomes larkgate's `upstream_error`.
fn result_map(name: &str, result: &CallToolResult, limits: Limits) -> Result<Map, Refusal> {
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    if result.is_error == Some(true) {
        // Whole: the model recovers from what the upstream said. The envelope bounds what it
        // carries itself, with a marked cut (its length and hash), never a silent one.
        return Err(Refusal::new(
            Code::UpstreamError,
            format!("{name} failed upstream: {text}"),
        ));
    }
    if let Some(structured) = result
        .structured_content
        .as_ref()
        .and_then(|v| v.as_object())
    {
        let value = from_json_object(structured, limits).map_err(|e| {
            Refusal::new(
                Code::UpstreamError,
                format!("{name}: the upstream's structured result cannot be used: {e}"),
            )
        })?;
        return with_content(name, value, result, limits);
    }
    let mut map = BTreeMap::new();
    map.insert(larkgate_caller::TEXT_RESULT_KEY.to_owned(), text.into());
    with_content(name, map, result, limits)
}

/// `value` with the result's content blocks when some are not text (see
/// [`larkgate_caller::CONTENT_RESULT_KEY`]): what a script sees of the same answer.
fn with_content(
    name: &str,
    mut value: Map,
    result: &CallToolResult,
    limits: Limits,
) -> Result<Map, Refusal> {
    let blocks: Vec<serde_json::Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .collect();
    larkgate_caller::add_content(&mut value, &blocks, limits).map_err(|e| {
        Refusal::new(
            Code::UpstreamError,
            format!("{name}: the upstream's content cannot be used: {e}"),
        )
    })?;
    Ok(value)
}
