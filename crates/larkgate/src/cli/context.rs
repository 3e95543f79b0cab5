//! What store-backed commands open. The operator's commands (tokens, principals, approvals,
//! run records, the audit log, upstreams) open a [`StoreContext`] and work beside a running
//! `larkgate serve`; the rest open a [`Context`]: also the audit log itself, the platform, federation and
//! scripts, so they need the audit log free.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use larkgate_platform::Platform;
use larkgate_platform::access;
use larkgate_platform::audit::{
    AuditEntry, AuditError, AuditLog, AuditOptions, AuditSink, EventKind, ForwardingAudit,
};
use larkgate_script::{WorkerCommand, WorkerPool};
use larkgate_store::{
    AuditKind, IssuerBinding, PostgresStore, Principal, PrincipalKind, SqliteStore, Store,
};
use larkgate_upstream::SystemResolver;
use larkgate_upstream::federation::Federation;

use crate::config::Config;
use larkgate_scripts::{Scripts, Workers};

/// The local operator's principal id.
pub(crate) const OPERATOR: &str = "operator";

/// `Ok` if `actor` is an administrator; else an error saying it may not do `what`.
pub(crate) fn require_admin(actor: &Principal, what: &str) -> anyhow::Result<()> {
    larkgate_platform::access::require_any_role(actor, access::ADMINS, what).map_err(|refusal| {
        anyhow::anyhow!("{}: {}", refusal.message, refusal.hint.unwrap_or_default())
    })
}

pub(crate) struct Options {
    pub(crate) config: Option<PathBuf>,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) as_principal: Option<String>,
    /// For `serve`: whether it serves, and its `--listen`.
    pub(crate) serve: Option<Option<std::net::SocketAddr>>,
    /// Whether to keep script workers started (long-running commands) rather than start one
    /// per run.
    pub(crate) pool: bool,
    /// Whether to own the audit log when no other process does (events are handed to the
    /// store's inbox otherwise).
    pub(crate) own_audit_log: bool,
}

pub(crate) struct Context {
    /// The data directory (the store, the audit journal, `serve`'s endpoint file).
    pub(crate) data_dir: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) audit: Arc<AuditLog>,
    pub(crate) platform: Platform,
    /// The federated upstreams, connected (or recorded as down) when the command started.
    pub(crate) federation: Arc<Federation>,
    /// For `serve`: where it listens (`--listen`, else the configuration's), which upstreams
    /// may never target.
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// For `serve`: the edge's configuration (`[server]`).
    pub(crate) server: larkgate_edge::server::ServerConfig,
    /// For `serve`: the identity providers whose access tokens `/mcp` accepts (a reload
    /// replaces them).
    pub(crate) sign_in: larkgate_edge::sign_in::Providers,
    /// The script lifecycle: drafts, publishing, runs, script tools.
    pub(crate) scripts: Arc<Scripts>,
    /// Who the command acts as: the operator, or `--as NAME`.
    pub(crate) actor: Principal,
    /// `--config`, for a reload to find the same file.
    pub(crate) config_flag: Option<PathBuf>,
    /// The configuration file's text as TOML when the command started, for a reload to tell
    /// what changed.
    pub(crate) config_raw: toml::Table,
}

/// What the operator's commands open: the configuration, the store, the principal the
/// command acts as, and a way to record audit events — no federation, no script workers. So
/// these commands work beside a running `larkgate serve`: SQLite serialises the two
/// processes' writes; `serve` reads tokens, principals and approvals from the store at every
/// request, so a change made here counts from its next request; and while `serve` owns the
/// audit log, this process's events are forwarded for it to chain
/// ([`larkgate_platform::audit::ForwardingAudit`]).
pub(crate) struct StoreContext {
    pub(crate) config: Config,
    pub(crate) data_dir: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    /// The audit log, when this process owns it (no other larkgate runs on this directory).
    pub(crate) log: Option<Arc<AuditLog>>,
    /// Where events go: the log, or the running larkgate that owns it.
    pub(crate) events: Arc<dyn AuditSink>,
    /// Who the command acts as: the operator, or `--as NAME`.
    pub(crate) actor: Principal,
}

