//! Keeping upstreams federated: connect at start (an upstream that is down does not stop
//! larkgate: the reason is kept, and its approved tools are listed from their pins, answering
//! `upstream_unavailable` with that reason), check every listing against the pins, publish the
//! usable tools into the platform's tool table, reconnect with backoff (a command-launched
//! server that exits is started again the same way), refresh on
//! `notifications/tools/list_changed`, and follow the store, where `larkgate upstream add |
//! remove | review` change upstreams and pins beside a running gateway.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use larkgate_platform::Platform;

use crate::config::UpstreamConfig;
use crate::guard::Resolve;

mod sync;
mod tend;
mod upstream;

pub use sync::{audit_pin, check_and_pin};
pub use upstream::{Upstream, UpstreamStatus};

/// The principal audit events of federation are recorded under.
pub const FEDERATION_PRINCIPAL: &str = "larkgate";

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

    /// Closes every connection.
    pub async fn close(&self) {
        for upstream in self.upstreams() {
            if let Some(client) = upstream.link.close("larkgate is shutting down")
                && let Ok(client) = Arc::try_unwrap(client)
            {
                client.close().await;
            }
        }
    }
}

/// An error that must stop larkgate (configuration, not connectivity).
struct Fatal(String);
