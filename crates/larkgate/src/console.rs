//! The admin console at `/admin`, served by `larkgate serve` beside `/mcp`: server-rendered
//! pages (HTML auto-escaped by minijinja), plain forms answered with POST-redirect-GET, no
//! script at all. Every action goes through the same services as the CLI and the MCP tools,
//! and is audited the same way.
//!
//! | page | who | what |
//! | --- | --- | --- |
//! | `/admin/approvals` | `approver`, `admin` | requests with their arguments; approve or deny with a reason |
//! | `/admin/audit` | `admin` | the audit chain, filtered by principal and tool; verify it |
//! | `/admin/scripts`, `/admin/scripts/NAME` | `admin` | drafts and versions; a draft's source, its diff from the latest version, its review run's intended writes and pins; publish |
//! | `/admin/runs`, `/admin/runs/ID` | `admin` | run records, filtered; one run whole |
//! | `/admin/upstreams` | `admin` | each upstream's status and cause; quarantined tools with their definitions' diff and the scripts they suspend; approve |
//! | `/admin/tokens` | `admin` | principals and tokens; create a token (shown once), revoke one |
//!
//! ## Threat model
//!
//! The console faces a person's browser, and every other page that browser opens.
//! - **Sign-in** takes a larkgate token of an `admin` or `approver`, checked as `/mcp` checks
//!   one, against the same per-address budget of failures (429 once it is spent, sampled into
//!   the audit as `authentication_failed`); the browser then holds only a session cookie
//!   ([`session`]). The session is tied to
//!   the token's id and re-checked at every request: a revoked or expired token, a removed
//!   principal or a lost role ends it at the next click.
//! - **Cross-site requests**: the cookie is `SameSite=Strict`; every form carries the
//!   session's CSRF token, and a POST without it (or with another session's) is refused; a POST
//!   whose `Origin` is not this console's is refused before that.
//! - **DNS rebinding**: `Host` must name this server, as for `/mcp`.
//! - **Injection**: everything shown (tool arguments, script sources, principal names) is
//!   escaped by the template engine; the Content-Security-Policy allows nothing but this
//!   server's own stylesheet (`default-src 'none'`, no script at all), and pages may not be
//!   framed.
//! - Answers carry `Cache-Control: no-store`, so a page with a fresh token is not kept.
//!
//! Unlike `/mcp`, which refuses every browser `Origin`, `/admin` accepts its own origin: it is
//! made for browsers.

mod pages;
pub mod session;

use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Form, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use larkgate_platform::Platform;
use larkgate_platform::access::{self, ADMINS, APPROVERS};
use larkgate_platform::approvals::{self, Decision, tools::ApprovalView};
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::capabilities::rfc3339_from_ms;
use larkgate_platform::tokens;
use larkgate_store::{AuditKind, Principal, now_ms};
use minijinja::value::Serde;
use minijinja::{Environment, context};
use serde::Deserialize;

use larkgate_scripts::Scripts;
use larkgate_upstream::federation::Federation;

use crate::http::Auth;
use crate::http::address::{AddressPolicy, ClientAddress};
use session::{Flash, Session, Sessions};

/// The console's Content-Security-Policy: nothing but this server's stylesheet.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                       frame-ancestors 'none'; base-uri 'none'";

/// What the console's pages share.
#[derive(Debug)]
pub struct Console {
    platform: Platform,
    scripts: Arc<Scripts>,
    federation: Arc<Federation>,
    sessions: Sessions,
    templates: Environment<'static>,
    addresses: Arc<AddressPolicy>,
    /// `/mcp`'s authentication: its per-address budget of failures, and its audit sample.
    auth: Auth,
    secure: bool,
}

