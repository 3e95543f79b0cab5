//! Keeping upstreams federated: connect at start (an upstream that is down does not stop
//! larkgate: its tools are absent and the reason is kept), check every listing against the
//! pins, publish the usable tools into the platform's tool table, reconnect with backoff (a
//! command-launched server that exits is started again the same way), and refresh on
//! `notifications/tools/list_changed`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_binding::Limits;
use larkgate_platform::Platform;
use larkgate_platform::audit::{AuditEntry, EventKind};
use larkgate_platform::registry::prefixed_name;
use larkgate_store::AuditKind;
use larkgate_store::now_ms;
use serde::Serialize;

use crate::client::UpstreamClient;
use crate::config::UpstreamConfig;
use crate::guard::Resolve;
use crate::pinning::reconcile;
use crate::tools::{Link, adopt, handlers};

/// The principal audit events of federation are recorded under.
pub const FEDERATION_PRINCIPAL: &str = "larkgate";

/// How an upstream stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
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
    /// Tools federated.
    pub tools: usize,
    /// Tools held back until reviewed.
    pub quarantined: Vec<String>,
    /// Tools dropped for being over `max_tools`.
    pub dropped: usize,
    /// Tools dropped for their names, each with why (listed twice, a mapped name another tool
    /// has, empty or too long).
    pub invalid: Vec<String>,
}

/// One federated upstream.
#[derive(Debug)]
pub struct Upstream {
    config: UpstreamConfig,
    link: Arc<Link>,
    status: Mutex<UpstreamStatus>,
}

impl Upstream {
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
}

/// Every upstream of one larkgate process.
pub struct Federation {
    platform: Platform,
    resolver: Arc<dyn Resolve>,
    listen: Option<SocketAddr>,
    upstreams: Vec<Arc<Upstream>>,
}

impl std::fmt::Debug for Federation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Federation")
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl Federation {
    /// Connects every upstream (concurrently). Fails only on configuration errors — a bad
    /// alias, two upstreams with one alias, a tool name colliding with another tool; an
    /// upstream that cannot be reached is recorded as down.
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
        let upstreams = configs
            .into_iter()
            .map(|config| {
                Arc::new(Upstream {
                    status: Mutex::new(UpstreamStatus {
                        alias: config.alias.clone(),
                        url: config.target(),
                        ..UpstreamStatus::default()
                    }),
                    config,
                    link: Link::new(),
                })
            })
            .collect();
        let federation = Arc::new(Federation {
            platform: platform.clone(),
            resolver,
            listen,
            upstreams,
        });
        let attempts = federation
            .upstreams
            .iter()
            .map(|upstream| federation.connect(upstream));
        for result in futures::future::join_all(attempts).await {
            if let Err(Fatal(message)) = result {
                return Err(message);
            }
        }
        Ok(federation)
    }

    /// Every upstream.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// One upstream by alias.
    pub fn upstream(&self, alias: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.config.alias == alias)
    }

    /// Connects (or reconnects) one upstream and publishes its tools. A connection failure
    /// marks it down; only a tool-name collision is fatal.
    async fn connect(&self, upstream: &Upstream) -> Result<(), Fatal> {
        let config = &upstream.config;
        let result = config
            .connect(self.listen, Arc::clone(&self.resolver))
            .await
            .map(Arc::new);
        match result {
            Ok(client) => self.refresh(upstream, client).await,
            Err(why) => {
                tracing::warn!(alias = %config.alias, %why, "an upstream is down");
                upstream.down(why);
                Ok(())
            }
        }
    }

    /// Lists `client`'s tools, checks them against the pins, and publishes the usable ones.
    async fn refresh(&self, upstream: &Upstream, client: Arc<UpstreamClient>) -> Result<(), Fatal> {
        let config = &upstream.config;
        let alias = config.alias.as_str();
        let (tools, repeated) = match client.list_tools().await {
            Ok(tools) => crate::tools::distinct(tools),
            Err(e) => {
                upstream.down(format!("its tools could not be listed: {e}"));
                return Ok(());
            }
        };
        let checked = check_and_pin(&self.platform, alias, config.approval, &tools)
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
        status.invalid = repeated
            .into_iter()
            .chain(adoption.invalid)
            .map(|(name, why)| format!("{name} ({why})"))
            .collect();
        drop(status);
        upstream.link.connected(client);
        Ok(())
    }

    /// Keeps upstreams connected and fresh until the returned task is aborted: a down upstream
    /// is retried with exponential backoff (1 s doubling to 5 min), a connected one is pinged
    /// and re-listed when it says its tools changed.
    pub fn maintain(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let federation = Arc::clone(self);
        tokio::spawn(async move {
            let mut backoff: Vec<Duration> =
                vec![Duration::from_secs(1); federation.upstreams.len()];
            let mut next_try: Vec<tokio::time::Instant> =
                vec![tokio::time::Instant::now(); federation.upstreams.len()];
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                for (i, upstream) in federation.upstreams.iter().enumerate() {
                    match upstream.link.client() {
                        // The connection ended (a command-launched server exited): down, and
                        // started again after the backoff.
                        Some(client) if client.is_closed() => {
                            let why = client
                                .process_ended()
                                .unwrap_or_else(|| "the connection was lost".to_owned());
                            tracing::warn!(alias = %upstream.config.alias, %why, "an upstream went down");
                            upstream.down(why);
                            drop(client);
                            next_try[i] = tokio::time::Instant::now() + backoff[i];
                            backoff[i] = (backoff[i] * 2).min(Duration::from_secs(300));
                        }
                        Some(client) if client.tools_changed() => {
                            if let Err(Fatal(e)) = federation.refresh(upstream, client).await {
                                tracing::error!(%e, "an upstream's new tools were not published");
                            }
                        }
                        Some(_) => backoff[i] = Duration::from_secs(1),
                        None if tokio::time::Instant::now() >= next_try[i] => {
                            if let Err(Fatal(e)) = federation.connect(upstream).await {
                                tracing::error!(%e, "an upstream's tools were not published");
                            }
                            if upstream.link.client().is_none() {
                                next_try[i] = tokio::time::Instant::now() + backoff[i];
                                backoff[i] = (backoff[i] * 2).min(Duration::from_secs(300));
                            }
                        }
                        None => {}
                    }
                }
            }
        })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        for upstream in &self.upstreams {
            if let Some(client) = upstream.link.client() {
                upstream.link.down("larkgate is shutting down".into());
                if let Ok(client) = Arc::try_unwrap(client) {
                    client.close().await;
                }
            }
        }
    }
}

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
    platform
        .services()
        .audit
        .append(entry)
        .map(|_| ())
        .map_err(|e| format!("the audit log could not be written: {e}"))
}