/// Opens the store the configuration names: SQLite in `data_dir`, or PostgreSQL (`[store]
/// url`), migrating it to this larkgate's schema either way.
pub(crate) async fn open_store(
    config: &Config,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<dyn Store>> {
    let settings = config
        .store
        .postgres(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    Ok(match settings {
        None => Arc::new(SqliteStore::open(data_dir)?),
        Some(settings) => Arc::new(PostgresStore::open(&settings).await.map_err(|error| {
            anyhow::anyhow!(
                "{error}; check that PostgreSQL is running and reachable from here, and that \
                 [store] names it (`larkgate check` validates the settings without connecting)"
            )
        })?),
    })
}

impl StoreContext {
    /// When a change this command makes to the store reaches the gateways serving from it.
    pub(crate) fn takes_effect(&self) -> &'static str {
        if self.log.is_none() {
            "the running larkgate follows within a second"
        } else if self.store.shared_by_replicas() {
            "every larkgate serving from this database follows within a second"
        } else {
            "larkgate serves it from its next start"
        }
    }

    /// A platform on the command's store whose audit events go where the command's do
    /// (forwarded to a running gateway that owns the chain, or into the chain).
    pub(crate) fn platform(&self) -> anyhow::Result<Platform> {
        Ok(Platform::builder(self.store.clone(), self.events.clone())?
            .policy(self.config.policy.clone())
            .build())
    }

    pub(crate) async fn open(options: &Options) -> anyhow::Result<Self> {
        let located = crate::config::Located::find(
            options.config.as_deref(),
            options.data_dir.as_deref(),
            |name| std::env::var(name).ok(),
        )?;
        if options.pool {
            // `serve` and `stdio` say which policy they run under, and what in it is unwise.
            crate::logging::say(&located.describe());
            for warning in located.warnings() {
                tracing::warn!("{warning}");
            }
        }
        let crate::config::Located {
            data_dir, config, ..
        } = located;
        let store = open_store(&config, &data_dir).await?;
        if options.pool {
            crate::logging::say(&format!("store: {}", store.describe()));
        }
        let actor = match &options.as_principal {
            None => Principal {
                id: OPERATOR.to_owned(),
                kind: PrincipalKind::User,
                roles: vec![larkgate_platform::policy::ROLE_ADMIN.to_owned()],
                issuer: IssuerBinding::Local,
            },
            Some(name) => store.principal(name).await?.with_context(|| {
                format!("there is no principal {name:?}; list them with `larkgate principal list`")
            })?,
        };
        // Owning the log replays a journal a crashed process left behind.
        let audit_options = AuditOptions {
            fsync: config.audit.fsync,
            store_intents: config.audit.store_intents,
            ..AuditOptions::default()
        };
        let forwarding = || -> Arc<dyn AuditSink> { Arc::new(ForwardingAudit::new(store.clone())) };
        let (log, events): (_, Arc<dyn AuditSink>) = if !options.own_audit_log {
            (None, forwarding())
        } else {
            match AuditLog::open(&data_dir, store.clone(), audit_options).await {
                Ok(log) => (Some(log.clone()), log),
                // A second `serve` of the same directory is a mistake to name plainly.
                Err(AuditError::Busy(_)) if options.serve.is_some() => {
                    anyhow::bail!("{}", already_served(&data_dir))
                }
                Err(AuditError::Busy(_)) => (None, forwarding()),
                Err(error) => return Err(error.into()),
            }
        };
        Ok(StoreContext {
            config,
            data_dir,
            store,
            log,
            events,
            actor,
        })
    }

    /// Records an audit event as the actor.
    pub(crate) fn event(&self, kind: EventKind, detail: String) -> anyhow::Result<()> {
        self.events.record_event(AuditEntry {
            kind: Some(AuditKind::Event),
            principal: self.actor.id.clone(),
            code: Some(kind.into()),
            detail: Some(detail),
            ..AuditEntry::default()
        })?;
        Ok(())
    }

    /// Moves what this process appended into the store (forwarded events are already there).
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        if let Some(log) = self.log {
            log.flush().await?;
        }
        Ok(())
    }
}

