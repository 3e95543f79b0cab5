//! Authentication at the edge: the bearer token names the principal, at every request.
//!
//! [`verify_token`] is the one token check of every edge (HTTP here, `larkgate stdio` at its
//! start): the store is asked each time, so a revoked or expired token is refused from its next
//! use and the principal's roles are read as they are now. [`authenticate`] binds the principal
//! to the request for the platform, and a 2025-11-25 session to the principal that opened it:
//! another principal's token on that session is refused (403), so a leaked session id does not
//! lend anyone else's authority.
//!
//! With `[sign_in]` configured, a bearer that is not a larkgate token (`lgt_...`) is an
//! identity provider's access token, checked by [`super::sign_in`], and every refusal's
//! `WWW-Authenticate` names the protected resource metadata where clients find the provider.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use larkgate_platform::audit::{AuditEntry, AuditSink, EventKind};
use larkgate_platform::envelope::Refusal;
use larkgate_platform::{RunContext, SessionIdentity, tokens};
use larkgate_store::{AuditKind, Principal, Store, now_ms};

use super::address::ClientAddress;
use super::error::EdgeError;
use super::sessions::Registry;
use super::sign_in::metadata::{self, Challenge};
use super::sign_in::{Providers, Rejection};
use super::throttle::FailureThrottle;

/// The principal `token` authenticates, with its roles as they are now.
pub async fn verify_token(store: &dyn Store, token: &str) -> Result<Principal, EdgeError> {
    match tokens::verify(store, token, now_ms()).await {
        Ok(principal) => Ok(principal),
        Err(tokens::TokenError::Invalid) => Err(EdgeError::Unauthenticated),
        Err(tokens::TokenError::Store(error)) => Err(EdgeError::Unavailable(Refusal::store(
            "the token could not be checked",
            error,
        ))),
    }
}

/// What the authentication layer shares between requests.
#[derive(Clone, Debug)]
pub struct Auth {
    store: Arc<dyn Store>,
    sessions: Arc<Registry>,
    /// Requests refused for a missing, unknown, revoked or expired token.
    failures: prometheus_client::metrics::counter::Counter,
    /// Failed authentications per source address.
    throttle: Arc<FailureThrottle>,
    /// Where the sampled failed authentications are recorded.
    audit: Arc<dyn AuditSink>,
    /// The identity providers whose access tokens are accepted beside larkgate's own.
    sign_in: Option<Providers>,
}

impl Auth {
    /// Authentication against `store`, with 2025-11-25 sessions entered in `sessions`, and a
    /// sample of the failures recorded on `audit`.
    pub fn new(
        store: Arc<dyn Store>,
        sessions: Arc<Registry>,
        throttle: FailureThrottle,
        audit: Arc<dyn AuditSink>,
    ) -> Self {
        Auth {
            store,
            sessions,
            failures: Default::default(),
            throttle: Arc::new(throttle),
            audit,
            sign_in: None,
        }
    }

    /// Accepts the access tokens of the providers in force too, and names them in every
    /// challenge.
    pub fn with_sign_in(mut self, providers: Providers) -> Self {
        self.sign_in = Some(providers);
        self
    }

    /// `Err` while `source` has spent its failed authentications for this minute: the refusal
    /// to answer, without looking anything up. Shared by `/mcp` and the admin console's
    /// sign-in, so the two count against one budget per address.
    pub fn throttled(&self, source: std::net::IpAddr) -> Result<(), EdgeError> {
        self.throttle
            .check(source)
            .map_err(|wait| EdgeError::TooManyFailures {
                limit: self.throttle.limit(),
                retry_after: wait,
            })
    }

