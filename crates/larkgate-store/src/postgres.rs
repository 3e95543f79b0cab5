//! The PostgreSQL store: every operation of [`Store`] on a pool of connections to one schema
//! of one database, for deployments that keep larkgate's state in a database server (and, in
//! time, many replicas sharing it).
//!
//! - **Same meaning as SQLite.** Each operation does what the SQLite store's does, in a
//!   transaction where that one has one; the store test suite runs on both. Conflicts that
//!   SQLite settles with its single writer are settled here by constraints and single
//!   statements (one pending approval per call is a partial unique index; an approval is
//!   consumed by one conditional `UPDATE`; a script's next version is numbered under a row
//!   lock on its draft).
//! - **Connections.** `deadpool-postgres` keeps up to `pool_size` connections; each starts with
//!   `search_path` set to the schema and `lock_timeout` set to the busy timeout. A call that
//!   waits longer than that for a connection or a row lock is refused as busy
//!   ([`StoreError::is_busy`]); one that cannot reach the database as unavailable
//!   ([`StoreError::is_unavailable`]). A connection the server closed is dropped and replaced
//!   at the next checkout, so service resumes by itself when the database comes back.
//! - **Migrations** (`migrations.rs`) run at open under an advisory lock, and a schema newer
//!   than this larkgate is refused.
//! - **Any number of processes chain into one audit chain** ([`Store::chain_audit`]): each
//!   batch is linked after the head under a transaction-level advisory lock on the schema's
//!   chain, so the lock is held for one batch, never per record and never across a crash. A
//!   replica's name is held by one live process at a time ([`Store::claim_audit_replica`]: a
//!   session-level advisory lock on a connection of its own). A record appended already
//!   chained whose sequence is stored with another hash is refused (the chain forked), never
//!   skipped.
//! - **Changes reach every process** ([`Store::watch_changes`], `changes.rs`): a connection
//!   of its own listens for the notifications the triggers of migration 2 send, so a script
//!   published or an upstream changed through one replica is followed by the others at once.
//! - **No TLS** to the database yet: the URL is refused if it asks for it (see
//!   [`PostgresSettings::validate`]).
//!
//! The SQL lives in one file per section of the trait, as for SQLite.

mod approvals;
mod audit;
mod changes;
mod kv;
mod migrations;
mod principals;
mod scripts;
mod sessions;
pub mod settings;
/// Test schemas on a test server, for this crate's tests and the crates above (the `testing`
/// feature, which only their dev-dependencies turn on: never in a build of larkgate itself).
#[cfg(feature = "testing")]
pub mod testing;
mod upstreams;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::NoTls;

pub use migrations::{Migrated, SCHEMA_VERSION};
pub use settings::PostgresSettings;

use crate::{
    Approval, ApprovalDetails, ApprovalStatus, AuditChainClaim, AuditHead, AuditQuery, AuditRecord,
    CallChain, Draft, ForwardedAudit, JournaledAudit, PoolStatus, Principal, Result, Run, RunQuery,
    ScriptPin, ScriptVersion, Store, StoreError, TokenRecord, ToolPin, UpstreamRecord,
    UpstreamStatusRecord, chain_column, join_roles, signed, split_roles,
};

/// The PostgreSQL implementation of [`Store`].
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    config: tokio_postgres::Config,
    schema: String,
    busy_timeout: Duration,
    described: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("at", &self.described)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects (checking the settings first), and brings the schema to this larkgate's
    /// version. A database that cannot be reached is [`StoreError::Open`], saying where and
    /// why.
    pub async fn open(settings: &PostgresSettings) -> Result<Self> {
        let store = Self::connect(settings)?;
        store.migrate().await?;
        Ok(store)
    }

    /// The pool, without touching the database (no migration, no connection yet).
    pub fn connect(settings: &PostgresSettings) -> Result<Self> {
        let described = settings.describe();
        let config = settings.validate().map_err(|reason| StoreError::Open {
            path: described.clone(),
            reason,
        })?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // A connection is checked with a round trip before it is handed out, so a
                // connection the server dropped (a restart, a failover) is replaced rather
                // than failing the call it was given to.
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(settings.busy_timeout))
            .create_timeout(Some(settings.connect_timeout))
            .recycle_timeout(Some(settings.connect_timeout))
            .build()
            .map_err(|e| StoreError::Open {
                path: described.clone(),
                reason: e.to_string(),
            })?;
        Ok(PostgresStore {
            pool,
            config,
            schema: settings.schema.clone(),
            busy_timeout: settings.busy_timeout,
            described,
        })
    }

    /// Applies pending migrations (see the module documentation).
    pub async fn migrate(&self) -> Result<Migrated> {
        self.migrate_to(SCHEMA_VERSION).await
    }

    /// Applies pending migrations up to `version` only: how tests make a schema as an older
    /// larkgate left it.
    #[doc(hidden)]
    pub async fn migrate_to(&self, version: i64) -> Result<Migrated> {
        let mut client = self.client().await.map_err(|e| self.open_error(e))?;
        migrations::run(&mut client, &self.schema, version).await
    }

    /// The schema's version as stored (0 for a schema larkgate has not used).
    pub async fn schema_version(&self) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT version FROM {}.larkgate_schema WHERE id = 1",
                    self.schema
                ),
                &[],
            )
            .await;
        match row {
            Ok(row) => Ok(row.map_or(0, |r| r.get(0))),
            // No such table: the schema was never migrated.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// A connection from the pool.
    async fn client(&self) -> Result<Object> {
        self.pool
            .get()
            .await
            .map_err(|error| pool_error(error, self.busy_timeout))
    }

    fn open_error(&self, error: StoreError) -> StoreError {
        StoreError::Open {
            path: self.described.clone(),
            reason: error.to_string(),
        }
    }
}

