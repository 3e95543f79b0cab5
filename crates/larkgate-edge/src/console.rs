//! The admin console at `/admin`, served by `larkgate serve` beside `/mcp`: server-rendered
//! pages (HTML auto-escaped by minijinja), plain forms answered with POST-redirect-GET, no
//! script at all. An action that is also an MCP tool (approving or denying a request,
//! publishing a script, approving an upstream's quarantined tools) is that tool's call, made
//! through the platform's pipeline as the signed-in principal ([`Console::call`]): the policy's
//! rules, rate limits and audit treat it as they treat the same call from any other edge.
//!
//! | page | who | what |
//! | --- | --- | --- |
//! | `/admin/approvals` | `approver`, `admin` | requests with their arguments; approve or deny with a reason |
//! | `/admin/audit` | `admin` | the audit chain, filtered by principal and tool; verify it |
//! | `/admin/scripts`, `/admin/scripts/NAME` | `admin` | drafts and versions; a draft's source, its diff from the latest version, its review run's intended writes and pins; publish |
//! | `/admin/runs`, `/admin/runs/ID` | `admin` | run records, filtered; one run whole |
//! | `/admin/upstreams` | `admin` | each upstream's status and cause; quarantined tools with their definitions' diff and the scripts they suspend; approve |
//! | `/admin/servers` | `admin` | the virtual servers: each one's endpoint, patterns, tool search, and what it serves the signed-in admin |
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

mod approvals;
mod audit;
mod guard;
mod runs;
mod scripts;
mod servers;
pub mod session;
mod sign_in;
mod tokens;
mod upstreams;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use larkgate_platform::Platform;
use larkgate_platform::access::{self, ADMINS};
use larkgate_platform::capabilities::rfc3339_from_ms;
use larkgate_scripts::Scripts;
use larkgate_upstream::federation::Federation;
use minijinja::value::Serde;
use minijinja::{Environment, context};

use crate::Auth;
use crate::address::AddressPolicy;
use guard::{Signed, signed_in};
use session::Sessions;

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
            ("servers.html", include_str!("console/servers.html")),
            ("refused.html", include_str!("console/refused.html")),
        ] {
            templates
                .add_template(name, source)
                .expect("the console's templates parse");
        }
        // Text from outside (an upstream's cause, a caller's argument, a script's source)
        // shows as text on every page: characters that reorder or hide what is displayed are
        // written as escapes, line breaks and tabs kept ([`larkgate_platform::display`]); then
        // it is HTML-escaped as before.
        templates.set_formatter(|out, state, value| {
            if !value.is_safe()
                && let Some(text) = value.as_str()
                && let std::borrow::Cow::Owned(shown) =
                    larkgate_platform::display::escaped_text(text)
            {
                return minijinja::escape_formatter(out, state, &minijinja::Value::from(shown));
            }
            minijinja::escape_formatter(out, state, value)
        });
        templates.add_filter("time", |ms: i64| rfc3339_from_ms(ms));
        templates.add_filter("ago", |seconds: u64| ago(seconds));
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

    /// Carries out a console action as the tool call it is (`approvals_approve`,
    /// `script_publish`, ...): through the platform's pipeline, as `principal` in a direct
    /// session labelled `console`. The policy's rules, rate limits, approval gate and audit
    /// apply to it exactly as to the same call over MCP or stdio: the console is one more edge,
    /// never a way around them. The answer is the tool's structured output.
    async fn call(
        &self,
        principal: &larkgate_store::Principal,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value, larkgate_platform::Refusal> {
        let identity = Arc::new(larkgate_platform::SessionIdentity {
            run: larkgate_platform::RunContext::direct(principal.clone()),
            label: "console".into(),
            server: None,
        });
        let output = self
            .platform
            .call(Some(identity), tool, Some(arguments))
            .await?;
        Ok(larkgate_binding::to_json(&larkgate_binding::Value::Map(
            output,
        )))
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
        .route(
            "/admin/sign-in",
            get(sign_in::sign_in_page).post(sign_in::sign_in),
        )
        .route("/admin/sign-out", post(sign_in::sign_out))
        .route("/admin/approvals", get(approvals::approvals_page))
        .route("/admin/approvals/{id}", post(approvals::resolve))
        .route(
            "/admin/tokens",
            get(tokens::tokens_page).post(tokens::create_token),
        )
        .route("/admin/tokens/{id}/revoke", post(tokens::revoke_token))
        .route("/admin/audit", get(audit::audit))
        .route("/admin/scripts", get(scripts::scripts))
        .route("/admin/scripts/{name}", get(scripts::script))
        .route("/admin/scripts/{name}/publish", post(scripts::publish))
        .route("/admin/runs", get(runs::runs))
        .route("/admin/runs/{id}", get(runs::run))
        .route("/admin/upstreams", get(upstreams::upstreams))
        .route("/admin/servers", get(servers::servers))
        .route(
            "/admin/upstreams/{alias}/approve",
            post(upstreams::approve_tools),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&console),
            guard::guard,
        ))
        .with_state(console)
}

/// The most audit records or runs one page shows.
const MAX_ROWS: usize = 1000;

/// An empty text field is no filter.
fn filter(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
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
/// `seconds` ago, in the largest whole unit: `just now`, `42 s ago`, `5 min ago`, `3 h ago`,
/// `2 days ago`.
fn ago(seconds: u64) -> String {
    match seconds {
        0 => "just now".to_owned(),
        1..60 => format!("{seconds} s ago"),
        60..3600 => format!("{} min ago", seconds / 60),
        3600..86_400 => format!("{} h ago", seconds / 3600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

fn frame(signed: &Signed, page: &str) -> minijinja::Value {
    context! {
        page,
        principal => signed.principal.id.as_str(),
        roles => minijinja::Value::from(Serde(&signed.principal.roles)),
        admin => access::has_any_role(&signed.principal, ADMINS),
        csrf => signed.session.csrf.as_str(),
        flash => minijinja::Value::from(Serde(&signed.flash)),
        pending => signed.pending,
    }
}

fn refused(console: &Console, signed: &Signed, status: StatusCode, why: &str) -> Response {
    console.render(
        status,
        "refused.html",
        context! { why, ..frame(signed, "") },
    )
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
