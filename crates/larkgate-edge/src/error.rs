//! Refusals at the HTTP edge, and the one conversion from each to an HTTP answer: a JSON-RPC
//! error body (`"id": null` unless the request's id is known) with the status that fits, and
//! for `unauthenticated` a `WWW-Authenticate` header and larkgate's envelope in `data`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use larkgate_platform::envelope::{Code, Refusal};

use super::sessions::SessionCap;
use super::sign_in::Rejection;

fn too_many_sessions(cap: &SessionCap) -> String {
    match cap {
        SessionCap::PerPrincipal(n) => format!(
            "too many open sessions: this principal has {n}, the most it may have open at once"
        ),
        SessionCap::Total(n) => {
            format!("too many open sessions: the server has {n} open, the most it keeps at once")
        }
    }
}

fn sign_in_message(rejection: &super::sign_in::Rejection) -> String {
    use super::sign_in::Rejection;
    match rejection {
        Rejection::Invalid(_) => format!("unauthenticated: {rejection}"),
        Rejection::InsufficientScope(_) => {
            format!("forbidden: {rejection}: sign in again, asking for them")
        }
        Rejection::NotAPrincipal { principal, issuer } => format!(
            "forbidden: {rejection}: an admin registers it with `larkgate principal add \
             {principal} --issuer {issuer} --roles ROLES`"
        ),
        Rejection::Unavailable(refusal) => refusal.message.clone(),
    }
}

/// The JSON-RPC error codes the edge answers with: the one table's (see
/// `larkgate_caller::answer`).
pub use larkgate_caller::answer as codes;

/// Why the edge refused a request before the MCP service saw it.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// No bearer token, or one that is unknown, revoked or expired.
    #[error(
        "unauthenticated: no valid bearer token: send `Authorization: Bearer <token>` with a \
         larkgate token"
    )]
    Unauthenticated,
    /// An identity provider's access token was refused, or could not be checked.
    #[error("{}", sign_in_message(.0))]
    SignIn(super::sign_in::Rejection),
    /// Too many failed authentications from this address in the last minute.
    #[error(
        "too many failed authentications from this address (at most {limit} a minute): \
         retry in {} s",
        .retry_after.as_secs().max(1)
    )]
    TooManyFailures {
        /// The failures allowed per minute.
        limit: u32,
        /// How long until the address may try again.
        retry_after: std::time::Duration,
    },
    /// The credential could not be checked (the store failed). The detail is logged under
    /// the refusal's correlation id.
    #[error("{}", .0.message)]
    Unavailable(Refusal),
    /// A 2025-11-25 session presented with another principal's token.
    #[error("this session belongs to another principal")]
    ForeignSession,
    /// The `Host` is not one this server answers to (possible DNS rebinding).
    #[error(
        "the Host {0:?} is not one this server answers to: add it to [server] allowed_hosts, \
         or set [server] public_url to the URL clients use"
    )]
    UnknownHost(String),
    /// A browser page's request, from an origin not allowed.
    #[error(
        "requests from web pages are refused (Origin {0:?}); to allow a page, add its origin \
         to [server] allowed_origins"
    )]
    BrowserOrigin(String),
    /// The body is larger than the edge reads.
    #[error("the request body exceeds {limit} bytes")]
    BodyTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The body did not arrive within the time the edge waits for it.
    #[error("the request body did not arrive within {} s; send it whole, without pauses", .seconds)]
    BodyTimeout {
        /// The time the edge waits, in seconds.
        seconds: u64,
    },
    /// A request whose params do not have the shape its method needs.
    #[error("invalid params: {problem}")]
    InvalidParams {
        /// What is wrong with them.
        problem: &'static str,
        /// The request's id.
        id: serde_json::Value,
    },
    /// A 2025-11-25 session would pass a cap on open sessions.
    #[error("{}", too_many_sessions(.cap))]
    TooManySessions {
        /// The cap reached.
        cap: SessionCap,
        /// The `initialize` request's id.
        id: serde_json::Value,
    },
    /// The body is not JSON.
    #[error("parse error: the body is not JSON ({0})")]
    NotJson(String),
    /// The body is JSON but not a JSON-RPC message larkgate serves.
    #[error("invalid request: {problem}")]
    InvalidRequest {
        /// What is wrong with it.
        problem: &'static str,
        /// The request's id, when it had one.
        id: serde_json::Value,
    },
    /// The MCP transport refused the request before any method ran (a session it does not
    /// know, a header it needs, a media type it does not take), with its HTTP status and what
    /// it said.
    #[error("{problem}")]
    Transport {
        /// The transport's status (4xx).
        status: StatusCode,
        /// What it said, bounded and without control characters.
        problem: String,
    },
}

