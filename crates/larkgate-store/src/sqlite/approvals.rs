//! Approvals in SQLite: one pending request per {principal, tool, arguments hash}, resolved
//! once, consumed once.

use rusqlite::{Connection, TransactionBehavior, params};

use super::SqliteStore;
use crate::rows::{self, APPROVAL_COLUMNS};
use crate::{
    Approval, ApprovalFor, ApprovalQuery, ApprovalRequest, ApprovalStore, Asked, PendingCapReached,
    Resolution, Result, StoreError, chain_column, signed,
};

fn approval_by_id(connection: &Connection, id: &str) -> Result<Option<Approval>> {
    connection
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"
        ))?
        .query_and_then(params![id], |r| rows::approval(r))?
        .next()
        .transpose()
}

#[async_trait::async_trait]
impl ApprovalStore for SqliteStore {
    async fn pending_approval(&self, request: ApprovalRequest<'_>) -> Result<Asked> {
        let key = request.call.key();
        let authors = chain_column(&request.call.chain.authors);
        let (details, now_ms, caps) = (request.details.clone(), request.now_ms, request.caps);
        self.with(move |c| {
            // Immediate: the lookup, the count and the insert are one writer's, even across
            // processes sharing the file; the partial unique index keeps one pending record
            // per call besides.
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let pending = |tx: &rusqlite::Transaction<'_>| -> Result<Option<Approval>> {
                tx.prepare_cached(&format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 \
                       AND chain_through = ?4 AND status = 'pending'"
                ))?
                .query_and_then(
                    params![key.principal, key.tool, key.args_hash, key.through],
                    |r| rows::approval(r),
                )?
                .next()
                .transpose()
            };
            if let Some(approval) = pending(&tx)? {
                return Ok(Asked::Pending(Box::new(approval)));
            }
            let (all, own): (i64, i64) = tx.query_row(
                "SELECT count(*), count(*) FILTER (WHERE principal = ?1) FROM approvals \
                 WHERE status = 'pending'",
                params![key.principal],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            if all >= signed(caps.total) {
                return Ok(Asked::CapReached(PendingCapReached::Total));
            }
            if own >= signed(caps.per_principal) {
                return Ok(Asked::CapReached(PendingCapReached::PerPrincipal));
            }
            tx.execute(
                "INSERT INTO approvals \
                 (id, principal, tool, args_hash, status, created_at_ms, chain_through, \
                  chain_authors, arguments, run_id, script, arguments_bytes) \
                 VALUES (lower(hex(randomblob(8))), ?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, \
                  ?9, ?10)",
                params![
                    key.principal,
                    key.tool,
                    key.args_hash,
                    now_ms,
                    key.through,
                    authors,
                    details.arguments,
                    details.run_id,
                    details.script,
                    details.arguments_bytes.map(signed),
                ],
            )?;
            let approval = pending(&tx)?
                .ok_or_else(|| StoreError::Missing("the pending approval just made".into()))?;
            tx.commit()?;
            Ok(Asked::Pending(Box::new(approval)))
        })
        .await
    }

    async fn expire_approvals(&self, created_before_ms: i64) -> Result<u64> {
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE approvals SET status = 'expired' \
                 WHERE status = 'pending' AND created_at_ms < ?1",
                params![created_before_ms],
            )?;
            Ok(changed as u64)
        })
        .await
    }

    async fn resolved_approval(&self, call: ApprovalFor<'_>) -> Result<Option<Approval>> {
        let key = call.key();
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE principal = ?1 AND tool = ?2 AND args_hash = ?3 AND chain_through = ?4 \
                   AND status IN ('approved', 'denied') \
                 ORDER BY resolved_at_ms DESC, rowid DESC LIMIT 1"
            ))?
            .query_and_then(
                params![key.principal, key.tool, key.args_hash, key.through],
                |r| rows::approval(r),
            )?
            .next()
            .transpose()
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

    async fn restore_approval(&self, id: &str, used_at_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE approvals SET status = 'approved', used_at_ms = NULL \
                 WHERE id = ?1 AND status = 'used' AND used_at_ms = ?2",
                params![id, used_at_ms],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn withdraw_approval(&self, id: &str, by: &str, now_ms: i64) -> Result<bool> {
        let (id, by) = (id.to_owned(), by.to_owned());
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE approvals SET status = 'withdrawn', resolved_by = ?2, resolved_at_ms = ?3 \
                 WHERE id = ?1 AND status = 'pending'",
                params![id, by, now_ms],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn resolve_approval(&self, id: &str, resolution: Resolution<'_>) -> Result<Approval> {
        let (id, approver) = (id.to_owned(), resolution.approver.to_owned());
        let reason = resolution.reason.map(str::to_owned);
        let (status, now_ms) = (resolution.status(), resolution.now_ms);
        let expires_at_ms = resolution.expires_at_ms;
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.execute(
                "UPDATE approvals SET status = ?2, resolved_by = ?3, resolved_at_ms = ?4, \
                 expires_at_ms = CASE WHEN ?2 = 'approved' THEN ?5 ELSE NULL END, reason = ?6 \
                 WHERE id = ?1 AND status = 'pending'",
                params![id, status, approver, now_ms, expires_at_ms, reason],
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

    async fn approvals(&self, query: ApprovalQuery) -> Result<Vec<Approval>> {
        self.with(move |c| {
            let (after_ms, after_id) = match &query.after {
                Some(cursor) => (Some(cursor.created_at_ms), Some(cursor.id.clone())),
                None => (None, None),
            };
            c.prepare_cached(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE (?1 IS NULL OR status = ?1) \
                   AND (?2 IS NULL OR created_at_ms < ?2 OR (created_at_ms = ?2 AND id < ?3)) \
                 ORDER BY created_at_ms DESC, id DESC LIMIT ?4"
            ))?
            .query_and_then(
                params![
                    query.status.map(|s| s.as_str()),
                    after_ms,
                    after_id,
                    query.limit
                ],
                |r| rows::approval(r),
            )?
            .collect()
        })
        .await
    }

    async fn pending_approvals(&self, asked_since_ms: i64) -> Result<u64> {
        self.read(move |c| {
            let count: i64 = c
                .prepare_cached(
                    "SELECT count(*) FROM approvals \
                     WHERE status = 'pending' AND created_at_ms >= ?1",
                )?
                .query_row([asked_since_ms], |r| r.get(0))?;
            Ok(count.max(0) as u64)
        })
        .await
    }
}
