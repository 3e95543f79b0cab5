//! The scripts pages: drafts and versions; a draft's source, its diff from the latest version,
//! its review run's intended writes and pins; publishing it.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use minijinja::value::Serde;

use super::guard::{CsrfForm, admin, admin_form};
use super::session::Flash;
use super::{Console, frame, refused, said};

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
    let mut arguments = serde_json::Map::new();
    arguments.insert("name".into(), name.as_str().into());
    let flash = match console
        .call(&signed.principal, "script_publish", arguments)
        .await
    {
        Ok(published) => {
            let roles: Vec<&str> = published["author_roles"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .collect();
            Flash::ok(format!(
                "Published {name} version {}: it runs as script:{name} with {}'s roles [{}].",
                published["version"],
                published["author"].as_str().unwrap_or_default(),
                roles.join(", ")
            ))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_path_segment() {
        assert_eq!(url_path("tidy_v2"), "tidy_v2");
        assert_eq!(url_path("../x?y#z"), "..%2Fx%3Fy%23z");
    }
}
