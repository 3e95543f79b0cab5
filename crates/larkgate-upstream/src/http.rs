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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use larkgate_platform::trace_context;
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use crate::guard::{GuardError, GuardedResolver, Resolve, UrlGuard};

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
                StreamableHttpPostResponse::Sse(self.capped(stream), session)
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
        Ok(self.capped(stream))
    }
}
