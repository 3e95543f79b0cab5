//! Signing in to the console with a larkgate token of an admin or approver, against `/mcp`'s
//! per-address budget of failures, and signing out.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use larkgate_platform::access::{self, APPROVERS};
use larkgate_platform::tokens;
use larkgate_store::now_ms;
use minijinja::context;
use serde::Deserialize;

use super::Console;
use super::guard::{CsrfForm, signed_form};
use super::session;
use crate::address::ClientAddress;

#[derive(Debug, Default, Deserialize)]
pub(super) struct SignInQuery {
    ended: Option<String>,
}

pub(super) async fn sign_in_page(
    State(console): State<Arc<Console>>,
    axum::extract::Query(query): axum::extract::Query<SignInQuery>,
) -> Response {
    let note = query.ended.map(|_| {
        "Your console session ended: its token was revoked or has expired, or its principal \
         is no longer an admin or approver. Sign in again."
    });
    console.render(StatusCode::OK, "sign_in.html", context! { note })
}

#[derive(Debug, Deserialize)]
pub(super) struct SignInForm {
    #[serde(default)]
    token: String,
}

pub(super) async fn sign_in(
    State(console): State<Arc<Console>>,
    axum::Extension(ClientAddress(client)): axum::Extension<ClientAddress>,
    Form(form): Form<SignInForm>,
) -> Response {
    // As at /mcp: an address that spent its failures for this minute is not looked up.
    if let Err(refusal) = console.auth.throttled(client) {
        let why = format!("Too many failed sign-ins from your address: {refusal}.");
        return console.render(
            StatusCode::TOO_MANY_REQUESTS,
            "sign_in.html",
            context! { error => why },
        );
    }
    let store = console.platform.services().store.as_ref();
    let failed = |console: &Console, why: &str| {
        console.render(
            StatusCode::UNAUTHORIZED,
            "sign_in.html",
            context! { error => why },
        )
    };
    let token = form.token.trim();
    let principal = match tokens::verify(store, token, now_ms()).await {
        Ok(principal) => principal,
        Err(tokens::TokenError::Invalid) => {
            console.auth.failed(Some(client), !token.is_empty());
            return failed(
                &console,
                "That token is not valid: it is unknown, revoked or expired. Paste the whole \
                 token (it starts with lgt_).",
            );
        }
        Err(tokens::TokenError::Store(error)) => {
            let refusal =
                larkgate_platform::Refusal::store("the console could not check the token", error);
            return failed(&console, &refusal.message);
        }
    };
    if !access::has_any_role(&principal, APPROVERS) {
        return failed(
            &console,
            &format!(
                "{} may not use the console: it is for principals with the admin or approver role",
                principal.id
            ),
        );
    }
    let Some(token_id) = tokens::token_id(token) else {
        return failed(&console, "That token is not valid.");
    };
    let id = console.sessions.create(token_id);
    let mut response = Redirect::to("/admin/approvals").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::set_cookie(&id, console.secure)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

pub(super) async fn sign_out(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = match signed_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    console.sessions.end(&signed.id);
    let mut response = Redirect::to("/admin/sign-in").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session::clear_cookie(console.secure)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}
