//! The outermost layer of `/mcp`: every request, refused at the edge or served, gets one
//! access-log line and one span ([`larkgate_platform::observe`]).
//!
//! The layer opens the request's [`Exchange`] and puts it into the request's extensions; the
//! layers inside note what they learn (the principal, the JSON-RPC method, id and tool, the
//! outcome). The line is written when the response's body has been sent or dropped, so a
//! call's line comes after its result, and an event stream's line says how long it was open.
//! A refusal at the edge names its code ([`EdgeOutcome`], set by [`super::EdgeError`]).
//! The line is an event of the target [`larkgate_platform::observe::ACCESS`]: whoever
//! installs the log decides whether it is written (`larkgate` follows `[server] access_log`,
//! which a reload changes).
//!
//! The client's trace context is adopted after authentication, by [`adopt_trace`]: a caller
//! without a valid token cannot place its requests in a trace of its choosing.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use larkgate_platform::conversation::ResponseGone;
use larkgate_platform::observe::{Exchange, rpc_error_name, write_access_line};
use larkgate_platform::trace_context;

/// The code of a refusal at the edge, put into the response by [`super::EdgeError`].
#[derive(Clone, Copy, Debug)]
pub struct EdgeOutcome(pub &'static str);

/// The layer. See the module documentation.
pub async fn observe(mut request: Request, next: Next) -> Response {
    let exchange = Exchange::begin();
    match *request.method() {
        axum::http::Method::GET => exchange.without_message("GET", "GET /mcp"),
        axum::http::Method::DELETE => exchange.without_message("DELETE", "DELETE /mcp"),
        _ => {}
    }
    let session = session_id(request.headers());
    // The connection's peer; the address check notes the forwarded one behind a trusted proxy.
    if let Some(peer) = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
    {
        exchange.client(peer.0.ip());
    }
    request.extensions_mut().insert(exchange.clone());
    // Cancelled when the response's body is dropped: sent whole, or the client went away.
    let gone = ResponseGone::default();
    request.extensions_mut().insert(gone.clone());
    let response = next.run(request).await;
    if let Some(EdgeOutcome(code)) = response.extensions().get::<EdgeOutcome>() {
        exchange.outcome(*code);
    }
    let status = response.status();
    // An `initialize` is answered with the session it opened.
    let session = session.or_else(|| session_id(response.headers()));
    let (parts, mut body) = response.into_parts();
    if !exchange.has_outcome() {
        body = note_answer(&exchange, &parts, body).await;
    }
    let ends = LineAtEnd {
        exchange,
        status: status.as_u16(),
        session,
    };
    Response::from_parts(
        parts,
        Body::new(Logged {
            body,
            _line: ends,
            _gone: GoneAtEnd(gone),
        }),
    )
}

/// The largest JSON answer read for its outcome.
const MAX_PEEK_BYTES: u64 = 64 * 1024;

/// Notes the outcome of a request the handler did not answer itself (`initialize`, `ping`,
/// a method larkgate does not serve) from its JSON-RPC answer: an error's name, else `ok`. A
/// JSON answer whose whole length is known and small is read for it (and passed on
/// unchanged); an event stream or anything else is `ok`, or `http_<status>` for an error
/// status.
async fn note_answer(exchange: &Exchange, parts: &axum::http::response::Parts, body: Body) -> Body {
    use http_body::Body as _;
    let json = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let small = body
        .size_hint()
        .exact()
        .is_some_and(|n| n <= MAX_PEEK_BYTES);
    let status = parts.status;
    let fallback = || -> std::borrow::Cow<'static, str> {
        if status.is_client_error() || status.is_server_error() {
            format!("http_{}", status.as_u16()).into()
        } else {
            "ok".into()
        }
    };
    if !(json && small) {
        exchange.outcome(fallback());
        return body;
    }
    let bytes = match axum::body::to_bytes(body, MAX_PEEK_BYTES as usize).await {
        Ok(bytes) => bytes,
        // The client gets the same failure it would have without the peek.
        Err(error) => {
            return Body::from_stream(futures::stream::once(async { Err::<Bytes, _>(error) }));
        }
    };
    let code = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|answer| answer.pointer("/error/code").and_then(|c| c.as_i64()));
    match code {
        Some(code) => exchange.outcome(rpc_error_name(i32::try_from(code).unwrap_or(i32::MIN))),
        None => exchange.outcome(fallback()),
    }
    Body::from(bytes)
}

/// Makes the request's span a child of the client's trace context: the `traceparent` header,
/// else (for a JSON-RPC request) its `_meta.traceparent`. Called once the caller is
/// authenticated, before the span is first entered.
pub fn adopt_trace(request: &Request, meta: Option<&serde_json::Value>) {
    let Some(exchange) = request.extensions().get::<Exchange>() else {
        return;
    };
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let from_meta = |name: &str| {
        meta.and_then(|m| m.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let (parent, state) = match header(trace_context::TRACEPARENT) {
        Some(parent) => (Some(parent), header(trace_context::TRACESTATE)),
        None => (
            from_meta(trace_context::TRACEPARENT),
            from_meta(trace_context::TRACESTATE),
        ),
    };
    if let Some(parent) = parent {
        trace_context::adopt(exchange.span(), &parent, state.as_deref());
    }
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Writes the line when dropped: when the body has been sent, or the client went away.
struct LineAtEnd {
    exchange: Exchange,
    status: u16,
    session: Option<String>,
}

impl Drop for LineAtEnd {
    fn drop(&mut self) {
        write_access_line(
            &self.exchange,
            "http",
            Some(self.status),
            self.session.as_deref(),
        );
    }
}

/// A response body that writes its line when it ends (when `_line` is dropped with it), and
/// says its client's end is gone then ([`ResponseGone`]).
struct Logged {
    body: Body,
    _line: LineAtEnd,
    _gone: GoneAtEnd,
}

/// Says the response's client end is gone when dropped.
struct GoneAtEnd(ResponseGone);

impl Drop for GoneAtEnd {
    fn drop(&mut self) {
        self.0.0.cancel();
    }
}

impl http_body::Body for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
