//! larkgate's script service: the script lifecycle, one implementation behind both the command line (`larkgate script`,
//! `larkgate run`, `larkgate runs`) and the MCP platform tools (`script_save_draft`,
//! `script_run_draft`, `script_publish`, `script_list`, `script_history`, `run_get`,
//! `runs_list`), so the two cannot drift apart.
//!
//! It sits above the platform, the session plumbing and the engine, and below the binary:
//! calls flow downward only. A run is launched here (identity decided here), executed by the
//! engine in a worker process (`larkgate-script`), and its host calls reach the platform through
//! an in-memory MCP session (`larkgate-session`) — the same pipeline as every other call.
//!
//! Authority, decided here (with the role checks of `larkgate_platform::access`):
//! - a draft belongs to its author (`author` or `admin` role); only the author saves over it
//!   or runs it, and a draft run runs **as the caller** with the write barrier on;
//! - publishing needs `publisher` (or `admin`), captures the draft *author's* roles in the same
//!   store transaction, and records the publisher;
//! - a published run runs as `script:<name>` with the captured roles, one nesting level deeper
//!   than whoever called it, refused past `[scripts] max_depth` ([`DEFAULT_MAX_DEPTH`]);
//! - a run record is readable by whoever started it, by the principal it ran as, and by
//!   admins.
//!
//! Every operation answers with a [`Refusal`], so MCP callers get envelopes and the CLI prints
//! the same sentences.

#![forbid(unsafe_code)]

mod authority;
mod drafts;
mod publish;
mod records;
mod run;
mod tools;
pub mod turns;

pub use authority::RunRequest;
pub use drafts::{Saved, check, source_hash};
pub use publish::{PublishPreview, ReviewSummary};
pub use records::{DEFAULT_RUNS, MAX_RUNS, RunsFilter, readable_run, readable_runs, review_of};
pub use run::Finished;
pub use tools::RunView;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use larkgate_platform::Platform;
use larkgate_platform::audit::{AuditEntry, AuditSink, EventKind};
use larkgate_platform::envelope::Refusal;
use larkgate_platform::registry::{RegistryError, script_tool_name};
pub use larkgate_script::Workers;
use larkgate_script::{ScriptLimits, WorkerPool};
use larkgate_store::{AuditKind, Principal, Store, StoreError};

/// How deep published scripts may call each other by default: a direct caller is depth 0, the
/// script it calls depth 1, and a script that script calls depth 2, up to this
/// (`[scripts] max_depth`).
pub const DEFAULT_MAX_DEPTH: u32 = 4;

/// How runs are bounded.
#[derive(Clone, Copy, Debug)]
pub struct RunBounds {
    /// Each run's limits.
    pub limits: ScriptLimits,
    /// How many runs may go at once; more wait their turn.
    pub max_concurrent_runs: usize,
    /// The memory all runs going at once may reserve together (see [`turns`]).
    pub memory_budget_bytes: u64,
    /// How long a run waits for its turn (a slot and its memory) before it is refused.
    pub start_wait: std::time::Duration,
    /// How deep published scripts may call each other.
    pub max_depth: u32,
}

