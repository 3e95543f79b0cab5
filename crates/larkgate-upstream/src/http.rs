//! The HTTP client an upstream's MCP transport runs on.
//!
//! Built here and only here, from a [`UrlGuard`], so no caller can hand the transport a client
//! whose redirects or name resolution bypass the guard:
//!
//! - **No proxies.** `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` are ignored: a proxy would resolve
//!   and connect on our behalf, out of the guard's sight.
//! - **Names resolve only through the guard** ([`GuardedResolver`]): the client connects to the
//!   addresses the guard vetted, so DNS rebinding between check and connect is impossible.
//! - **Redirects stay within the upstream's origin** (scheme, host and port), at most
//!   [`MAX_REDIRECTS`] hops, each re-checked by the guard. A cross-origin redirect is refused
//!   rather than followed with stripped headers: an MCP endpoint has no business sending its
//!   clients elsewhere, and refusing means credentials, custom headers and `Mcp-Session-Id`
//!   can never reach another origin.
//! - **Every request's URL passes the guard** before it is sent ([`GuardedHttp`]).
//! - **Responses are capped**: a JSON body, an error body and every SSE event by rmcp's limits
//!   (set from the upstream's byte limit), and a whole SSE stream by [`GuardedHttp`] itself.
//!   Exceeding a cap is an error that names the limit; nothing is parsed from a truncated body.
//! - **Log messages say which request's stream they came on** ([`mark_logs`]): the request's
//!   id under [`REQUEST_META_KEY`] in their `_meta`, so that they reach the call of that
//!   request and no other. The server's own value under that key is replaced, or removed on
//!   a stream that belongs to no request, so no server can send a message to another call.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use larkgate_platform::trace_context;
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use crate::guard::{GuardError, GuardedResolver, Resolve, UrlGuard};

/// Where a log message's `_meta` says the request whose response stream it came on (see
/// [`mark_logs`]).
pub(crate) const REQUEST_META_KEY: &str = "larkgate/request";

/// Redirect hops followed for one request.
pub const MAX_REDIRECTS: usize = 10;

/// Why the guarded client refused or failed a request.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL guard refused the target.
    #[error(transparent)]
    Guard(#[from] GuardError),
    /// An SSE stream went over the upstream's response byte limit.
    #[error("the upstream's response exceeded the response-bytes limit of {limit} bytes")]
    ResponseTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The HTTP exchange failed.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Which redirects a guarded client follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirects {
    /// Within `base`'s origin, at most [`MAX_REDIRECTS`] hops, each re-checked by the guard.
    SameOrigin,
    /// None: a redirect is returned to the caller as it is.
    None,
}

/// Builds the guarded reqwest client for an upstream at `base`.
pub fn build_client(
    guard: Arc<UrlGuard>,
    resolver: Arc<dyn Resolve>,
    base: &Url,
    connect_timeout: Duration,
) -> Result<reqwest::Client, HttpError> {
    build_client_with(
        guard,
        resolver,
        base,
        connect_timeout,
        Redirects::SameOrigin,
    )
}

/// Builds a guarded reqwest client for requests to `base`'s origin, following `redirects`.
pub fn build_client_with(
    guard: Arc<UrlGuard>,
    resolver: Arc<dyn Resolve>,
    base: &Url,
    connect_timeout: Duration,
    redirects: Redirects,
) -> Result<reqwest::Client, HttpError> {
    guard.check_url(base)?;
    let origin = base.origin();
    let port = base.port_or_known_default().unwrap_or(80);
    let redirect_guard = guard.clone();
    let policy = match redirects {
        Redirects::None => reqwest::redirect::Policy::none(),
        Redirects::SameOrigin => same_origin(origin, redirect_guard),
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(policy)
        .dns_resolver(Arc::new(GuardedResolver::new(guard, resolver, port)))
        .connect_timeout(connect_timeout)
        .build()?;
    Ok(client)
}

/// Follows redirects within `origin` only, each hop re-checked by `guard`.
fn same_origin(origin: url::Origin, redirect_guard: Arc<UrlGuard>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let next = attempt.url().clone();
        if next.origin() != origin {
            return attempt.error(format!(
                "a redirect to another origin ({}) is refused: larkgate follows redirects only \
                 within the upstream's own scheme, host and port",
                next.origin().ascii_serialization()
            ));
        }
        match redirect_guard.check_url(&next) {
            Ok(_) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    })
}

/// rmcp's reqwest transport client behind the URL guard, with a cap on whole SSE streams.
#[derive(Clone, Debug)]
pub struct GuardedHttp {
    client: reqwest::Client,
    guard: Arc<UrlGuard>,
    max_stream_bytes: usize,
    /// Set when a stream went over the cap. rmcp reports a broken stream only as a closed
    /// transport; this lets the client name the limit.
    overflowed: Arc<std::sync::atomic::AtomicBool>,
}

impl GuardedHttp {
    /// Wraps a client from [`build_client`]. Crate-private: no caller can hand the transport
    /// a client built any other way.
    pub(crate) fn new(
        client: reqwest::Client,
        guard: Arc<UrlGuard>,
        max_stream_bytes: usize,
    ) -> Self {
        GuardedHttp {
            client,
            guard,
            max_stream_bytes,
            overflowed: Arc::default(),
        }
    }

    /// Set once any response stream went over the byte cap.
    pub(crate) fn overflowed(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.overflowed)
    }

    fn check(&self, uri: &str) -> Result<(), StreamableHttpError<HttpError>> {
        let url = Url::parse(uri).map_err(|e| {
            StreamableHttpError::Client(HttpError::Guard(GuardError::Malformed {
                url: uri.to_owned(),
                reason: e.to_string(),
            }))
        })?;
        self.guard
            .check_url(&url)
            .map(|_| ())
            .map_err(|e| StreamableHttpError::Client(HttpError::Guard(e)))
    }

    /// Counts a stream's bytes and ends it with an error past the cap.
    fn capped(
        &self,
        stream: rmcp::transport::common::client_side_sse::BoxedSseResponse,
    ) -> rmcp::transport::common::client_side_sse::BoxedSseResponse {
        let limit = self.max_stream_bytes;
        let overflowed = Arc::clone(&self.overflowed);
        let seen = Arc::new(AtomicUsize::new(0));
        let mut over = false;
        stream
            .map(move |item| {
                let sse = item?;
                let size = sse.data.as_ref().map_or(0, String::len)
                    + sse.event.as_ref().map_or(0, String::len)
                    + sse.id.as_ref().map_or(0, String::len);
                let total = seen.fetch_add(size, Ordering::Relaxed) + size;
                if total > limit {
                    overflowed.store(true, Ordering::SeqCst);
                    return Err(sse_stream::Error::Body(Box::new(
                        HttpError::ResponseTooLarge { limit },
                    )));
                }
                Ok(sse)
            })
            .take_while(move |item| {
                let keep = !over;
                over = over || item.is_err();
                std::future::ready(keep)
            })
            .boxed()
    }
}