impl Console {
    /// The console of `platform` (with its script service and upstreams), answering the hosts
    /// `addresses` allows; `secure`: larkgate is served over HTTPS (the cookie is then
    /// `Secure`).
    pub fn new(
        platform: Platform,
        scripts: Arc<Scripts>,
        federation: Arc<Federation>,
        addresses: Arc<AddressPolicy>,
        auth: Auth,
        secure: bool,
    ) -> Arc<Self> {
        let mut templates = Environment::new();
        for (name, source) in [
            ("base.html", include_str!("console/base.html")),
            ("sign_in.html", include_str!("console/sign_in.html")),
            ("approvals.html", include_str!("console/approvals.html")),
            ("tokens.html", include_str!("console/tokens.html")),
            ("audit.html", include_str!("console/audit.html")),
            ("scripts.html", include_str!("console/scripts.html")),
            ("script.html", include_str!("console/script.html")),
            ("runs.html", include_str!("console/runs.html")),
            ("run.html", include_str!("console/run.html")),
            ("upstreams.html", include_str!("console/upstreams.html")),
            ("refused.html", include_str!("console/refused.html")),
        ] {
            templates
                .add_template(name, source)
                .expect("the console's templates parse");
        }
        templates.add_filter("time", |ms: i64| rfc3339_from_ms(ms));
        // Indented JSON, as text: the page escapes it like any other text.
        templates.add_filter("pretty", |value: minijinja::Value| {
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
        });
        Arc::new(Console {
            platform,
            scripts,
            federation,
            sessions: Sessions::default(),
            templates,
            addresses,
            auth,
            secure,
        })
    }

    fn render(&self, status: StatusCode, name: &str, values: minijinja::Value) -> Response {
        match self
            .templates
            .get_template(name)
            .and_then(|t| t.render(values))
        {
            Ok(html) => (
                status,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                html,
            )
                .into_response(),
            Err(error) => {
                let refusal = larkgate_platform::Refusal::internal(
                    "the page could not be shown",
                    format_args!("console template {name}: {error:#}"),
                );
                (StatusCode::INTERNAL_SERVER_ERROR, refusal.message).into_response()
            }
        }
    }
}

/// The console's routes, under `/admin`.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/admin", get(home))
        .route("/admin/", get(home))
        .route("/admin/console.css", get(stylesheet))
        .route("/admin/favicon.svg", get(icon))
        .route("/admin/sign-in", get(sign_in_page).post(sign_in))
        .route("/admin/sign-out", post(sign_out))
        .route("/admin/approvals", get(approvals_page))
        .route("/admin/approvals/{id}", post(resolve))
        .route("/admin/tokens", get(tokens_page).post(create_token))
        .route("/admin/audit", get(pages::audit))
        .route("/admin/scripts", get(pages::scripts))
        .route("/admin/scripts/{name}", get(pages::script))
        .route("/admin/scripts/{name}/publish", post(pages::publish))
        .route("/admin/runs", get(pages::runs))
        .route("/admin/runs/{id}", get(pages::run))
        .route("/admin/upstreams", get(pages::upstreams))
        .route(
            "/admin/upstreams/{alias}/approve",
            post(pages::approve_tools),
        )
        .route("/admin/tokens/{id}/revoke", post(revoke_token))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&console),
            guard,
        ))
        .with_state(console)
}

/// `Host` must name this server; a POST's `Origin`, when sent, must be this console's; every
/// answer carries the security headers. (`Referrer-Policy: same-origin`, not `no-referrer`:
/// under `no-referrer` a browser sends `Origin: null` with the console's own forms.)
async fn guard(State(console): State<Arc<Console>>, mut request: Request, next: Next) -> Response {
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
fn same_origin(origin: &str, host: &str, secure: bool) -> bool {
    let scheme = if secure { "https://" } else { "http://" };
    origin
        .strip_prefix(scheme)
        .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
}

/// A signed-in request: the session, and its principal as the store says now.
struct Signed {
    id: String,
    session: Session,
    principal: Principal,
    flash: Option<Flash>,
}

/// Why a request is not signed in.
enum NotSignedIn {
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

async fn signed_in(console: &Console, headers: &HeaderMap) -> Result<Signed, NotSignedIn> {
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
    Ok(Signed {
        id: id.to_owned(),
        session,
        principal,
        flash,
    })
}

/// A refusal as a person reads it: what happened, and what to do.
fn said(refusal: &larkgate_platform::Refusal) -> String {
    match &refusal.hint {
        Some(hint) => format!("{} ({hint})", refusal.message),
        None => refusal.message.clone(),
    }
}

/// What someone without the admin role is told on an administrator's page or form.
const ADMIN_ONLY: &str = "This is for principals with the admin role.";

/// What every page's frame shows.
fn frame(signed: &Signed, page: &str) -> minijinja::Value {
    context! {
        page,
        principal => signed.principal.id.as_str(),
        roles => minijinja::Value::from(Serde(&signed.principal.roles)),
        admin => access::has_any_role(&signed.principal, ADMINS),
        csrf => signed.session.csrf.as_str(),
        flash => minijinja::Value::from(Serde(&signed.flash)),
    }
}

fn refused(console: &Console, signed: &Signed, status: StatusCode, why: &str) -> Response {
    console.render(
        status,
        "refused.html",
        context! { why, ..frame(signed, "") },
    )
}

/// A form's CSRF token, checked against the session's: the one refusal for a form that did not
/// come from this session's own page (`None`: the form is the session's own).
fn csrf_refusal(console: &Console, signed: &Signed, sent: Option<&str>) -> Option<Response> {
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

async fn home(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match signed_in(&console, &headers).await {
        Ok(_) => Redirect::to("/admin/approvals").into_response(),
        Err(not) => not.into_response(),
    }
}

async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console/console.css"),
    )
        .into_response()
}

async fn icon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
         <circle cx=\"8\" cy=\"8\" r=\"7\" fill=\"#2f6f4f\"/></svg>",
    )
        .into_response()
}

