//! Following the store and publishing: upstreams added or removed beside a running gateway,
//! each connection and listing checked against the pins, the usable tools published into the
//! platform's tool table, and pin changes audited.

use std::sync::Arc;

use larkgate_binding::Limits;
use larkgate_platform::Platform;
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::registry::prefixed_name;
use larkgate_store::{AuditKind, PinStatus, now_ms};

use super::upstream::Listing;
use super::{FEDERATION_PRINCIPAL, Fatal, Federation, Upstream};
use crate::client::UpstreamClient;
use crate::config::UpstreamConfig;
use crate::pinning::reconcile;
use crate::tools::{adopt, handlers};

impl Federation {
    /// Follows the store: starts the upstreams added since the last time, stops those removed
    /// (their tools leave the listing and a command-launched server is stopped), and checks
    /// every listing against the pins again, so that a tool approved with `larkgate upstream
    /// review --approve` is served at once. Does nothing when the store's upstream revision has
    /// not moved. Clients are told of every change to the listing
    /// (`notifications/tools/list_changed`). Fails only when the store cannot be read.
    pub async fn sync(&self) -> Result<(), String> {
        let _one = self.syncing.lock().await;
        let store = &self.platform.services().store;
        let revision = store
            .upstreams_revision()
            .await
            .map_err(|e| format!("the stored upstreams cannot be read: {e}"))?;
        let followed = *self.revision.lock().unwrap_or_else(|p| p.into_inner());
        if followed == Some(revision) {
            return Ok(());
        }
        let first = followed.is_none();
        let records = store
            .upstreams()
            .await
            .map_err(|e| format!("the stored upstreams cannot be read: {e}"))?;
        let mut wanted = Vec::new();
        for record in records {
            match serde_json::from_str::<UpstreamConfig>(&record.config) {
                Ok(config) if config.alias == record.alias => wanted.push(config),
                Ok(_) | Err(_) => tracing::error!(
                    alias = %record.alias,
                    "the stored upstream's configuration cannot be read; remove it with \
                     `larkgate upstream remove` and add it again"
                ),
            }
        }
        // Removed (or changed: stopped here and started again below).
        for upstream in self.upstreams() {
            let kept = !upstream.added || wanted.iter().any(|config| *config == upstream.config);
            if !kept {
                self.stop(&upstream).await;
            }
        }
        // Added.
        let mut started = Vec::new();
        for config in wanted {
            if let Some(running) = self.upstream(&config.alias) {
                if !running.added {
                    tracing::error!(
                        alias = %config.alias,
                        "an upstream added at run time has the alias of one in the \
                         configuration file, which is used; remove one of them"
                    );
                }
                continue;
            }
            let alias = config.alias.clone();
            let allowed = config
                .validate()
                .and_then(|()| self.platform.registry().check_alias(&alias));
            if let Err(why) = allowed {
                tracing::error!(%alias, %why, "a stored upstream cannot be federated");
                continue;
            }
            let upstream = Upstream::new(config, true);
            self.upstreams
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push(Arc::clone(&upstream));
            tracing::info!(%alias, "an upstream was added; connecting");
            started.push(upstream);
        }
        // Listed at once from the definitions pinned when it was added (calls answer
        // `upstream_unavailable` until it is connected), however long its server takes to
        // start: every replica lists an added upstream as soon as it hears of it.
        for upstream in &started {
            if let Err(Fatal(e)) = self.publish_pinned(upstream).await {
                tracing::error!(%e, "an added upstream's pinned tools were not published");
            }
        }
        let attempts = started.iter().map(|upstream| self.connect(upstream));
        for result in futures::future::join_all(attempts).await {
            if let Err(Fatal(e)) = result {
                tracing::error!(%e, "an added upstream's tools were not published");
            }
        }
        // Pins that changed: every other upstream's listing checked again (not at the first
        // pass: `start` has just checked them).
        let upstreams = if first { Vec::new() } else { self.upstreams() };
        for upstream in upstreams {
            if started.iter().any(|s| Arc::ptr_eq(s, &upstream)) {
                continue;
            }
            let result = match (upstream.link.client(), upstream.listing()) {
                (Some(client), Some(listing)) => self.publish(&upstream, &client, listing).await,
                (None, _) => self.publish_pinned(&upstream).await,
                (Some(_), None) => Ok(()),
            };
            if let Err(Fatal(e)) = result {
                tracing::error!(alias = %upstream.config.alias, %e, "an upstream's tools were not published");
            }
        }
        // Changes this made (pins saved) move the revision again; the next pass finds nothing
        // to do, so it need not be read here, where it could hide a change made meanwhile.
        *self.revision.lock().unwrap_or_else(|p| p.into_inner()) = Some(revision);
        Ok(())
    }

