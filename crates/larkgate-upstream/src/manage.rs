//! Changing upstreams: adding one, reviewing its quarantined tools, removing it. One
//! implementation for `larkgate upstream ...` on the host and for the admin tools a running
//! gateway serves ([`crate::admin`]); each change is saved in the store (where a running
//! gateway follows it, see [`crate::federation::Federation::sync`]) and is an audit event
//! under the admin who made it.

use std::net::SocketAddr;
use std::sync::Arc;

use larkgate_platform::Platform;
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::registry::script_tool_name;
use larkgate_store::{PinStatus, UpstreamRecord, now_ms};
use serde::Serialize;

use crate::config::UpstreamConfig;
use crate::federation::{audit_pin, check_and_pin};
use crate::guard::Resolve;
use crate::pinning::{approve, difference};
use crate::tools::{SEPARATOR, adopt, distinct};

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The request itself is wrong (a bad alias or URL, one taken, nothing to remove): its
    /// words are for the caller.
    #[error("{0}")]
    Invalid(String),
    /// The server could not be reached or listed: nothing was saved; its words are plain.
    #[error("{0}")]
    Unreachable(String),
    /// The store or the audit log failed: for the log, not the caller.
    #[error("{0}")]
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> ManageError {
    ManageError::Failed(e.to_string())
}

/// What `add` found at the server, and kept.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Added {
    /// The alias.
    pub alias: String,
    /// The server's name and version, when it gave them.
    pub server: Option<String>,
    /// The negotiated protocol revision.
    pub protocol: Option<String>,
    /// The tools federated, by their larkgate names.
    pub tools: Vec<AddedTool>,
    /// Tools dropped for their names, with why.
    pub dropped_for_names: Vec<String>,
    /// Tools dropped over `max_tools`.
    pub dropped_over_max_tools: usize,
}

/// One tool `add` federated.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct AddedTool {
    /// Its larkgate name (`<alias>__<name>`).
    pub name: String,
    /// Whether the server declares it read-only (drafts may call it).
    pub read_only: bool,
}

/// Whether `config` could be added, before anything is asked of the server: it is valid, and
/// its alias is free (`taken` are the configuration file's aliases) and can be one.
pub async fn addable(
    platform: &Platform,
    config: &UpstreamConfig,
    taken: &[String],
) -> Result<(), ManageError> {
    config.validate().map_err(ManageError::Invalid)?;
    let alias = &config.alias;
    let stored = platform
        .services()
        .store
        .upstreams()
        .await
        .map_err(failed)?;
    if taken.contains(alias) || stored.iter().any(|u| &u.alias == alias) {
        return Err(ManageError::Invalid(format!(
            "an upstream named {alias:?} exists already; remove it first to replace it"
        )));
    }
    platform
        .registry()
        .check_alias(alias)
        .map_err(|e| ManageError::Invalid(format!("{alias:?} cannot be an alias: {e}")))
}

/// Signs `actor` larkgate in to OAuth upstream `config` ([`crate::oauth::login`]: `show` is
/// given the URL to open in a browser) and records `upstream_signed_in`. The tokens are
/// stored sealed with `key`; a running gateway connects a down upstream with them within a
/// second.
pub async fn sign_in(
    platform: &Platform,
    config: &UpstreamConfig,
    actor: &str,
    listen: Option<SocketAddr>,
    resolver: Arc<dyn Resolve>,
    key: Result<Arc<crate::credentials::CredentialKey>, crate::credentials::CredentialError>,
    show: impl FnOnce(&str),
) -> Result<(), ManageError> {
    let store = &platform.services().store;
    crate::oauth::login(config, listen, resolver, store, key, show)
        .await
        .map_err(ManageError::Unreachable)?;
    event(
        platform,
        actor,
        EventKind::UpstreamSignedIn,
        format!(
            "signed in to upstream {:?} at {}",
            config.alias,
            config.target()
        ),
    )
    .map_err(ManageError::Failed)
}