impl Context {
    /// Opens the rest on an opened [`StoreContext`], which must own the audit log.
    pub(crate) async fn with_store(
        store_context: StoreContext,
        options: Options,
    ) -> anyhow::Result<Self> {
        let StoreContext {
            config,
            data_dir,
            store,
            log,
            actor,
            ..
        } = store_context;
        // Calls, runs, scripts and upstreams need the chain itself.
        let Some(audit) = log else {
            anyhow::bail!(
                "another larkgate process (a running `serve` or `stdio`) owns the audit log in {}, \
                 and this command records calls on it: stop that process first, or do this \
                 through it over MCP (`larkgate client call TOOL ...`), or give this command a \
                 data directory of its own (--data-dir) when the store is shared; the token, \
                 principal, approvals, audit, runs and upstream commands work beside it",
                data_dir.display()
            );
        };
        // Signed checkpoints, by this data directory's key (made at its first start).
        if let Some((every_records, every)) =
            config.audit.checkpoints().map_err(anyhow::Error::msg)?
        {
            audit.set_checkpoints(larkgate_platform::audit::checkpoint::Checkpoints {
                signer: super::signing::load_or_create(&data_dir)?,
                every_records,
                every,
            });
        }
        // A rule whose condition reads an argument its tool does not take would refuse every
        // call of it: refused here as `larkgate check` refuses it.
        let outside = match super::check::has_conditions(&config.policy) {
            true => super::check::stored_tools(store.as_ref(), &config.upstreams).await?,
            false => Vec::new(),
        };
        for warning in super::check::rules_fit_their_tools(
            &config.policy,
            config.upstreams.iter().map(|u| u.alias.clone()),
            outside,
        )? {
            tracing::warn!("{warning}");
        }
        let listen = options
            .serve
            .map(|flag| flag.unwrap_or(config.server.listen));
        // Checkpoints anchored outside the database too.
        if !config.audit.anchors.is_empty() {
            let sinks = config
                .audit
                .anchors
                .iter()
                .enumerate()
                .map(|(i, anchor)| {
                    anchor
                        .sink(listen, Arc::new(SystemResolver), |name| {
                            std::env::var(name).ok()
                        })
                        .map_err(|e| anyhow::anyhow!("audit.anchors[{i}]: {e}"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            audit.set_anchors(larkgate_platform::audit::anchor::Anchors::start(
                sinks,
                config.audit.anchors_required,
            ));
        }
        let shared_rate_limits = config
            .ratelimit
            .shared(|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)?;
        let servers = config.virtual_servers().map_err(anyhow::Error::msg)?;
        let mut platform = Platform::builder(store.clone(), audit.clone())?
            .policy(config.policy)
            .servers(servers)
            .record_arguments(config.audit.record_arguments);
        if let Some(settings) = shared_rate_limits {
            platform = platform.shared_rate_limits(settings);
        }
        let platform = platform.build();
        if let Some(anchors) = audit.anchors() {
            anchors.register_metrics(&platform.services().metrics);
        }
        let federation = Federation::start(
            &platform,
            config.upstreams,
            Arc::new(SystemResolver),
            listen,
        )
        .await
        .map_err(anyhow::Error::msg)?;
        // Admins manage upstreams over MCP too (URL upstreams only; see the module's threat
        // model).
        platform.tool_table().add(larkgate_upstream::admin::tools(
            &federation,
            listen,
            Arc::new(SystemResolver),
        )?)?;
        // And virtual servers: those added at run time are served from the first request.
        platform
            .tool_table()
            .add(larkgate_platform::added_servers::tools::tools(&platform)?)?;
        platform
            .servers()
            .follow(store.as_ref())
            .await
            .map_err(anyhow::Error::msg)?;
        let command = WorkerCommand {
            address_space: config.scripts.address_space(),
            ..WorkerCommand::current_exe()?
        };
        let workers = match config.scripts.workers() {
            size if options.pool && size > 0 => Workers::Pool(WorkerPool::new(command, size)),
            _ => Workers::Fresh(command),
        };
        let scripts = Scripts::start(
            platform.clone(),
            store.clone(),
            audit.clone(),
            workers,
            config.scripts.bounds(),
        )
        .await?;
        Ok(Context {
            data_dir,
            store,
            audit,
            platform,
            federation,
            listen,
            server: config.server,
            sign_in: larkgate_edge::sign_in::Providers::new(config.sign_in),
            scripts,
            actor,
            config_flag: options.config,
            config_raw: config.raw,
        })
    }

    /// Flushes the audit log into the store and leaves no journal behind; with `sign` (a
    /// command that served), signs a checkpoint of what it chained since its last one too.
    pub(crate) async fn close(self, sign: bool) -> anyhow::Result<()> {
        self.federation.close().await;
        self.audit.flush_at_stop(sign).await?;
        // A checkpoint signed by this flush is given a moment to reach the anchors.
        if let Some(anchors) = self.audit.anchors()
            && !anchors.settle(std::time::Duration::from_secs(5)).await
        {
            tracing::warn!(
                "the last checkpoint could not be anchored before larkgate stopped; the next \
                 checkpoint covers it"
            );
        }
        Ok(())
    }
}

/// What a `serve` started on a data directory another process serves is told: which process,
/// where it serves (as far as it announced them), and what to do.
fn already_served(data_dir: &std::path::Path) -> String {
    let by = larkgate_platform::audit::held_by(data_dir).map_or_else(
        || "another larkgate process".to_owned(),
        |pid| format!("pid {pid}"),
    );
    let at = super::endpoint::read(data_dir)
        .map(|url| format!(" at {url}"))
        .unwrap_or_default();
    format!(
        "{} is already served by {by}{at}: stop that process first, or give this one a data \
         directory of its own (--data-dir)",
        data_dir.display()
    )
}
