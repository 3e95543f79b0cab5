//! 2025-11-25 sessions in PostgreSQL: caps checked and the session entered in one transaction
//! under an advisory lock on the schema's sessions, so replicas opening sessions at once
//! cannot overshoot a cap.

use super::PostgresStore;
use crate::SessionStore;
use crate::rows::{self, SESSION_COLUMNS};
use crate::{Result, SessionCapReached, signed};

/// The advisory lock (with the schema's hash) under which sessions are counted and opened.
const SESSIONS_LOCK: i32 = 1818325610;

#[async_trait::async_trait]
impl SessionStore for PostgresStore {
    async fn open_session(
        &self,
        session: crate::NewSession,
    ) -> Result<Option<crate::SessionCapReached>> {
        let session = &session;

        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&SESSIONS_LOCK, &self.schema],
        )
        .await?;
        tx.execute(
            "DELETE FROM sessions WHERE expires_at_ms <= $1",
            &[&session.now_ms],
        )
        .await?;
        let row = tx
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE owner = $1) FROM sessions",
                &[&session.owner],
            )
            .await?;
        let (all, own): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if all >= signed(session.total as u64) {
            return Ok(Some(SessionCapReached::Total));
        }
        if own >= signed(session.per_principal as u64) {
            return Ok(Some(SessionCapReached::PerPrincipal));
        }
        tx.execute(
            "INSERT INTO sessions (id, owner, expires_at_ms) VALUES ($1, $2, $3)",
            &[&session.id, &session.owner, &session.expires_at_ms],
        )
        .await?;
        tx.commit().await?;
        Ok(None)
    }

    async fn save_session_state(&self, id: &str, state: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE sessions SET state = $2 WHERE id = $1",
                &[&id, &state],
            )
            .await?;
        Ok(())
    }

    async fn session(&self, id: &str, now_ms: i64) -> Result<Option<crate::SharedSession>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 AND expires_at_ms > $2"
            ))
            .await?;
        client
            .query_opt(&statement, &[&id, &now_ms])
            .await?
            .as_ref()
            .map(rows::session)
            .transpose()
    }

    async fn touch_session(&self, id: &str, expires_at_ms: i64) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE sessions SET expires_at_ms = greatest(expires_at_ms, $2) WHERE id = $1",
                &[&id, &expires_at_ms],
            )
            .await?;
        Ok(())
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM sessions WHERE id = $1", &[&id])
            .await?;
        Ok(())
    }
}
