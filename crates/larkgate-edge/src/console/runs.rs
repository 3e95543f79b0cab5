//! The runs pages: run records, filtered, and one run whole.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use larkgate_scripts::{RunView, RunsFilter};

use super::guard::admin;
use super::{Console, filter, frame, refused, said};

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
