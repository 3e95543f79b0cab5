//! What an operator sees of each MCP request: one access-log line and one span.
//!
//! An [`Exchange`] follows one request through an edge: the HTTP edge opens it when a request
//! arrives and writes its line when the response's body ends (so an event stream's line says
//! how long the stream stayed open); `larkgate stdio` opens and writes it per request in
//! [`Observed`]. Each layer that learns something notes it: the authentication the principal,
//! the JSON-RPC layer the method, id and tool, the handler the outcome.
//!
//! The line ([`write_access_line`]) is an `info` event of the target [`ACCESS`]: time,
//! principal, method, tool, outcome code, HTTP status, duration, session and request id. It
//! never holds a token, arguments or a result.
//!
//! ## Threat model
//!
//! Everything but the principal and the outcome is written by the client: a tool name, a
//! request id, a session id. Each is cut to a bound and stripped of anything but visible
//! ASCII ([`bounded`]), so a request cannot make a line longer than a few hundred bytes, nor
//! forge a second line in a text log, nor carry terminal escape codes into it. A method that
//! is not one of MCP's is logged as `other`, so the field's values stay a small set.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ClientRequest, ServerResult};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, Service};
use tracing::field::Empty;

use crate::trace_context;

/// The target of access-log lines (`RUST_LOG=larkgate_access=off` turns them off).
pub const ACCESS: &str = "larkgate_access";

/// The longest tool name, request id or session id a line holds, in bytes.
pub const MAX_FIELD_BYTES: usize = 128;

/// `text` as a line may hold it: visible ASCII only (anything else is `?`), at most
/// [`MAX_FIELD_BYTES`] (then ending in `…`).
pub fn bounded(text: &str) -> Cow<'_, str> {
    let clean = text.len() <= MAX_FIELD_BYTES && text.bytes().all(|b| b.is_ascii_graphic());
    if clean {
        return Cow::Borrowed(text);
    }
    let mut out: String = text
        .chars()
        .take(MAX_FIELD_BYTES)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if text.chars().count() > MAX_FIELD_BYTES {
        out.push('…');
    }
    Cow::Owned(out)
}

/// MCP's request and notification methods: a line names one of these, or `other`.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    // A client's answer to a request of the server's.
    "response",
];

/// The method as a line names it.
pub fn method_name(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("other")
}

/// What is known of a request when its line is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Note {
    /// Who made it (after authentication).
    pub principal: Option<String>,
    /// The JSON-RPC method (see [`method_name`]); an HTTP edge's stream or session request
    /// without one is named by its HTTP method.
    pub method: Option<&'static str>,
    /// The tool, for `tools/call`, [`bounded`].
    pub tool: Option<String>,
    /// The JSON-RPC id, [`bounded`].
    pub request_id: Option<String>,
    /// How it ended: `ok`, a refusal's code, or a JSON-RPC error's name.
    pub outcome: Option<Cow<'static, str>>,
    /// Where it came from, over HTTP: the connection's peer, or behind a trusted proxy the
    /// address it forwarded.
    pub client: Option<std::net::IpAddr>,
}

/// One request's note and span, shared by the layers that serve it (cheap to clone).
#[derive(Clone, Debug)]
pub struct Exchange(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    span: tracing::Span,
    note: Mutex<Note>,
    started: Instant,
}

impl Exchange {
    /// A request arriving at an edge, with a new span for it (not yet entered, so its parent
    /// can still be set from the client's trace context).
    pub fn begin() -> Self {
        let span = tracing::info_span!(
            "mcp.request",
            otel.name = Empty,
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = Empty,
            gen_ai.tool.name = Empty,
            jsonrpc.request.id = Empty,
            mcp.session.id = Empty,
            enduser.id = Empty,
            larkgate.outcome = Empty,
            http.response.status_code = Empty,
            client.address = Empty,
        );
        Exchange(Arc::new(Inner {
            span,
            note: Mutex::new(Note::default()),
            started: Instant::now(),
        }))
    }

    /// The request's span.
    pub fn span(&self) -> &tracing::Span {
        &self.0.span
    }

    /// Time since the request arrived.
    pub fn elapsed(&self) -> Duration {
        self.0.started.elapsed()
    }

    fn note_mut(&self) -> std::sync::MutexGuard<'_, Note> {
        // A panic while holding the lock leaves only a note; keep using it.
        self.0.note.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What is known so far.
    pub fn note(&self) -> Note {
        self.note_mut().clone()
    }

    /// Whether an outcome has been noted.
    pub fn has_outcome(&self) -> bool {
        self.note_mut().outcome.is_some()
    }

    /// The authenticated principal.
    /// Noted once: over HTTP the edge's authentication notes it before the handler would.
    pub fn principal(&self, principal: &str) {
        let mut note = self.note_mut();
        if note.principal.is_none() {
            self.0.span.record("enduser.id", principal);
            note.principal = Some(principal.to_owned());
        }
    }

