//! Virtual servers added at run time: `larkgate server add | remove` on the host and the
//! `server_add` / `server_remove` tools ([`tools`]) save them in the store, and every
//! process serving from that store follows it ([`crate::servers::ServerTable::follow`]), so a server
//! added through one replica is served by all of them.
//!
//! # Threat model
//!
//! Whoever may add a server holds the `admin` role (and, over MCP, a person's own session).
//! A server only narrows what a principal may reach (see [`crate::servers`]), so adding one grants
//! nobody anything. What such a caller could still try, and what stops it:
//!
//! - **Taking a name it should not:** a name that is not one path segment, or the name of a
//!   server of the configuration file (which the operator reviews and deploys), is refused;
//!   so is a second add of a stored name (`replace` says a change is meant).
//! - **Filling the store or the memory of every replica:** at most [`MAX_STORED`] stored
//!   servers, each with at most [`MAX_PATTERNS`] patterns per list and a description of at most
//!   [`MAX_DESCRIPTION`] characters (it is told to every client of the server as instructions).
//! - **Hiding a change:** each add, replacement and removal is an audit event under the caller
//!   (`server_added`, `server_removed`) with what the server serves.

pub mod tools;

use larkgate_store::{ServerRecord, ServerSave, StoreError, now_ms};
use serde::Serialize;

use crate::audit::{AuditEntry, EventKind};
use crate::registry::Registry;
use crate::servers::{ServerSpec, ServerTable, VirtualServer};
use crate::services::Services;

/// The most servers the store keeps.
pub const MAX_STORED: usize = 100;
/// The most patterns in each of a stored server's lists (tools, prompts, resources, pinned).
pub const MAX_PATTERNS: usize = 100;
/// The longest description of a stored server, in characters.
pub const MAX_DESCRIPTION: usize = 2000;

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The request itself is wrong: its words are for the caller.
    #[error("{0}")]
    Invalid(String),
    /// The store or the audit log failed: for the log, not the caller.
    #[error("{0}")]
    Failed(String),
}

/// What [`add`] saved.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Saved {
    /// The server's name.
    pub name: String,
    /// Where it is served, under larkgate's address.
    pub path: String,
    /// Whether it replaced a stored server of that name.
    pub replaced: bool,
    /// How many tools it serves now (before each caller's roles narrow them), where the
    /// tools served are known (a running gateway's; not `larkgate server add` on the host).
    pub tools_served: Option<usize>,
    /// What the caller should look at: patterns that match no tool now.
    pub warnings: Vec<String>,
}

/// Checks `spec` as one to store: what any server must be ([`VirtualServer::new`]), within
/// the bounds of a stored one.
pub fn check(spec: &ServerSpec) -> Result<VirtualServer, ServerError> {
    let at = |what: String| ServerError::Invalid(format!("servers.{}: {what}", spec.name));
    let server = VirtualServer::new(spec.clone()).map_err(ServerError::Invalid)?;
    if let Some(description) = &spec.description
        && description.chars().count() > MAX_DESCRIPTION
    {
        return Err(at(format!(
            "its description is longer than {MAX_DESCRIPTION} characters (clients are told it \
             as instructions); shorten it"
        )));
    }
    for (list, len) in [
        ("tools", spec.tools.len()),
        ("prompts", spec.prompts.len()),
        ("resources", spec.resources.len()),
        ("pinned", spec.pinned.len()),
    ] {
        if len > MAX_PATTERNS {
            return Err(at(format!(
                "{list} has {len} patterns, more than {MAX_PATTERNS}; use `*` to match many \
                 names with one"
            )));
        }
    }
    Ok(server)
}

