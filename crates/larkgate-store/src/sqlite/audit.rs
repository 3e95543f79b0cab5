//! The audit chain in SQLite: batches of records with the chain head moved in the same
//! transaction, and the inbox of entries forwarded by processes that do not own the chain.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use std::collections::{HashMap, HashSet};

use super::signed;
use crate::chain::{self, JournaledAudit};
use crate::{AuditHead, AuditKind, AuditQuery, AuditRecord, ForwardedAudit, Result};

pub(super) const AUDIT_COLUMNS: &str = "seq, at_ms, kind, principal, run_id, run_kind, session, tool, \
     args_hash, args, code, intent_seq, duration_us, detail, prev_hash, hash, replica, local_seq";

pub(super) fn audit_from_row(row: &Row<'_>) -> rusqlite::Result<AuditRecord> {
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
        replica: row.get(16)?,
        local_seq: row.get::<_, Option<i64>>(17)?.map(|s| s as u64),
    })
}

pub(super) fn append_audit_adopting(
    c: &mut Connection,
    records: Vec<AuditRecord>,
    adopted: Vec<i64>,
) -> Result<()> {
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
}

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

/// Links a replica's batch after the head (see [`crate::chain`]); the immediate transaction is
/// the chain's lock.
pub(super) fn chain_audit(
    c: &mut Connection,
    replica: &str,
    entries: Vec<JournaledAudit>,
) -> Result<()> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut chained = HashMap::new();
    {
        let mut select =
            tx.prepare_cached("SELECT seq FROM audit WHERE replica = ?1 AND local_seq = ?2")?;
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
    let head = audit_head(&tx)?;
    let records = chain::link(head, replica, entries, &chained, &deleted);
    insert(&tx, &records)?;
    tx.commit()?;
    Ok(())
}

pub(super) fn audit_local_head(c: &mut Connection, replica: &str) -> Result<u64> {
    let last: Option<i64> = c.query_row(
        "SELECT MAX(local_seq) FROM audit WHERE replica = ?1",
        [replica],
        |r| r.get(0),
    )?;
    Ok(last.map_or(0, |l| l as u64))
}

pub(super) fn forwarded_audit(c: &mut Connection, limit: i64) -> Result<Vec<ForwardedAudit>> {
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
}

pub(super) fn audit_head(c: &Connection) -> Result<Option<AuditHead>> {
    Ok(
        c.query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |r| {
            Ok(AuditHead {
                seq: r.get::<_, i64>(0)? as u64,
                hash: r.get(1)?,
            })
        })
        .optional()?,
    )
}

pub(super) fn audit_records(c: &mut Connection, query: AuditQuery) -> Result<Vec<AuditRecord>> {
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
}