    /// Where the request came from (over HTTP). The last one noted stands: the connection's
    /// peer first, then the address a trusted proxy forwarded.
    pub fn client(&self, address: std::net::IpAddr) {
        let mut note = self.note_mut();
        // The same address again (no proxy in between) changes nothing.
        if note.client != Some(address) {
            note.client = Some(address);
            self.0.span.record("client.address", address.to_string());
        }
    }

    /// The request's JSON-RPC method, id and (for `tools/call`) tool, as the client sent them.
    pub fn request(&self, method: &str, id: Option<&str>, tool: Option<&str>) {
        let method = method_name(method);
        let tool = tool.map(|t| bounded(t).into_owned());
        let id = id.map(|i| bounded(i).into_owned());
        let span = &self.0.span;
        if !span.is_disabled() {
            span.record("mcp.method.name", method);
            match &tool {
                Some(tool) => {
                    span.record("otel.name", format!("{method} {tool}"));
                    span.record("gen_ai.tool.name", tool.as_str());
                }
                None => {
                    span.record("otel.name", method);
                }
            }
            if let Some(id) = &id {
                span.record("jsonrpc.request.id", id.as_str());
            }
        }
        let mut note = self.note_mut();
        note.method = Some(method);
        note.tool = tool;
        note.request_id = id;
    }

    /// A request that carries no JSON-RPC message: an HTTP `GET` (a session's event stream)
    /// or `DELETE` (the end of a session), named `method` in its line and `span_name` as a
    /// span.
    pub fn without_message(&self, method: &'static str, span_name: &'static str) {
        self.0.span.record("otel.name", span_name);
        let mut note = self.note_mut();
        if note.method.is_none() {
            note.method = Some(method);
        }
    }

    /// How the request ended. The first outcome noted stands: the handler knows more than the
    /// layers around it.
    pub fn outcome(&self, outcome: impl Into<Cow<'static, str>>) {
        let mut note = self.note_mut();
        if note.outcome.is_none() {
            let outcome = outcome.into();
            self.0.span.record("larkgate.outcome", outcome.as_ref());
            if outcome != "ok" {
                self.0.span.record("otel.status_code", "ERROR");
            }
            note.outcome = Some(outcome);
        }
    }

    /// The exchange a request handled by rmcp belongs to: the one the HTTP edge put into the
    /// request, or the one [`Observed`] opened.
    pub fn of(context: &RequestContext<RoleServer>) -> Option<&Exchange> {
        context.extensions.get::<Exchange>().or_else(|| {
            context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Exchange>())
        })
    }
}

/// The name a line gives a JSON-RPC error (`larkgate_caller::answer::name`).
pub fn rpc_error_name(code: i32) -> Cow<'static, str> {
    larkgate_caller::answer::name(i64::from(code))
}

/// Writes the access-log line of `exchange`, as served on `edge` (`http`, `stdio`), with the
/// HTTP status and the session id where there are such.
pub fn write_access_line(
    exchange: &Exchange,
    edge: &'static str,
    status: Option<u16>,
    session: Option<&str>,
) {
    // Read in place: the note is complete, and nothing else holds its lock now.
    let note = exchange.note_mut();
    let duration_ms = (exchange.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
    let session = session.map(bounded);
    if let Some(status) = status {
        exchange
            .span()
            .record("http.response.status_code", i64::from(status));
    }
    if let Some(session) = &session {
        exchange.span().record("mcp.session.id", session.as_ref());
    }
    let client = note
        .client
        .map_or_else(|| Cow::Borrowed("-"), |ip| Cow::Owned(ip.to_string()));
    tracing::info!(
        target: ACCESS,
        edge,
        client = client.as_ref(),
        principal = note.principal.as_deref().unwrap_or("-"),
        method = note.method.unwrap_or("-"),
        tool = note.tool.as_deref().unwrap_or("-"),
        outcome = note.outcome.as_deref().unwrap_or("-"),
        status,
        duration_ms,
        session = session.as_deref().unwrap_or("-"),
        request_id = note.request_id.as_deref().unwrap_or("-"),
        "access"
    );
}

/// An rmcp service that opens an exchange per request, adopting a `traceparent` from the
/// request's `_meta`, notes its outcome, and writes its line: for `larkgate stdio` and a
/// script run's session. (Over HTTP the edge opens the exchange and writes the line, and
/// notes the outcome of what the handler does not answer itself from the JSON-RPC answer.)
///
/// A script run's in-memory session is observed too ([`Observed::internal`]): its requests get
/// spans (children of the host call that made them, through the `traceparent` the session
/// puts in `_meta`) but no lines, since they are not requests of a client (the audit chain
/// records each call).
#[derive(Clone, Debug)]
pub struct Observed<S> {
    inner: S,
    edge: &'static str,
    lines: bool,
}

impl<S> Observed<S> {
    /// `inner`, served to clients on `edge` (`http`, `stdio`).
    pub fn edge(inner: S, edge: &'static str) -> Self {
        Observed {
            inner,
            edge,
            lines: true,
        }
    }

    /// `inner`, serving a script run's session: spans, no lines.
    pub fn internal(inner: S) -> Self {
        Observed {
            inner,
            edge: "script",
            lines: false,
        }
    }
}

/// The trace context a request carries in `_meta`: rmcp moves a decoded request's `_meta`
/// into the context; a request passed in memory keeps it in its params.
fn carried_context(
    request: &ClientRequest,
    context: &RequestContext<RoleServer>,
) -> Option<(String, Option<String>)> {
    let from = |meta: &rmcp::model::MetaObject| {
        meta.get_traceparent()
            .map(|p| (p.to_owned(), meta.get_tracestate().map(str::to_owned)))
    };
    from(&context.meta.0).or_else(|| match request {
        ClientRequest::CallToolRequest(call) => call.params.meta.as_ref().and_then(|m| from(&m.0)),
        _ => None,
    })
}

/// The tool a request calls, if it is `tools/call`.
fn called_tool(request: &ClientRequest) -> Option<&str> {
    match request {
        ClientRequest::CallToolRequest(call) => Some(call.params.name.as_ref()),
        _ => None,
    }
}

/// A JSON-RPC id as a line holds it.
fn id_text(id: &rmcp::model::RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    }
}

