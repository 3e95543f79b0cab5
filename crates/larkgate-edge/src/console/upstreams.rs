//! The upstreams page: each upstream's status and cause; quarantined tools with their
//! definitions' diff and the scripts they suspend; approving them.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use larkgate_upstream::manage;

use super::guard::{admin, admin_form};
use super::session::Flash;
use super::{Console, filter, frame, said};

pub(super) async fn upstreams(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let mut shown = Vec::new();
    for upstream in console.federation.upstreams() {
        let status = upstream.status();
        // What changed in each quarantined tool, and which published scripts it suspends.
        let reviewed = if status.quarantined.is_empty() {
            Vec::new()
        } else {
            manage::review(
                &console.platform,
                &status.alias,
                None,
                false,
                &signed.principal.id,
            )
            .await
            .unwrap_or_default()
        };
        shown.push(context! { status => Serde(&status), reviewed => Serde(&reviewed) });
    }
    console.render(
        StatusCode::OK,
        "upstreams.html",
        context! { upstreams => shown, ..frame(&signed, "upstreams") },
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct ApproveForm {
    csrf: Option<String>,
    tool: Option<String>,
}

pub(super) async fn approve_tools(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(alias): Path<String>,
    Form(form): Form<ApproveForm>,
) -> Response {
    let signed = match admin_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let tool = filter(form.tool);
    let mut arguments = serde_json::Map::new();
    arguments.insert("alias".into(), alias.as_str().into());
    if let Some(tool) = &tool {
        arguments.insert("tool".into(), tool.as_str().into());
    }
    arguments.insert("approve".into(), true.into());
    let flash = match console
        .call(&signed.principal, "upstream_review", arguments)
        .await
    {
        Ok(reviewed) => {
            let approved: Vec<&str> = reviewed["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["approved"] == true)
                .filter_map(|t| t["name"].as_str())
                .collect();
            if approved.is_empty() {
                Flash::error(format!("{alias}: nothing was quarantined to approve."))
            } else {
                Flash::ok(format!(
                    "Approved {}; the gateway serves the new definition now.",
                    approved.join(", ")
                ))
            }
        }
        Err(refusal) => Flash::error(said(&refusal)),
    };
    console.sessions.flash(&signed.id, flash);
    Redirect::to("/admin/upstreams").into_response()
}
