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

mod tools;
pub mod turns;

pub use tools::RunView;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use larkgate_binding::{Limits, Map, Value};
use larkgate_platform::access::{self, AUTHORS, PUBLISHERS};
use larkgate_platform::audit::{AuditEntry, AuditSink, EventKind};
use larkgate_platform::envelope::{Code, Refusal};
use larkgate_platform::registry::{RegistryError, script_tool_name};
use larkgate_platform::review::{IntendedWrite, ReviewRecord};
use larkgate_platform::{Platform, RunContext, RunKind};
use larkgate_script::{EntryPoint, RunError, ScriptLimits, WorkerCommand, WorkerPool};
use larkgate_store::now_ms;
use larkgate_store::{
    AuditKind, CallChain, Draft, Principal, PrincipalKind, Run, RunQuery, RunStats, RunStatus,
    ScriptPin, ScriptVersion, Store, StoreError,
};
use sha2::{Digest, Sha256};
use tracing::Instrument;

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

/// Where runs get their worker processes.
#[derive(Debug)]
pub enum Workers {
    /// Pre-started workers (`serve`, `stdio`): a run does not wait for a process to start.
    Pool(Arc<WorkerPool>),
    /// A fresh worker per run (one-shot commands, which would waste a pool).
    Fresh(WorkerCommand),
}

/// The names of the script lifecycle's platform tools (`script_save_draft`, ...), for checks
/// that need to know which tools exist without starting anything.
pub fn platform_tool_names() -> Result<Vec<String>, RegistryError> {
    Ok(tools::platform_tools(Weak::new())?
        .into_iter()
        .map(|(spec, _)| spec.name)
        .collect())
}

/// The SHA-256 (hex) of a script's source.
pub fn source_hash(source: &str) -> String {
    hex::encode(Sha256::digest(source.as_bytes()))
}

/// Parses a script and reads its entry point, or says what is wrong.
pub fn check(name: &str, source: &str) -> Result<EntryPoint, Refusal> {
    larkgate_script::parse(&format!("{name}.star"), source)
        .and_then(|ast| larkgate_script::entry_point(&ast))
        .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))
}

/// The run `id` if `reader` may read it: whoever started it, the principal it ran as, and
/// admins; anyone else gets the same answer as for a run that does not exist.
pub async fn readable_run(store: &dyn Store, reader: &Principal, id: &str) -> Result<Run, Refusal> {
    let run = store.run(id).await.map_err(store_failed)?;
    run.filter(|run| access::may_read_run(reader, &run.principal, run.started_by.as_deref()))
        .ok_or_else(|| Refusal::new(Code::NotFound, format!("there is no run {id:?}")))
}

/// What a runs listing is filtered by, as a caller gives it.
#[derive(Clone, Debug, Default)]
pub struct RunsFilter {
    /// Only runs of this script.
    pub script: Option<String>,
    /// Only runs that ran as this principal.
    pub principal: Option<String>,
    /// Only runs with this status (`running`, `succeeded`, `failed`).
    pub status: Option<String>,
    /// Only runs started at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// At most this many (default [`DEFAULT_RUNS`], at most [`MAX_RUNS`]).
    pub limit: Option<i64>,
}

/// How many runs a listing answers unless told.
pub const DEFAULT_RUNS: usize = 50;
/// The most runs one listing answers.
pub const MAX_RUNS: usize = 1000;

/// The runs `filter` selects that `reader` may read (as [`readable_run`] decides: admins every
/// run, anyone else the runs they started or that ran as them), newest first.
pub async fn readable_runs(
    store: &dyn Store,
    reader: &Principal,
    filter: &RunsFilter,
) -> Result<Vec<Run>, Refusal> {
    let status = match filter.status.as_deref() {
        None => None,
        Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
            Refusal::new(
                Code::InvalidArguments,
                format!("a run's status is running, succeeded or failed, not {text:?}"),
            )
        })?),
    };
    let limit = match filter.limit {
        None => DEFAULT_RUNS,
        Some(n) if (1..=MAX_RUNS as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!("limit is 1 to {MAX_RUNS}, not {n}"),
            )
            .with_hint("narrow the listing by script, principal, status or since_ms"));
        }
    };
    let admin = access::has_any_role(reader, access::ADMINS);
    let query = RunQuery {
        script: filter.script.clone(),
        principal: filter.principal.clone(),
        status,
        since_ms: filter.since_ms,
        reader: (!admin).then(|| reader.id.clone()),
        limit,
    };
    store.runs(&query).await.map_err(store_failed)
}