fn convert(error: StreamableHttpError<reqwest::Error>) -> StreamableHttpError<HttpError> {
    match error {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(HttpError::Http(e)),
        StreamableHttpError::Sse(e) => StreamableHttpError::Sse(e),
        StreamableHttpError::Io(e) => StreamableHttpError::Io(e),
        StreamableHttpError::HttpStatus(e) => StreamableHttpError::HttpStatus(e),
        StreamableHttpError::UnexpectedEndOfStream => StreamableHttpError::UnexpectedEndOfStream,
        StreamableHttpError::UnexpectedServerResponse(e) => {
            StreamableHttpError::UnexpectedServerResponse(e)
        }
        StreamableHttpError::ResponseBodyTooLarge { max_size } => {
            StreamableHttpError::ResponseBodyTooLarge { max_size }
        }
        StreamableHttpError::UnexpectedContentType(e) => {
            StreamableHttpError::UnexpectedContentType(e)
        }
        StreamableHttpError::ServerDoesNotSupportSse => {
            StreamableHttpError::ServerDoesNotSupportSse
        }
        StreamableHttpError::ServerDoesNotSupportDeleteSession => {
            StreamableHttpError::ServerDoesNotSupportDeleteSession
        }
        StreamableHttpError::TokioJoinError(e) => StreamableHttpError::TokioJoinError(e),
        StreamableHttpError::Deserialize(e) => StreamableHttpError::Deserialize(e),
        StreamableHttpError::TransportChannelClosed => StreamableHttpError::TransportChannelClosed,
        StreamableHttpError::MissingSessionIdInResponse => {
            StreamableHttpError::MissingSessionIdInResponse
        }
        StreamableHttpError::AuthRequired(e) => StreamableHttpError::AuthRequired(e),
        StreamableHttpError::InsufficientScope(e) => StreamableHttpError::InsufficientScope(e),
        StreamableHttpError::ReservedHeaderConflict(e) => {
            StreamableHttpError::ReservedHeaderConflict(e)
        }
        StreamableHttpError::SessionExpired => StreamableHttpError::SessionExpired,
        StreamableHttpError::SessionRecoveryTimeout => StreamableHttpError::SessionRecoveryTimeout,
        StreamableHttpError::ReinitializationFailed(e) => {
            StreamableHttpError::ReinitializationFailed(e)
        }
        StreamableHttpError::ControlRequestTimeout => StreamableHttpError::ControlRequestTimeout,
        other => StreamableHttpError::UnexpectedServerResponse(other.to_string().into()),
    }
}

