//! Approvals in PostgreSQL: one pending request per {principal, tool, arguments hash, chain}
//! (a partial unique index), resolved once and consumed once (conditional updates).

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use crate::rows::{self, APPROVAL_COLUMNS};
use crate::{
    Approval, ApprovalFor, ApprovalQuery, ApprovalRequest, ApprovalStore, Asked, PendingCapReached,
    Resolution, Result, StoreError, chain_column, signed,
};

/// The advisory lock (with the schema's hash) under which pending approvals are counted and
/// created.
const PENDING_LOCK: i32 = 1818325611;

/// A new approval's id: 64 random bits in hex, as the SQLite store makes them.
fn new_id() -> Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Invalid(format!("no randomness for an approval id: {e}")))?;
    Ok(hex::encode(bytes))
}

async fn approval_by_id(client: &impl GenericClient, id: &str) -> Result<Option<Approval>> {
    client
        .query_opt(
            &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"),
            &[&id],
        )
        .await?
        .as_ref()
        .map(rows::approval)
        .transpose()
}

#[async_trait::async_trait]
impl ApprovalStore for PostgresStore {
    async fn withdraw_approval(&self, id: &str, by: &str, now_ms: i64) -> Result<bool> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE approvals SET status = 'withdrawn', resolved_by = $2, resolved_at_ms = $3 \
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &by, &now_ms],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn resolve_approval(&self, id: &str, resolution: Resolution<'_>) -> Result<Approval> {
        let Resolution {
            approver,
            reason,
            now_ms,
            expires_at_ms,
            ..
        } = resolution;
        let status = resolution.status();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let changed = tx
            .execute(
                "UPDATE approvals SET status = $2, resolved_by = $3, resolved_at_ms = $4, \
                 expires_at_ms = CASE WHEN $2 = 'approved' THEN $5::bigint ELSE NULL END, \
                 reason = $6 \
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &status, &approver, &now_ms, &expires_at_ms, &reason],
            )
            .await?;
        let approval = approval_by_id(&tx, id)
            .await?
            .ok_or_else(|| StoreError::Missing(format!("approval {id:?}")))?;
        if changed == 0 {
            return Err(StoreError::Invalid(format!(
                "approval {id:?} is already {}; only a pending approval can be resolved",
                approval.status.as_str()
            )));
        }
        tx.commit().await?;
        Ok(approval)
    }

    async fn pending_approval(&self, request: ApprovalRequest<'_>) -> Result<Asked> {
        let ApprovalRequest {
            call,
            details,
            now_ms,
            caps,
        } = request;
        let key = call.key();
        let authors = chain_column(&call.chain.authors);
        let mut client = self.client().await?;
        // The lookup, the count and the insert under one advisory lock on the schema's
        // pending approvals, so replicas asking at once cannot overshoot a cap; the partial
        // unique index keeps one pending record per call besides.
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&PENDING_LOCK, &self.schema],
        )
        .await?;
        let pending = tx
            .query_opt(
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE principal = $1 AND tool = $2 AND args_hash = $3 \
                       AND chain_through = $4 AND status = 'pending'"
                ),
                &[&key.principal, &key.tool, &key.args_hash, &key.through],
            )
            .await?;
        if let Some(row) = pending {
            return Ok(Asked::Pending(Box::new(rows::approval(&row)?)));
        }
        let counts = tx
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE principal = $1) FROM approvals \
                 WHERE status = 'pending'",
                &[&key.principal],
            )
            .await?;
        let (all, own): (i64, i64) = (counts.try_get(0)?, counts.try_get(1)?);
        if all >= signed(caps.total) {
            return Ok(Asked::CapReached(PendingCapReached::Total));
        }
        if own >= signed(caps.per_principal) {
            return Ok(Asked::CapReached(PendingCapReached::PerPrincipal));
        }
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO approvals \
                     (id, principal, tool, args_hash, status, created_at_ms, chain_through, \
                      chain_authors, arguments, run_id, script, arguments_bytes) \
                     VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10, $11) \
                     RETURNING {APPROVAL_COLUMNS}"
                ),
                &[
                    &new_id()?,
                    &key.principal,
                    &key.tool,
                    &key.args_hash,
                    &now_ms,
                    &key.through,
                    &authors,
                    &details.arguments,
                    &details.run_id,
                    &details.script,
                    &details.arguments_bytes.map(signed),
                ],
            )
            .await?;
        let approval = rows::approval(&row)?;
        tx.commit().await?;
        Ok(Asked::Pending(Box::new(approval)))
    }

    async fn expire_approvals(&self, created_before_ms: i64) -> Result<u64> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "UPDATE approvals SET status = 'expired' \
             WHERE status = 'pending' AND created_at_ms < $1",
                &[&created_before_ms],
            )
            .await?)
    }

    async fn resolved_approval(&self, call: ApprovalFor<'_>) -> Result<Option<Approval>> {
        let key = call.key();
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE principal = $1 AND tool = $2 AND args_hash = $3 AND chain_through = $4 \
               AND status IN ('approved', 'denied') \
             ORDER BY resolved_at_ms DESC, ord DESC LIMIT 1"
            ))
            .await?;
        client
            .query_opt(
                &statement,
                &[&key.principal, &key.tool, &key.args_hash, &key.through],
            )
            .await?
            .as_ref()
            .map(rows::approval)
            .transpose()
    }

    async fn consume_approval(&self, id: &str, now_ms: i64) -> Result<bool> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE approvals SET status = 'used', used_at_ms = $2 \
             WHERE id = $1 AND status = 'approved' AND expires_at_ms > $2",
                &[&id, &now_ms],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn restore_approval(&self, id: &str, used_at_ms: i64) -> Result<bool> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE approvals SET status = 'approved', used_at_ms = NULL \
             WHERE id = $1 AND status = 'used' AND used_at_ms = $2",
                &[&id, &used_at_ms],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        approval_by_id(&self.client().await?, id).await
    }

    async fn approvals(&self, query: ApprovalQuery) -> Result<Vec<Approval>> {
        let client = self.client().await?;
        let (after_ms, after_id) = match &query.after {
            Some(cursor) => (Some(cursor.created_at_ms), Some(cursor.id.as_str())),
            None => (None, None),
        };
        let rows = client
            .query(
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                     WHERE ($1::text IS NULL OR status = $1) \
                       AND ($2::bigint IS NULL OR created_at_ms < $2 \
                            OR (created_at_ms = $2 AND id < $3::text)) \
                     ORDER BY created_at_ms DESC, id DESC LIMIT $4"
                ),
                &[
                    &query.status.map(|s| s.as_str()),
                    &after_ms,
                    &after_id,
                    &i64::from(query.limit),
                ],
            )
            .await?;
        rows.iter().map(rows::approval).collect()
    }

    async fn pending_approvals(&self, asked_since_ms: i64) -> Result<u64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM approvals WHERE status = 'pending' AND created_at_ms >= $1",
                &[&asked_since_ms],
            )
            .await?;
        let count: i64 = row.try_get(0)?;
        Ok(count.max(0) as u64)
    }
}