/// Saves `spec` as a server added (or with `replace`, replaced) by `actor`, records
/// `server_added`, and serves it in `table` at once (other processes follow the store).
/// `registry` is the tools in force, where they are known, to say what it serves.
pub async fn add(
    services: &Services,
    table: &ServerTable,
    registry: Option<&Registry>,
    spec: ServerSpec,
    replace: bool,
    actor: &str,
) -> Result<Saved, ServerError> {
    let server = check(&spec)?;
    let name = spec.name.clone();
    if table.configured(&name) {
        return Err(ServerError::Invalid(format!(
            "server {name:?} is configured in the configuration file; change it there"
        )));
    }
    let store = &services.store;
    if !replace {
        let stored = store.servers().await.map_err(failed)?;
        if stored.len() >= MAX_STORED {
            return Err(ServerError::Invalid(format!(
                "the store holds {MAX_STORED} servers, its most; remove one first"
            )));
        }
    }
    let record = ServerRecord {
        name: name.clone(),
        spec: serde_json::to_string(&spec).map_err(failed)?,
        added_by: actor.to_owned(),
        added_at_ms: now_ms(),
    };
    let mode = if replace {
        ServerSave::Replace
    } else {
        ServerSave::New
    };
    match store.save_server(record, mode).await {
        Ok(()) => {}
        Err(StoreError::Conflict(_)) => {
            return Err(ServerError::Invalid(format!(
                "a server named {name:?} was added already; pass replace to change it, or \
                 remove it first"
            )));
        }
        Err(StoreError::Missing(_)) => {
            return Err(ServerError::Invalid(format!(
                "there is no server {name:?} added at run time to replace; add it without \
                 replace"
            )));
        }
        Err(error) => return Err(failed(error)),
    }
    let verb = if replace { "replaced" } else { "added" };
    event(
        services,
        actor,
        EventKind::ServerAdded,
        format!(
            "server {name:?} {verb}: {}",
            serde_json::to_string(&server.view()).map_err(failed)?
        ),
    )?;
    if let Err(error) = table.follow(store.as_ref()).await {
        // Saved: the next pass of the follower serves it.
        tracing::warn!(%error, "a server added is served at the next pass");
    }
    let (tools_served, warnings) = match registry {
        Some(registry) => served(&server, &spec, registry),
        None => (None, Vec::new()),
    };
    Ok(Saved {
        path: format!("/mcp/{name}"),
        name,
        replaced: replace,
        tools_served,
        warnings,
    })
}

/// How many of `registry`'s tools `server` serves, and its patterns that match none of them.
fn served(
    server: &VirtualServer,
    spec: &ServerSpec,
    registry: &Registry,
) -> (Option<usize>, Vec<String>) {
    let count = registry
        .iter()
        .filter(|tool| server.serves_tool(&tool.spec.name, &tool.spec.origin))
        .count();
    let warnings = spec
        .tools
        .iter()
        .chain(&spec.pinned)
        .filter(|pattern| !registry.iter().any(|tool| pattern.matches(&tool.spec.name)))
        .map(|pattern| {
            format!(
                "{:?} matches no tool now (an upstream's tools are named ALIAS__TOOL, a \
                 published script's script__NAME)",
                pattern.as_str()
            )
        })
        .collect();
    (Some(count), warnings)
}

/// Removes server `name` (one added at run time) as `actor`, recording `server_removed`, and
/// stops serving it in `table` at once; `false` when the store has no such server.
pub async fn remove(
    services: &Services,
    table: &ServerTable,
    name: &str,
    actor: &str,
) -> Result<bool, ServerError> {
    let store = &services.store;
    let removed = store.remove_server(name).await.map_err(failed)?;
    if removed {
        event(
            services,
            actor,
            EventKind::ServerRemoved,
            format!("server {name:?} removed"),
        )?;
        if let Err(error) = table.follow(store.as_ref()).await {
            tracing::warn!(%error, "a server removed stops being served at the next pass");
        }
    }
    Ok(removed)
}

fn failed(error: impl std::fmt::Display) -> ServerError {
    ServerError::Failed(error.to_string())
}

fn event(
    services: &Services,
    actor: &str,
    kind: EventKind,
    detail: String,
) -> Result<(), ServerError> {
    services
        .audit
        .record_event(AuditEntry::event(actor, kind, detail))
        .map_err(|e| ServerError::Failed(format!("the audit log could not be written: {e}")))
}
