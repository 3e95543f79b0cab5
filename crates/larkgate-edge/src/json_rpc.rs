//! JSON-RPC shape at the edge: malformed requests are answered in JSON-RPC, before rmcp
//! (which answers some of them with plain text), and the server keeps serving whatever it
//! receives.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::EdgeError;

/// The largest request body `/mcp` reads by default (the platform's own argument limit is
/// smaller).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// How much of a request body the edge reads, and how long it waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimits {
    /// The largest body read, in bytes; a larger one is answered 413, before it is read when
    /// its `Content-Length` says so.
    pub max_bytes: usize,
    /// How long the whole body may take to arrive.
    pub timeout: Duration,
}

/// The most of the transport's own plain-text refusal that is passed on.
const MAX_TRANSPORT_TEXT: usize = 300;

/// Answers malformed JSON-RPC in JSON-RPC, before rmcp (which answers some of it with plain
/// text): unparsable JSON is a parse error (-32700); a batch, a message that is not an object,
/// one without `"jsonrpc": "2.0"`, or one whose id is neither a string nor an integer rmcp
/// can answer is an invalid request (-32600). Unknown methods are left to rmcp (-32601). What
/// rmcp itself refuses in plain text (an unknown session, a missing header) reaches the client
/// as a JSON-RPC error too, with rmcp's status. The server keeps serving whatever it receives.
pub async fn json_rpc_shape(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    in_json_rpc(shaped(limits, request, next).await).await
}

/// A client error that rmcp answered in plain text, answered as a JSON-RPC error instead
/// (`application/json`, the same status, `"id": null`); every other answer as it is.
async fn in_json_rpc(response: Response) -> Response {
    let plain = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !response.status().is_client_error() || !plain {
        return response;
    }
    let status = response.status();
    let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let said = String::from_utf8_lossy(&text);
    let mut problem: String = said
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_TRANSPORT_TEXT)
        .collect();
    if problem.trim().is_empty() {
        problem = status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_ascii_lowercase();
    }
    EdgeError::Transport { status, problem }.into_response()
}

async fn shaped(limits: BodyLimits, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        super::access::adopt_trace(&request, None);
        return next.run(request).await;
    }
    let too_large = EdgeError::BodyTooLarge {
        limit: limits.max_bytes,
    };
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_bytes as u64) {
        return too_large.into_response();
    }
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, limits.max_bytes);
    let bytes = match tokio::time::timeout(limits.timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return too_large.into_response(),
        Err(_) => {
            return EdgeError::BodyTimeout {
                seconds: limits.timeout.as_secs().max(1),
            }
            .into_response();
        }
    };
    let (message, id) = match check_message(&bytes) {
        Ok(checked) => checked,
        Err(error) => return error.into_response(),
    };
    note_message(&parts, &message);
    // A 2025-11-25 session this request opens is entered in the registry under the
    // authenticated principal, if the caps allow it; a refusal answers the request's own id.
    let principal = parts
        .extensions
        .get::<std::sync::Arc<larkgate_platform::SessionIdentity>>()
        .map(|identity| identity.run.principal.id.clone());
    let request = Request::from_parts(parts, Body::from(bytes));
    super::access::adopt_trace(&request, message.pointer("/params/_meta"));
    let Some(principal) = principal else {
        return next.run(request).await;
    };
    let (response, refused) = super::sessions::opening_as(principal, next.run(request)).await;
    match refused {
        Some(cap) => EdgeError::TooManySessions { cap, id }.into_response(),
        None => response,
    }
}

/// Notes the message's method, id and tool in the request's exchange (for its access-log line
/// and span). A response the client sends (to a request of the server) has no method.
fn note_message(parts: &axum::http::request::Parts, message: &serde_json::Value) {
    let Some(exchange) = parts
        .extensions
        .get::<larkgate_platform::observe::Exchange>()
    else {
        return;
    };
    let id = match message.get("id") {
        Some(serde_json::Value::String(id)) => Some(id.clone()),
        Some(serde_json::Value::Number(id)) => Some(id.to_string()),
        _ => None,
    };
    let method = message
        .get("method")
        .and_then(|m| m.as_str())
        .unwrap_or("response");
    let tool = (method == "tools/call")
        .then(|| message.pointer("/params/name").and_then(|n| n.as_str()))
        .flatten();
    exchange.request(method, id.as_deref(), tool);
}

/// Checks one request body's JSON-RPC shape (see [`json_rpc_shape`]); returns the message and
/// the id to answer with (the request's own, when it is one JSON-RPC allows; else null).
pub fn check_message(bytes: &[u8]) -> Result<(serde_json::Value, serde_json::Value), EdgeError> {
    let message: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| EdgeError::NotJson(e.to_string()))?;
    let problem = match &message {
        serde_json::Value::Array(_) => {
            Some("batches are not supported; send one message per request")
        }
        serde_json::Value::Object(object) => {
            if object.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
                Some("a JSON-RPC message needs \"jsonrpc\": \"2.0\"")
            } else if object.contains_key("method") && !object["method"].is_string() {
                Some("\"method\" must be a string")
            } else if !object.contains_key("method")
                && !object.contains_key("result")
                && !object.contains_key("error")
            {
                Some("a JSON-RPC message needs a \"method\" (or a \"result\" or \"error\")")
            } else if object
                .get("id")
                .is_some_and(|id| !(id.is_null() || answerable_id(id)))
            {
                Some(
                    "\"id\" must be a string or an integer from -2^63 to 2^63-1 (not a \
                     fraction, nor a number beyond that range)",
                )
            } else {
                None
            }
        }
        _ => Some("a JSON-RPC message must be an object"),
    };
    let id = message
        .get("id")
        .filter(|id| answerable_id(id))
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    if let Some(problem) = problem {
        return Err(EdgeError::InvalidRequest { problem, id });
    }
    if let Some(problem) = params_problem(&message) {
        return Err(EdgeError::InvalidParams { problem, id });
    }
    Ok((message, id))
}

/// Whether `id` is one the MCP service can read and answer: exactly what rmcp's id type
/// takes (a string, or an integer that fits in 64 bits, also when written `1.0` or `1e2`).
/// Anything else (`1.5`, `2^64`, `1e999`) would be refused by rmcp as an unreadable body.
fn answerable_id(id: &serde_json::Value) -> bool {
    serde_json::from_value::<rmcp::model::NumberOrString>(id.clone()).is_ok()
}

/// What is wrong with a request's `params`, in the shapes every method shares (an object) and
/// in `tools/call`'s (a string `name`, an object of `arguments`): rmcp reads a request whose
/// params do not fit as an unknown method (-32601), which tells the caller the wrong thing.
fn params_problem(message: &serde_json::Value) -> Option<&'static str> {
    let params = message.get("params").filter(|p| !p.is_null())?;
    if !params.is_object() {
        return Some("\"params\" must be an object");
    }
    if message.get("method").and_then(|m| m.as_str()) == Some("tools/call") {
        if !params.get("name").is_some_and(|n| n.is_string()) {
            return Some("tools/call needs \"name\", the tool's name as a string");
        }
        if params
            .get("arguments")
            .is_some_and(|a| !(a.is_object() || a.is_null()))
        {
            return Some("tools/call \"arguments\" must be an object of the tool's arguments");
        }
    }
    None
}
