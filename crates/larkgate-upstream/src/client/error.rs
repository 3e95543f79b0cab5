//! Why an upstream could not be used ([`UpstreamError`]), and the one reading of a transport's
//! failure into it: plain words that name no URL and no library, shown to callers and in
//! `upstream list`.

use std::time::Duration;

use rmcp::model::ServerResult;
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};

use super::UpstreamLimits;
use crate::http::HttpError;

/// Why an upstream could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The server cannot be reached or the connection broke.
    #[error("the upstream is unavailable: {0}")]
    Unavailable(String),
    /// No answer within the round-trip or total timeout (the call was cancelled).
    #[error("the upstream did not answer within {0:?} (the call was cancelled)")]
    Timeout(Duration),
    /// A response over the byte limit.
    #[error("the upstream's response exceeded the response-bytes limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The server answered with an error or broke the protocol.
    #[error("the upstream answered with an error: {0}")]
    Protocol(String),
    /// The configuration cannot be used (URL refused by the guard, bad header).
    #[error("{0}")]
    Config(String),
    /// The server answered 401 Unauthorized inside a session it had accepted: it no longer
    /// takes the credentials larkgate sends (a revoked key; for OAuth, a token that expired
    /// and could not be refreshed). The upstream must be connected again, which says why.
    #[error(
        "the server answered 401 Unauthorized: it refused the credentials larkgate sends (the \
         upstream's headers, or its OAuth sign-in)"
    )]
    Unauthorized,
    /// The server answered 403 `insufficient_scope` (OAuth): the token larkgate holds lacks a
    /// scope this request needs. `challenge` is the server's `WWW-Authenticate`, which a new
    /// sign-in ([`crate::oauth::sign_in`]) takes to ask for the scopes it names.
    #[error(
        "the server answered 403 Forbidden: the token larkgate holds lacks a scope this needs \
         (sign in to the upstream again)"
    )]
    InsufficientScope {
        /// The server's `WWW-Authenticate` header.
        challenge: String,
    },
}

/// A request answered with the wrong kind of result.
pub(super) fn answered_with(method: &str, other: &ServerResult) -> UpstreamError {
    UpstreamError::Protocol(format!("{method} was answered with {}", short_kind(other)))
}

pub(super) fn short_kind(result: &ServerResult) -> String {
    let text = serde_json::to_string(result).unwrap_or_default();
    text.chars().take(120).collect()
}

pub(super) fn classify(error: ServiceError, limits: UpstreamLimits) -> UpstreamError {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = next {
        if let Some(scope) = e.downcast_ref::<InsufficientScopeError>() {
            return UpstreamError::InsufficientScope {
                challenge: scope.www_authenticate_header.clone(),
            };
        }
        if e.is::<AuthRequiredError>() {
            return UpstreamError::Unauthorized;
        }
        next = e.source();
    }
    match error {
        ServiceError::Timeout { timeout } => UpstreamError::Timeout(timeout),
        ServiceError::McpError(error) => UpstreamError::Protocol(error.message.to_string()),
        other => match plain_cause(&other) {
            Some(cause) => UpstreamError::Unavailable(cause),
            None => classify_text(&other.to_string(), limits),
        },
    }
}

/// What the URL guard says of an address it refuses (see [`crate::guard::GuardError`]).
const NOT_PUBLIC: &str = "which is not a public address";

/// Why a server could not be reached, in plain words, read from `error` and its causes
/// (rmcp and the HTTP stack say it in their own types); `None` when nothing is recognised.
/// The words name no URL and no library: they are shown to callers and in `upstream list`.
pub fn plain_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut chain = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        chain.push_str(&format!("{e} {e:?} "));
        next = e.source();
    }
    // The guard refusing every address a name resolves to surfaces as a failed lookup: say
    // what the guard said (which address, which range), not that the name did not resolve.
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if let Some(at) = text.find(NOT_PUBLIC) {
            let start = text[..at].rfind(": ").map_or(0, |i| i + 2);
            let end = text[at..].find(';').map_or(text.len(), |i| at + i);
            return Some(text[start..end].to_owned());
        }
        next = e.source();
    }
    let chain = chain.to_ascii_lowercase();
    let has = |w: &str| chain.contains(w);
    let cause = if has("notpublic {") {
        // Only the guard's error type in a library's debug text.
        "its host name resolves only to addresses that are not public; larkgate reaches \
         those only when the upstream allows them"
    } else if has("connectionrefused") || has("connection refused") {
        "the connection was refused: nothing listens at that address"
    } else if has("dns error")
        || has("failed to lookup address")
        || has("could not be resolved")
        || has("name or service not known")
    {
        "its host name could not be resolved"
    } else if has("invalidcertificate") || has("certificate") || has("tls handshake") {
        "the TLS connection failed: its certificate or protocol was not accepted"
    } else if has("redirect to another origin") {
        "the server redirected larkgate to another origin, which larkgate does not follow: it \
         follows redirects only within the upstream's own scheme, host and port"
    } else if has("more than") && has("redirects") {
        "the server redirected larkgate too many times (a redirect loop?)"
    } else if has("error following redirect") {
        "the server redirected larkgate to an address it does not reach (redirects are \
         checked as the upstream's own URL is)"
    } else if has("token refresh failed") || has("tokenrefreshrejected") {
        "the authorization server refused to refresh larkgate's OAuth token: an operator signs \
         in again with `larkgate upstream login`"
    } else if has("auth error") {
        "larkgate's OAuth sign-in for it cannot be used (the log says why): an operator signs in \
         again with `larkgate upstream login`"
    } else if has("401 unauthorized") || has("authrequired") || has("auth required") {
        UNAUTHORIZED_CAUSE
    } else if has("403 forbidden") || has("insufficientscope") || has("insufficient scope") {
        "the server answered 403 Forbidden: the credentials larkgate sends may not do this"
    } else if has("timed out") || has("elapsed") {
        "the server did not answer in time"
    } else if has("connectionreset") || has("connection reset") || has("broken pipe") {
        "the server closed the connection"
    } else {
        return None;
    };
    Some(cause.to_owned())
}

