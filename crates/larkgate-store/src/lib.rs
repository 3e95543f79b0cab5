//! larkgate's persistence: what it keeps, behind one trait per section of the data.
//!
//! [`Store`] is everything larkgate keeps: [`PrincipalStore`] (principals and their bearer
//! tokens), [`KvStore`] (the built-in key-value data), [`ApprovalStore`], [`ScriptStore`]
//! (drafts, published versions and run records), [`UpstreamStore`] (federated upstreams, the
//! pins of their tools and their sealed credentials), [`SessionStore`] (sessions several
//! replicas serve) and [`AuditStore`] (the chain, its head, and the inbox of entries forwarded
//! by processes that do not own it). Callers hold no SQL. [`SqliteStore`] is the embedded
//! default (one file under the data directory, WAL, every write in a transaction), and
//! [`PostgresStore`] keeps the same data in a PostgreSQL schema, for deployments with a
//! database server. Each backend implements each section in a file of its own; both read a
//! row back through the same decoder (`rows.rs`), and one test suite runs on both.
//!
//! The traits are async so that a networked database fits them. The SQLite store runs its
//! operations on tokio's blocking pool, except the reads of a request's token and principal,
//! which run on the request's own thread from a read-only connection that never waits (see
//! `SqliteStore::read`), and [`AuditStore::forward_audit`], which blocks its caller for one
//! small commit by design.

#![forbid(unsafe_code)]

pub mod chain;
mod model;
pub mod postgres;
mod publishing;
mod rows;
mod sqlite;

pub use chain::{GENESIS_HASH, JournaledAudit, record_hash, valid_replica};
pub use model::{
    Approval, ApprovalCursor, ApprovalDetails, ApprovalFor, ApprovalQuery, ApprovalRequest,
    ApprovalStatus, Asked, AuditHead, AuditKind, AuditQuery, AuditRecord, BackupOrigin, CallChain,
    Draft, ForwardedAudit, IssuerBinding, KvQuery, NewSession, PendingCapReached, PendingCaps,
    PinStatus, Principal, PrincipalKind, Publication, Resolution, Run, RunQuery, RunStats,
    RunStatus, ScriptPin, ScriptVersion, ServerRecord, ServerSave, SessionCapReached,
    SharedSession, TokenRecord, ToolPin, UpstreamCredentials, UpstreamRecord, UpstreamStatusRecord,
};
pub use postgres::{PostgresSettings, PostgresStore};
pub use sqlite::{BUSY_TIMEOUT, DATABASE_FILE, SqliteStore, Synchronous};

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// PostgreSQL reported an error, or the connection to it failed mid-operation.
    #[error("database error: {}", postgres_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// The database could not be reached (nothing was done).
    #[error("the database is unreachable: {0}")]
    Unavailable(String),
    /// The database was reachable but every connection or the row needed stayed in use for
    /// longer than the store waits (nothing was done).
    #[error("the database is busy: {0}")]
    Busy(String),
    /// A principal, approval or other record with this id already exists.
    #[error("{0} already exists")]
    Conflict(String),
    /// The record does not exist.
    #[error("{0} does not exist")]
    Missing(String),
    /// The record exists but is not in a state that allows the change.
    #[error("{0}")]
    Invalid(String),
    /// The data directory or database file could not be opened.
    #[error("cannot open the store at {path}: {reason}")]
    Open {
        /// The path that failed.
        path: String,
        /// Why.
        reason: String,
    },
    /// A blocking task failed (panicked or was cancelled).
    #[error("a store task failed: {0}")]
    Task(String),
}