impl<S: Service<RoleServer>> Service<RoleServer> for Observed<S> {
    async fn handle_request(
        &self,
        request: ClientRequest,
        mut context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let (exchange, own) = match Exchange::of(&context) {
            Some(exchange) => (exchange.clone(), false),
            None => {
                let exchange = Exchange::begin();
                if let Some((parent, state)) = carried_context(&request, &context) {
                    trace_context::adopt(exchange.span(), &parent, state.as_deref());
                }
                exchange.request(
                    request.method(),
                    Some(&id_text(&context.id)),
                    called_tool(&request),
                );
                context.extensions.insert(exchange.clone());
                (exchange, true)
            }
        };
        // The handler enters the exchange's span for the work it does (see
        // `PlatformServer::call_tool`).
        let result = self.inner.handle_request(request, context).await;
        match &result {
            Ok(_) => exchange.outcome("ok"),
            Err(error) => exchange.outcome(rpc_error_name(error.code.0)),
        }
        if own && self.lines {
            write_access_line(&exchange, self.edge, None, None);
        }
        result
    }

    async fn handle_notification(
        &self,
        notification: rmcp::model::ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as rmcp::service::ServiceRole>::Info {
        self.inner.get_info()
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_written_fields_are_bounded_and_printable() {
        let cases: &[(&str, &str)] = &[
            ("kv_get", "kv_get"),
            ("github__create_issue", "github__create_issue"),
            ("a.b-c/d", "a.b-c/d"),
            // A forged second line, escape codes, spaces, non-ASCII.
            (
                "kv_get\nINFO access principal=admin",
                "kv_get?INFO?access?principal=admin",
            ),
            ("\u{1b}[31mred", "?[31mred"),
            ("two words", "two?words"),
            ("héllo", "h?llo"),
            ("", ""),
        ];
        for (sent, logged) in cases {
            assert_eq!(bounded(sent), *logged, "{sent:?}");
        }
        let long = "x".repeat(10_000);
        let shown = bounded(&long);
        assert_eq!(shown.chars().count(), MAX_FIELD_BYTES + 1);
        assert!(shown.ends_with('…'));
        let wide = "é".repeat(10_000);
        assert!(bounded(&wide).len() <= MAX_FIELD_BYTES + '…'.len_utf8());
    }

    #[test]
    fn methods_outside_mcp_are_other() {
        assert_eq!(method_name("tools/call"), "tools/call");
        assert_eq!(method_name("initialize"), "initialize");
        assert_eq!(method_name("tools/call\n"), "other");
        assert_eq!(method_name(&"x".repeat(5000)), "other");
    }

    #[test]
    fn the_first_outcome_stands_and_the_note_holds_what_was_learned() {
        let exchange = Exchange::begin();
        exchange.principal("alice");
        exchange.request("tools/call", Some("7"), Some("kv_get"));
        exchange.outcome("forbidden");
        exchange.outcome("ok");
        assert_eq!(
            exchange.note(),
            Note {
                principal: Some("alice".into()),
                method: Some("tools/call"),
                tool: Some("kv_get".into()),
                request_id: Some("7".into()),
                outcome: Some("forbidden".into()),
                client: None,
            }
        );
        assert_eq!(rpc_error_name(-32601), "method_not_found");
        assert_eq!(rpc_error_name(-32001), "rpc_error_-32001");
    }
}