/// Transport failures arrive as text through rmcp; the byte cap and the guard are recognised
/// by their own messages (pinned by tests). Any other text is a library's, which names its
/// types and the URL: it goes to the log, and people are told only that the connection
/// failed.
pub(super) fn classify_text(text: &str, limits: UpstreamLimits) -> UpstreamError {
    if text.contains("exceeded the maximum size")
        || text.contains("response-bytes limit")
        || text.contains("too large")
    {
        return UpstreamError::TooLarge {
            limit: limits.max_response_bytes,
        };
    }
    tracing::warn!(
        error = %crate::redact::urls(text),
        "an upstream could not be reached for a reason larkgate does not name"
    );
    UpstreamError::Unavailable(
        "the connection failed in a way larkgate does not name (its log has the detail)".to_owned(),
    )
}

/// What [`plain_cause`] says of a server that answered 401 Unauthorized.
const UNAUTHORIZED_CAUSE: &str = "the server answered 401 Unauthorized: it refused the \
                                  credentials larkgate sends (the upstream's headers, or its \
                                  OAuth sign-in)";

impl UpstreamError {
    /// Whether the server could not be reached at all (nothing listens, its name does not
    /// resolve, TLS failed, the connection broke or timed out before an answer): the upstream
    /// is down, rather than refusing or failing this one request. A server that answered, with
    /// an error or a 401 or 403, is not.
    pub fn is_unreachable(&self) -> bool {
        self.unreachable_because().is_some()
    }

    /// Why the server could not be reached (see [`Self::is_unreachable`]), in the words a
    /// failed connection attempt gives, so that both read alike in the log and `upstream list`.
    pub fn unreachable_because(&self) -> Option<&str> {
        match self {
            UpstreamError::Unavailable(cause) if !cause.starts_with("the server answered 40") => {
                Some(cause)
            }
            _ => None,
        }
    }

    /// Why an upstream whose connection failed with this is down, as `upstream list` and the
    /// log say it.
    pub fn why_down(&self) -> String {
        match self.unreachable_because() {
            Some(cause) => cause.to_owned(),
            None => format!("the connection was lost: {self}"),
        }
    }

    /// Whether the server refused larkgate's credentials (401), in a session or while
    /// connecting.
    pub fn is_unauthorized(&self) -> bool {
        match self {
            UpstreamError::Unauthorized => true,
            UpstreamError::Unavailable(cause) => cause == UNAUTHORIZED_CAUSE,
            _ => false,
        }
    }
}

impl From<HttpError> for UpstreamError {
    fn from(error: HttpError) -> Self {
        UpstreamError::Unavailable(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_credential_is_told_apart_from_other_failures_by_its_kind() {
        let cases = [
            (UpstreamError::Unauthorized, true),
            (
                UpstreamError::Unavailable(UNAUTHORIZED_CAUSE.to_owned()),
                true,
            ),
            (
                UpstreamError::Unavailable("the server did not answer in time".to_owned()),
                false,
            ),
            // A server's own text that merely begins like larkgate's words is not a 401.
            (
                UpstreamError::Unavailable(format!("{UNAUTHORIZED_CAUSE}, or so it says")),
                false,
            ),
            (
                UpstreamError::Protocol("the server answered 401".to_owned()),
                false,
            ),
            (UpstreamError::Timeout(Duration::from_secs(1)), false),
        ];
        for (error, unauthorized) in cases {
            assert_eq!(error.is_unauthorized(), unauthorized, "{error}");
        }
    }
}
