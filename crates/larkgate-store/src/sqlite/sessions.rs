//! 2025-11-25 sessions in SQLite: caps checked and the session entered in one immediate
//! transaction (the database's single writer is the lock).

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::signed;
use crate::{NewSession, Result, SessionCapReached, SharedSession};

pub(super) fn open_session(
    c: &mut Connection,
    session: &NewSession,
) -> Result<Option<SessionCapReached>> {
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
}

pub(super) fn save_session_state(c: &mut Connection, id: &str, state: &str) -> Result<()> {
    c.execute(
        "UPDATE sessions SET state = ?2 WHERE id = ?1",
        params![id, state],
    )?;
    Ok(())
}

pub(super) fn session(c: &mut Connection, id: &str, now_ms: i64) -> Result<Option<SharedSession>> {
    Ok(c.query_row(
        "SELECT owner, state, expires_at_ms FROM sessions \
             WHERE id = ?1 AND expires_at_ms > ?2",
        params![id, now_ms],
        |r| {
            Ok(SharedSession {
                owner: r.get(0)?,
                state: r.get(1)?,
                expires_at_ms: r.get(2)?,
            })
        },
    )
    .optional()?)
}

pub(super) fn touch_session(c: &mut Connection, id: &str, expires_at_ms: i64) -> Result<()> {
    c.execute(
        "UPDATE sessions SET expires_at_ms = max(expires_at_ms, ?2) WHERE id = ?1",
        params![id, expires_at_ms],
    )?;
    Ok(())
}

pub(super) fn close_session(c: &mut Connection, id: &str) -> Result<()> {
    c.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
    Ok(())
}
