//! The administrators' pages: the audit chain, scripts, runs and upstreams. Each reads and acts
//! through the services the CLI and the MCP tools use (`larkgate_platform::audit`, the script
//! service, `larkgate_upstream::manage`), as the signed-in principal.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use larkgate_platform::access::{self, ADMINS};
use larkgate_platform::audit;
use larkgate_scripts::{RunView, RunsFilter};
use larkgate_store::AuditQuery;
use larkgate_upstream::manage;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use super::session::Flash;
use super::{Console, CsrfForm, Signed, admin_form, frame, refused, said, signed_in};

/// The most audit records or runs one page shows.
const MAX_ROWS: usize = 1000;

/// A signed-in administrator, or the answer for anyone else.
pub(super) async fn admin(console: &Console, headers: &HeaderMap) -> Result<Signed, Box<Response>> {
    let signed = signed_in(console, headers)
        .await
        .map_err(|not| Box::new(not.into_response()))?;
    if !access::has_any_role(&signed.principal, ADMINS) {
        return Err(Box::new(refused(
            console,
            &signed,
            StatusCode::FORBIDDEN,
            super::ADMIN_ONLY,
        )));
    }
    Ok(signed)
}

/// An empty text field is no filter.
fn filter(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct AuditQueryForm {
    principal: Option<String>,
    tool: Option<String>,
    n: Option<usize>,
    verify: Option<String>,
}

pub(super) async fn audit(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<AuditQueryForm>,
) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let store = console.platform.services().store.as_ref();
    let n = query.n.unwrap_or(100).clamp(1, MAX_ROWS);
    let principal = filter(query.principal);
    let tool = filter(query.tool);
    let records = store
        .audit_records(AuditQuery {
            limit: Some(n),
            newest: true,
            principal: principal.clone(),
            tool: tool.clone(),
            ..Default::default()
        })
        .await;
    let mut records = match records {
        Ok(records) => records,
        Err(error) => {
            let refusal =
                larkgate_platform::Refusal::store("the audit chain could not be read", error);
            return refused(
                &console,
                &signed,
                StatusCode::SERVICE_UNAVAILABLE,
                &said(&refusal),
            );
        }
    };
    records.reverse();
    // Verifying reads the whole chain: only when asked.
    let verified = match query.verify {
        Some(_) => Some(match audit::verify(store).await {
            Ok(report) => context! {
                intact => report.intact(),
                records => report.records,
                broken => report.first_broken.map(|(seq, why)| format!("record {seq}: {why}")),
                head => report.head_mismatch,
                open => report.intents_without_outcome.len(),
            },
            Err(error) => {
                let refusal =
                    larkgate_platform::Refusal::store("the audit chain could not be read", error);
                context! { failed => said(&refusal) }
            }
        }),
        None => None,
    };
    console.render(
        StatusCode::OK,
        "audit.html",
        context! {
            records => Serde(&records),
            filter_principal => principal,
            tool,
            n,
            verified,
            ..frame(&signed, "audit")
        },
    )
}

pub(super) async fn scripts(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let listed = match (
        console.scripts.drafts().await,
        console.scripts.published().await,
    ) {
        (Ok(drafts), Ok(published)) => (drafts, published),
        (Err(refusal), _) | (_, Err(refusal)) => {
            return refused(
                &console,
                &signed,
                StatusCode::SERVICE_UNAVAILABLE,
                &said(&refusal),
            );
        }
    };
    let (drafts, published) = listed;
    let drafts: Vec<_> = drafts
        .into_iter()
        .map(|d| context! { name => d.name, author => d.author, updated_at_ms => d.updated_at_ms })
        .collect();
    console.render(
        StatusCode::OK,
        "scripts.html",
        context! {
            drafts,
            published => Serde(&published),
            ..frame(&signed, "scripts")
        },
    )
}