fn store_failed(error: StoreError) -> Refusal {
    Refusal::store("the script store failed", error)
}

/// A saved draft, as reported back.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The draft.
    pub draft: Draft,
    /// `main`'s signature.
    pub signature: String,
    /// `main`'s docstring.
    pub description: Option<String>,
    /// What the checks at save time found that does not refuse the save.
    pub warnings: Vec<String>,
}

/// The most save-time errors one refusal lists.
const MAX_LISTED_ERRORS: usize = 10;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The script's name (a file's stem, for unsaved sources).
    pub name: String,
    /// Whether `name` is a saved draft or a published script (recorded with the run).
    pub saved: bool,
    /// The source.
    pub source: String,
    /// The published version, for published runs.
    pub version: Option<u32>,
    /// Who the run runs as.
    pub principal: Principal,
    /// Draft or published.
    pub kind: RunKind,
    /// Arguments for `main`.
    pub arguments: Map,
    /// The nesting depth of the run (1 for a run started directly).
    pub depth: u32,
    /// Who started it.
    pub started_by: String,
    /// The runs it is part of, this one included: who started each and who wrote its script.
    /// The run's calls carry it, so an approval they need binds to it.
    pub chain: CallChain,
    /// For a published run: the upstream tools its version was published against, the only
    /// upstream tools it may call (`None`: no such list).
    pub upstream_tools: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl RunRequest {
    /// This draft run in review mode: calls to tools that may write are recorded as intended
    /// writes and answered with a placeholder instead of being made
    /// ([`larkgate_platform::review`]).
    pub fn reviewing(mut self) -> Self {
        if self.kind == RunKind::Draft {
            self.kind = RunKind::Review;
        }
        self
    }

    /// A draft run of `source` as `actor`, who starts it, at nesting `depth`.
    pub fn draft(
        actor: &Principal,
        name: String,
        saved: bool,
        source: String,
        arguments: Map,
        depth: u32,
    ) -> Self {
        RunRequest {
            name,
            saved,
            source,
            version: None,
            principal: actor.clone(),
            kind: RunKind::Draft,
            arguments,
            depth,
            started_by: actor.id.clone(),
            chain: CallChain::default().then(&actor.id, &actor.id),
            upstream_tools: None,
        }
    }
}

/// A finished run: its record, what it printed, and its outcome.
#[derive(Clone, Debug)]
pub struct Finished {
    /// The run as recorded.
    pub record: Run,
    /// What it printed.
    pub printed: String,
    /// `main`'s result, or why the run failed.
    pub outcome: Result<Value, RunError>,
    /// For a review run: the calls it would have made to tools that may write, in order, and
    /// the tools it called.
    pub review: Option<ReviewRecord>,
}

impl Finished {
    /// The failed run as a refusal: its own code and text, and where to read the record.
    pub fn refusal(&self, error: &RunError) -> Refusal {
        let code = error.code();
        Refusal::new(code, format!("run {} failed: {error}", self.record.id)).with_hint(format!(
            "read the run with run_get(run_id=\"{}\")",
            self.record.id
        ))
    }
}

/// What publishing a draft changes: shown before publishing (`script publish --dry-run`) and
/// with the publication.
#[derive(Clone, Debug)]
pub struct PublishPreview {
    /// The script's name.
    pub name: String,
    /// The draft's source.
    pub source: String,
    /// Its SHA-256 (hex).
    pub hash: String,
    /// The draft's author: whose roles the version's runs carry.
    pub author: String,
    /// The latest version before it, if any.
    pub previous_version: Option<u32>,
    /// A unified diff from the latest version's source to the draft's (empty when they are the
    /// same; `None` for a first version).
    pub diff: Option<String>,
    /// The newest review run of exactly this source that succeeded, if any.
    pub review: Option<ReviewSummary>,
    /// The upstream tools the version refers to, with their approved definitions now: its
    /// runs may call no other upstream tool, and it is suspended while one of these is
    /// quarantined.
    pub pins: Vec<ScriptPin>,
}

