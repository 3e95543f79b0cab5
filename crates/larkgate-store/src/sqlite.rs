//! The embedded SQLite store: one file, WAL, every write in a transaction.
//!
//! Durability: with WAL and `synchronous = NORMAL`, a committed transaction has been written
//! to the WAL file before the commit returns, so it survives the process being killed (it may
//! not survive the machine losing power before the next checkpoint; set
//! `synchronous = FULL` through [`SqliteStore::open_with`] for that).
//!
//! Every write, and every read but two, goes through one connection behind a mutex, on tokio's
//! blocking pool. The two reads every request makes (its token, its principal) go through a
//! second, read-only connection on the caller's own thread: see [`SqliteStore::read`].
//!
//! The [`Store`] implementation below only moves each operation onto that pool; the SQL lives
//! in one file per section of the trait: `principals.rs` (principals and tokens), `kv.rs`,
//! `approvals.rs`, `scripts.rs` (drafts, versions and runs), `upstreams.rs` (upstreams and
//! pins), `audit.rs` (the chain and the inbox), and `migrations.rs` (the schema).

mod approvals;
mod audit;
mod kv;
mod migrations;
mod principals;
mod scripts;
mod sessions;
mod upstreams;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags, params};

use crate::{
    Approval, ApprovalDetails, ApprovalStatus, AuditHead, AuditQuery, AuditRecord, CallChain,
    Draft, ForwardedAudit, JournaledAudit, NewSession, Principal, Result, Run, RunQuery, ScriptPin,
    ScriptVersion, SessionCapReached, SharedSession, Store, StoreError, TokenRecord, ToolPin,
    UpstreamRecord, UpstreamStatusRecord, chain_column, join_roles, signed, split_roles,
};

/// How hard SQLite works to keep a commit across a power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// Survives a process crash; the default.
    #[default]
    Normal,
    /// Also survives power loss, at the cost of an fsync per commit.
    Full,
}