impl StoreError {
    /// Whether another process held the database's lock for longer than the store waits (the
    /// busy timeout): nothing is wrong with the data, and the same call may succeed later.
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Database(rusqlite::Error::SqliteFailure(error, _)) => matches!(
                error.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            StoreError::Busy(_) => true,
            StoreError::Postgres(error) => {
                error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
            }
            _ => false,
        }
    }

    /// Whether the database could not be reached, or the connection to it broke during the
    /// operation: nothing is known to be wrong with the data, and the same call may succeed
    /// once the database is back. (An operation whose connection broke after it was sent may
    /// or may not have been applied.)
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Postgres(error) => {
                use tokio_postgres::error::SqlState;
                error.is_closed()
                    || match error.code() {
                        // Connection exceptions (class 08), and a server shutting down or
                        // starting up.
                        Some(code) => {
                            code.code().starts_with("08")
                                || [
                                    SqlState::ADMIN_SHUTDOWN,
                                    SqlState::CRASH_SHUTDOWN,
                                    SqlState::CANNOT_CONNECT_NOW,
                                ]
                                .contains(code)
                        }
                        // No SQLSTATE: the failure was in the connection, not the statement.
                        None => error.as_db_error().is_none(),
                    }
            }
            _ => false,
        }
    }
}

/// A PostgreSQL error's text with the server's message, which the driver's own text leaves to
/// its source.
fn postgres_text(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{}: {}", db.severity(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            text
        }
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        },
    }
}

/// How full a store's connection pool is (for stores that keep one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections it keeps at most.
    pub max_size: usize,
    /// Connections open now.
    pub size: usize,
    /// Open connections not in use.
    pub available: usize,
    /// Callers waiting for a connection.
    pub waiting: usize,
}

/// What changed, as [`Store::watch_changes`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Published script versions.
    Scripts,
    /// Upstreams, or the pins (and quarantines) of their tools.
    Upstreams,
    /// Virtual servers added, replaced or removed at run time.
    Servers,
    /// An approval was decided or withdrawn.
    Approvals,
    /// Anything may have changed (changes could not be followed for a while): read again
    /// whatever is followed.
    Everything,
}

impl Change {
    /// What a change to `table` is, for the tables whose changes are told.
    pub fn of_table(table: &str) -> Option<Change> {
        match table {
            "script_versions" => Some(Change::Scripts),
            "upstreams" | "upstream_pins" => Some(Change::Upstreams),
            "servers" => Some(Change::Servers),
            "approvals" => Some(Change::Approvals),
            _ => None,
        }
    }
}

/// The right to append to a store's audit chain, held by one process at a time
/// ([`AuditStore::claim_audit_replica`]); dropping it gives the right up.
pub struct AuditChainClaim {
    _held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl AuditChainClaim {
    /// A claim with nothing to hold (a store whose chain is guarded elsewhere).
    pub fn free() -> Self {
        AuditChainClaim { _held: None }
    }

    /// A claim kept by `held` (a lock, a connection) until it is dropped.
    pub fn held(held: Box<dyn std::any::Any + Send + Sync>) -> Self {
        AuditChainClaim { _held: Some(held) }
    }
}

impl std::fmt::Debug for AuditChainClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditChainClaim").finish_non_exhaustive()
    }
}

/// Roles are stored comma-separated, sorted and unique.
fn split_roles(roles: &str) -> Vec<String> {
    roles
        .split(',')
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Roles as stored: sorted, unique, comma-separated; a role that is empty or holds a comma is
/// refused.
fn join_roles(mut roles: Vec<String>) -> Result<String> {
    if let Some(bad) = roles.iter().find(|r| r.is_empty() || r.contains(',')) {
        return Err(StoreError::Invalid(format!(
            "role {bad:?} is empty or contains a comma"
        )));
    }
    roles.sort();
    roles.dedup();
    Ok(roles.join(","))
}

/// Integers are signed in both databases; sequences and durations are far below 2^63.
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// An approval's call as the approvals table keys it: its four parts, the chain as the JSON
/// of the runs it came through.
struct CallKey {
    principal: String,
    tool: String,
    args_hash: String,
    through: String,
}

impl Resolution<'_> {
    /// The status the decision gives a pending approval, as the approvals table keeps it.
    fn status(&self) -> &'static str {
        if self.approve { "approved" } else { "denied" }
    }
}

