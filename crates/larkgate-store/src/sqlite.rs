//! The embedded SQLite store: one file, WAL, every write in a transaction.
//!
//! Durability: with WAL and `synchronous = NORMAL`, a committed transaction has been written
//! to the WAL file before the commit returns, so it survives the process being killed (it may
//! not survive the machine losing power before the next checkpoint; set
//! `synchronous = FULL` through [`SqliteStore::open_with`] for that).
//!
//! All access goes through one connection behind a mutex, on tokio's blocking pool.

mod migrations;
mod scripts;
mod upstreams;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::{
    Approval, ApprovalStatus, AuditHead, AuditKind, AuditQuery, AuditRecord, Draft, ForwardedAudit,
    Principal, PrincipalKind, Result, Run, ScriptVersion, Store, StoreError, TokenRecord, ToolPin,
    UpstreamRecord,
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
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
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
}

fn principal_from_row(row: &Row<'_>) -> rusqlite::Result<Principal> {
    let kind: String = row.get(1)?;
    let roles: String = row.get(2)?;
    Ok(Principal {
        id: row.get(0)?,
        kind: PrincipalKind::parse(&kind).unwrap_or(PrincipalKind::User),
        roles: split_roles(&roles),
    })
}

fn split_roles(roles: &str) -> Vec<String> {
    roles
        .split(',')
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Roles are stored comma-separated, sorted and unique.
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

const APPROVAL_COLUMNS: &str = "id, principal, tool, args_hash, status, created_at_ms, \
     resolved_by, resolved_at_ms, expires_at_ms, used_at_ms";

fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<Approval> {
    let status: String = row.get(4)?;
    Ok(Approval {
        id: row.get(0)?,
        principal: row.get(1)?,
        tool: row.get(2)?,
        args_hash: row.get(3)?,
        // An unknown status reads as denied: fail closed.
        status: ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Denied),
        created_at_ms: row.get(5)?,
        resolved_by: row.get(6)?,
        resolved_at_ms: row.get(7)?,
        expires_at_ms: row.get(8)?,
        used_at_ms: row.get(9)?,
    })
}

fn approval_by_id(connection: &Connection, id: &str) -> Result<Option<Approval>> {
    Ok(connection
        .query_row(
            &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
            params![id],
            approval_from_row,
        )
        .optional()?)
}

const AUDIT_COLUMNS: &str = "seq, at_ms, kind, principal, run_id, run_kind, session, tool, \
     args_hash, args, code, intent_seq, duration_us, detail, prev_hash, hash";

fn audit_from_row(row: &Row<'_>) -> rusqlite::Result<AuditRecord> {
    let kind: String = row.get(2)?;
    Ok(AuditRecord {
        seq: row.get::<_, i64>(0)? as u64,
        at_ms: row.get(1)?,
        kind: AuditKind::parse(&kind).unwrap_or(AuditKind::Event),
        principal: row.get(3)?,
        run_id: row.get(4)?,
        run_kind: row.get(5)?,
        session: row.get(6)?,
        tool: row.get(7)?,
        args_hash: row.get(8)?,
        args: row.get(9)?,
        code: row.get(10)?,
        intent_seq: row.get::<_, Option<i64>>(11)?.map(|s| s as u64),
        duration_us: row.get::<_, Option<i64>>(12)?.map(|d| d as u64),
        detail: row.get(13)?,
        prev_hash: row.get(14)?,
        hash: row.get(15)?,
    })
}

/// SQLite integers are signed; sequences and durations are far below 2^63.
const TOKEN_COLUMNS: &str =
    "id, principal, secret_hash, created_by, created_at_ms, expires_at_ms, revoked_at_ms";