/// The SQLite implementation of [`Store`].
#[derive(Clone, Debug)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
    /// Read-only, for the point reads of [`SqliteStore::read`].
    reader: Arc<Mutex<Connection>>,
    path: PathBuf,
}

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "larkgate.sqlite3";

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, and runs pending migrations.
    pub fn open(data_dir: &Path) -> Result<Self> {
        Self::open_with(data_dir, Synchronous::default())
    }

    /// [`SqliteStore::open`] with a chosen durability level.
    pub fn open_with(data_dir: &Path, synchronous: Synchronous) -> Result<Self> {
        let open_error = |reason: String| StoreError::Open {
            path: data_dir.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(data_dir).map_err(|e| open_error(e.to_string()))?;
        let path = data_dir.join(DATABASE_FILE);
        let mut connection = Connection::open(&path).map_err(|e| open_error(e.to_string()))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(
            None,
            "synchronous",
            match synchronous {
                Synchronous::Normal => "NORMAL",
                Synchronous::Full => "FULL",
            },
        )?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::run(&mut connection)?;
        // Opened after the migrations, so it sees the schema they made. It never waits for a
        // lock: `read` falls back to the blocking pool instead.
        let reader = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| open_error(e.to_string()))?;
        reader.busy_timeout(std::time::Duration::ZERO)?;
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            reader: Arc::new(Mutex::new(reader)),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema's version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64> {
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(connection.pragma_query_value(None, "user_version", |row| row.get(0))?)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot leave a transaction half-applied (SQLite
            // rolls it back), so a poisoned lock is safe to keep using.
            let mut guard = connection
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Runs the point read `f` (one row by its key) on the read-only connection, on the
    /// calling thread, when it can do so without waiting; else as [`SqliteStore::with`] does.
    ///
    /// Every request reads its token and its principal, and a trip to the blocking pool and
    /// back costs more than such a read (two thread wake-ups; on two cores, a good part of a
    /// call). Why running it here cannot stall the runtime:
    /// - the reader never waits for a lock: its busy timeout is zero, and in WAL mode a
    ///   reader does not wait for writers anyway; a read that finds the database busy is
    ///   retried on the blocking pool, where waiting is allowed;
    /// - it never waits for another thread: the reader is taken only when free (`try_lock`);
    ///   when another request is reading, this one goes to the blocking pool;
    /// - `f` is a lookup by primary key, so its work is bounded by the depth of one index.
    ///
    /// Each read is its own transaction, started after the last commit of any connection, so
    /// it sees a revocation committed before it began: nothing is cached.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> Result<T> + Send + 'static,
    {
        if let Some(done) = self.read_here(&f) {
            return done;
        }
        self.with(f).await
    }

    /// [`SqliteStore::read`] on this thread: `None` when the reader is taken or the database
    /// was busy.
    fn read_here<T>(&self, f: &impl Fn(&mut Connection) -> Result<T>) -> Option<Result<T>> {
        let mut reader = match self.reader.try_lock() {
            Ok(guard) => guard,
            // A panic during a read leaves nothing half-applied.
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        match f(&mut reader) {
            Err(error) if error.is_busy() => None,
            done => Some(done),
        }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("SQLite database {}", self.path.display())
    }

    async fn ping(&self) -> Result<()> {
        self.with(|c| Ok(c.query_row("SELECT 1", [], |_| Ok(()))?))
            .await
    }

    async fn add_principal(&self, principal: Principal) -> Result<()> {
        self.with(move |c| principals::add_principal(c, principal))
            .await
    }

    async fn principal(&self, id: &str) -> Result<Option<Principal>> {
        let id = id.to_owned();
        self.read(move |c| principals::principal(c, &id)).await
    }

    async fn principals(&self) -> Result<Vec<Principal>> {
        self.with(principals::principals).await
    }

    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| principals::set_roles(c, &id, roles))
            .await
    }

    async fn remove_principal(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| principals::remove_principal(c, &id))
            .await
    }

    async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_owned();
        self.with(move |c| kv::kv_get(c, &key)).await
    }

    async fn kv_list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        let prefix = prefix.to_owned();
        let after = after.map(str::to_owned);
        let limit = signed(limit as u64);
        self.with(move |c| kv::kv_list(c, &prefix, after.as_deref(), limit))
            .await
    }

    async fn kv_set(&self, key: &str, value: &str) -> Result<bool> {
        let key = key.to_owned();
        let value = value.to_owned();
        self.with(move |c| kv::kv_set(c, &key, &value)).await
    }

    async fn kv_delete(&self, key: &str) -> Result<bool> {
        let key = key.to_owned();
        self.with(move |c| kv::kv_delete(c, &key)).await
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
        let details = details.clone();
        let (principal, tool, args_hash, chain) = (
            principal.to_owned(),
            tool.to_owned(),
            args_hash.to_owned(),
            chain.clone(),
        );
        self.with(move |c| {
            approvals::pending_approval(c, &principal, &tool, &args_hash, &chain, &details, now_ms)
        })
        .await
    }

    async fn expire_approvals(&self, created_before_ms: i64) -> Result<u64> {
        self.with(move |c| approvals::expire_approvals(c, created_before_ms))
            .await
    }

    async fn resolved_approval(
        &self,
        principal: &str,
        tool: &str,
        args_hash: &str,
        chain: &CallChain,
    ) -> Result<Option<Approval>> {
        let (principal, tool, args_hash, chain) = (
            principal.to_owned(),
            tool.to_owned(),
            args_hash.to_owned(),
            chain.clone(),
        );
        self.with(move |c| approvals::resolved_approval(c, &principal, &tool, &args_hash, &chain))
            .await
    }

    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| approvals::consume_approval(c, &id, now_ms))
            .await
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
        let (id, approver) = (id.to_owned(), approver.to_owned());
        let reason = reason.map(str::to_owned);
        self.with(move |c| {
            let decision = approvals::Decision {
                approve,
                reason: reason.as_deref(),
                now_ms,
                expires_at_ms,
            };
            approvals::resolve_approval(c, &id, &approver, decision)
        })
        .await
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        let id = id.to_owned();
        self.with(move |c| approvals::approval(c, &id)).await
    }

    async fn approvals(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        self.with(move |c| approvals::approvals(c, status)).await
    }

    async fn save_draft(
        &self,
        name: &str,
        source: &str,
        author: &str,
        now_ms: i64,
    ) -> Result<Draft> {
        let (name, source, author) = (name.to_owned(), source.to_owned(), author.to_owned());
        self.with(move |c| scripts::save_draft(c, &name, &source, &author, now_ms))
            .await
    }

    async fn draft(&self, name: &str) -> Result<Option<Draft>> {
        let name = name.to_owned();
        self.with(move |c| scripts::draft(c, &name)).await
    }

    async fn drafts(&self) -> Result<Vec<Draft>> {
        self.with(scripts::drafts).await
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
        let (name, source, hash, publisher, pins) = (
            name.to_owned(),
            source.to_owned(),
            hash.to_owned(),
            publisher.to_owned(),
            pins.to_vec(),
        );
        self.with(move |c| scripts::publish(c, &name, &source, &hash, &publisher, pins, now_ms))
            .await
    }

    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>> {
        let name = name.to_owned();
        self.with(move |c| scripts::versions(c, &name)).await
    }

    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>> {
        let name = name.to_owned();
        self.with(move |c| scripts::latest_version(c, &name)).await
    }

    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>> {
        self.with(scripts::latest_versions).await
    }

    async fn start_run(&self, run: Run) -> Result<()> {
        self.with(move |c| scripts::start_run(c, run)).await
    }

    async fn finish_run(&self, run: Run) -> Result<()> {
        self.with(move |c| scripts::finish_run(c, run)).await
    }

    async fn run(&self, id: &str) -> Result<Option<Run>> {
        let id = id.to_owned();
        self.with(move |c| scripts::run(c, &id)).await
    }

    async fn latest_review(&self, script: &str, hash: &str) -> Result<Option<Run>> {
        let (script, hash) = (script.to_owned(), hash.to_owned());
        self.with(move |c| scripts::latest_review(c, &script, &hash))
            .await
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<Run>> {
        let query = query.clone();
        self.with(move |c| scripts::runs(c, &query)).await
    }

    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()> {
        self.with(move |c| upstreams::save_upstream(c, upstream))
            .await
    }

    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>> {
        self.with(upstreams::upstreams).await
    }

    async fn remove_upstream(&self, alias: &str) -> Result<bool> {
        let alias = alias.to_owned();
        self.with(move |c| upstreams::remove_upstream(c, &alias))
            .await
    }

    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>> {
        let alias = alias.to_owned();
        self.with(move |c| upstreams::pins(c, &alias)).await
    }

    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()> {
        self.with(move |c| upstreams::save_pins(c, &pins)).await
    }

    async fn upstreams_revision(&self) -> Result<i64> {
        self.with(upstreams::revision).await
    }

    async fn save_upstream_statuses(&self, statuses: Vec<UpstreamStatusRecord>) -> Result<()> {
        self.with(move |c| upstreams::save_statuses(c, &statuses))
            .await
    }

    async fn upstream_statuses(&self) -> Result<Vec<UpstreamStatusRecord>> {
        self.with(upstreams::statuses).await
    }

    async fn upstream_credentials(&self, alias: &str) -> Result<Option<Vec<u8>>> {
        let alias = alias.to_owned();
        self.with(move |c| upstreams::credentials(c, &alias)).await
    }

    async fn save_upstream_credentials(
        &self,
        alias: &str,
        sealed: Vec<u8>,
        now_ms: i64,
    ) -> Result<()> {
        let alias = alias.to_owned();
        self.with(move |c| upstreams::save_credentials(c, &alias, &sealed, now_ms))
            .await
    }

    async fn remove_upstream_credentials(&self, alias: &str) -> Result<bool> {
        let alias = alias.to_owned();
        self.with(move |c| upstreams::remove_credentials(c, &alias))
            .await
    }

    async fn add_token(&self, token: TokenRecord) -> Result<()> {
        self.with(move |c| principals::add_token(c, token)).await
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_owned();
        self.read(move |c| principals::token(c, &id)).await
    }

    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
        let principal = principal.map(str::to_owned);
        self.with(move |c| principals::tokens(c, principal.as_deref()))
            .await
    }

    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| principals::revoke_token(c, &id, now_ms))
            .await
    }

    async fn append_audit_adopting(
        &self,
        records: Vec<AuditRecord>,
        adopted: Vec<i64>,
    ) -> Result<()> {
        if records.is_empty() && adopted.is_empty() {
            return Ok(());
        }
        self.with(move |c| audit::append_audit_adopting(c, records, adopted))
            .await
    }

    async fn open_session(&self, session: NewSession) -> Result<Option<SessionCapReached>> {
        self.with(move |c| sessions::open_session(c, &session))
            .await
    }

    async fn save_session_state(&self, id: &str, state: &str) -> Result<()> {
        let (id, state) = (id.to_owned(), state.to_owned());
        self.with(move |c| sessions::save_session_state(c, &id, &state))
            .await
    }

    async fn session(&self, id: &str, now_ms: i64) -> Result<Option<SharedSession>> {
        let id = id.to_owned();
        self.with(move |c| sessions::session(c, &id, now_ms)).await
    }

    async fn touch_session(&self, id: &str, expires_at_ms: i64) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| sessions::touch_session(c, &id, expires_at_ms))
            .await
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| sessions::close_session(c, &id)).await
    }

    async fn chain_audit(&self, replica: &str, entries: Vec<JournaledAudit>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let replica = replica.to_owned();
        self.with(move |c| audit::chain_audit(c, &replica, entries))
            .await
    }

    async fn audit_local_head(&self, replica: &str) -> Result<u64> {
        let replica = replica.to_owned();
        self.with(move |c| audit::audit_local_head(c, &replica))
            .await
    }

    fn forward_audit(&self, at_ms: i64, entry: &str) -> Result<i64> {
        // A poisoned lock is safe to keep using: see `with`.
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        connection.execute(
            "INSERT INTO audit_inbox (at_ms, entry) VALUES (?1, ?2)",
            params![at_ms, entry],
        )?;
        Ok(connection.last_insert_rowid())
    }

    async fn forwarded_audit(&self, limit: usize) -> Result<Vec<ForwardedAudit>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(move |c| audit::forwarded_audit(c, limit)).await
    }

    async fn audit_head(&self) -> Result<Option<AuditHead>> {
        self.with(|c| audit::audit_head(c)).await
    }

    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>> {
        self.with(move |c| audit::audit_records(c, query)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        (dir, store)
    }

    fn one(c: &mut Connection) -> Result<i64> {
        Ok(c.query_row("SELECT 1", [], |row| row.get(0))?)
    }

    // A point read finding the database busy is not failed: it is made again on the blocking
    // pool, where it may wait within the busy timeout.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_that_finds_the_database_busy_is_made_again_where_it_may_wait() {
        let (_dir, store) = store();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&attempts);
        let read = store
            .read(move |c| {
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        None,
                    )
                    .into());
                }
                one(c)
            })
            .await;
        assert_eq!(read.unwrap(), 1);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);

        // Another failure is the answer: it is not made again.
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&attempts);
        let read = store
            .read(move |c| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(c.query_row("SELECT nothing FROM nowhere", [], |row| {
                    row.get::<_, i64>(0)
                })?)
            })
            .await;
        assert!(read.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    // While another request holds the reader, a read does not wait for it: it is made on the
    // blocking pool.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_while_the_reader_is_taken_goes_to_the_blocking_pool() {
        let (_dir, store) = store();
        // Another request reads: it holds the reader until told to let go.
        let (held, taken) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let reader = Arc::clone(&store.reader);
        let other = std::thread::spawn(move || {
            let _guard = reader.lock().unwrap();
            held.send(()).unwrap();
            released.recv().unwrap();
        });
        taken.recv().unwrap();
        let here = std::thread::current().id();
        let read = store
            .read(move |c| Ok((std::thread::current().id() != here, one(c)?)))
            .await
            .unwrap();
        release.send(()).unwrap();
        other.join().unwrap();
        assert_eq!(read, (true, 1), "made on another thread");
        let read = store
            .read(move |c| Ok((std::thread::current().id() == here, one(c)?)))
            .await
            .unwrap();
        assert_eq!(read, (true, 1), "made on the caller's thread");
    }

    // The reader cannot write, whatever a read is given.
    #[test]
    fn the_reader_cannot_write() {
        let (_dir, store) = store();
        let reader = store.reader.lock().unwrap();
        let refused = reader
            .execute("INSERT INTO kv (key, value) VALUES ('k', 'v')", [])
            .unwrap_err();
        assert!(refused.to_string().contains("readonly"), "{refused}");
    }
}
