//! Approvals in SQLite: one pending request per {principal, tool, arguments hash}, resolved
//! once, consumed once.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::chain_column;
use crate::{Approval, ApprovalDetails, ApprovalStatus, CallChain, Result, StoreError};

pub(super) const APPROVAL_COLUMNS: &str = "id, principal, tool, args_hash, status, created_at_ms, \
     resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors, \
     arguments, run_id, script, reason";

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
        details: ApprovalDetails {
            arguments: row.get(12)?,
            run_id: row.get(13)?,
            script: row.get(14)?,
        },
        reason: row.get(15)?,
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
    details: &ApprovalDetails,
    now_ms: i64,
) -> Result<Approval> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let through = chain_column(&chain.through);
    // The partial unique index keeps one pending record per call, even across
    // processes sharing the file.
    tx.execute(
        "INSERT INTO approvals \
             (id, principal, tool, args_hash, status, created_at_ms, chain_through, chain_authors, \
              arguments, run_id, script) \
             VALUES (lower(hex(randomblob(8))), ?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT DO NOTHING",
        params![
            principal,
            tool,
            args_hash,
            now_ms,
            through,
            chain_column(&chain.authors),
            details.arguments,
            details.run_id,
            details.script,
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

/// Marks approvals pending since before `created_before_ms` expired.
pub(super) fn expire_approvals(c: &mut Connection, created_before_ms: i64) -> Result<u64> {
    let changed = c.execute(
        "UPDATE approvals SET status = 'expired' \
             WHERE status = 'pending' AND created_at_ms < ?1",
        params![created_before_ms],
    )?;
    Ok(changed as u64)
}

/// An approver's decision on a pending approval.
pub(super) struct Decision<'a> {
    pub(super) approve: bool,
    pub(super) reason: Option<&'a str>,
    pub(super) now_ms: i64,
    /// Until when an approval may be used (ignored for a denial).
    pub(super) expires_at_ms: i64,
}

pub(super) fn resolve_approval(
    c: &mut Connection,
    id: &str,
    approver: &str,
    decision: Decision<'_>,
) -> Result<Approval> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let status = if decision.approve {
        "approved"
    } else {
        "denied"
    };
    let changed = tx.execute(
        "UPDATE approvals SET status = ?2, resolved_by = ?3, resolved_at_ms = ?4, \
             expires_at_ms = CASE WHEN ?2 = 'approved' THEN ?5 ELSE NULL END, reason = ?6 \
             WHERE id = ?1 AND status = 'pending'",
        params![
            id,
            status,
            approver,
            decision.now_ms,
            decision.expires_at_ms,
            decision.reason
        ],
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