/// A pool failure as a store error: waiting too long for a free connection is busy (the
/// database works, larkgate is using every connection); failing to connect is unavailable.
fn pool_error(error: PoolError, busy_timeout: Duration) -> StoreError {
    match error {
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::Busy(format!(
            "no database connection became free within {} ms",
            busy_timeout.as_millis()
        )),
        PoolError::Timeout(_) => {
            StoreError::Unavailable("connecting to the database timed out".to_owned())
        }
        PoolError::Backend(error) => StoreError::Unavailable(unavailable_reason(&error)),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// Why a connection failed, in words an operator acts on (the driver's own text, whose cause
/// is an I/O error or the server's message; it never holds the password).
fn unavailable_reason(error: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    match (error.as_db_error(), error.source()) {
        (Some(db), _) => format!("the database refused: {}", db.message()),
        (None, Some(cause)) => format!("{error}: {cause}"),
        (None, None) => error.to_string(),
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.described.clone()
    }

    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }

    fn pool_status(&self) -> Option<PoolStatus> {
        let status = self.pool.status();
        Some(PoolStatus {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        })
    }

    fn shared_by_replicas(&self) -> bool {
        true
    }

    fn watch_changes(&self) -> Option<tokio::sync::broadcast::Receiver<crate::Change>> {
        Some(changes::listen(self))
    }

    async fn claim_audit_replica(&self, replica: &str) -> Result<Option<AuditChainClaim>> {
        audit::claim_replica(self, replica).await
    }

    async fn add_principal(&self, principal: Principal) -> Result<()> {
        principals::add_principal(self, principal).await
    }

    async fn principal(&self, id: &str) -> Result<Option<Principal>> {
        principals::principal(self, id).await
    }

    async fn principals(&self) -> Result<Vec<Principal>> {
        principals::principals(self).await
    }

    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()> {
        principals::set_roles(self, id, roles).await
    }

    async fn remove_principal(&self, id: &str) -> Result<()> {
        principals::remove_principal(self, id).await
    }

    async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        kv::kv_get(self, key).await
    }

    async fn kv_list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        kv::kv_list(self, prefix, after, signed(limit as u64)).await
    }

    async fn kv_set(&self, key: &str, value: &str) -> Result<bool> {
        kv::kv_set(self, key, value).await
    }

    async fn kv_delete(&self, key: &str) -> Result<bool> {
        kv::kv_delete(self, key).await
    }

    async fn pending_approval(
        &self,
        principal: &str,
        tool: &str,
        args_hash: &str,
        chain: &CallChain,
        details: &ApprovalDetails,
        now_ms: i64,
    ) -> Result<Approval> {
        approvals::pending_approval(self, principal, tool, args_hash, chain, details, now_ms).await
    }

    async fn expire_approvals(&self, created_before_ms: i64) -> Result<u64> {
        approvals::expire_approvals(self, created_before_ms).await
    }

    async fn resolved_approval(
        &self,
        principal: &str,
        tool: &str,
        args_hash: &str,
        chain: &CallChain,
    ) -> Result<Option<Approval>> {
        approvals::resolved_approval(self, principal, tool, args_hash, chain).await
    }

    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<bool> {
        approvals::consume_approval(self, id, now_ms).await
    }

    async fn resolve_approval(
        &self,
        id: &str,
        approver: &str,
        approve: bool,
        reason: Option<&str>,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<Approval> {
        approvals::resolve_approval(self, id, approver, approve, reason, now_ms, expires_at_ms)
            .await
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        approvals::approval(self, id).await
    }

    async fn approvals(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        approvals::approvals(self, status).await
    }

    async fn save_draft(
        &self,
        name: &str,
        source: &str,
        author: &str,
        now_ms: i64,
    ) -> Result<Draft> {
        scripts::save_draft(self, name, source, author, now_ms).await
    }

    async fn draft(&self, name: &str) -> Result<Option<Draft>> {
        scripts::draft(self, name).await
    }

    async fn drafts(&self) -> Result<Vec<Draft>> {
        scripts::drafts(self).await
    }

    async fn publish(
        &self,
        name: &str,
        source: &str,
        hash: &str,
        publisher: &str,
        pins: &[ScriptPin],
        now_ms: i64,
    ) -> Result<ScriptVersion> {
        scripts::publish(self, name, source, hash, publisher, pins, now_ms).await
    }

    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>> {
        scripts::versions(self, name).await
    }

    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>> {
        scripts::latest_version(self, name).await
    }

    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>> {
        scripts::latest_versions(self).await
    }

    async fn start_run(&self, run: Run) -> Result<()> {
        scripts::start_run(self, run).await
    }

    async fn finish_run(&self, run: Run) -> Result<()> {
        scripts::finish_run(self, run).await
    }

    async fn run(&self, id: &str) -> Result<Option<Run>> {
        scripts::run(self, id).await
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<Run>> {
        scripts::runs(self, query).await
    }

    async fn latest_review(&self, script: &str, hash: &str) -> Result<Option<Run>> {
        scripts::latest_review(self, script, hash).await
    }

    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()> {
        upstreams::save_upstream(self, upstream).await
    }

    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>> {
        upstreams::upstreams(self).await
    }

    async fn remove_upstream(&self, alias: &str) -> Result<bool> {
        upstreams::remove_upstream(self, alias).await
    }

    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>> {
        upstreams::pins(self, alias).await
    }

    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()> {
        upstreams::save_pins(self, &pins).await
    }

    async fn upstreams_revision(&self) -> Result<i64> {
        upstreams::revision(self).await
    }

    async fn save_upstream_statuses(&self, statuses: Vec<UpstreamStatusRecord>) -> Result<()> {
        upstreams::save_statuses(self, &statuses).await
    }

    async fn upstream_statuses(&self) -> Result<Vec<UpstreamStatusRecord>> {
        upstreams::statuses(self).await
    }

    async fn upstream_credentials(&self, alias: &str) -> Result<Option<Vec<u8>>> {
        upstreams::credentials(self, alias).await
    }

    async fn save_upstream_credentials(
        &self,
        alias: &str,
        sealed: Vec<u8>,
        now_ms: i64,
    ) -> Result<()> {
        upstreams::save_credentials(self, alias, &sealed, now_ms).await
    }

    async fn remove_upstream_credentials(&self, alias: &str) -> Result<bool> {
        upstreams::remove_credentials(self, alias).await
    }

    async fn add_token(&self, token: TokenRecord) -> Result<()> {
        principals::add_token(self, token).await
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        principals::token(self, id).await
    }

    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
        principals::tokens(self, principal).await
    }

    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool> {
        principals::revoke_token(self, id, now_ms).await
    }

    async fn open_session(
        &self,
        session: crate::NewSession,
    ) -> Result<Option<crate::SessionCapReached>> {
        sessions::open_session(self, &session).await
    }

    async fn save_session_state(&self, id: &str, state: &str) -> Result<()> {
        sessions::save_session_state(self, id, state).await
    }

    async fn session(&self, id: &str, now_ms: i64) -> Result<Option<crate::SharedSession>> {
        sessions::session(self, id, now_ms).await
    }

    async fn touch_session(&self, id: &str, expires_at_ms: i64) -> Result<()> {
        sessions::touch_session(self, id, expires_at_ms).await
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        sessions::close_session(self, id).await
    }

    async fn chain_audit(&self, replica: &str, entries: Vec<JournaledAudit>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        audit::chain_audit(self, replica, entries).await
    }

    async fn audit_local_head(&self, replica: &str) -> Result<u64> {
        audit::audit_local_head(self, replica).await
    }

    async fn append_audit_adopting(
        &self,
        records: Vec<AuditRecord>,
        adopted: Vec<i64>,
    ) -> Result<()> {
        if records.is_empty() && adopted.is_empty() {
            return Ok(());
        }
        audit::append_audit_adopting(self, records, adopted).await
    }

    fn forward_audit(&self, at_ms: i64, entry: &str) -> Result<i64> {
        audit::forward_audit(self, at_ms, entry)
    }

    async fn forwarded_audit(&self, limit: usize) -> Result<Vec<ForwardedAudit>> {
        audit::forwarded_audit(self, signed(limit as u64)).await
    }

    async fn audit_head(&self) -> Result<Option<AuditHead>> {
        audit::audit_head(self).await
    }

    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>> {
        audit::audit_records(self, query).await
    }
}