fn token_from_row(row: &Row<'_>) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.get(0)?,
        principal: row.get(1)?,
        secret_hash: row.get(2)?,
        created_by: row.get(3)?,
        created_at_ms: row.get(4)?,
        expires_at_ms: row.get(5)?,
        revoked_at_ms: row.get(6)?,
    })
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn add_principal(&self, principal: Principal) -> Result<()> {
        self.with(move |c| {
            let roles = join_roles(principal.roles)?;
            let inserted = c.execute(
                "INSERT INTO principals (id, kind, roles) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO NOTHING",
                params![principal.id, principal.kind.as_str(), roles],
            )?;
            if inserted == 0 {
                return Err(StoreError::Conflict(format!(
                    "principal {:?}",
                    principal.id
                )));
            }
            Ok(())
        })
        .await
    }

    async fn principal(&self, id: &str) -> Result<Option<Principal>> {
        let id = id.to_owned();
        // Read on every authenticated request: the statement is prepared once.
        self.with(move |c| {
            Ok(
                c.prepare_cached("SELECT id, kind, roles FROM principals WHERE id = ?1")?
                    .query_row(params![id], principal_from_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn principals(&self) -> Result<Vec<Principal>> {
        self.with(|c| {
            let mut statement = c.prepare("SELECT id, kind, roles FROM principals ORDER BY id")?;
            let rows = statement.query_map([], principal_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            let roles = join_roles(roles)?;
            let changed = c.execute(
                "UPDATE principals SET roles = ?2 WHERE id = ?1",
                params![id, roles],
            )?;
            if changed == 0 {
                return Err(StoreError::Missing(format!("principal {id:?}")));
            }
            Ok(())
        })
        .await
    }

    async fn remove_principal(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            let changed = c.execute("DELETE FROM principals WHERE id = ?1", params![id])?;
            if changed == 0 {
                return Err(StoreError::Missing(format!("principal {id:?}")));
            }
            Ok(())
        })
        .await
    }

    async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_owned();
        self.with(move |c| {
            Ok(
                c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })
        .await
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
        self.with(move |c| {
            // `key >= prefix` lets the primary key index find the start; `substr` keeps only
            // keys that really start with the prefix (both count characters, not bytes).
            let mut statement = c.prepare_cached(
                "SELECT key, value FROM kv \
                 WHERE key >= ?1 AND substr(key, 1, length(?1)) = ?1 \
                   AND (?2 IS NULL OR key > ?2) \
                 ORDER BY key LIMIT ?3",
            )?;
            let rows = statement.query_map(params![prefix, after, limit], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn kv_set(&self, key: &str, value: &str) -> Result<bool> {
        let key = key.to_owned();
        let value = value.to_owned();
        self.with(move |c| {
            let tx = c.transaction()?;
            let existed: bool = tx
                .query_row("SELECT 1 FROM kv WHERE key = ?1", params![key], |_| Ok(()))
                .optional()?
                .is_some();
            tx.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )?;
            tx.commit()?;
            Ok(!existed)
        })
        .await
    }

    async fn kv_delete(&self, key: &str) -> Result<bool> {
        let key = key.to_owned();
        self.with(move |c| Ok(c.execute("DELETE FROM kv WHERE key = ?1", params![key])? > 0))
            .await
    }

    async fn pending_approval(
        &self,
        principal: &str,
        tool: &str,
        args_hash: &str,
        now_ms: i64,
    ) -> Result<Approval> {
        let (principal, tool, args_hash) =
            (principal.to_owned(), tool.to_owned(), args_hash.to_owned());
        self.with(move |c| {
            let tx = c.transaction()?;
            // The partial unique index keeps one pending record per call, even across
            // processes sharing the file.
            tx.execute(
                "INSERT INTO approvals (id, principal, tool, args_hash, status, created_at_ms) \
                 VALUES (lower(hex(randomblob(8))), ?1, ?2, ?3, 'pending', ?4) \
                 ON CONFLICT DO NOTHING",
                params![principal, tool, args_hash, now_ms],
            )?;
            let approval = tx.query_row(
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 \
                       AND status = 'pending'"
                ),
                params![principal, tool, args_hash],
                approval_from_row,
            )?;
            tx.commit()?;
            Ok(approval)
        })
        .await
    }

    async fn resolved_approval(
        &self,
        principal: &str,
        tool: &str,
        args_hash: &str,
    ) -> Result<Option<Approval>> {
        let (principal, tool, args_hash) =
            (principal.to_owned(), tool.to_owned(), args_hash.to_owned());
        self.with(move |c| {
            Ok(c.query_row(
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 \
                       AND status IN ('approved', 'denied') \
                     ORDER BY resolved_at_ms DESC, rowid DESC LIMIT 1"
                ),
                params![principal, tool, args_hash],
                approval_from_row,
            )
            .optional()?)
        })
        .await
    }

    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE approvals SET status = 'used', used_at_ms = ?2 \
                 WHERE id = ?1 AND status = 'approved' AND expires_at_ms > ?2",
                params![id, now_ms],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn resolve_approval(
        &self,
        id: &str,
        approver: &str,
        approve: bool,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<Approval> {
        let (id, approver) = (id.to_owned(), approver.to_owned());
        self.with(move |c| {
            let tx = c.transaction()?;
            let status = if approve { "approved" } else { "denied" };
            let changed = tx.execute(
                "UPDATE approvals SET status = ?2, resolved_by = ?3, resolved_at_ms = ?4, \
                 expires_at_ms = CASE WHEN ?2 = 'approved' THEN ?5 ELSE NULL END \
                 WHERE id = ?1 AND status = 'pending'",
                params![id, status, approver, now_ms, expires_at_ms],
            )?;
            let approval = approval_by_id(&tx, &id)?
                .ok_or_else(|| StoreError::Missing(format!("approval {id:?}")))?;
            if changed == 0 {
                return Err(StoreError::Invalid(format!(
                    "approval {id:?} is already {}; only a pending approval can be resolved",
                    approval.status.as_str()
                )));
            }
            tx.commit()?;
            Ok(approval)
        })
        .await
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        let id = id.to_owned();
        self.with(move |c| approval_by_id(c, &id)).await
    }

    async fn approvals(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        self.with(move |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at_ms DESC, rowid DESC"
            ))?;
            let rows =
                statement.query_map(params![status.map(|s| s.as_str())], approval_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
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
        self.with(move |c| {
            Ok(c.query_row(
                "SELECT name, source, author, updated_at_ms FROM script_drafts WHERE name = ?1",
                params![name],
                scripts::draft_from_row,
            )
            .optional()?)
        })
        .await
    }

    async fn drafts(&self) -> Result<Vec<Draft>> {
        self.with(|c| {
            let mut statement = c.prepare(
                "SELECT name, source, author, updated_at_ms FROM script_drafts ORDER BY name",
            )?;
            let rows = statement.query_map([], scripts::draft_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn publish(
        &self,
        name: &str,
        source: &str,
        hash: &str,
        publisher: &str,
        now_ms: i64,
    ) -> Result<ScriptVersion> {
        let (name, source, hash, publisher) = (
            name.to_owned(),
            source.to_owned(),
            hash.to_owned(),
            publisher.to_owned(),
        );
        self.with(move |c| scripts::publish(c, &name, &source, &hash, &publisher, now_ms))
            .await
    }

    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>> {
        let name = name.to_owned();
        self.with(move |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {} FROM script_versions WHERE name = ?1 ORDER BY version",
                scripts::VERSION_COLUMNS
            ))?;
            let rows = statement.query_map(params![name], scripts::version_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>> {
        let name = name.to_owned();
        // Read on every call of a script's tool: the statement is prepared once.
        self.with(move |c| {
            Ok(c.prepare_cached(&format!(
                "SELECT {} FROM script_versions WHERE name = ?1 ORDER BY version DESC LIMIT 1",
                scripts::VERSION_COLUMNS
            ))?
            .query_row(params![name], scripts::version_from_row)
            .optional()?)
        })
        .await
    }

    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>> {
        self.with(|c| {
            let mut statement = c.prepare(&format!(
                "SELECT {} FROM script_versions AS v WHERE version =                  (SELECT MAX(version) FROM script_versions WHERE name = v.name) ORDER BY name",
                scripts::VERSION_COLUMNS
            ))?;
            let rows = statement.query_map([], scripts::version_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn start_run(&self, run: Run) -> Result<()> {
        self.with(move |c| {
            scripts::write_run(c, &run, true).map_err(|e| match e {
                StoreError::Database(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    StoreError::Conflict(format!("run {:?}", run.id))
                }
                other => other,
            })?;
            Ok(())
        })
        .await
    }

    async fn finish_run(&self, run: Run) -> Result<()> {
        self.with(move |c| {
            if scripts::write_run(c, &run, false)? == 0 {
                return Err(StoreError::Missing(format!("run {:?}", run.id)));
            }
            Ok(())
        })
        .await
    }

    async fn run(&self, id: &str) -> Result<Option<Run>> {
        let id = id.to_owned();
        self.with(move |c| {
            Ok(c.query_row(
                &format!("SELECT {} FROM runs WHERE id = ?1", scripts::RUN_COLUMNS),
                params![id],
                scripts::run_from_row,
            )
            .optional()?)
        })
        .await
    }

    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()> {
        self.with(move |c| {
            c.execute(
                "INSERT OR REPLACE INTO upstreams (alias, config, added_by, added_at_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    upstream.alias,
                    upstream.config,
                    upstream.added_by,
                    upstream.added_at_ms
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>> {
        self.with(|c| {
            let mut statement = c.prepare(
                "SELECT alias, config, added_by, added_at_ms FROM upstreams ORDER BY alias",
            )?;
            let rows = statement.query_map([], upstreams::upstream_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn remove_upstream(&self, alias: &str) -> Result<bool> {
        let alias = alias.to_owned();
        self.with(move |c| {
            let tx = c.transaction()?;
            let removed = tx.execute("DELETE FROM upstreams WHERE alias = ?1", params![alias])?;
            tx.execute("DELETE FROM upstream_pins WHERE alias = ?1", params![alias])?;
            tx.commit()?;
            Ok(removed > 0)
        })
        .await
    }

    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>> {
        let alias = alias.to_owned();
        self.with(move |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {} FROM upstream_pins WHERE alias = ?1 ORDER BY tool",
                upstreams::PIN_COLUMNS
            ))?;
            let rows = statement.query_map(params![alias], upstreams::pin_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()> {
        self.with(move |c| upstreams::save_pins(c, &pins)).await
    }

    async fn add_token(&self, token: TokenRecord) -> Result<()> {
        self.with(move |c| {
            c.execute(
                &format!(
                    "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                ),
                params![
                    token.id,
                    token.principal,
                    token.secret_hash,
                    token.created_by,
                    token.created_at_ms,
                    token.expires_at_ms,
                    token.revoked_at_ms
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_owned();
        // Read on every authenticated request: the statement is prepared once.
        self.with(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"))?
                    .query_row(params![id], token_from_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
        let principal = principal.map(str::to_owned);
        self.with(move |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens \
                 WHERE ?1 IS NULL OR principal = ?1 ORDER BY created_at_ms, id"
            ))?;
            let rows = statement.query_map(params![principal], token_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| {
            let exists = c.execute(
                "UPDATE tokens SET revoked_at_ms = COALESCE(revoked_at_ms, ?2) WHERE id = ?1",
                params![id, now_ms],
            )?;
            Ok(exists > 0)
        })
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
        self.with(move |c| {
            let tx = c.transaction()?;
            {
                let mut delete = tx.prepare_cached("DELETE FROM audit_inbox WHERE id = ?1")?;
                for id in &adopted {
                    delete.execute([id])?;
                }
            }
            {
                let mut insert = tx.prepare_cached(&format!(
                    "INSERT INTO audit ({AUDIT_COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
                     ON CONFLICT (seq) DO NOTHING"
                ))?;
                for r in &records {
                    insert.execute(params![
                        signed(r.seq),
                        r.at_ms,
                        r.kind.as_str(),
                        r.principal,
                        r.run_id,
                        r.run_kind,
                        r.session,
                        r.tool,
                        r.args_hash,
                        r.args,
                        r.code,
                        r.intent_seq.map(signed),
                        r.duration_us.map(signed),
                        r.detail,
                        r.prev_hash,
                        r.hash,
                    ])?;
                }
            }
            if let Some(last) = records.iter().max_by_key(|r| r.seq) {
                // The head only moves forward: a replayed older batch leaves it alone.
                tx.execute(
                    "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2) \
                     ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash \
                     WHERE excluded.seq > audit_head.seq",
                    params![signed(last.seq), last.hash],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
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
        self.with(move |c| {
            let mut select =
                c.prepare_cached("SELECT id, at_ms, entry FROM audit_inbox ORDER BY id LIMIT ?1")?;
            let rows = select.query_map([limit], |r| {
                Ok(ForwardedAudit {
                    id: r.get(0)?,
                    at_ms: r.get(1)?,
                    entry: r.get(2)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn audit_head(&self) -> Result<Option<AuditHead>> {
        self.with(|c| {
            Ok(
                c.query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |r| {
                    Ok(AuditHead {
                        seq: r.get::<_, i64>(0)? as u64,
                        hash: r.get(1)?,
                    })
                })
                .optional()?,
            )
        })
        .await
    }

    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>> {
        self.with(move |c| {
            let order = if query.newest { "DESC" } else { "ASC" };
            let mut statement = c.prepare(&format!(
                "SELECT {AUDIT_COLUMNS} FROM audit \
                 WHERE (?1 IS NULL OR seq > ?1) AND (?2 IS NULL OR principal = ?2) \
                   AND (?3 IS NULL OR tool = ?3) \
                 ORDER BY seq {order} LIMIT ?4"
            ))?;
            let limit = query.limit.map_or(-1, |l| signed(l as u64));
            let rows = statement.query_map(
                params![
                    query.after_seq.map(signed),
                    query.principal,
                    query.tool,
                    limit
                ],
                audit_from_row,
            )?;
            let mut records: Vec<AuditRecord> = rows.collect::<rusqlite::Result<_>>()?;
            if query.newest {
                records.reverse();
            }
            Ok(records)
        })
        .await
    }
}