/// A review run, as a publisher is shown it.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ReviewSummary {
    /// The run's id.
    pub run_id: String,
    /// Who ran it.
    pub principal: String,
    /// When it finished (Unix ms).
    pub finished_at_ms: Option<i64>,
    /// The calls it would have made to tools that may write, in order.
    pub intended_writes: Vec<IntendedWrite>,
    /// Every tool it called, by name.
    pub tools_called: Vec<String>,
}

/// A run's review record, as its run record keeps it.
pub fn review_of(run: &Run) -> Option<ReviewRecord> {
    run.review
        .as_deref()
        .map(|json| serde_json::from_str(json).unwrap_or_default())
}

impl ReviewSummary {
    fn from_run(run: Run) -> Self {
        let review = review_of(&run).unwrap_or_default();
        ReviewSummary {
            intended_writes: review.intended_writes,
            tools_called: review.tools_called.into_iter().collect(),
            run_id: run.id,
            principal: run.principal,
            finished_at_ms: run.finished_at_ms,
        }
    }
}

/// A unified diff from `previous`'s source to `source`.
fn source_diff(name: &str, previous: &ScriptVersion, source: &str) -> String {
    similar::TextDiff::from_lines(previous.source.as_str(), source)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{name} v{}", previous.version),
            &format!("{name} (draft)"),
        )
        .to_string()
}