    /// Stops a removed upstream: its tools leave the listing, its connection is closed.
    pub(super) async fn stop(&self, upstream: &Arc<Upstream>) {
        let alias = upstream.config.alias.clone();
        self.upstreams
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|u| !Arc::ptr_eq(u, upstream));
        if let Err(e) = self
            .platform
            .tool_table()
            .replace_upstream(&alias, Vec::new())
        {
            tracing::error!(%alias, %e, "a removed upstream's tools could not be withdrawn");
        }
        self.platform.catalog().replace_upstream(&alias, None);
        if let Some(client) = upstream.link.close("the upstream was removed")
            && let Ok(client) = Arc::try_unwrap(client)
        {
            client.close().await;
        }
        // A call still in flight holds the client; the last one to finish drops it, which
        // stops a command-launched server's process group.
        tracing::info!(%alias, "an upstream was removed");
    }

    /// Connects (or reconnects) one upstream and publishes its tools. A connection failure
    /// marks it down (at the first try, its approved tools are listed from their pins); only
    /// a tool-name collision is fatal.
    pub(super) async fn connect(&self, upstream: &Upstream) -> Result<(), Fatal> {
        let config = &upstream.config;
        let result = config
            .connect(
                self.listen,
                Arc::clone(&self.resolver),
                &self.platform.services().store,
            )
            .await
            .map(Arc::new);
        if upstream.config.signs_in() {
            // After the attempt, so that what it saved itself (a refresh) is not taken for a
            // sign-in; a sign-in saved during the attempt waits for the next try.
            let stored = self
                .platform
                .services()
                .store
                .upstream_credentials(&config.alias)
                .await
                .ok();
            *upstream
                .credentials_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = stored;
        }
        match result {
            Ok(client) => self.refresh(upstream, client).await,
            Err(why) => {
                upstream.down(why);
                if upstream.listing().is_none() {
                    self.publish_pinned(upstream).await?;
                }
                Ok(())
            }
        }
    }

    /// Lists `client`'s tools, checks them against the pins, and publishes the usable ones.
    pub(super) async fn refresh(
        &self,
        upstream: &Upstream,
        client: Arc<UpstreamClient>,
    ) -> Result<(), Fatal> {
        let listing = match client.list_tools().await {
            Ok(tools) => {
                let (tools, repeated) = crate::tools::distinct(tools);
                Listing { tools, repeated }
            }
            Err(e) => {
                upstream.down(format!("its tools could not be listed: {e}"));
                return Ok(());
            }
        };
        *upstream.listing.lock().unwrap_or_else(|p| p.into_inner()) = Some(listing.clone());
        self.publish(upstream, &client, listing).await?;
        upstream.link.connected(Arc::clone(&client));
        self.refresh_catalog(upstream, &client).await;
        Ok(())
    }

    /// Lists `client`'s resources and prompts into the platform's catalogue.
    pub(super) async fn refresh_catalog(&self, upstream: &Upstream, client: &UpstreamClient) {
        let alias = upstream.config.alias.as_str();
        let listed = crate::catalog::list(alias, client, &upstream.link).await;
        let (resources, templates, prompts) = listed.catalog.counts();
        self.platform
            .catalog()
            .replace_upstream(alias, Some(listed.catalog));
        let mut status = upstream.status.lock().unwrap_or_else(|p| p.into_inner());
        status.resources = resources;
        status.resource_templates = templates;
        status.prompts = prompts;
        let mut problems = upstream.problems.lock().unwrap_or_else(|p| p.into_inner());
        problems.catalog = listed.problems;
        status.invalid = problems.shown();
    }

    /// Checks `listing` against the pins and publishes the usable tools.
    pub(super) async fn publish(
        &self,
        upstream: &Upstream,
        client: &UpstreamClient,
        listing: Listing,
    ) -> Result<(), Fatal> {
        let config = &upstream.config;
        let alias = config.alias.as_str();
        let checked = check_and_pin(&self.platform, alias, config.approval, &listing.tools)
            .await
            .map_err(Fatal)?;
        let adoption = adopt(alias, &checked.usable, config.approval);
        let count = adoption.specs.len();
        let gated = adoption.gated();
        let published = self.platform.tool_table().replace_upstream(
            alias,
            handlers(adoption.specs, &upstream.link, Limits::default()),
        );
        if let Err(e) = published {
            return Err(Fatal(format!("upstream {alias:?}: {e}")));
        }
        self.platform
            .warn_of_unfit_rules(|spec| spec.origin.alias.as_deref() == Some(alias));
        let mut status = upstream.status.lock().unwrap_or_else(|p| p.into_inner());
        status.server = client.server_shown();
        status.protocol = client.protocol_version().map(|v| v.to_string());
        status.tools = count;
        status.gated = gated;
        status.quarantined = checked.quarantined;
        status.dropped = client.dropped_tools();
        let mut problems = upstream.problems.lock().unwrap_or_else(|p| p.into_inner());
        problems.tools = listing
            .repeated
            .into_iter()
            .chain(adoption.invalid)
            .map(|(name, why)| format!("{} ({why})", larkgate_platform::display::escaped(&name)))
            .collect();
        status.invalid = problems.shown();
        Ok(())
    }

    /// Lists a down upstream's approved tools from their pins (the definitions an operator
    /// accepted), so that they answer `upstream_unavailable` with the cause rather than
    /// `not_found` like a name nobody knows.
    pub(super) async fn publish_pinned(&self, upstream: &Upstream) -> Result<(), Fatal> {
        let config = &upstream.config;
        let alias = config.alias.as_str();
        let pins = match self.platform.services().store.pins(alias).await {
            Ok(pins) => pins,
            Err(e) => {
                tracing::warn!(alias, %e, "a down upstream's pins could not be read");
                return Ok(());
            }
        };
        let tools: Vec<rmcp::model::Tool> = pins
            .iter()
            .filter(|pin| pin.status == PinStatus::Approved && !pin.definition.is_empty())
            .filter_map(|pin| serde_json::from_str(&pin.definition).ok())
            .collect();
        let adoption = adopt(alias, &tools, config.approval);
        let count = adoption.specs.len();
        let gated = adoption.gated();
        self.platform
            .tool_table()
            .replace_upstream(
                alias,
                handlers(adoption.specs, &upstream.link, Limits::default()),
            )
            .map_err(|e| Fatal(format!("upstream {alias:?}: {e}")))?;
        self.platform
            .warn_of_unfit_rules(|spec| spec.origin.alias.as_deref() == Some(alias));
        let mut status = upstream.status.lock().unwrap_or_else(|p| p.into_inner());
        status.tools = count;
        status.gated = gated;
        Ok(())
    }
}