impl EdgeError {
    /// The refusal a bad or missing token gets, as an envelope.
    fn unauthenticated_refusal() -> Refusal {
        Refusal::new(
            Code::Unauthenticated,
            "no valid bearer token: send `Authorization: Bearer <token>` with a larkgate token",
        )
        .with_hint("an admin creates one with `larkgate token create --principal NAME`")
    }

    /// The refusal code this answer carries: the envelope's where there is one. The HTTP
    /// status and the JSON-RPC code follow from it through the one table, except for the
    /// transport's own errors below.
    fn refusal_code(&self) -> Option<Code> {
        match self {
            EdgeError::Unauthenticated => Some(Code::Unauthenticated),
            EdgeError::SignIn(rejection) => Some(rejection_code(rejection)),
            EdgeError::TooManyFailures { .. } => Some(Code::RateLimited),
            EdgeError::Unavailable(refusal) => Some(refusal.code),
            EdgeError::ForeignSession | EdgeError::UnknownHost(_) | EdgeError::BrowserOrigin(_) => {
                Some(Code::Forbidden)
            }
            EdgeError::BodyTooLarge { .. } | EdgeError::TooManySessions { .. } => {
                Some(Code::LimitExceeded)
            }
            EdgeError::BodyTimeout { .. } => Some(Code::Timeout),
            EdgeError::InvalidParams { .. }
            | EdgeError::NotJson(_)
            | EdgeError::InvalidRequest { .. }
            | EdgeError::Transport { .. } => None,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            // HTTP's own answers for a body too large or too slow.
            EdgeError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            EdgeError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            EdgeError::Transport { status, .. } => *status,
            _ => match self.refusal_code() {
                Some(code) => StatusCode::from_u16(code.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                None => StatusCode::BAD_REQUEST,
            },
        }
    }

    fn code(&self) -> i64 {
        match self {
            // JSON-RPC's own errors: the message never reached a method.
            EdgeError::NotJson(_) => codes::PARSE_ERROR,
            EdgeError::BodyTooLarge { .. }
            | EdgeError::BodyTimeout { .. }
            | EdgeError::InvalidRequest { .. }
            | EdgeError::Transport { .. } => codes::INVALID_REQUEST,
            EdgeError::InvalidParams { .. } => codes::INVALID_PARAMS,
            _ => self
                .refusal_code()
                .map_or(codes::INTERNAL_ERROR, Code::json_rpc_code),
        }
    }

    /// The code the access log names this refusal by: the envelope's code where the refusal
    /// has one, else the JSON-RPC error's name.
    pub fn outcome(&self) -> &'static str {
        match self.refusal_code() {
            Some(code) => code.as_str(),
            // Only JSON-RPC's own errors have no refusal code.
            None => codes::protocol_name(self.code()).unwrap_or("invalid_request"),
        }
    }

    /// larkgate's envelope, for the refusals that have one.
    fn data(&self) -> Option<serde_json::Value> {
        let refusal = match self {
            EdgeError::Unauthenticated => Self::unauthenticated_refusal(),
            EdgeError::Unavailable(refusal) => refusal.clone(),
            EdgeError::SignIn(Rejection::Unavailable(refusal)) => refusal.clone(),
            EdgeError::SignIn(rejection) => {
                let refusal = Refusal::new(rejection_code(rejection), self.to_string());
                match rejection {
                    Rejection::Invalid(_) => refusal.with_hint(
                        "sign in with the identity provider again, or use a larkgate token",
                    ),
                    _ => refusal,
                }
            }
            EdgeError::TooManyFailures { retry_after, .. } => Refusal {
                retry_after: Some(*retry_after),
                ..Refusal::new(Code::RateLimited, self.to_string())
                    .with_hint("check the token: this address sent too many that were not valid")
            },
            EdgeError::TooManySessions { .. } => {
                Refusal::new(Code::LimitExceeded, self.to_string()).with_hint(
                    "close a session you no longer use (HTTP DELETE with its Mcp-Session-Id), \
                     or use the 2026-07-28 revision, which needs no session",
                )
            }
            _ => return None,
        };
        serde_json::to_value(refusal.envelope()).ok()
    }
}

/// The envelope's code for a refused access token.
fn rejection_code(rejection: &Rejection) -> Code {
    match rejection {
        Rejection::Invalid(_) => Code::Unauthenticated,
        Rejection::InsufficientScope(_) | Rejection::NotAPrincipal { .. } => Code::Forbidden,
        Rejection::Unavailable(refusal) => refusal.code,
    }
}

