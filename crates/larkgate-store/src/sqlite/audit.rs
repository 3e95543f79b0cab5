//! The audit chain in SQLite: batches of records with the chain head moved in the same
//! transaction, and the inbox of entries forwarded by processes that do not own the chain.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::chain::{self, JournaledAudit};
use crate::rows::{self, AUDIT_COLUMNS, AUDIT_HEAD_COLUMNS, FORWARDED_COLUMNS};
use crate::{AuditHead, AuditQuery, AuditRecord, AuditStore, ForwardedAudit, Result, signed};

/// Inserts chained records (skipping sequences already stored) and moves the head forward.
fn insert(tx: &rusqlite::Transaction<'_>, records: &[AuditRecord]) -> Result<()> {
    {
        let mut insert = tx.prepare_cached(&format!(
            "INSERT INTO audit ({AUDIT_COLUMNS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18) \
                 ON CONFLICT (seq) DO NOTHING"
        ))?;
        for r in records {
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
                r.replica,
                r.local_seq.map(signed),
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
    Ok(())
}

pub(super) fn head(c: &Connection) -> Result<Option<AuditHead>> {
    c.prepare_cached(&format!(
        "SELECT {AUDIT_HEAD_COLUMNS} FROM audit_head WHERE id = 1"
    ))?
    .query_and_then([], |r| rows::audit_head(r))?
    .next()
    .transpose()
}

#[async_trait::async_trait]
impl AuditStore for SqliteStore {
    async fn write_audit(&self, records: Vec<AuditRecord>, adopted: Vec<i64>) -> Result<()> {
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut delete = tx.prepare_cached("DELETE FROM audit_inbox WHERE id = ?1")?;
                for id in &adopted {
                    delete.execute([id])?;
                }
            }
            insert(&tx, &records)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Links a replica's batch after the head (see [`crate::chain`]); the immediate
    /// transaction is the chain's lock.
    async fn chain_audit(&self, replica: &str, entries: Vec<JournaledAudit>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let replica = replica.to_owned();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut chained = HashMap::new();
            {
                let mut select = tx.prepare_cached(
                    "SELECT seq FROM audit WHERE replica = ?1 AND local_seq = ?2",
                )?;
                for local in chain::local_seqs(&entries) {
                    let found: Option<i64> = select
                        .query_row(params![replica, signed(local)], |r| r.get(0))
                        .optional()?;
                    if let Some(seq) = found {
                        chained.insert(local, seq as u64);
                    }
                }
            }
            let mut deleted = HashSet::new();
            {
                let mut delete = tx.prepare_cached("DELETE FROM audit_inbox WHERE id = ?1")?;
                for id in chain::adopted_ids(&entries, &chained) {
                    if delete.execute([id])? > 0 {
                        deleted.insert(id);
                    }
                }
            }
            let head = head(&tx)?;
            let records = chain::link(head, &replica, entries, &chained, &deleted);
            insert(&tx, &records)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn audit_local_head(&self, replica: &str) -> Result<u64> {
        let replica = replica.to_owned();
        self.with(move |c| {
            let last: Option<i64> = c.query_row(
                "SELECT MAX(local_seq) FROM audit WHERE replica = ?1",
                [replica],
                |r| r.get(0),
            )?;
            Ok(last.map_or(0, |l| l as u64))
        })
        .await
    }

    /// On the calling thread, through the writing connection: one small insert.
    fn forward_audit(&self, at_ms: i64, entry: &str) -> Result<i64> {
        let connection = self.lock();
        connection.execute(
            "INSERT INTO audit_inbox (at_ms, entry) VALUES (?1, ?2)",
            params![at_ms, entry],
        )?;
        Ok(connection.last_insert_rowid())
    }

    async fn forwarded_audit(&self, limit: usize) -> Result<Vec<ForwardedAudit>> {
        let limit = signed(limit as u64);
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {FORWARDED_COLUMNS} FROM audit_inbox ORDER BY id LIMIT ?1"
            ))?
            .query_and_then([limit], |r| rows::forwarded(r))?
            .collect()
        })
        .await
    }

    async fn audit_head(&self) -> Result<Option<AuditHead>> {
        self.with(|c| head(c)).await
    }

    async fn backup_origin(&self) -> Result<Option<crate::BackupOrigin>> {
        self.with(|c| super::backup::origin(c)).await
    }

    async fn audit_records(&self, query: AuditQuery) -> Result<Vec<AuditRecord>> {
        self.with(move |c| {
            let order = if query.newest { "DESC" } else { "ASC" };
            let limit = query.limit.map_or(-1, |l| signed(l as u64));
            let mut records = c
                .prepare(&format!(
                    "SELECT {AUDIT_COLUMNS} FROM audit \
                     WHERE (?1 IS NULL OR seq > ?1) AND (?2 IS NULL OR principal = ?2) \
                       AND (?3 IS NULL OR tool = ?3) \
                     ORDER BY seq {order} LIMIT ?4"
                ))?
                .query_and_then(
                    params![
                        query.after_seq.map(signed),
                        query.principal,
                        query.tool,
                        limit
                    ],
                    |r| rows::audit(r),
                )?
                .collect::<Result<Vec<_>>>()?;
            if query.newest {
                records.reverse();
            }
            Ok(records)
        })
        .await
    }
}
