//! 2025-11-25 sessions in SQLite: caps checked and the session entered in one immediate
//! transaction (the database's single writer is the lock).

use rusqlite::{TransactionBehavior, params};

use super::SqliteStore;
use crate::rows::{self, SESSION_COLUMNS};
use crate::{NewSession, Result, SessionCapReached, SessionStore, SharedSession, signed};

#[async_trait::async_trait]
impl SessionStore for SqliteStore {
    async fn open_session(&self, session: NewSession) -> Result<Option<SessionCapReached>> {
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "DELETE FROM sessions WHERE expires_at_ms <= ?1",
                [session.now_ms],
            )?;
            let all: i64 = tx.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?;
            if all >= signed(session.total as u64) {
                return Ok(Some(SessionCapReached::Total));
            }
            let own: i64 = tx.query_row(
                "SELECT count(*) FROM sessions WHERE owner = ?1",
                [&session.owner],
                |r| r.get(0),
            )?;
            if own >= signed(session.per_principal as u64) {
                return Ok(Some(SessionCapReached::PerPrincipal));
            }
            tx.execute(
                "INSERT INTO sessions (id, owner, expires_at_ms) VALUES (?1, ?2, ?3)",
                params![session.id, session.owner, session.expires_at_ms],
            )?;
            tx.commit()?;
            Ok(None)
        })
        .await
    }

    async fn save_session_state(&self, id: &str, state: &str) -> Result<()> {
        let (id, state) = (id.to_owned(), state.to_owned());
        self.with(move |c| {
            c.execute(
                "UPDATE sessions SET state = ?2 WHERE id = ?1",
                params![id, state],
            )?;
            Ok(())
        })
        .await
    }

    async fn session(&self, id: &str, now_ms: i64) -> Result<Option<SharedSession>> {
        let id = id.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1 AND expires_at_ms > ?2"
            ))?
            .query_and_then(params![id, now_ms], |r| rows::session(r))?
            .next()
            .transpose()
        })
        .await
    }

    async fn touch_session(&self, id: &str, expires_at_ms: i64) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            c.execute(
                "UPDATE sessions SET expires_at_ms = max(expires_at_ms, ?2) WHERE id = ?1",
                params![id, expires_at_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            c.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
            Ok(())
        })
        .await
    }
}
