//! Keeping upstreams federated: connect at start (an upstream that is down does not stop
//! larkgate: the reason is kept, and its approved tools are listed from their pins, answering
//! `upstream_unavailable` with that reason), check every listing against the pins, publish the
//! usable tools into the platform's tool table, reconnect with backoff (a command-launched
//! server that exits is started again the same way), refresh on
//! `notifications/tools/list_changed`, and follow the store, where `larkgate upstream add |
//! remove | review` change upstreams and pins beside a running gateway.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use larkgate_binding::Limits;
use larkgate_platform::Platform;
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::registry::prefixed_name;
use larkgate_store::{AuditKind, PinStatus, UpstreamStatusRecord, now_ms};
use serde::{Deserialize, Serialize};

use crate::client::UpstreamClient;
use crate::config::UpstreamConfig;
use crate::guard::Resolve;
use crate::pinning::reconcile;
use crate::tools::{Link, adopt, handlers};

/// The principal audit events of federation are recorded under.
pub const FEDERATION_PRINCIPAL: &str = "larkgate";

/// How an upstream stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpstreamStatus {
    /// Its alias.
    pub alias: String,
    /// Its URL.
    pub url: String,
    /// Whether it is connected.
    pub connected: bool,
    /// Why it is not, when it is not.
    pub down_because: Option<String>,
    /// The server's name and version, when it gave them.
    pub server: Option<String>,
    /// The negotiated protocol revision.
    pub protocol: Option<String>,
    /// Tools federated (while it is down: those listed from their approved pins, which answer
    /// `upstream_unavailable`).
    pub tools: usize,
    /// Tools held back until reviewed.
    pub quarantined: Vec<String>,
    /// Tools dropped for being over `max_tools`.
    pub dropped: usize,
    /// Tools dropped for their names, each with why (listed twice, a mapped name another tool
    /// has, empty or too long); resources, templates and prompts dropped, each with why; and
    /// resource or prompt listings that failed.
    pub invalid: Vec<String>,
    /// Resources federated.
    #[serde(default)]
    pub resources: usize,
    /// Resource templates federated.
    #[serde(default)]
    pub resource_templates: usize,
    /// Prompts federated.
    #[serde(default)]
    pub prompts: usize,
    /// Whether it was added at run time (`larkgate upstream add`), so `upstream remove` can
    /// remove it; the others come from the configuration file.
    #[serde(default)]
    pub added: bool,
}

/// One federated upstream.
#[derive(Debug)]
pub struct Upstream {
    config: UpstreamConfig,
    /// Added at run time (stored), rather than from the configuration file.
    added: bool,
    link: Arc<Link>,
    status: Mutex<UpstreamStatus>,
    /// The last listing it served in this process (checked against the pins again when they
    /// change, without asking the server).
    listing: Mutex<Option<Listing>>,
    retry: Mutex<Retry>,
    /// For an OAuth upstream signed in by a person: its sealed credentials as the store held
    /// them after this process last tried to connect it (`None` until then, or when they could
    /// not be read). A change beside it is a `larkgate upstream login`, which a down upstream
    /// does not wait out its backoff for.
    credentials_seen: Mutex<Option<Option<Vec<u8>>>>,
}

/// A listing as the server gave it, names made distinct.
#[derive(Clone, Debug)]
struct Listing {
    tools: Vec<rmcp::model::Tool>,
    repeated: Vec<(String, String)>,
}

/// When a down upstream is tried again.
#[derive(Debug)]
struct Retry {
    backoff: Duration,
    next_try: tokio::time::Instant,
}

impl Retry {
    fn new() -> Self {
        Retry {
            backoff: Duration::from_secs(1),
            next_try: tokio::time::Instant::now(),
        }
    }

    /// Waits the backoff before the next try, and doubles it (up to 5 minutes).
    fn later(&mut self) {
        self.next_try = tokio::time::Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(300));
    }
}