/// Checks `tools` of upstream `alias` against its stored pins, saves the pins that changed,
/// and audits every change.
pub async fn check_and_pin(
    platform: &Platform,
    alias: &str,
    approval: crate::tools::Approval,
    tools: &[rmcp::model::Tool],
) -> Result<crate::pinning::Reconciled, String> {
    let store = &platform.services().store;
    let pins = store.pins(alias).await.map_err(|e| e.to_string())?;
    let checked = reconcile(alias, approval, tools, &pins, now_ms());
    if !checked.pins.is_empty() {
        store
            .save_pins(checked.pins.clone())
            .await
            .map_err(|e| e.to_string())?;
    }
    for change in &checked.changes {
        audit_pin(
            platform,
            FEDERATION_PRINCIPAL,
            alias,
            &change.tool,
            change.event,
            &change.hash,
        )?;
        if change.event == EventKind::ToolQuarantined {
            tracing::warn!(
                alias,
                tool = %change.tool,
                "an upstream tool changed and is quarantined until `larkgate upstream review`"
            );
        }
    }
    Ok(checked)
}

/// Records a pin event in the audit chain.
pub fn audit_pin(
    platform: &Platform,
    principal: &str,
    alias: &str,
    tool: &str,
    event: EventKind,
    hash: &str,
) -> Result<(), String> {
    let entry = AuditEntry {
        kind: Some(AuditKind::Event),
        principal: principal.to_owned(),
        tool: Some(prefixed_name(alias, tool)),
        code: Some(event.into()),
        detail: Some(format!(
            "upstream {alias:?} tool {tool:?}: {event} (definition sha256 {hash})"
        )),
        ..Default::default()
    };
    // An event (not `append`): from a command beside a running gateway, it is forwarded to
    // the gateway, which owns the chain.
    platform
        .services()
        .audit
        .record_event(entry)
        .map_err(|e| format!("the audit log could not be written: {e}"))
}