/// The lifecycle service. See the module documentation.
#[derive(Debug)]
pub struct Scripts {
    platform: Platform,
    store: Arc<dyn Store>,
    audit: Arc<dyn AuditSink>,
    workers: Workers,
    limits: ScriptLimits,
    max_depth: u32,
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
            limits: bounds.limits,
            max_depth: bounds.max_depth,
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
        Ok(())
    }

    /// Saves `source` as `actor`'s draft `name`.
    pub async fn save_draft(
        &self,
        actor: &Principal,
        name: &str,
        source: &str,
    ) -> Result<Saved, Refusal> {
        access::require_any_role(actor, AUTHORS, "save drafts")?;
        self.platform.registry().check_alias(name).map_err(|why| {
            Refusal::new(
                Code::InvalidArguments,
                format!("{name:?} is not a script name: {why}"),
            )
        })?;
        let entry = check(name, source)?;
        let findings = self.lint(actor, name, source)?;
        let draft = self
            .store
            .save_draft(name, source, &actor.id, now_ms())
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => Refusal::new(
                    Code::Forbidden,
                    format!("the draft {name:?} belongs to another author"),
                )
                .with_hint("choose another name"),
                other => store_failed(other),
            })?;
        self.event(
            actor,
            name,
            EventKind::DraftSaved,
            format!("saved draft {name}, sha256 {}", source_hash(source)),
        )?;
        Ok(Saved {
            draft,
            signature: entry.input.signature("main", "any"),
            description: entry.description,
            warnings: findings.warnings,
        })
    }

    /// The tools `principal` sees, as a script run as it sees them.
    fn listing(&self, principal: &Principal) -> Vec<larkgate_caller::ToolInfo> {
        let identity = larkgate_platform::SessionIdentity {
            run: RunContext {
                principal: principal.clone(),
                run_id: None,
                kind: RunKind::Draft,
                depth: 0,
                chain: CallChain::default(),
                upstream_tools: None,
            },
            label: "listing".to_owned(),
        };
        self.platform
            .list(Some(&identity))
            .iter()
            .map(larkgate_session::tool_info)
            .collect()
    }

    /// The upstream tools a published version of `source` refers to: those it names literally
    /// (as its author sees tools: the roles its runs will carry) and those `review` called,
    /// each with the hash of its approved definition now.
    async fn upstream_pins(
        &self,
        name: &str,
        source: &str,
        author: &str,
        review: Option<&ReviewSummary>,
    ) -> Result<Vec<ScriptPin>, Refusal> {
        let Some(author) = self.store.principal(author).await.map_err(store_failed)? else {
            // Publishing refuses a departed author; nothing to pin.
            return Ok(Vec::new());
        };
        let ast = larkgate_script::parse(&format!("{name}.star"), source)
            .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))?;
        let listing = self.listing(&author);
        let mut named = larkgate_script::lint::references(&ast, &listing);
        named.extend(
            review
                .into_iter()
                .flat_map(|r| r.tools_called.iter().cloned()),
        );
        let mut pins = Vec::new();
        let mut known: std::collections::HashMap<String, Vec<larkgate_store::ToolPin>> =
            std::collections::HashMap::new();
        for tool in listing.iter().filter(|t| named.contains(&t.name)) {
            let (larkgate_caller::Source::Upstream, Some(alias)) =
                (&tool.origin.source, &tool.origin.alias)
            else {
                continue;
            };
            if !known.contains_key(alias) {
                let stored = self.store.pins(alias).await.map_err(store_failed)?;
                known.insert(alias.to_owned(), stored);
            }
            let hash = known[alias]
                .iter()
                .find(|p| p.tool == tool.origin.original_name)
                .map(|p| p.hash.clone())
                .unwrap_or_default();
            pins.push(ScriptPin {
                tool: tool.name.clone(),
                alias: alias.to_owned(),
                upstream_tool: tool.origin.original_name.clone(),
                hash,
            });
        }
        Ok(pins)
    }

    /// Refuses a run of `version` while an upstream tool it was published against is
    /// quarantined (its definition changed and waits for an admin's review): nothing of the
    /// script runs. Approving the change, or the upstream reverting it, restores the script.
    async fn check_not_suspended(&self, version: &ScriptVersion) -> Result<(), Refusal> {
        let Some(pins) = &version.pins else {
            return Ok(());
        };
        let mut by_alias: std::collections::BTreeMap<&str, Vec<&ScriptPin>> = Default::default();
        for pin in pins {
            by_alias.entry(&pin.alias).or_default().push(pin);
        }
        for (alias, wanted) in by_alias {
            let stored = self.store.pins(alias).await.map_err(store_failed)?;
            for pin in wanted {
                let quarantined = stored.iter().any(|p| {
                    p.tool == pin.upstream_tool
                        && p.status == larkgate_store::PinStatus::Quarantined
                });
                if quarantined {
                    return Err(Refusal::new(
                        Code::ScriptSuspended,
                        format!(
                            "{} is suspended: it calls {}, whose definition changed since \
                             version {} was published and waits for an admin's review",
                            script_tool_name(&version.name),
                            pin.tool,
                            version.version
                        ),
                    )
                    .with_hint(format!(
                        "an admin reviews the change with larkgate upstream review {alias} \
                         (approving it restores the script)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks `source` against the tools `actor` may call in a draft run
    /// ([`larkgate_script::lint`]): errors refuse, warnings are answered.
    fn lint(
        &self,
        actor: &Principal,
        name: &str,
        source: &str,
    ) -> Result<larkgate_script::lint::Findings, Refusal> {
        let ast = larkgate_script::parse(&format!("{name}.star"), source)
            .map_err(|e| Refusal::new(Code::InvalidArguments, format!("{name}: {e}")))?;
        let findings = larkgate_script::lint::lint(&ast, &self.listing(actor));
        if findings.errors.is_empty() {
            return Ok(findings);
        }
        let count = findings.errors.len();
        let mut listed: Vec<&str> = findings
            .errors
            .iter()
            .take(MAX_LISTED_ERRORS)
            .map(String::as_str)
            .collect();
        let more = count.saturating_sub(MAX_LISTED_ERRORS);
        let more_text = format!("and {more} more");
        if more > 0 {
            listed.push(&more_text);
        }
        Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{name} was not saved: {count} problem{} a run would fail on: {}",
                if count == 1 { "" } else { "s" },
                listed.join("; ")
            ),
        )
        .with_hint(
            "fix them and save again; list your tools with tools() or larkgate capabilities",
        ))
    }

    /// What publishing the draft `name` would change, for `actor` (a publisher) to see first:
    /// the diff from the latest version, and the intended writes of the newest review run of
    /// exactly this source. Refused as [`Scripts::publish`] would refuse it, except for a
    /// missing review run, which the preview shows as missing.
    pub async fn publish_preview(
        &self,
        actor: &Principal,
        name: &str,
    ) -> Result<PublishPreview, Refusal> {
        access::require_any_role(actor, PUBLISHERS, "publish scripts")?;
        let draft = self
            .store
            .draft(name)
            .await
            .map_err(store_failed)?
            .ok_or_else(|| {
                Refusal::new(Code::NotFound, format!("there is no draft named {name:?}"))
                    .with_hint("save one with script_save_draft first")
            })?;
        check(name, &draft.source)?;
        let hash = source_hash(&draft.source);
        let latest = self
            .store
            .latest_version(name)
            .await
            .map_err(store_failed)?;
        let review = self
            .store
            .latest_review(name, &hash)
            .await
            .map_err(store_failed)?
            .map(ReviewSummary::from_run);
        let pins = self
            .upstream_pins(name, &draft.source, &draft.author, review.as_ref())
            .await?;
        Ok(PublishPreview {
            pins,
            name: name.to_owned(),
            hash,
            author: draft.author,
            previous_version: latest.as_ref().map(|v| v.version),
            diff: latest.map(|v| source_diff(name, &v, &draft.source)),
            review,
            source: draft.source,
        })
    }

    /// Publishes the draft `name` as its next version, published by `actor`; answers the
    /// version and what was shown of it ([`Scripts::publish_preview`]). With
    /// `[policy.publishing] require_review`, a draft whose exact source has no successful review
    /// run is refused.
    pub async fn publish(
        self: &Arc<Self>,
        actor: &Principal,
        name: &str,
    ) -> Result<(ScriptVersion, PublishPreview), Refusal> {
        let preview = self.publish_preview(actor, name).await?;
        if self.platform.services().policy.publishing.require_review && preview.review.is_none() {
            return Err(Refusal::new(
                Code::Forbidden,
                format!(
                    "{name} was not published: this source has no successful review run, and \
                     the policy requires one before publishing"
                ),
            )
            .with_hint(format!(
                "run it in review mode first: larkgate run --draft {name} --review, or \
                 script_run_draft(name=\"{name}\", review=true)"
            )));
        }
        let hash = &preview.hash;
        let version = self
            .store
            .publish(
                name,
                &preview.source,
                hash,
                &actor.id,
                &preview.pins,
                now_ms(),
            )
            .await
            .map_err(|e| match e {
                StoreError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
                other => store_failed(other),
            })?;
        let reviewed = match &preview.review {
            Some(review) => {
                let count = review.intended_writes.len();
                format!(
                    ", reviewed by run {} ({count} intended write{})",
                    review.run_id,
                    if count == 1 { "" } else { "s" }
                )
            }
            None => ", not reviewed".to_owned(),
        };
        self.event(
            actor,
            name,
            EventKind::Published,
            format!(
                "published {name} version {} by {} with roles [{}], hash {hash}{reviewed}",
                version.version,
                version.author,
                version.author_roles.join(",")
            ),
        )?;
        self.refresh_tools()
            .await
            .map_err(|e| Refusal::internal("the script tools were not refreshed", e))?;
        Ok((version, preview))
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

    /// Every draft, by name.
    pub async fn drafts(&self) -> Result<Vec<Draft>, Refusal> {
        self.store.drafts().await.map_err(store_failed)
    }

    /// The latest version of every published script, by name.
    pub async fn published(&self) -> Result<Vec<ScriptVersion>, Refusal> {
        self.store.latest_versions().await.map_err(store_failed)
    }

    /// Every version of `name`, oldest first.
    pub async fn history(&self, name: &str) -> Result<Vec<ScriptVersion>, Refusal> {
        let versions = self.store.versions(name).await.map_err(store_failed)?;
        if versions.is_empty() {
            return Err(Refusal::new(
                Code::NotFound,
                format!("{name:?} has no published versions"),
            ));
        }
        Ok(versions)
    }

    /// The run `id`, if `reader` may read it: whoever started it, the principal it ran as,
    /// and admins. Others are told it does not exist.
    pub async fn run_record(&self, reader: &Principal, id: &str) -> Result<Run, Refusal> {
        readable_run(self.store.as_ref(), reader, id).await
    }

    /// The runs `filter` selects that `reader` may read, newest first ([`readable_runs`]).
    pub async fn run_records(
        &self,
        reader: &Principal,
        filter: &RunsFilter,
    ) -> Result<Vec<Run>, Refusal> {
        readable_runs(self.store.as_ref(), reader, filter).await
    }

    /// The draft `name` for `actor` to run: only its author runs it.
    pub async fn own_draft(&self, actor: &Principal, name: &str) -> Result<Draft, Refusal> {
        // The same answer whether the draft is missing or someone else's.
        self.store
            .draft(name)
            .await
            .map_err(store_failed)?
            .filter(|d| d.author == actor.id)
            .ok_or_else(|| {
                Refusal::new(
                    Code::NotFound,
                    format!(
                        "{} has no draft named {name:?}; only a draft's author runs it",
                        actor.id
                    ),
                )
            })
    }

    /// The request for a run of the latest published version of `name`, started by `caller`
    /// (a session's run context: a direct one, or another run's).
    pub async fn published_run(
        &self,
        name: &str,
        arguments: Map,
        caller: &RunContext,
    ) -> Result<RunRequest, Refusal> {
        let latest = self
            .store
            .latest_version(name)
            .await
            .map_err(store_failed)?;
        let latest = latest.ok_or_else(|| {
            Refusal::new(Code::NotFound, format!("{name:?} has no published version"))
                .with_hint("publish it first")
        })?;
        self.check_not_suspended(&latest).await?;
        Ok(RunRequest {
            upstream_tools: latest
                .pins
                .as_ref()
                .map(|pins| Arc::new(pins.iter().map(|p| p.tool.clone()).collect())),
            name: name.to_owned(),
            saved: true,
            source: latest.source.clone(),
            version: Some(latest.version),
            principal: Principal {
                id: format!("script:{name}"),
                kind: PrincipalKind::Script,
                roles: latest.author_roles.clone(),
            },
            kind: RunKind::Published,
            arguments,
            depth: caller.depth + 1,
            started_by: caller.principal.id.clone(),
            chain: caller.chain.then(&caller.principal.id, &latest.author),
        })
    }

    /// Runs a script in a worker and records the run. A refusal means the run never started
    /// (a bad script or arguments, too deep a nesting); a run that started and failed is a
    /// [`Finished`] with an error outcome.
    pub async fn run(&self, request: RunRequest) -> Result<Finished, Refusal> {
        if request.depth > self.max_depth {
            return Err(Refusal::new(
                Code::LimitExceeded,
                format!(
                    "the run exceeded its script nesting depth limit: scripts may call scripts \
                     at most {} deep",
                    self.max_depth
                ),
            )
            .with_hint("raise [scripts] max_depth, or have fewer scripts call each other"));
        }
        let entry = check(&request.name, &request.source)?;
        // Bound here too, so a bad argument is refused before a worker or a record is spent.
        entry
            .input
            .bind_map("main", &request.arguments)
            .map_err(|e| larkgate_platform::envelope::refuse_arguments(&e))?;
        let _turn = self.turns.take().await.map_err(|no| match no {
            turns::NoTurn::Waited(refusal) => refusal,
            turns::NoTurn::Closed => {
                Refusal::internal("larkgate is stopping", "the run slots are closed")
            }
        })?;
        let id = run_id();
        let started = Instant::now();
        let mut record = Run {
            id: id.clone(),
            script: request.saved.then(|| request.name.clone()),
            version: request.version,
            hash: source_hash(&request.source),
            kind: request.kind.as_str().to_owned(),
            principal: request.principal.id.clone(),
            status: RunStatus::Running,
            result: None,
            error_code: None,
            error: None,
            stats: RunStats::default(),
            started_at_ms: now_ms(),
            finished_at_ms: None,
            started_by: Some(request.started_by.clone()),
            review: None,
        };
        self.store
            .start_run(record.clone())
            .await
            .map_err(store_failed)?;
        let metrics = &self.platform.services().metrics;
        metrics.active_runs.inc();
        let reserved = i64::try_from(self.turns.reservation()).unwrap_or(i64::MAX);
        metrics.script_memory_reserved_bytes.inc_by(reserved);
        self.lock_active().insert(id.clone());
        let span = tracing::info_span!(
            "script.run",
            otel.name = format!("run {}", request.name),
            larkgate.script.name = %request.name,
            larkgate.script.version = request.version,
            larkgate.run.id = %id,
            larkgate.run.kind = request.kind.as_str(),
        );
        let ledger = (request.kind == RunKind::Review)
            .then(|| ReviewLedger::open(&self.platform.services().reviews, &id));
        let mut report = self.execute(&request, &id).instrument(span).await;
        let review = ledger.map(ReviewLedger::close);
        if report.outcome.is_err() && self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            report.outcome = Err(RunError::Failed(CANCELLED.to_owned()));
        }
        self.lock_active().remove(&id);
        metrics.active_runs.dec();
        metrics.script_memory_reserved_bytes.dec_by(reserved);
        record.finished_at_ms = Some(now_ms());
        record.stats = RunStats {
            tool_calls: report.usage.tool_calls,
            paces: report.usage.paces,
            duration_ms: started.elapsed().as_millis() as u64,
            peak_memory_bytes: report.usage.peak_memory_bytes,
        };
        match &report.outcome {
            Ok(value) => {
                record.status = RunStatus::Succeeded;
                record.result = Some(value.to_string());
            }
            Err(error) => {
                record.status = RunStatus::Failed;
                record.error_code = Some(error.code().as_str().to_owned());
                record.error = Some(error.to_string());
            }
        }
        record.review = review
            .as_ref()
            .map(|review| serde_json::to_string(review).unwrap_or_else(|_| "{}".to_owned()));
        self.store
            .finish_run(record.clone())
            .await
            .map_err(store_failed)?;
        Ok(Finished {
            record,
            printed: report.printed,
            outcome: report.outcome,
            review,
        })
    }

    async fn execute(&self, request: &RunRequest, id: &str) -> larkgate_script::RunReport {
        let context = RunContext {
            principal: request.principal.clone(),
            run_id: Some(id.to_owned()),
            kind: request.kind,
            depth: request.depth,
            chain: request.chain.clone(),
            upstream_tools: request.upstream_tools.clone(),
        };
        let label = format!("script-{}", request.kind);
        let (caller, teardown) =
            match larkgate_session::connect(&self.platform, context, &label, Limits::default())
                .await
            {
                Ok(session) => session,
                Err(e) => {
                    return larkgate_script::RunReport::failed(RunError::Failed(e.to_string()));
                }
            };
        let filename = format!("{}.star", request.name);
        let draft = request.kind == RunKind::Draft;
        let report = match &self.workers {
            Workers::Pool(pool) => {
                pool.run(
                    &caller,
                    &filename,
                    &request.source,
                    &request.arguments,
                    &self.limits,
                    draft,
                )
                .await
            }
            Workers::Fresh(command) => {
                larkgate_script::run_in_worker(
                    command,
                    &caller,
                    &filename,
                    &request.source,
                    &request.arguments,
                    &self.limits,
                    draft,
                )
                .await
            }
        };
        teardown.close().await;
        report
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancels every run still going, for a shutdown that could not wait for them: new runs
    /// are refused, every worker is killed, and each run is recorded as failed with
    /// [`CANCELLED`] — by the run itself as its worker dies, or here for one that does not
    /// finish recording within a second.
    pub async fn cancel_active(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.turns.close();
        larkgate_script::kill_all();
        for _ in 0..20 {
            if self.lock_active().is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let ids: Vec<String> = self.lock_active().drain().collect();
        for id in ids {
            let Ok(Some(mut run)) = self.store.run(&id).await else {
                continue;
            };
            run.status = RunStatus::Failed;
            run.error_code = Some(Code::Internal.as_str().to_owned());
            run.error = Some(format!("the script failed: {CANCELLED}"));
            run.finished_at_ms = Some(now_ms());
            if let Err(error) = self.store.finish_run(run).await {
                tracing::warn!("run {id} could not be recorded as cancelled: {error}");
            }
        }
    }
}

/// A review run's ledger of intended writes, open while the run goes: closed by
/// [`ReviewLedger::close`], or when dropped (a run whose caller went away).
struct ReviewLedger<'a> {
    reviews: &'a larkgate_platform::review::Reviews,
    run_id: String,
    closed: bool,
}

impl<'a> ReviewLedger<'a> {
    fn open(reviews: &'a larkgate_platform::review::Reviews, run_id: &str) -> Self {
        reviews.open(run_id);
        ReviewLedger {
            reviews,
            run_id: run_id.to_owned(),
            closed: false,
        }
    }

    fn close(mut self) -> ReviewRecord {
        self.closed = true;
        self.reviews.close(&self.run_id)
    }
}

impl Drop for ReviewLedger<'_> {
    fn drop(&mut self) {
        if !self.closed {
            self.reviews.close(&self.run_id);
        }
    }
}

/// Why a run that was going at shutdown failed.
const CANCELLED: &str = "the run was cancelled: larkgate stopped";

/// A new run id: time-ordered, unique across processes.
fn run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("run-{nanos:x}-{:x}-{n:x}", std::process::id())
}

/// Holds the service for tool handlers without keeping it alive: the platform's tool table
/// outlives nothing that owns it.
pub fn upgrade(scripts: &Weak<Scripts>) -> Result<Arc<Scripts>, Refusal> {
    scripts
        .upgrade()
        .ok_or_else(|| Refusal::internal("the script service has stopped", "its handle is gone"))
}
