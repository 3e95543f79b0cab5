//! The tokens page: principals and their tokens; create a token (shown once), revoke one.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::capabilities::rfc3339_from_ms;
use larkgate_platform::tokens;
use larkgate_store::{AuditKind, Principal, now_ms};
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use super::guard::{CsrfForm, admin_form};
use super::session::Flash;
use super::{Console, frame, refused, said};

/// A token as the tokens page lists it.
#[derive(Debug, serde::Serialize)]
struct TokenRow {
    id: String,
    principal: String,
    created_by: String,
    created_at_ms: i64,
    state: String,
    revocable: bool,
}

pub(super) async fn tokens_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
) -> Response {
    let signed = match super::guard::admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let store = console.platform.services().store.as_ref();
    let (principals, tokens) = match (store.principals().await, store.tokens(None).await) {
        (Ok(principals), Ok(tokens)) => (principals, tokens),
        (Err(error), _) | (_, Err(error)) => {
            let refusal = larkgate_platform::Refusal::store("the tokens could not be read", error);
            return refused(
                &console,
                &signed,
                StatusCode::SERVICE_UNAVAILABLE,
                &said(&refusal),
            );
        }
    };
    let now = now_ms();
    let rows: Vec<TokenRow> = tokens
        .into_iter()
        .map(|t| {
            let (state, revocable) = tokens::standing_text(&t, now);
            TokenRow {
                id: t.id,
                principal: t.principal,
                created_by: t.created_by,
                created_at_ms: t.created_at_ms,
                state,
                revocable,
            }
        })
        .collect();
    console.render(
        StatusCode::OK,
        "tokens.html",
        context! {
            principals => minijinja::Value::from(Serde(&principals)),
            tokens => minijinja::Value::from(Serde(&rows)),
            ..frame(&signed, "tokens")
        },
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateTokenForm {
    csrf: Option<String>,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    expires: String,
}

fn token_event(console: &Console, actor: &Principal, detail: String) -> Result<(), String> {
    console
        .platform
        .services()
        .audit
        .record_event(AuditEntry {
            kind: Some(AuditKind::Event),
            principal: actor.id.clone(),
            code: Some(EventKind::Token.into()),
            detail: Some(detail),
            ..AuditEntry::default()
        })
        .map(drop)
        .map_err(|e| {
            larkgate_platform::Refusal::internal("the change could not be audited", e).message
        })
}

pub(super) async fn create_token(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<CreateTokenForm>,
) -> Response {
    let signed = match admin_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let flash = create(&console, &signed.principal, &form).await;
    console.sessions.flash(&signed.id, flash);
    Redirect::to("/admin/tokens").into_response()
}

async fn create(console: &Console, actor: &Principal, form: &CreateTokenForm) -> Flash {
    let store = console.platform.services().store.as_ref();
    let principal = form.principal.trim();
    match store.principal(principal).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Flash::error(format!(
                "There is no principal {principal:?}; choose one from the list."
            ));
        }
        Err(error) => {
            return Flash::error(said(&larkgate_platform::Refusal::store(
                "the principal could not be read",
                error,
            )));
        }
    }
    let lifetime = match form.expires.trim() {
        "" => None,
        text => match humantime::parse_duration(text) {
            Ok(lifetime) if !lifetime.is_zero() => Some(lifetime),
            _ => {
                return Flash::error(format!(
                    "{text:?} is not a lifetime: write one like 30d or 12h, or leave it empty \
                     for a token valid until revoked"
                ));
            }
        },
    };
    let new = match tokens::create(store, principal, &actor.id, lifetime, now_ms()).await {
        Ok(new) => new,
        Err(error) => {
            return Flash::error(said(&larkgate_platform::Refusal::internal(
                "the token could not be created",
                error,
            )));
        }
    };
    let validity = new.record.expires_at_ms.map_or_else(String::new, |t| {
        format!(", valid until {}", rfc3339_from_ms(t))
    });
    if let Err(message) = token_event(
        console,
        actor,
        format!("created token {} for {principal}{validity}", new.record.id),
    ) {
        return Flash::error(message);
    }
    Flash {
        kind: "ok",
        text: format!(
            "Created token {} for {principal}{validity}. This is the only time it is shown: copy \
             it now.",
            new.record.id
        ),
        secret: Some(new.token),
    }
}

pub(super) async fn revoke_token(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = match admin_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let store = console.platform.services().store.as_ref();
    let flash = match store.revoke_token(&id, now_ms()).await {
        Ok(true) => match token_event(&console, &signed.principal, format!("revoked token {id}")) {
            Ok(()) => Flash::ok(format!("Revoked token {id}.")),
            Err(message) => Flash::error(message),
        },
        Ok(false) => Flash::error(format!("There is no token {id:?}.")),
        Err(error) => Flash::error(said(&larkgate_platform::Refusal::store(
            "the token could not be revoked",
            error,
        ))),
    };
    console.sessions.flash(&signed.id, flash);
    // Revoking the token this session signed in with ends it at the next request.
    Redirect::to("/admin/tokens").into_response()
}
