//! Principals and their tokens in SQLite: who may call, and the credentials that name them.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{join_roles, split_roles};
use crate::{Principal, PrincipalKind, Result, StoreError, TokenRecord};

pub(super) fn principal_from_row(row: &Row<'_>) -> rusqlite::Result<Principal> {
    let kind: String = row.get(1)?;
    let roles: String = row.get(2)?;
    Ok(Principal {
        id: row.get(0)?,
        kind: PrincipalKind::parse(&kind).unwrap_or(PrincipalKind::User),
        roles: split_roles(&roles),
    })
}

pub(super) const TOKEN_COLUMNS: &str =
    "id, principal, secret_hash, created_by, created_at_ms, expires_at_ms, revoked_at_ms";

pub(super) fn token_from_row(row: &Row<'_>) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.get(0)?,
        principal: row.get(1)?,
        secret_hash: row.get(2)?,
        created_by: row.get(3)?,
        created_at_ms: row.get(4)?,
        expires_at_ms: row.get(5)?,
        revoked_at_ms: row.get(6)?,
    })
}

pub(super) fn add_principal(c: &mut Connection, principal: Principal) -> Result<()> {
    let roles = join_roles(principal.roles)?;
    let inserted = c.execute(
        "INSERT INTO principals (id, kind, roles) VALUES (?1, ?2, ?3) \
             ON CONFLICT (id) DO NOTHING",
        params![principal.id, principal.kind.as_str(), roles],
    )?;
    if inserted == 0 {
        return Err(StoreError::Conflict(format!(
            "principal {:?}",
            principal.id
        )));
    }
    Ok(())
}

/// Read on every authenticated request: the statement is prepared once.
pub(super) fn principal(c: &mut Connection, id: &str) -> Result<Option<Principal>> {
    Ok(
        c.prepare_cached("SELECT id, kind, roles FROM principals WHERE id = ?1")?
            .query_row(params![id], principal_from_row)
            .optional()?,
    )
}

pub(super) fn principals(c: &mut Connection) -> Result<Vec<Principal>> {
    let mut statement = c.prepare("SELECT id, kind, roles FROM principals ORDER BY id")?;
    let rows = statement.query_map([], principal_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn set_roles(c: &mut Connection, id: &str, roles: Vec<String>) -> Result<()> {
    let roles = join_roles(roles)?;
    let changed = c.execute(
        "UPDATE principals SET roles = ?2 WHERE id = ?1",
        params![id, roles],
    )?;
    if changed == 0 {
        return Err(StoreError::Missing(format!("principal {id:?}")));
    }
    Ok(())
}

pub(super) fn remove_principal(c: &mut Connection, id: &str) -> Result<()> {
    let changed = c.execute("DELETE FROM principals WHERE id = ?1", params![id])?;
    if changed == 0 {
        return Err(StoreError::Missing(format!("principal {id:?}")));
    }
    Ok(())
}

pub(super) fn add_token(c: &mut Connection, token: TokenRecord) -> Result<()> {
    c.execute(
        &format!("INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        params![
            token.id,
            token.principal,
            token.secret_hash,
            token.created_by,
            token.created_at_ms,
            token.expires_at_ms,
            token.revoked_at_ms
        ],
    )?;
    Ok(())
}

pub(super) fn token(c: &mut Connection, id: &str) -> Result<Option<TokenRecord>> {
    Ok(
        c.prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"))?
            .query_row(params![id], token_from_row)
            .optional()?,
    )
}

pub(super) fn tokens(c: &mut Connection, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
    let mut statement = c.prepare(&format!(
        "SELECT {TOKEN_COLUMNS} FROM tokens \
             WHERE ?1 IS NULL OR principal = ?1 ORDER BY created_at_ms, id"
    ))?;
    let rows = statement.query_map(params![principal], token_from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn revoke_token(c: &mut Connection, id: &str, now_ms: i64) -> Result<bool> {
    let exists = c.execute(
        "UPDATE tokens SET revoked_at_ms = COALESCE(revoked_at_ms, ?2) WHERE id = ?1",
        params![id, now_ms],
    )?;
    Ok(exists > 0)
}