/// Adds upstream `config` as `actor`: connects, lists its tools, pins every definition, saves
/// it, and records `upstream_added`. Nothing is saved when the server cannot be reached or
/// listed. `taken` are the aliases of the configuration file's upstreams.
pub async fn add(
    platform: &Platform,
    config: &UpstreamConfig,
    taken: &[String],
    actor: &str,
    listen: Option<SocketAddr>,
    resolver: Arc<dyn Resolve>,
) -> Result<Added, ManageError> {
    addable(platform, config, taken).await?;
    let alias = config.alias.clone();
    let store = &platform.services().store;
    // Connect and list before anything is saved.
    let client = config.connect(listen, resolver, store).await.map_err(|e| {
        ManageError::Unreachable(format!(
            "{alias}: cannot connect to {}: {e}",
            config.target()
        ))
    })?;
    let listed = client.list_tools().await;
    let server = client.server_shown();
    let protocol = client.protocol_version().map(|v| v.to_string());
    let dropped_over_max_tools = client.dropped_tools();
    client.close().await;
    let tools = listed
        .map_err(|e| ManageError::Unreachable(format!("{alias}: cannot list its tools: {e}")))?;
    let (tools, repeated) = distinct(tools);
    let mut adoption = adopt(&alias, &tools, config.approval);
    adoption.invalid.extend(repeated);
    // Pinned first: a running gateway that sees the upstream finds its pins.
    check_and_pin(platform, &alias, config.approval, &tools)
        .await
        .map_err(ManageError::Failed)?;
    let record = UpstreamRecord {
        alias: alias.clone(),
        config: serde_json::to_string(config).map_err(failed)?,
        added_by: actor.to_owned(),
        added_at_ms: now_ms(),
    };
    if let Err(error) = store.save_upstream(record).await {
        let _ = store.remove_upstream(&alias).await;
        return Err(failed(error));
    }
    event(
        platform,
        actor,
        EventKind::UpstreamAdded,
        format!("upstream {alias:?} added: {}", config.target()),
    )
    .map_err(ManageError::Failed)?;
    Ok(Added {
        alias,
        server,
        protocol,
        tools: adoption
            .specs
            .iter()
            .map(|spec| AddedTool {
                name: spec.name.clone(),
                read_only: spec.read_only,
            })
            .collect(),
        dropped_for_names: adoption
            .invalid
            .into_iter()
            .map(|(name, why)| format!("{name:?}: {why}"))
            .collect(),
        dropped_over_max_tools,
    })
}

/// Removes upstream `alias` (one added at run time) and its pins as `actor`, recording
/// `upstream_removed`; `false` when there is no such upstream in the store.
pub async fn remove(platform: &Platform, alias: &str, actor: &str) -> Result<bool, ManageError> {
    let removed = platform
        .services()
        .store
        .remove_upstream(alias)
        .await
        .map_err(failed)?;
    if removed {
        event(
            platform,
            actor,
            EventKind::UpstreamRemoved,
            format!("upstream {alias:?} and its pins removed"),
        )
        .map_err(ManageError::Failed)?;
    }
    Ok(removed)
}

/// One quarantined tool as reviewed.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Reviewed {
    /// Its larkgate name.
    pub name: String,
    /// Whether it appeared after adoption (rather than changed).
    pub new: bool,
    /// The unified diff from the approved definition to the one served now.
    pub diff: String,
    /// Whether this review approved it.
    pub approved: bool,
    /// The published scripts (`script__NAME vN`) suspended while it waits: their latest
    /// version was published against its approved definition.
    pub suspends: Vec<String>,
}

/// The quarantined tools of upstream `alias` (or just `tool`), with what changed; with
/// `approving`, each served definition becomes its pin, recorded as `tool_approved` under
/// `actor`.
pub async fn review(
    platform: &Platform,
    alias: &str,
    tool: Option<&str>,
    approving: bool,
    actor: &str,
) -> Result<Vec<Reviewed>, ManageError> {
    let store = &platform.services().store;
    let pins = store.pins(alias).await.map_err(failed)?;
    let scripts = store.latest_versions().await.map_err(failed)?;
    let mut reviewed = Vec::new();
    let mut approved = Vec::new();
    for pin in pins
        .iter()
        .filter(|p| p.status == PinStatus::Quarantined)
        .filter(|p| tool.is_none_or(|t| t == p.tool))
    {
        let next = approving.then(|| approve(pin, actor, now_ms())).flatten();
        if let Some(next) = &next {
            audit_pin(
                platform,
                actor,
                alias,
                &pin.tool,
                EventKind::ToolApproved,
                &next.hash,
            )
            .map_err(ManageError::Failed)?;
        }
        let suspends = scripts
            .iter()
            .filter(|v| {
                v.pins
                    .iter()
                    .flatten()
                    .any(|p| p.alias == alias && p.upstream_tool == pin.tool)
            })
            .map(|v| format!("{} v{}", script_tool_name(&v.name), v.version))
            .collect();
        reviewed.push(Reviewed {
            name: format!("{alias}{SEPARATOR}{}", pin.tool),
            new: pin.hash.is_empty(),
            diff: difference(pin),
            approved: next.is_some(),
            suspends,
        });
        approved.extend(next);
    }
    if !approved.is_empty() {
        store.save_pins(approved).await.map_err(failed)?;
    }
    Ok(reviewed)
}

fn event(platform: &Platform, actor: &str, kind: EventKind, detail: String) -> Result<(), String> {
    platform
        .services()
        .audit
        .record_event(AuditEntry::event(actor, kind, detail))
        .map_err(|e| format!("the audit log could not be written: {e}"))
}