pub(super) async fn script(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    // The draft as publishing would take it, or only its versions when it has no draft.
    let preview = console
        .scripts
        .publish_preview(&signed.principal, &name)
        .await;
    let versions = console.scripts.history(&name).await.unwrap_or_default();
    let preview = match preview {
        Ok(preview) => Some(preview),
        Err(refusal) if versions.is_empty() => {
            return refused(&console, &signed, StatusCode::NOT_FOUND, &said(&refusal));
        }
        Err(_) => None,
    };
    let draft = preview.as_ref().map(|p| {
        let pins: Vec<_> = p
            .pins
            .iter()
            .map(|pin| context! { tool => pin.tool.as_str(), hash => pin.hash.as_str() })
            .collect();
        context! {
            source => p.source.as_str(),
            hash => p.hash.as_str(),
            author => p.author.as_str(),
            previous_version => p.previous_version,
            diff => p.diff.as_deref(),
            review => Serde(&p.review),
            pins,
        }
    });
    console.render(
        StatusCode::OK,
        "script.html",
        context! {
            name,
            draft,
            versions => Serde(&versions),
            ..frame(&signed, "scripts")
        },
    )
}

pub(super) async fn publish(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = match admin_form(&console, &headers, form.csrf.as_deref()).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let flash = match console.scripts.publish(&signed.principal, &name).await {
        Ok((version, _)) => Flash::ok(format!(
            "Published {name} version {}: it runs as script:{name} with {}'s roles [{}].",
            version.version,
            version.author,
            version.author_roles.join(", ")
        )),
        Err(refusal) => Flash::error(said(&refusal)),
    };
    console.sessions.flash(&signed.id, flash);
    Redirect::to(&format!("/admin/scripts/{}", url_path(&name))).into_response()
}

/// `text` as one URL path segment (script names are `[a-z0-9_]`; anything else is escaped).
fn url_path(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RunsQuery {
    script: Option<String>,
    principal: Option<String>,
    status: Option<String>,
}

pub(super) async fn runs(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<RunsQuery>,
) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let runs_filter = RunsFilter {
        script: filter(query.script),
        principal: filter(query.principal),
        status: filter(query.status),
        since_ms: None,
        limit: Some(200),
    };
    let runs = match console
        .scripts
        .run_records(&signed.principal, &runs_filter)
        .await
    {
        Ok(runs) => runs,
        Err(refusal) => {
            return refused(&console, &signed, StatusCode::BAD_REQUEST, &said(&refusal));
        }
    };
    let runs: Vec<RunView> = runs.into_iter().map(RunView::from).collect();
    console.render(
        StatusCode::OK,
        "runs.html",
        context! {
            runs => Serde(&runs),
            script => runs_filter.script,
            filter_principal => runs_filter.principal,
            status => runs_filter.status,
            ..frame(&signed, "runs")
        },
    )
}

pub(super) async fn run(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let run = match console.scripts.run_record(&signed.principal, &id).await {
        Ok(run) => RunView::from(run),
        Err(refusal) => {
            return refused(&console, &signed, StatusCode::NOT_FOUND, &said(&refusal));
        }
    };
    let result = run
        .result
        .as_ref()
        .and_then(|r| serde_json::to_string_pretty(r).ok());
    console.render(
        StatusCode::OK,
        "run.html",
        context! { run => Serde(&run), result, ..frame(&signed, "runs") },
    )
}

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
    let flash = match manage::review(
        &console.platform,
        &alias,
        tool.as_deref(),
        true,
        &signed.principal.id,
    )
    .await
    {
        Ok(reviewed) => {
            let approved: Vec<String> = reviewed
                .into_iter()
                .filter(|t| t.approved)
                .map(|t| t.name)
                .collect();
            if approved.is_empty() {
                Flash::error(format!("{alias}: nothing was quarantined to approve."))
            } else {
                Flash::ok(format!(
                    "Approved {}; the gateway serves the new definition within a second.",
                    approved.join(", ")
                ))
            }
        }
        Err(manage::ManageError::Failed(detail)) => Flash::error(said(
            &larkgate_platform::Refusal::internal("the review could not be saved", detail),
        )),
        Err(error) => Flash::error(error.to_string()),
    };
    console.sessions.flash(&signed.id, flash);
    Redirect::to("/admin/upstreams").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_path_segment() {
        assert_eq!(url_path("tidy_v2"), "tidy_v2");
        assert_eq!(url_path("../x?y#z"), "..%2Fx%3Fy%23z");
    }
}
