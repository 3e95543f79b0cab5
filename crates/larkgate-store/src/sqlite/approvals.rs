//! Approvals in SQLite: one pending request per {principal, tool, arguments hash}, resolved
//! once, consumed once.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::{Approval, ApprovalStatus, CallChain, Result, StoreError};

pub(super) const APPROVAL_COLUMNS: &str = "id, principal, tool, args_hash, status, created_at_ms, \
     resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors";

/// A chain's column: a JSON array (the same text for the same chain, so it is matched by
/// equality).
fn chain_column(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
}

/// A chain column read back. One that does not parse makes the approval unreadable, so it is
/// neither resolved nor used: fail closed.
fn chain_names(row: &Row<'_>, column: usize) -> rusqlite::Result<Vec<String>> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, e.into())
    })
}

pub(super) fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<Approval> {
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
        chain: CallChain {
            through: chain_names(row, 10)?,
            authors: chain_names(row, 11)?,
        },
    })
}

pub(super) fn approval_by_id(connection: &Connection, id: &str) -> Result<Option<Approval>> {
    Ok(connection
        .query_row(
            &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
            params![id],
            approval_from_row,
        )
        .optional()?)
}

pub(super) fn pending_approval(
    c: &mut Connection,
    principal: &str,
    tool: &str,
    args_hash: &str,
    chain: &CallChain,
    now_ms: i64,
) -> Result<Approval> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let through = chain_column(&chain.through);
    // The partial unique index keeps one pending record per call, even across
    // processes sharing the file.
    tx.execute(
        "INSERT INTO approvals \
             (id, principal, tool, args_hash, status, created_at_ms, chain_through, chain_authors) \
             VALUES (lower(hex(randomblob(8))), ?1, ?2, ?3, 'pending', ?4, ?5, ?6) \
             ON CONFLICT DO NOTHING",
        params![
            principal,
            tool,
            args_hash,
            now_ms,
            through,
            chain_column(&chain.authors)
        ],
    )?;
    let approval = tx.query_row(
        &format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 AND chain_through = ?4 \
                   AND status = 'pending'"
        ),
        params![principal, tool, args_hash, through],
        approval_from_row,
    )?;
    tx.commit()?;
    Ok(approval)
}

pub(super) fn resolved_approval(
    c: &mut Connection,
    principal: &str,
    tool: &str,
    args_hash: &str,
    chain: &CallChain,
) -> Result<Option<Approval>> {
    Ok(c.query_row(
        &format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 AND chain_through = ?4 \
                   AND status IN ('approved', 'denied') \
                 ORDER BY resolved_at_ms DESC, rowid DESC LIMIT 1"
        ),
        params![principal, tool, args_hash, chain_column(&chain.through)],
        approval_from_row,
    )
    .optional()?)
}

pub(super) fn consume_approval(c: &mut Connection, id: &str, now_ms: i64) -> Result<bool> {
    let changed = c.execute(
        "UPDATE approvals SET status = 'used', used_at_ms = ?2 \
             WHERE id = ?1 AND status = 'approved' AND expires_at_ms > ?2",
        params![id, now_ms],
    )?;
    Ok(changed == 1)
}

pub(super) fn resolve_approval(
    c: &mut Connection,
    id: &str,
    approver: &str,
    approve: bool,
    now_ms: i64,
    expires_at_ms: i64,
) -> Result<Approval> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let status = if approve { "approved" } else { "denied" };
    let changed = tx.execute(
        "UPDATE approvals SET status = ?2, resolved_by = ?3, resolved_at_ms = ?4, \
             expires_at_ms = CASE WHEN ?2 = 'approved' THEN ?5 ELSE NULL END \
             WHERE id = ?1 AND status = 'pending'",
        params![id, status, approver, now_ms, expires_at_ms],
    )?;
    let approval =
        approval_by_id(&tx, id)?.ok_or_else(|| StoreError::Missing(format!("approval {id:?}")))?;
    if changed == 0 {
        return Err(StoreError::Invalid(format!(
            "approval {id:?} is already {}; only a pending approval can be resolved",
            approval.status.as_str()
        )));
    }
    tx.commit()?;
    Ok(approval)
}

pub(super) fn approval(c: &mut Connection, id: &str) -> Result<Option<Approval>> {
    approval_by_id(c, id)
}

pub(super) fn approvals(
    c: &mut Connection,
    status: Option<ApprovalStatus>,
) -> Result<Vec<Approval>> {
    let mut statement = c.prepare(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at_ms DESC, rowid DESC"
    ))?;
    let rows = statement.query_map(params![status.map(|s| s.as_str())], approval_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
