//! Approvals in PostgreSQL: one pending request per {principal, tool, arguments hash, chain}
//! (a partial unique index), resolved once and consumed once (conditional updates).

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use crate::rows::{self, APPROVAL_COLUMNS};
use crate::{
    Approval, ApprovalFor, ApprovalRequest, ApprovalStatus, ApprovalStore, Resolution, Result,
    StoreError, chain_column,
};

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

    async fn pending_approval(&self, request: ApprovalRequest<'_>) -> Result<Approval> {
        let ApprovalRequest {
            call,
            details,
            now_ms,
        } = request;
        let key = call.key();
        let authors = chain_column(&call.chain.authors);
        let client = self.client().await?;
        // The partial unique index keeps one pending record per call across every process sharing
        // the database. An insert that finds one pending does nothing; the select that follows is
        // a statement of its own, so it sees a record another process committed meanwhile. If an
        // approver resolved that record between the two statements, the next round asks anew.
        for _ in 0..3 {
            let inserted = client
                .query_opt(
                    &format!(
                        "INSERT INTO approvals \
                     (id, principal, tool, args_hash, status, created_at_ms, chain_through, \
                      chain_authors, arguments, run_id, script) \
                     VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT DO NOTHING RETURNING {APPROVAL_COLUMNS}"
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
                    ],
                )
                .await?;
            if let Some(row) = inserted {
                return rows::approval(&row);
            }
            let pending = client
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
                return rows::approval(&row);
            }
        }
        Err(StoreError::Busy(
            "the approval for this call kept changing while it was requested".to_owned(),
        ))
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

    async fn approval(&self, id: &str) -> Result<Option<Approval>> {
        approval_by_id(&self.client().await?, id).await
    }

    async fn approvals(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE $1::text IS NULL OR status = $1 ORDER BY created_at_ms DESC, ord DESC"
                ),
                &[&status.map(|s| s.as_str())],
            )
            .await?;
        rows.iter().map(rows::approval).collect()
    }
}
