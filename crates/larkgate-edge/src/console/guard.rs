//! What every console request crosses: `Host` must name this server, a POST's `Origin` must
//! be this console's, every answer carries the security headers; a signed-in request's session
//! is re-checked against the store, and a form must carry the session's CSRF token.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use larkgate_platform::access::{self, ADMINS, APPROVERS};
use larkgate_platform::tokens;
use larkgate_store::{Principal, now_ms};
use serde::Deserialize;

use super::session::{self, Flash, Session};
use super::{ADMIN_ONLY, CSP, Console, refused};
use crate::address::ClientAddress;

/// `Host` must name this server; a POST's `Origin`, when sent, must be this console's; every
/// answer carries the security headers. (`Referrer-Policy: same-origin`, not `no-referrer`:
/// under `no-referrer` a browser sends `Origin: null` with the console's own forms.)
pub(super) async fn guard(
    State(console): State<Arc<Console>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |info| info.0.ip());
    let (client, host) = console.addresses.resolve(peer, request.headers());
    let host = host.map(str::to_owned);
    request.extensions_mut().insert(ClientAddress(client));
    let refused = match &host {
        Some(host) if console.addresses.host_is_allowed(host) => {
            let origin = request
                .headers()
                .get(header::ORIGIN)
                .map(|v| v.to_str().unwrap_or(""));
            match origin {
                Some(origin) if request.method() == Method::POST => {
                    !same_origin(origin, host, console.secure)
                }
                _ => false,
            }
        }
        _ => true,
    };
    let mut response = if refused {
        (
            StatusCode::FORBIDDEN,
            "refused: this request did not come from larkgate's own console page\n",
        )
            .into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether `origin` is the console's own: its scheme and `host` (with port, as the browser
/// sent `Host`).
pub(super) fn same_origin(origin: &str, host: &str, secure: bool) -> bool {
    let scheme = if secure { "https://" } else { "http://" };
    origin
        .strip_prefix(scheme)
        .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
}

/// A signed-in request: the session, and its principal as the store says now.
pub(super) struct Signed {
    pub(super) id: String,
    pub(super) session: Session,
    pub(super) principal: Principal,
    pub(super) flash: Option<Flash>,
    /// Requests waiting for a decision, for the navigation (`None` if they could not be
    /// counted: the page is shown all the same).
    pub(super) pending: Option<u64>,
}

/// Why a request is not signed in.
pub(super) enum NotSignedIn {
    /// No session: sign in.
    Absent,
    /// The session ended now (its token revoked or expired, its principal gone or no longer an
    /// admin or approver).
    Ended,
    /// The store could not be read.
    Failed(Box<Response>),
}

impl IntoResponse for NotSignedIn {
    fn into_response(self) -> Response {
        match self {
            NotSignedIn::Absent => Redirect::to("/admin/sign-in").into_response(),
            NotSignedIn::Ended => Redirect::to("/admin/sign-in?ended=1").into_response(),
            NotSignedIn::Failed(response) => *response,
        }
    }
}

pub(super) async fn signed_in(
    console: &Console,
    headers: &HeaderMap,
) -> Result<Signed, NotSignedIn> {
    let id = session::cookie(headers).ok_or(NotSignedIn::Absent)?;
    let (session, flash) = console.sessions.visit(id).ok_or(NotSignedIn::Absent)?;
    let store = console.platform.services().store.as_ref();
    let principal = match tokens::verify_id(store, &session.token_id, now_ms()).await {
        Ok(principal) if access::has_any_role(&principal, APPROVERS) => principal,
        Ok(_) | Err(tokens::TokenError::Invalid) => {
            console.sessions.end(id);
            return Err(NotSignedIn::Ended);
        }
        Err(tokens::TokenError::Store(error)) => {
            let refusal =
                larkgate_platform::Refusal::store("the console could not check the token", error);
            return Err(NotSignedIn::Failed(Box::new(
                (StatusCode::SERVICE_UNAVAILABLE, refusal.message).into_response(),
            )));
        }
    };
    let services = console.platform.services();
    let pending = larkgate_platform::approvals::pending_count(
        store,
        services.policy().approvals.pending_ttl_seconds,
        services.clock.now_ms(),
    )
    .await
    .inspect_err(|error| tracing::debug!(%error, "pending approvals could not be counted"))
    .ok();
    Ok(Signed {
        id: id.to_owned(),
        session,
        principal,
        flash,
        pending,
    })
}

#[derive(Debug, Deserialize)]
pub(super) struct CsrfForm {
    pub(super) csrf: Option<String>,
}

/// A form's CSRF token, checked against the session's: the one refusal for a form that did not
/// come from this session's own page (`None`: the form is the session's own).
pub(super) fn csrf_refusal(
    console: &Console,
    signed: &Signed,
    sent: Option<&str>,
) -> Option<Response> {
    if session::csrf_matches(&signed.session, sent) {
        return None;
    }
    tracing::warn!(principal = %signed.principal.id, "the console refused a form without its CSRF token");
    Some(refused(
        console,
        signed,
        StatusCode::FORBIDDEN,
        "This form was not sent from this console's own page (its CSRF token is missing or \
         belongs to another session). Reload the page and send it again.",
    ))
}

/// Checks a form: signed in, and the session's own form.
pub(super) async fn signed_form(
    console: &Console,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Signed, Box<Response>> {
    let signed = signed_in(console, headers)
        .await
        .map_err(|not| Box::new(not.into_response()))?;
    match csrf_refusal(console, &signed, csrf) {
        Some(refusal) => Err(Box::new(refusal)),
        None => Ok(signed),
    }
}

/// Checks an admin's form: signed in, an admin, the session's own form.
pub(super) async fn admin_form(
    console: &Console,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Signed, Box<Response>> {
    let signed = signed_form(console, headers, csrf).await?;
    an_admin(console, signed)
}

/// A signed-in administrator, or the answer for anyone else.
pub(super) async fn admin(console: &Console, headers: &HeaderMap) -> Result<Signed, Box<Response>> {
    let signed = signed_in(console, headers)
        .await
        .map_err(|not| Box::new(not.into_response()))?;
    an_admin(console, signed)
}

/// `signed` if its principal is an admin, else the page that says the page or form is theirs.
fn an_admin(console: &Console, signed: Signed) -> Result<Signed, Box<Response>> {
    if !access::has_any_role(&signed.principal, ADMINS) {
        return Err(Box::new(refused(
            console,
            &signed,
            StatusCode::FORBIDDEN,
            ADMIN_ONLY,
        )));
    }
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_consoles_own_origin_may_post() {
        let table = [
            ("http://127.0.0.1:8940", "127.0.0.1:8940", false, true),
            ("http://LOCALHOST:8940", "localhost:8940", false, true),
            ("https://mcp.example.com", "mcp.example.com", true, true),
            // Another port, another scheme, another host, a lookalike, the opaque origin.
            ("http://127.0.0.1:8941", "127.0.0.1:8940", false, false),
            ("https://127.0.0.1:8940", "127.0.0.1:8940", false, false),
            ("http://mcp.example.com", "mcp.example.com", true, false),
            ("http://evil.example", "127.0.0.1:8940", false, false),
            (
                "http://127.0.0.1:8940.evil.example",
                "127.0.0.1:8940",
                false,
                false,
            ),
            ("null", "127.0.0.1:8940", false, false),
            ("", "127.0.0.1:8940", false, false),
        ];
        for (origin, host, secure, expected) in table {
            assert_eq!(
                same_origin(origin, host, secure),
                expected,
                "{origin} {host}"
            );
        }
    }
}