impl IntoResponse for EdgeError {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({"code": self.code(), "message": self.to_string()});
        if let Some(data) = self.data() {
            error["data"] = data;
        }
        let id = match &self {
            EdgeError::InvalidRequest { id, .. }
            | EdgeError::InvalidParams { id, .. }
            | EdgeError::TooManySessions { id, .. } => id.clone(),
            _ => serde_json::Value::Null,
        };
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
        let mut response = (self.status(), body.to_string()).into_response();
        response
            .extensions_mut()
            .insert(super::access::EdgeOutcome(self.outcome()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let EdgeError::TooManyFailures { retry_after, .. } = &self
            && let Ok(value) = HeaderValue::from_str(&retry_after.as_secs().max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if matches!(
            self,
            EdgeError::Unauthenticated | EdgeError::SignIn(Rejection::Invalid(_))
        ) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"larkgate\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(error: EdgeError) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = error.into_response();
        let status = response.status();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, challenge, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_refusal_is_one_json_rpc_answer_with_its_status_and_code() {
        let cases = [
            (EdgeError::Unauthenticated, 401, codes::UNAUTHENTICATED),
            (EdgeError::ForeignSession, 403, codes::FORBIDDEN),
            (
                EdgeError::BodyTooLarge { limit: 4 },
                413,
                codes::INVALID_REQUEST,
            ),
            (EdgeError::NotJson("eof".into()), 400, codes::PARSE_ERROR),
            (
                EdgeError::UnknownHost("evil.example".into()),
                403,
                codes::FORBIDDEN,
            ),
            (
                EdgeError::BrowserOrigin("https://evil.example".into()),
                403,
                codes::FORBIDDEN,
            ),
            (
                EdgeError::BodyTimeout { seconds: 1 },
                408,
                codes::INVALID_REQUEST,
            ),
            (
                EdgeError::TooManySessions {
                    cap: SessionCap::PerPrincipal(2),
                    id: serde_json::json!(1),
                },
                429,
                codes::LIMIT_EXCEEDED,
            ),
            (
                EdgeError::InvalidRequest {
                    problem: "a JSON-RPC message must be an object",
                    id: serde_json::json!(7),
                },
                400,
                codes::INVALID_REQUEST,
            ),
        ];
        for (error, status, code) in cases {
            let text = error.to_string();
            let (got, challenge, body) = answer(error).await;
            assert_eq!(got.as_u16(), status, "{text}");
            assert_eq!(body["jsonrpc"], "2.0");
            assert_eq!(body["error"]["code"], code, "{text}");
            assert_eq!(body["error"]["message"], text.as_str());
            assert_eq!(challenge.is_some(), status == 401, "{text}");
        }
        let (_, _, body) = answer(EdgeError::InvalidRequest {
            problem: "x",
            id: serde_json::json!("abc"),
        })
        .await;
        assert_eq!(body["id"], "abc");
    }

    #[tokio::test]
    async fn a_failure_to_check_credentials_carries_only_a_correlation_id() {
        let refusal = Refusal::internal(
            "the token could not be checked",
            "database error: disk I/O error at /var/lib/larkgate/larkgate.db",
        );
        let (status, _, body) = answer(EdgeError::Unavailable(refusal)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let text = body.to_string();
        for leak in ["disk I/O", "/var/lib", "database error"] {
            assert!(!text.contains(leak), "{leak:?} reached the caller: {text}");
        }
        assert_eq!(body["error"]["code"], codes::INTERNAL_ERROR);
        assert_eq!(body["error"]["data"]["code"], "internal");
        assert!(
            body["error"]["data"]["correlation_id"].is_string(),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_refusal_with_a_code_is_answered_as_the_one_table_says() {
        for code in Code::ALL {
            let error = EdgeError::Unavailable(Refusal::new(code, "refused"));
            assert_eq!(error.outcome(), code.as_str());
            let (status, _, body) = answer(error).await;
            assert_eq!(status.as_u16(), code.http_status(), "{code}");
            assert_eq!(body["error"]["code"], code.json_rpc_code(), "{code}");
            assert_eq!(body["error"]["data"]["code"], code.as_str());
        }
    }

    #[test]
    fn the_access_log_names_protocol_errors_by_their_json_rpc_name() {
        let id = serde_json::Value::Null;
        let named = [
            (EdgeError::NotJson("eof".into()), "parse_error"),
            (
                EdgeError::InvalidRequest {
                    problem: "x",
                    id: id.clone(),
                },
                "invalid_request",
            ),
            (
                EdgeError::InvalidParams { problem: "x", id },
                "invalid_params",
            ),
            (EdgeError::BodyTooLarge { limit: 1 }, "limit_exceeded"),
            (EdgeError::BodyTimeout { seconds: 1 }, "timeout"),
            (EdgeError::ForeignSession, "forbidden"),
        ];
        for (error, outcome) in named {
            assert_eq!(error.outcome(), outcome, "{error}");
        }
    }
}