impl Default for RunBounds {
    fn default() -> Self {
        RunBounds {
            limits: ScriptLimits::default(),
            max_concurrent_runs: 32,
            memory_budget_bytes: turns::default_memory_budget(),
            start_wait: std::time::Duration::from_secs(30),
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// What bounds one run, as it starts: the part of [`RunBounds`] a reload may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// Its limits.
    pub limits: ScriptLimits,
    /// How deep published scripts may call each other.
    pub max_depth: u32,
}

/// Why the service could not start or list its tools.
#[derive(Debug, thiserror::Error)]
pub enum ScriptsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A tool could not be registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// The names of the script lifecycle's platform tools (`script_save_draft`, ...), for checks
/// that need to know which tools exist without starting anything.
pub fn platform_tool_names() -> Result<Vec<String>, RegistryError> {
    Ok(tools::platform_tools(Weak::new())?
        .into_iter()
        .map(|(spec, _)| spec.name)
        .collect())
}

/// The tool (`script__<name>`) a published `version` is served as, without what runs it: for
/// checks of the policy against the tools there are, without starting anything.
pub fn published_tool_spec(
    version: &larkgate_store::ScriptVersion,
) -> Result<larkgate_platform::registry::ToolSpec, Refusal> {
    tools::script_tool(Weak::new(), version).map(|(spec, _)| spec)
}

fn store_failed(error: StoreError) -> Refusal {
    Refusal::store("the script store failed", error)
}

/// The lifecycle service. See the module documentation.
#[derive(Debug)]
pub struct Scripts {
    platform: Platform,
    store: Arc<dyn Store>,
    audit: Arc<dyn AuditSink>,
    workers: Workers,
    /// Each run's limits and the nesting depth, which a reload may change
    /// ([`Scripts::set_run_limits`]); a run takes them as it starts.
    run_limits: Mutex<RunLimits>,
    /// Runs this process has started and not yet recorded as finished.
    active: Mutex<HashSet<String>>,
    /// Set at shutdown: runs that end now were cancelled.
    stopping: std::sync::atomic::AtomicBool,
    /// Bounds how many runs (worker processes) go at once and the memory they reserve; others
    /// wait their turn.
    turns: turns::Turns,
}

impl Scripts {
    /// The service, with its tools registered on `platform` and every published script
    /// listed as a tool.
    pub async fn start(
        platform: Platform,
        store: Arc<dyn Store>,
        audit: Arc<dyn AuditSink>,
        workers: Workers,
        bounds: RunBounds,
    ) -> Result<Arc<Self>, ScriptsError> {
        let scripts = Arc::new(Scripts {
            platform,
            store,
            audit,
            workers,
            run_limits: Mutex::new(RunLimits {
                limits: bounds.limits,
                max_depth: bounds.max_depth,
            }),
            active: Mutex::new(HashSet::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
            turns: turns::Turns::new(
                bounds.max_concurrent_runs,
                bounds.limits.max_memory_bytes,
                bounds.memory_budget_bytes,
                bounds.start_wait,
            ),
        });
        scripts
            .platform
            .tool_table()
            .add(tools::platform_tools(Arc::downgrade(&scripts))?)?;
        scripts.refresh_tools().await?;
        Ok(scripts)
    }

    /// Runs that start from now on get `limits` and `max_depth` (a reload). A run's memory
    /// limit is not among what changes: the runs' turns reserve memory by it, so `limits`
    /// keeps the memory limit the service started with.
    pub fn set_run_limits(&self, limits: ScriptLimits, max_depth: u32) {
        let mut live = self.run_limits.lock().unwrap_or_else(|p| p.into_inner());
        live.limits = ScriptLimits {
            max_memory_bytes: live.limits.max_memory_bytes,
            ..limits
        };
        live.max_depth = max_depth;
    }

    /// The limits a run starting now gets.
    pub fn run_limits(&self) -> RunLimits {
        *self.run_limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How runs share memory, in a sentence for an operator (`serve` prints it at start).
    pub fn memory_budget(&self) -> String {
        self.turns.describe()
    }

    /// The worker pool, when runs use one.
    pub fn pool(&self) -> Option<&Arc<WorkerPool>> {
        match &self.workers {
            Workers::Pool(pool) => Some(pool),
            Workers::Fresh(_) => None,
        }
    }

    /// Lists every published script's latest version as a `script__<name>` tool.
    pub async fn refresh_tools(self: &Arc<Self>) -> Result<(), ScriptsError> {
        let mut tools = Vec::new();
        for version in self.store.latest_versions().await? {
            match tools::script_tool(Arc::downgrade(self), &version) {
                Ok(tool) => tools.push(tool),
                // A version that no longer parses (the engine's dialect changed) is left out
                // rather than keeping every other script from being served.
                Err(error) => tracing::warn!(
                    "published script {} v{} is not served: {error}",
                    version.name,
                    version.version
                ),
            }
        }
        self.platform.tool_table().replace_scripts(tools)?;
        self.platform
            .warn_of_unfit_rules(|spec| spec.origin.source == larkgate_caller::Source::Script);
        Ok(())
    }

    fn event(
        &self,
        actor: &Principal,
        name: &str,
        kind: EventKind,
        detail: String,
    ) -> Result<(), Refusal> {
        self.audit
            .append(AuditEntry {
                kind: Some(AuditKind::Event),
                principal: actor.id.clone(),
                tool: Some(script_tool_name(name)),
                code: Some(kind.into()),
                detail: Some(detail),
                ..Default::default()
            })
            .map(|_| ())
            .map_err(|e| Refusal::internal("the change could not be audited", e))
    }
}

/// Holds the service for tool handlers without keeping it alive: the platform's tool table
/// outlives nothing that owns it.
pub fn upgrade(scripts: &Weak<Scripts>) -> Result<Arc<Scripts>, Refusal> {
    scripts
        .upgrade()
        .ok_or_else(|| Refusal::internal("the script service has stopped", "its handle is gone"))
}
