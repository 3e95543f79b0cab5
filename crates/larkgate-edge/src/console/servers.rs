//! The servers page: each virtual server (`[[servers]]`, and those added at run time, with who
//! added them) with its endpoint, its patterns and tool search, and what it serves the
//! signed-in admin now (the same listing and search a client of the server with the admin's
//! token gets).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;

use larkgate_platform::{RunContext, SessionIdentity};

use super::guard::admin;
use super::{Console, frame};

pub(super) async fn servers(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let signed = match admin(&console, &headers).await {
        Ok(signed) => signed,
        Err(response) => return *response,
    };
    let platform = &console.platform;
    let table = platform.servers();
    let shown: Vec<_> = table
        .entries()
        .into_iter()
        .map(|entry| {
            // A stored server shadowed by the configuration file's serves nothing of its own.
            let served_by = table.get(&entry.server.name).filter(|_| !entry.shadowed);
            let counts = served_by.map(|server| {
                let identity = SessionIdentity {
                    run: RunContext::direct(signed.principal.clone()),
                    label: "console".to_owned(),
                    server: Some(Arc::clone(&server)),
                };
                let served = platform.served_tools(&identity).len();
                // Without tool search, a server lists what it serves.
                let listed = if server.tool_search() {
                    platform.list(Some(&identity)).len()
                } else {
                    served
                };
                context! {
                    listed,
                    served,
                    prompts => platform.list_prompts(Some(&identity)).len(),
                    resources => platform.list_resources(Some(&identity)).len(),
                }
            });
            context! {
                server => Serde(&entry.server),
                added => Serde(&entry.added),
                shadowed => entry.shadowed,
                counts,
            }
        })
        .collect();
    console.render(
        StatusCode::OK,
        "servers.html",
        context! { servers => shown, ..frame(&signed, "servers") },
    )
}
