//! The audit page: the chain, filtered by principal and tool, and verified on request.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use larkgate_platform::audit;
use larkgate_store::AuditQuery;

use super::guard::admin;
use super::{Console, MAX_ROWS, filter, frame, refused, said};

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