/// A tool call's trace context, which [`crate::client::UpstreamClient::call_tool`] put in its
/// `_meta`, as the W3C headers too: servers and proxies that read only the headers join the
/// trace as well. Values that are not valid header text are left out.
fn trace_headers(message: &ClientJsonRpcMessage, headers: &mut HashMap<HeaderName, HeaderValue>) {
    let ClientJsonRpcMessage::Request(request) = message else {
        return;
    };
    let rmcp::model::ClientRequest::CallToolRequest(call) = &request.request else {
        return;
    };
    let Some(meta) = &call.params.meta else {
        return;
    };
    let fields = [
        (trace_context::TRACEPARENT, meta.0.get_traceparent()),
        (trace_context::TRACESTATE, meta.0.get_tracestate()),
    ];
    for (name, value) in fields {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

impl StreamableHttpClient for GuardedHttp {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
        self.check(&uri)?;
        let mut custom_headers = custom_headers;
        trace_headers(&message, &mut custom_headers);
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let response = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
            .map_err(convert)?;
        Ok(match response {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(mark_logs(self.capped(stream), request), session)
            }
            other => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<HttpError>> {
        self.check(&uri)?;
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(convert)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        rmcp::transport::common::client_side_sse::BoxedSseResponse,
        StreamableHttpError<HttpError>,
    > {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            self.max_stream_bytes,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        rmcp::transport::common::client_side_sse::BoxedSseResponse,
        StreamableHttpError<HttpError>,
    > {
        self.check(&uri)?;
        let stream = self
            .client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(convert)?;
        Ok(mark_logs(self.capped(stream), None))
    }
}

/// Marks each log message on a response stream with `request`, the request whose POST the
/// stream answers (`None`: a stream of no request, the session's own): its id under
/// [`REQUEST_META_KEY`] in the message's `_meta`, replacing or removing whatever the server
/// put there. Only events that mention `notifications/message` are read.
fn mark_logs(
    stream: rmcp::transport::common::client_side_sse::BoxedSseResponse,
    request: Option<RequestId>,
) -> rmcp::transport::common::client_side_sse::BoxedSseResponse {
    stream
        .map(move |item| {
            item.map(|mut sse| {
                if let Some(data) = &sse.data
                    && data.contains("notifications/message")
                {
                    sse.data = Some(marked(data, request.as_ref()));
                }
                sse
            })
        })
        .boxed()
}

/// `data` (one SSE event's JSON-RPC message, or a batch of them) with each log message
/// marked as [`mark_logs`] says; as it was when it is not JSON.
fn marked(data: &str, request: Option<&RequestId>) -> String {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(data) else {
        return data.to_owned();
    };
    let messages = match &mut value {
        serde_json::Value::Array(batch) => batch.iter_mut().collect(),
        single => vec![single],
    };
    for message in messages {
        if message.get("method").and_then(serde_json::Value::as_str)
            != Some("notifications/message")
        {
            continue;
        }
        let Some(params) = message
            .get_mut("params")
            .and_then(serde_json::Value::as_object_mut)
        else {
            continue;
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.remove(REQUEST_META_KEY);
            if let Some(request) = request {
                meta.insert(
                    REQUEST_META_KEY.to_owned(),
                    serde_json::to_value(request).unwrap_or_default(),
                );
            }
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn meta_of(data: &str) -> Option<Value> {
        let value: Value = serde_json::from_str(data).unwrap();
        value["params"]["_meta"].get(REQUEST_META_KEY).cloned()
    }

    /// A server cannot send a log message to a call that is not the one whose stream it is on.
    #[test]
    fn log_messages_are_marked_with_their_stream_s_request_and_no_server_s_mark_survives() {
        let id = RequestId::Number(7);
        let log = |meta: Value| {
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": "hi", "_meta": meta}})
            .to_string()
        };
        let plain = json!({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": "hi"}})
        .to_string();
        let forged = log(json!({REQUEST_META_KEY: 3, "other": true}));
        // On a request's stream: its id, whatever the server said.
        assert_eq!(meta_of(&marked(&plain, Some(&id))), Some(json!(7)));
        assert_eq!(meta_of(&marked(&forged, Some(&id))), Some(json!(7)));
        let kept: Value = serde_json::from_str(&marked(&forged, Some(&id))).unwrap();
        assert_eq!(
            kept["params"]["_meta"]["other"], true,
            "the rest of _meta is kept"
        );
        // On the session's own stream: no mark at all.
        assert_eq!(meta_of(&marked(&forged, None)), None);
        assert_eq!(meta_of(&marked(&plain, None)), None);
        // In a batch, each message.
        let batch = format!("[{forged},{plain}]");
        let batch: Value = serde_json::from_str(&marked(&batch, None)).unwrap();
        assert!(batch[0]["params"]["_meta"].get(REQUEST_META_KEY).is_none());
        // What is not a log message, or not JSON, or has no params object, is left as it is.
        let result = json!({"jsonrpc": "2.0", "id": 7, "result": {"content": [
            {"type": "text", "text": "notifications/message"}]}})
        .to_string();
        assert_eq!(
            serde_json::from_str::<Value>(&marked(&result, None)).unwrap(),
            serde_json::from_str::<Value>(&result).unwrap()
        );
        assert_eq!(
            marked("notifications/message {", None),
            "notifications/message {"
        );
        let odd = json!({"method": "notifications/message", "params": "x"}).to_string();
        assert_eq!(marked(&odd, Some(&id)), odd);
        // A `_meta` that is not an object: nothing to mark, and rmcp refuses the message.
        let odd = log(json!("x"));
        assert_eq!(
            serde_json::from_str::<Value>(&marked(&odd, Some(&id))).unwrap(),
            serde_json::from_str::<Value>(&odd).unwrap()
        );
    }
}