impl Upstream {
    fn new(config: UpstreamConfig, added: bool) -> Arc<Self> {
        Arc::new(Upstream {
            status: Mutex::new(UpstreamStatus {
                alias: config.alias.clone(),
                url: config.target(),
                added,
                ..UpstreamStatus::default()
            }),
            config,
            added,
            link: Link::new(),
            listing: Mutex::new(None),
            retry: Mutex::new(Retry::new()),
            credentials_seen: Mutex::new(None),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Marks it down, for `why`: its tools answer `upstream_unavailable` until it is back.
    fn down(&self, why: String) {
        self.link.down(why.clone());
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.connected = false;
        status.down_because = Some(why);
    }

    /// How it stands now.
    pub fn status(&self) -> UpstreamStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn listing(&self) -> Option<Listing> {
        self.listing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn retry(&self) -> std::sync::MutexGuard<'_, Retry> {
        self.retry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every upstream of one larkgate process: those of the configuration file, and those added
/// at run time (kept in the store, where `larkgate upstream add | remove | review` change them,
/// beside a running gateway too: [`Federation::sync`] follows the store).
pub struct Federation {
    platform: Platform,
    resolver: Arc<dyn Resolve>,
    listen: Option<SocketAddr>,
    upstreams: RwLock<Vec<Arc<Upstream>>>,
    /// The store's upstream revision last followed.
    revision: Mutex<Option<i64>>,
    /// One [`Federation::sync`] at a time.
    syncing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Federation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Federation")
            .field("upstreams", &self.upstreams())
            .finish_non_exhaustive()
    }
}

impl Federation {
    /// Connects every upstream of `configs` (the configuration file's) and every one added at
    /// run time (the store's), concurrently. Fails only on configuration errors — a bad alias,
    /// two upstreams with one alias, a tool name colliding with another tool; an upstream that
    /// cannot be reached is recorded as down (its approved tools listed from their pins).
    pub async fn start(
        platform: &Platform,
        configs: Vec<UpstreamConfig>,
        resolver: Arc<dyn Resolve>,
        listen: Option<SocketAddr>,
    ) -> Result<Arc<Self>, String> {
        let registry = platform.registry();
        let mut seen = std::collections::BTreeSet::new();
        for config in &configs {
            config.validate()?;
            registry
                .check_alias(&config.alias)
                .map_err(|e| format!("upstream alias {:?}: {e}", config.alias))?;
            if !seen.insert(config.alias.clone()) {
                return Err(format!(
                    "two upstreams have the alias {:?}; aliases must be unique",
                    config.alias
                ));
            }
            if !config.allow.is_empty() {
                tracing::info!(
                    alias = %config.alias,
                    allow = ?config.allow,
                    "an upstream may reach these non-public targets"
                );
            }
        }
        let federation = Arc::new(Federation {
            platform: platform.clone(),
            resolver,
            listen,
            upstreams: RwLock::new(
                configs
                    .into_iter()
                    .map(|config| Upstream::new(config, false))
                    .collect(),
            ),
            revision: Mutex::new(None),
            syncing: tokio::sync::Mutex::new(()),
        });
        let upstreams = federation.upstreams();
        let attempts = upstreams
            .iter()
            .map(|upstream| federation.connect(upstream));
        for result in futures::future::join_all(attempts).await {
            if let Err(Fatal(message)) = result {
                return Err(message);
            }
        }
        federation.sync().await?;
        Ok(federation)
    }

    /// The platform its tools are published on.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// Every upstream.
    pub fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One upstream by alias.
    pub fn upstream(&self, alias: &str) -> Option<Arc<Upstream>> {
        self.upstreams()
            .into_iter()
            .find(|u| u.config.alias == alias)
    }

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
    async fn stop(&self, upstream: &Arc<Upstream>) {
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
        let client = upstream.link.client();
        upstream.down("the upstream was removed".to_owned());
        if let Some(client) = client
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
    async fn connect(&self, upstream: &Upstream) -> Result<(), Fatal> {
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
                tracing::warn!(alias = %config.alias, %why, "an upstream is down");
                upstream.down(why);
                if upstream.listing().is_none() {
                    self.publish_pinned(upstream).await?;
                }
                Ok(())
            }
        }
    }

    /// Lists `client`'s tools, checks them against the pins, and publishes the usable ones.
    async fn refresh(&self, upstream: &Upstream, client: Arc<UpstreamClient>) -> Result<(), Fatal> {
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
    async fn refresh_catalog(&self, upstream: &Upstream, client: &UpstreamClient) {
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
        status.invalid.retain(|why| !why.starts_with(CATALOG_MARK));
        status.invalid.extend(
            listed
                .problems
                .into_iter()
                .map(|why| format!("{CATALOG_MARK}{why}")),
        );
    }

    /// Checks `listing` against the pins and publishes the usable tools.
    async fn publish(
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
        let published = self.platform.tool_table().replace_upstream(
            alias,
            handlers(adoption.specs, &upstream.link, Limits::default()),
        );
        if let Err(e) = published {
            return Err(Fatal(format!("upstream {alias:?}: {e}")));
        }
        let mut status = upstream.status.lock().unwrap_or_else(|p| p.into_inner());
        status.connected = true;
        status.down_because = None;
        status.server = client
            .server_info()
            .map(|i| format!("{} {}", i.name, i.version));
        status.protocol = client.protocol_version().map(|v| v.to_string());
        status.tools = count;
        status.quarantined = checked.quarantined;
        status.dropped = client.dropped_tools();
        let catalog_problems = status
            .invalid
            .iter()
            .filter(|why| why.starts_with(CATALOG_MARK))
            .cloned()
            .collect::<Vec<_>>();
        status.invalid = listing
            .repeated
            .into_iter()
            .chain(adoption.invalid)
            .map(|(name, why)| format!("{name} ({why})"))
            .chain(catalog_problems)
            .collect();
        Ok(())
    }

    /// Lists a down upstream's approved tools from their pins (the definitions an operator
    /// accepted), so that they answer `upstream_unavailable` with the cause rather than
    /// `not_found` like a name nobody knows.
    async fn publish_pinned(&self, upstream: &Upstream) -> Result<(), Fatal> {
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
        self.platform
            .tool_table()
            .replace_upstream(
                alias,
                handlers(adoption.specs, &upstream.link, Limits::default()),
            )
            .map_err(|e| Fatal(format!("upstream {alias:?}: {e}")))?;
        upstream
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tools = count;
        Ok(())
    }

    /// Keeps upstreams connected and fresh until the returned task is aborted: a down upstream
    /// is retried with exponential backoff (1 s doubling to 5 min), a connected one is pinged
    /// and re-listed when it says its tools changed; the store is followed every second
    /// ([`Federation::sync`]), and how each upstream stands is saved there for `larkgate
    /// upstream list` beside this process.
    ///
    /// How each upstream stands is saved once before this returns, so that `upstream list`
    /// beside a gateway that has just started shows this start's view.
    pub async fn maintain(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let federation = Arc::clone(self);
        let statuses: Vec<UpstreamStatus> = self.upstreams().iter().map(|u| u.status()).collect();
        let mut saved = self.save_statuses(&statuses).await.then_some(statuses);
        tokio::spawn(async move {
            let mut tick = 0u64;
            let mut failing = larkgate_platform::failing::Failing::default();
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                tick += 1;
                if tick.is_multiple_of(2) {
                    failing.note(
                        federation.sync().await,
                        |e, failed| {
                            tracing::warn!(
                                %e,
                                failed_attempts_since_last_logged = failed,
                                "upstream changes could not be followed"
                            );
                        },
                        || tracing::info!("upstream changes are followed again"),
                    );
                }
                for upstream in federation.upstreams() {
                    federation.tend(&upstream).await;
                }
                let statuses: Vec<UpstreamStatus> =
                    federation.upstreams().iter().map(|u| u.status()).collect();
                if saved.as_ref() != Some(&statuses) && federation.save_statuses(&statuses).await {
                    saved = Some(statuses);
                }
            }
        })
    }

    /// One upstream's turn in [`Federation::maintain`].
    async fn tend(&self, upstream: &Arc<Upstream>) {
        match upstream.link.client() {
            // The connection ended (a command-launched server exited): down, and started
            // again after the backoff.
            Some(client) if client.is_closed() => {
                let why = client
                    .process_ended()
                    .unwrap_or_else(|| "the connection was lost".to_owned());
                tracing::warn!(alias = %upstream.config.alias, %why, "an upstream went down");
                upstream.down(why);
                drop(client);
                upstream.retry().later();
            }
            Some(client) if client.tools_changed() => {
                if let Err(Fatal(e)) = self.refresh(upstream, client).await {
                    tracing::error!(%e, "an upstream's new tools were not published");
                }
            }
            Some(client) if client.catalog_changed() => {
                self.refresh_catalog(upstream, &client).await;
            }
            Some(_) => upstream.retry().backoff = Duration::from_secs(1),
            None => {
                let due = tokio::time::Instant::now() >= upstream.retry().next_try;
                let signed_in = self.signed_in_beside(upstream).await;
                if !due && !signed_in {
                    return;
                }
                if let Err(Fatal(e)) = self.connect(upstream).await {
                    tracing::error!(%e, "an upstream's tools were not published");
                }
                if upstream.link.client().is_none() {
                    upstream.retry().later();
                }
            }
        }
    }

    /// Whether someone signed in to down upstream `upstream` beside this process since it last
    /// tried it (`larkgate upstream login` changed its stored credentials): then it is tried at
    /// once rather than after its backoff (up to five minutes). Only for upstreams a person
    /// signs in to: a machine account's tokens change at every try of this process's own.
    async fn signed_in_beside(&self, upstream: &Upstream) -> bool {
        if !upstream.config.signs_in() {
            return false;
        }
        let Some(seen) = upstream
            .credentials_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return false;
        };
        match self
            .platform
            .services()
            .store
            .upstream_credentials(&upstream.config.alias)
            .await
        {
            Ok(stored) if stored != seen => {
                tracing::info!(
                    alias = %upstream.config.alias,
                    "someone signed in to a down upstream; connecting it again"
                );
                true
            }
            Ok(_) | Err(_) => false,
        }
    }

    /// Saves `statuses` in the store; whether that worked.
    async fn save_statuses(&self, statuses: &[UpstreamStatus]) -> bool {
        let at = now_ms();
        let records = statuses
            .iter()
            .map(|status| UpstreamStatusRecord {
                alias: status.alias.clone(),
                status: serde_json::to_string(status).unwrap_or_default(),
                updated_at_ms: at,
            })
            .collect();
        match self
            .platform
            .services()
            .store
            .save_upstream_statuses(records)
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%e, "the upstreams' statuses could not be saved");
                false
            }
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        for upstream in self.upstreams() {
            if let Some(client) = upstream.link.client() {
                upstream.link.down("larkgate is shutting down".into());
                if let Ok(client) = Arc::try_unwrap(client) {
                    client.close().await;
                }
            }
        }
    }
}

/// How the problems of resource and prompt listings begin among an upstream's `invalid`, so
/// that a new listing replaces them and leaves the tools' alone.
const CATALOG_MARK: &str = "resources and prompts: ";

/// An error that must stop larkgate (configuration, not connectivity).
struct Fatal(String);

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