impl ApprovalFor<'_> {
    fn key(&self) -> CallKey {
        CallKey {
            principal: self.principal.to_owned(),
            tool: self.tool.to_owned(),
            args_hash: self.args_hash.to_owned(),
            through: chain_column(&self.chain.through),
        }
    }
}

/// An approval's call chain as stored: a JSON array (the same text for the same chain, so it
/// is matched by equality).
fn chain_column(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Unix milliseconds now: the unit of every time the store keeps (0 on a clock set before
/// 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Everything larkgate persists (see the crate documentation): every section, and what concerns
/// the store as a whole. On a `dyn Store` every section's operations are at hand; on a concrete
/// store, import the section's trait.
#[async_trait::async_trait]
pub trait Store:
    PrincipalStore
    + KvStore
    + ApprovalStore
    + ScriptStore
    + UpstreamStore
    + ServerStore
    + SessionStore
    + AuditStore
    + std::fmt::Debug
    + 'static
{
    /// Where the store is, for the operator: a file, or a database and schema (never a
    /// password).
    fn describe(&self) -> String;
    /// Answers once the database has answered a trivial query: for readiness checks.
    async fn ping(&self) -> Result<()>;
    /// How full the connection pool is, for stores that keep one.
    fn pool_status(&self) -> Option<PoolStatus> {
        None
    }
    /// Whether several serving processes (replicas) may share this store, so that what they
    /// must agree on and would otherwise keep in memory (2025-11-25 sessions) is kept in it.
    fn shared_by_replicas(&self) -> bool {
        false
    }
    /// Tells of changes committed through any process sharing the store, as they commit, so a
    /// serving process can follow what another replica published: `None` for stores that do
    /// not tell (SQLite, whose serving process is the only one that publishes; it follows
    /// upstream changes made beside it by polling). Must be called within a tokio runtime.
    fn watch_changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }
}

/// Principals and their bearer tokens: who may call, and the credentials that name them.
#[async_trait::async_trait]
pub trait PrincipalStore: Send + Sync {
    /// Registers a new principal; [`StoreError::Conflict`] if the id is taken.
    async fn add_principal(&self, principal: Principal) -> Result<()>;
    /// One principal.
    async fn principal(&self, id: &str) -> Result<Option<Principal>>;
    /// All principals, by id.
    async fn principals(&self) -> Result<Vec<Principal>>;
    /// Replaces which issuer's accounts sign in as a principal; [`StoreError::Missing`] if
    /// it does not exist.
    async fn set_issuer(&self, id: &str, issuer: IssuerBinding) -> Result<()>;
    /// Binds a principal waiting for its first sign-in ([`IssuerBinding::FirstSignIn`]) to
    /// `issuer`, in one conditional write; `false` if it was not waiting (another sign-in or
    /// an operator bound it first, or it does not exist).
    async fn bind_at_first_sign_in(&self, id: &str, issuer: &str) -> Result<bool>;
    /// Replaces a principal's roles; [`StoreError::Missing`] if it does not exist.
    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()>;
    /// Removes a principal; [`StoreError::Missing`] if it does not exist.
    async fn remove_principal(&self, id: &str) -> Result<()>;

    /// Stores a new token.
    async fn add_token(&self, token: TokenRecord) -> Result<()>;
    /// One token by id.
    async fn token(&self, id: &str) -> Result<Option<TokenRecord>>;
    /// Tokens, all or one principal's, oldest first.
    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>>;
    /// Revokes a token at `now_ms`; `false` if there is no such token (revoking twice keeps
    /// the first time).
    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool>;
}

/// The built-in key-value data.
#[async_trait::async_trait]
pub trait KvStore: Send + Sync {
    /// The value of `key`.
    async fn kv_get(&self, key: &str) -> Result<Option<String>>;
    /// The entries `query` selects, as (key, value) in key order.
    async fn kv_list(&self, query: KvQuery<'_>) -> Result<Vec<(String, String)>>;
    /// Sets `key`; returns whether it was created.
    async fn kv_set(&self, key: &str, value: &str) -> Result<bool>;
    /// Deletes `key`; returns whether it existed.
    async fn kv_delete(&self, key: &str) -> Result<bool>;
}

/// Approvals: one pending request per call, resolved once, consumed once.
#[async_trait::async_trait]
pub trait ApprovalStore: Send + Sync {
    /// The pending approval for the request's call, created (with the chain's authors and the
    /// request's details) if there is none, so repeated refused calls share one record; none
    /// is created when the request's caps are reached (counted and created in one
    /// transaction, so processes asking at once cannot overshoot them).
    async fn pending_approval(&self, request: ApprovalRequest<'_>) -> Result<Asked>;
    /// Marks every approval still pending that was created before `created_before_ms`
    /// expired; returns how many.
    async fn expire_approvals(&self, created_before_ms: i64) -> Result<u64>;
    /// The newest approval for `call` that is not pending, if any: the gate reads its status (approved and unexpired admits; denied
    /// refuses).
    async fn resolved_approval(&self, call: ApprovalFor<'_>) -> Result<Option<Approval>>;
    /// Marks an approved, unexpired approval used. Returns `false` — and changes nothing — if
    /// it is no longer approved or has expired, so two calls can never both consume it.
    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<bool>;
    /// Gives back an approval consumed at `used_at_ms` whose call never reached its tool:
    /// approved again, with its expiry as it was. `false` — and changes nothing — unless it is
    /// still used by that consumption.
    async fn restore_approval(&self, id: &str, used_at_ms: i64) -> Result<bool>;
    /// Resolves the pending approval `id` as `resolution` says: approved (valid until its
    /// `expires_at_ms`) or denied.
    async fn resolve_approval(&self, id: &str, resolution: Resolution<'_>) -> Result<Approval>;
    /// Withdraws the pending approval `id` (its caller cancelled the call that waited for it),
    /// noting when and by whom. `false` — and changes nothing — unless it is pending.
    async fn withdraw_approval(&self, id: &str, by: &str, now_ms: i64) -> Result<bool>;
    /// One approval.
    async fn approval(&self, id: &str) -> Result<Option<Approval>>;
    /// A page of approvals, newest first (by creation time, then id).
    async fn approvals(&self, query: ApprovalQuery) -> Result<Vec<Approval>>;
    /// How many approvals are pending that were asked at or after `asked_since_ms` (older
    /// ones have expired, whether or not they are marked so yet).
    async fn pending_approvals(&self, asked_since_ms: i64) -> Result<u64>;
}

/// Script drafts, published versions, and run records.
#[async_trait::async_trait]
pub trait ScriptStore: Send + Sync {
    /// Saves `draft` as its author, updated at its `updated_at_ms`: creates it, or replaces its
    /// source if that author wrote it. [`StoreError::Conflict`] if another principal owns a
    /// draft of that name.
    async fn save_draft(&self, draft: Draft) -> Result<Draft>;
    /// One draft.
    async fn draft(&self, name: &str) -> Result<Option<Draft>>;
    /// All drafts, by name.
    async fn drafts(&self) -> Result<Vec<Draft>>;
    /// Publishes a draft as its next version, in one transaction: the publication's source
    /// (which must still be the draft's), its hash, the draft author's roles as they are now
    /// (read from the principals table in the same transaction), the publisher, and the
    /// upstream tools it refers to. [`StoreError::Missing`] without a draft;
    /// [`StoreError::Invalid`] if the draft changed since it was checked or its author is no
    /// longer registered.
    async fn publish(&self, publication: Publication<'_>) -> Result<ScriptVersion>;
    /// Every version of a script, oldest first.
    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>>;
    /// The latest version of one script, if it was ever published.
    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>>;
    /// The latest version of every published script, by name.
    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>>;
    /// Records a run as it starts.
    async fn start_run(&self, run: Run) -> Result<()>;
    /// Records how a run ended; [`StoreError::Missing`] for an unknown id.
    async fn finish_run(&self, run: Run) -> Result<()>;
    /// One run.
    async fn run(&self, id: &str) -> Result<Option<Run>>;
    /// The runs `query` selects, newest first.
    async fn runs(&self, query: &RunQuery) -> Result<Vec<Run>>;
    /// The newest review run of the saved draft `script` that ran exactly the source with
    /// SHA-256 `hash` and succeeded: what a publisher is shown before that source is published.
    async fn latest_review(&self, script: &str, hash: &str) -> Result<Option<Run>>;
}

/// Federated upstreams added at run time, the pins of their tools, their sealed credentials, and
/// the running gateway's view of them.
#[async_trait::async_trait]
pub trait UpstreamStore: Send + Sync {
    /// Saves an upstream added at run time (replacing one of the same alias).
    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()>;
    /// Every stored upstream, by alias.
    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>>;
    /// Removes a stored upstream and its pins; `false` if there was none.
    async fn remove_upstream(&self, alias: &str) -> Result<bool>;
    /// The pins of an upstream's tools, by tool.
    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>>;
    /// Saves pins (inserting or replacing each by alias and tool) in one transaction.
    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()>;
    /// A number that moves whenever a stored upstream or a pin is saved or removed (by any
    /// process): a running gateway compares it to notice changes made beside it.
    async fn upstreams_revision(&self) -> Result<i64>;
    /// Replaces the running gateway's view of its upstreams (each status as JSON).
    async fn save_upstream_statuses(&self, statuses: Vec<UpstreamStatusRecord>) -> Result<()>;
    /// The running gateway's view of its upstreams, by alias.
    async fn upstream_statuses(&self) -> Result<Vec<UpstreamStatusRecord>>;
    /// An OAuth-protected upstream's credentials, as larkgate sealed them (the store never sees
    /// them in the clear).
    async fn upstream_credentials(&self, alias: &str) -> Result<Option<Vec<u8>>>;
    /// Saves an upstream's sealed credentials, replacing what it had.
    async fn save_upstream_credentials(&self, credentials: UpstreamCredentials) -> Result<()>;
    /// Forgets an upstream's credentials; `false` if it had none. Removing a stored upstream
    /// forgets them too.
    async fn remove_upstream_credentials(&self, alias: &str) -> Result<bool>;
}

/// Virtual servers added at run time (`larkgate server add`, the `server_add` tool), beside
/// those of the configuration file.
#[async_trait::async_trait]
pub trait ServerStore: Send + Sync {
    /// Adds a server, or replaces a stored one's definition, as `mode` says.
    async fn save_server(&self, server: ServerRecord, mode: ServerSave) -> Result<()>;
    /// Every stored server, by name.
    async fn servers(&self) -> Result<Vec<ServerRecord>>;
    /// Removes a stored server; `false` if there was none.
    async fn remove_server(&self, name: &str) -> Result<bool>;
    /// A number that moves whenever a stored server is added, replaced or removed (by any
    /// process): a running gateway compares it to notice changes made beside it.
    async fn servers_revision(&self) -> Result<i64>;
}

/// 2025-11-25 sessions that several replicas serve.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync {
    /// Opens a 2025-11-25 session if fewer than its caps' sessions are open (unexpired at
    /// `now_ms`): `Ok(None)` when opened, else the cap that refused it. Checked and entered
    /// under one lock, so replicas opening sessions at once cannot overshoot a cap.
    async fn open_session(&self, session: NewSession) -> Result<Option<SessionCapReached>>;
    /// Keeps what a replica needs to continue session `id` (its `initialize` parameters, as
    /// the MCP library serializes them).
    async fn save_session_state(&self, id: &str, state: &str) -> Result<()>;
    /// Session `id`, unless it is closed or expired at `now_ms`.
    async fn session(&self, id: &str, now_ms: i64) -> Result<Option<SharedSession>>;
    /// Moves the expiry of session `id` (it was used).
    async fn touch_session(&self, id: &str, expires_at_ms: i64) -> Result<()>;
    /// Closes session `id` (its client ended it).
    async fn close_session(&self, id: &str) -> Result<()>;
}

/// The audit chain: its records and head, replicas' journals chained into it, and the inbox of
/// entries forwarded by processes that do not own it.
#[async_trait::async_trait]
pub trait AuditStore: Send + Sync {
    /// Claims the name `replica` for this process while it appends to the chain: `None` if
    /// another live process sharing the store uses that name (two processes journaling under
    /// one name would number their records alike). Stores whose processes share one data
    /// directory are already guarded by the audit log's own file lock, and answer a free claim.
    async fn claim_audit_replica(&self, _replica: &str) -> Result<Option<AuditChainClaim>> {
        Ok(Some(AuditChainClaim::free()))
    }

    /// Appends records (already sequenced and chained) in one transaction, and moves the
    /// chain's head to the last one. Records whose sequence is already stored are skipped, so a
    /// journal can be replayed.
    async fn append_audit(&self, records: Vec<AuditRecord>) -> Result<()> {
        self.append_audit_adopting(records, Vec::new()).await
    }
    /// [`AuditStore::append_audit`], and in the same transaction deletes the forwarded entries
    /// `adopted` from the inbox: the records include them, so each is chained exactly once.
    async fn append_audit_adopting(
        &self,
        records: Vec<AuditRecord>,
        adopted: Vec<i64>,
    ) -> Result<()> {
        if records.is_empty() && adopted.is_empty() {
            return Ok(());
        }
        self.write_audit(records, adopted).await
    }
    /// What [`AuditStore::append_audit_adopting`] writes, given something to write.
    async fn write_audit(&self, records: Vec<AuditRecord>, adopted: Vec<i64>) -> Result<()>;
    /// Chains a replica's journaled records, in its local order, after the chain's head: the
    /// global sequences and hashes are assigned under the store's lock on the chain, in one
    /// transaction that also moves the head and deletes the inbox entries the batch adopts.
    /// Records the chain already holds (by replica and local sequence) and inbox entries
    /// another replica chained first are skipped, so a journal can be replayed, and any number
    /// of replicas can chain at once (see [`chain`]).
    async fn chain_audit(&self, replica: &str, entries: Vec<JournaledAudit>) -> Result<()>;
    /// The highest local sequence of `replica` that the chain holds (0 if none): where a
    /// replica whose journal is empty continues numbering.
    async fn audit_local_head(&self, replica: &str) -> Result<u64>;
    /// Hands an audit entry (`entry`, in the audit log's own format) to the process that owns
    /// the chain, when another process holds it: the entry is committed to the audit inbox
    /// before this returns, and the owner chains it. Blocks the calling thread for one small
    /// commit. Returns the entry's inbox id.
    fn forward_audit(&self, at_ms: i64, entry: &str) -> Result<i64>;
    /// The oldest forwarded entries not yet chained, up to `limit`, oldest first.
    async fn forwarded_audit(&self, limit: usize) -> Result<Vec<ForwardedAudit>>;
    /// The chain's head as last written with records.
    async fn audit_head(&self) -> Result<Option<AuditHead>>;
    /// Records by query, in sequence order.
    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>>;
    /// In a copy made by `larkgate backup`, the head it held when it was made; `None` in a
    /// store that is not such a copy (and in stores that have no backups of their own).
    async fn backup_origin(&self) -> Result<Option<BackupOrigin>> {
        Ok(None)
    }
}
