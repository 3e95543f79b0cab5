//! JSON-RPC shape at the edge: malformed requests are answered in JSON-RPC, before rmcp
//! (which answers some of them with plain text), and the server keeps serving whatever it
//! receives.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::EdgeError;

/// The largest request body `/mcp` reads (the platform's own argument limit is smaller).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// Answers malformed JSON-RPC in JSON-RPC, before rmcp (which answers some of it with plain
/// text): unparsable JSON is a parse error (-32700); a batch, a message that is not an object,
/// or one without `"jsonrpc": "2.0"` is an invalid request (-32600). Unknown methods are left
/// to rmcp (-32601). The server keeps serving whatever it receives.
pub async fn json_rpc_shape(request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return EdgeError::BodyTooLarge { limit: MAX_BODY }.into_response();
        }
    };
    let message: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            return EdgeError::NotJson(e.to_string()).into_response();
        }
    };
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
            } else {
                None
            }
        }
        _ => Some("a JSON-RPC message must be an object"),
    };
    if let Some(problem) = problem {
        let id = message
            .get("id")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        return EdgeError::InvalidRequest { problem, id }.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