    /// Counts a failed authentication and records it if the sample takes it (see
    /// [`super::throttle`]). The record names the source and whether a token was presented,
    /// never the token.
    pub fn failed(&self, source: Option<std::net::IpAddr>, presented: bool) {
        self.failures.inc();
        let audited = match source {
            Some(source) => self.throttle.failed(source),
            None => self.throttle.failed_unplaced(),
        };
        let Some(audited) = audited else { return };
        let from = source.map_or_else(|| "an unknown address".to_owned(), |s| s.to_string());
        let what = if presented {
            "a token that is not valid"
        } else {
            "no token"
        };
        let entry = AuditEntry {
            kind: Some(AuditKind::Event),
            principal: ANONYMOUS.to_owned(),
            code: Some(EventKind::AuthenticationFailed.into()),
            detail: Some(format!(
                "a request from {from} presented {what}; {} more failed authentications went \
                 unrecorded since the last one recorded",
                audited.unrecorded_before
            )),
            ..Default::default()
        };
        if let Err(error) = self.audit.record_event(entry) {
            tracing::warn!(%error, "a failed authentication could not be audited");
        }
    }

    /// The count of requests refused for their credential, for `/metrics`.
    pub fn failures(&self) -> prometheus_client::metrics::counter::Counter {
        self.failures.clone()
    }
}

/// Who a failed authentication's record names.
pub const ANONYMOUS: &str = "anonymous";

/// The middleware: verifies the bearer token, binds sessions to principals, and hands the
/// handler the caller in the request's extensions.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    // The source, as the address check resolved it (behind trusted proxies: the client).
    let source = request
        .extensions()
        .get::<ClientAddress>()
        .map(|address| address.0)
        .or_else(|| {
            request
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|info| info.0.ip())
        });
    if let Some(source) = source
        && let Err(refusal) = auth.throttled(source)
    {
        return refusal.into_response();
    }
    let presented = token.is_some();
    // The virtual server the request is made to (`/mcp/NAME`), a protected resource of its own.
    let server = request
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .filter(|name| larkgate_platform::servers::check_name(name).is_ok())
        .map(str::to_owned);
    let sign_in = auth.sign_in.as_ref().and_then(Providers::current);
    let principal = match (token, &sign_in) {
        // larkgate's own tokens are told apart by their prefix; anything else is an access
        // token when an identity provider is configured.
        (Some(token), Some(sign_in)) if !token.trim().starts_with(tokens::TOKEN_PREFIX) => sign_in
            .verify(auth.store.as_ref(), &token, server.as_deref())
            .await
            .map_err(EdgeError::SignIn),
        (Some(token), _) => verify_token(auth.store.as_ref(), &token).await,
        (None, _) => Err(EdgeError::Unauthenticated),
    };
    let principal = match principal {
        Ok(principal) => principal,
        Err(error) => {
            if matches!(
                error,
                EdgeError::Unauthenticated
                    | EdgeError::SignIn(Rejection::Invalid(_) | Rejection::NotAPrincipal { .. })
            ) {
                auth.failed(source, presented);
            }
            let challenge = match &error {
                EdgeError::SignIn(Rejection::InsufficientScope(_)) => {
                    Some(Challenge::InsufficientScope)
                }
                EdgeError::Unauthenticated | EdgeError::SignIn(Rejection::Invalid(_)) => {
                    Some(if presented {
                        Challenge::Invalid
                    } else {
                        Challenge::Missing
                    })
                }
                _ => None,
            };
            let mut response = error.into_response();
            if let (Some(sign_in), Some(challenge)) = (&sign_in, challenge) {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    metadata::www_authenticate(sign_in, challenge, server.as_deref()),
                );
            }
            return response;
        }
    };
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &session
        && auth
            .sessions
            .owner_anywhere(session)
            .await
            .is_some_and(|o| o != principal.id)
    {
        tracing::warn!(session, principal = %principal.id, "a session was presented with another principal's token");
        return EdgeError::ForeignSession.into_response();
    }
    if let Some(exchange) = request
        .extensions()
        .get::<larkgate_platform::observe::Exchange>()
    {
        exchange.principal(&principal.id);
    }
    request.extensions_mut().insert(Arc::new(SessionIdentity {
        run: RunContext::direct(principal),
        label: "http".into(),
        server: None,
    }));
    let deleting = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    // The session is gone when this answers: 200, which every SDK takes without a warning
    // (rmcp answers 202; the Python SDK warns unless 200 or 204).
    if deleting && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::OK;
    }
    response
}