#[derive(Debug, Default, Deserialize)]
struct SignInQuery {
    ended: Option<String>,
}

async fn sign_in_page(
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
struct SignInForm {
    #[serde(default)]
    token: String,
}

async fn sign_in(
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

#[derive(Debug, Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn sign_out(
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

#[derive(Debug, Default, Deserialize)]
struct ApprovalsQuery {
    status: Option<String>,
}

/// An approval as the page shows it.
#[derive(Debug, serde::Serialize)]
struct ApprovalRow {
    #[serde(flatten)]
    view: ApprovalView,
    /// The arguments as indented JSON.
    arguments_text: Option<String>,
}

async fn approvals_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    axum::extract::Query(query): axum::extract::Query<ApprovalsQuery>,
) -> Response {
    let signed = match signed_in(&console, &headers).await {
        Ok(signed) => signed,
        Err(not) => return not.into_response(),
    };
    let services = console.platform.services();
    let status = query.status.as_deref().unwrap_or("pending");
    let listed = approvals::list(
        services.store.as_ref(),
        services.policy.approvals.pending_ttl_seconds,
        status,
    )
    .await;
    let approvals = match listed {
        Ok(list) => list,
        Err(refusal) => {
            return refused(&console, &signed, StatusCode::BAD_REQUEST, &said(&refusal));
        }
    };
    let rows: Vec<ApprovalRow> = approvals
        .into_iter()
        .map(ApprovalView::from)
        .map(|view| ApprovalRow {
            arguments_text: view
                .arguments
                .as_ref()
                .and_then(|a| serde_json::to_string_pretty(a).ok()),
            view,
        })
        .collect();
    console.render(
        StatusCode::OK,
        "approvals.html",
        context! {
            approvals => minijinja::Value::from(Serde(&rows)),
            status,
            statuses => ["pending", "approved", "denied", "used", "expired", "all"],
            ..frame(&signed, "approvals")
        },
    )
}

#[derive(Debug, Deserialize)]
struct DecisionForm {
    csrf: Option<String>,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: String,
}

async fn resolve(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<DecisionForm>,
) -> Response {
    let signed = match signed_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let approve = match form.decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => {
            console
                .sessions
                .flash(&signed.id, Flash::error("Choose approve or deny."));
            return Redirect::to("/admin/approvals").into_response();
        }
    };
    let reason = Some(form.reason.as_str()).filter(|r| !r.trim().is_empty());
    let decision = Decision { approve, reason };
    let flash = match approvals::resolve_in(
        console.platform.services(),
        &signed.principal,
        &id,
        decision,
    )
    .await
    {
        Ok(approval) => Flash::ok(format!(
            "{} {} for {}: {}",
            if approve { "Approved" } else { "Denied" },
            approval.id,
            approval.principal,
            approval.tool
        )),
        Err(refusal) => Flash::error(said(&refusal)),
    };
    console.sessions.flash(&signed.id, flash);
    Redirect::to("/admin/approvals").into_response()
}

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

async fn tokens_page(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let signed = match pages::admin(&console, &headers).await {
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
struct CreateTokenForm {
    csrf: Option<String>,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    expires: String,
}

/// Checks a form: signed in, and the session's own form.
async fn signed_form(
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
async fn admin_form(
    console: &Console,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Signed, Box<Response>> {
    let signed = signed_form(console, headers, csrf).await?;
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

async fn create_token(
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

async fn revoke_token(
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
