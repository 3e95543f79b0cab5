//! The approvals page: requests with their arguments, approved or denied with a reason.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use larkgate_platform::approvals::{self, tools::ApprovalView};
use larkgate_platform::display;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use super::guard::{signed_form, signed_in};
use super::session::Flash;
use super::{Console, frame, refused, said};

#[derive(Debug, Default, Deserialize)]
pub(super) struct ApprovalsQuery {
    status: Option<String>,
    after: Option<String>,
}

/// How many approvals one page of the console shows.
const PAGE: i64 = 20;

/// An approval as the page shows it.
#[derive(Debug, serde::Serialize)]
struct ApprovalRow {
    #[serde(flatten)]
    view: ApprovalView,
    /// The arguments as indented JSON, every character that would act or hide written as
    /// an escape ([`larkgate_platform::display`]).
    arguments_text: Option<String>,
    /// Values among them that show as other values (`"ｐｒｏｄ" shows as "prod"`).
    lookalikes: Vec<String>,
}

/// The most look-alike values named for one approval.
const MAX_LOOKALIKES: usize = 10;

pub(super) async fn approvals_page(
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
        services.policy().approvals.pending_ttl_seconds,
        status,
        query.after.as_deref(),
        PAGE,
        services.clock.now_ms(),
    )
    .await;
    let page = match listed {
        Ok(page) => page,
        Err(refusal) => {
            return refused(&console, &signed, StatusCode::BAD_REQUEST, &said(&refusal));
        }
    };
    let now_ms = services.clock.now_ms();
    let rows: Vec<ApprovalRow> = page
        .approvals
        .into_iter()
        .map(|a| ApprovalView::listed(a, now_ms))
        .map(|view| ApprovalRow {
            arguments_text: view.arguments.as_ref().map(|a| display::json(a, true)),
            lookalikes: view
                .arguments
                .as_ref()
                .map(|a| display::lookalikes(a, MAX_LOOKALIKES))
                .unwrap_or_default(),
            view,
        })
        .collect();
    console.render(
        StatusCode::OK,
        "approvals.html",
        context! {
            approvals => minijinja::Value::from(Serde(&rows)),
            status,
            next => page.next,
            first_page => query.after.is_none(),
            statuses => ["pending", "approved", "denied", "used", "expired", "withdrawn", "all"],
            ..frame(&signed, "approvals")
        },
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct DecisionForm {
    csrf: Option<String>,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: String,
}

pub(super) async fn resolve(
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
    let mut arguments = serde_json::Map::new();
    arguments.insert("id".into(), id.into());
    let reason = form.reason.trim();
    if !reason.is_empty() {
        arguments.insert("reason".into(), form.reason.into());
    }
    let tool = if approve {
        "approvals_approve"
    } else {
        "approvals_deny"
    };
    let flash = match console.call(&signed.principal, tool, arguments).await {
        Ok(resolved) => {
            let approval = &resolved["approval"];
            let field = |name: &str| approval[name].as_str().unwrap_or_default().to_owned();
            Flash::ok(format!(
                "{} {} for {}: {}",
                if approve { "Approved" } else { "Denied" },
                field("id"),
                field("principal"),
                field("tool")
            ))
        }
        Err(refusal) => Flash::error(said(&refusal)),
    };
    console.sessions.flash(&signed.id, flash);
    Redirect::to("/admin/approvals").into_response()
}
