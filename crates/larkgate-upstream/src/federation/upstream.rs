//! One federated upstream: its configuration, how it stands, its last listing and when it is
//! tried again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::UpstreamConfig;
use crate::tools::Link;

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
    /// Its `approval` setting (`always`, `writes` or `never`).
    #[serde(default)]
    #[schemars(with = "String")]
    pub approval: crate::tools::Approval,
    /// The federated tools (larkgate's names) whose calls its `approval` setting gates (the
    /// policy's own approval patterns may gate others).
    #[serde(default)]
    pub gated: Vec<String>,
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
    pub(super) config: UpstreamConfig,
    /// Added at run time (stored), rather than from the configuration file.
    pub(super) added: bool,
    pub(super) link: Arc<Link>,
    pub(super) status: Mutex<UpstreamStatus>,
    /// The last listing it served in this process (checked against the pins again when they
    /// change, without asking the server).
    pub(super) listing: Mutex<Option<Listing>>,
    pub(super) retry: Mutex<Retry>,
    /// For an OAuth upstream signed in by a person: its sealed credentials as the store held
    /// them after this process last tried to connect it (`None` until then, or when they could
    /// not be read). A change beside it is a `larkgate upstream login`, which a down upstream
    /// does not wait out its backoff for.
    pub(super) credentials_seen: Mutex<Option<Option<Vec<u8>>>>,
    /// What its listings held that larkgate could not serve, kept per listing.
    pub(super) problems: Mutex<Problems>,
}

/// What an upstream listed that larkgate could not serve, kept apart by listing, so that a new
/// tool listing replaces the tools' problems and leaves those of resources and prompts, and
/// the other way round.
#[derive(Debug, Default)]
pub(super) struct Problems {
    /// Tools left out, each as `NAME (why)`.
    pub(super) tools: Vec<String>,
    /// Resources, templates and prompts left out.
    pub(super) catalog: Vec<String>,
}

impl Problems {
    /// As `upstream list` and the console show them (`UpstreamStatus::invalid`): the tools'
    /// first, then those of resources and prompts.
    pub(super) fn shown(&self) -> Vec<String> {
        self.tools
            .iter()
            .cloned()
            .chain(
                self.catalog
                    .iter()
                    .map(|why| format!("resources and prompts: {why}")),
            )
            .collect()
    }
}

/// A listing as the server gave it, names made distinct.
#[derive(Clone, Debug)]
pub(super) struct Listing {
    pub(super) tools: Vec<rmcp::model::Tool>,
    pub(super) repeated: Vec<(String, String)>,
}

/// When a down upstream is tried again.
#[derive(Debug)]
pub(super) struct Retry {
    pub(super) backoff: Duration,
    pub(super) next_try: tokio::time::Instant,
}

impl Retry {
    pub(super) fn new() -> Self {
        Retry {
            backoff: Duration::from_secs(1),
            next_try: tokio::time::Instant::now(),
        }
    }

    /// Waits the backoff before the next try, and doubles it, up to `longest` (the
    /// upstream's probe interval: a down upstream is tried at least that often).
    pub(super) fn later(&mut self, longest: Duration) {
        self.next_try = tokio::time::Instant::now() + self.backoff.min(longest);
        self.backoff = (self.backoff * 2).min(longest);
    }
}

impl Upstream {
    pub(super) fn new(config: UpstreamConfig, added: bool) -> Arc<Self> {
        let link = Link::new(&config.alias);
        Arc::new(Upstream {
            status: Mutex::new(UpstreamStatus {
                alias: config.alias.clone(),
                url: config.target(),
                approval: config.approval,
                added,
                ..UpstreamStatus::default()
            }),
            config,
            added,
            link,
            listing: Mutex::new(None),
            retry: Mutex::new(Retry::new()),
            credentials_seen: Mutex::new(None),
            problems: Mutex::new(Problems::default()),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// Marks it down, for `why`: its tools answer `upstream_unavailable` until it is back.
    pub(super) fn down(&self, why: String) {
        self.link.down(why);
    }

    /// How it stands now: whether it is up is its link's (see [`Link`]).
    pub fn status(&self) -> UpstreamStatus {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        status.connected = self.link.client().is_some();
        status.down_because = self.link.down_because();
        status
    }

    pub(super) fn listing(&self) -> Option<Listing> {
        self.listing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn retry(&self) -> std::sync::MutexGuard<'_, Retry> {
        self.retry.lock().unwrap_or_else(|p| p.into_inner())
    }
}
