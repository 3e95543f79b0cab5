//! Principals and their tokens in PostgreSQL.

use tokio_postgres::Row;

use super::{PostgresStore, join_roles, split_roles};
use crate::{Principal, PrincipalKind, Result, StoreError, TokenRecord};

fn principal_from_row(row: &Row) -> Result<Principal> {
    let kind: String = row.try_get(1)?;
    let roles: String = row.try_get(2)?;
    Ok(Principal {
        id: row.try_get(0)?,
        kind: PrincipalKind::parse(&kind).unwrap_or(PrincipalKind::User),
        roles: split_roles(&roles),
    })
}

const TOKEN_COLUMNS: &str =
    "id, principal, secret_hash, created_by, created_at_ms, expires_at_ms, revoked_at_ms";

fn token_from_row(row: &Row) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.try_get(0)?,
        principal: row.try_get(1)?,
        secret_hash: row.try_get(2)?,
        created_by: row.try_get(3)?,
        created_at_ms: row.try_get(4)?,
        expires_at_ms: row.try_get(5)?,
        revoked_at_ms: row.try_get(6)?,
    })
}

pub(super) async fn add_principal(store: &PostgresStore, principal: Principal) -> Result<()> {
    let roles = join_roles(principal.roles)?;
    let client = store.client().await?;
    let inserted = client
        .execute(
            "INSERT INTO principals (id, kind, roles) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
            &[&principal.id, &principal.kind.as_str(), &roles],
        )
        .await?;
    if inserted == 0 {
        return Err(StoreError::Conflict(format!(
            "principal {:?}",
            principal.id
        )));
    }
    Ok(())
}

/// Read on every authenticated request: the statement is prepared once per connection.
pub(super) async fn principal(store: &PostgresStore, id: &str) -> Result<Option<Principal>> {
    let client = store.client().await?;
    let statement = client
        .prepare_cached("SELECT id, kind, roles FROM principals WHERE id = $1")
        .await?;
    client
        .query_opt(&statement, &[&id])
        .await?
        .as_ref()
        .map(principal_from_row)
        .transpose()
}

pub(super) async fn principals(store: &PostgresStore) -> Result<Vec<Principal>> {
    let client = store.client().await?;
    let rows = client
        .query("SELECT id, kind, roles FROM principals ORDER BY id", &[])
        .await?;
    rows.iter().map(principal_from_row).collect()
}

pub(super) async fn set_roles(store: &PostgresStore, id: &str, roles: Vec<String>) -> Result<()> {
    let roles = join_roles(roles)?;
    let client = store.client().await?;
    let changed = client
        .execute(
            "UPDATE principals SET roles = $2 WHERE id = $1",
            &[&id, &roles],
        )
        .await?;
    if changed == 0 {
        return Err(StoreError::Missing(format!("principal {id:?}")));
    }
    Ok(())
}

pub(super) async fn remove_principal(store: &PostgresStore, id: &str) -> Result<()> {
    let client = store.client().await?;
    let changed = client
        .execute("DELETE FROM principals WHERE id = $1", &[&id])
        .await?;
    if changed == 0 {
        return Err(StoreError::Missing(format!("principal {id:?}")));
    }
    Ok(())
}

pub(super) async fn add_token(store: &PostgresStore, token: TokenRecord) -> Result<()> {
    let client = store.client().await?;
    client
        .execute(
            &format!("INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"),
            &[
                &token.id,
                &token.principal,
                &token.secret_hash,
                &token.created_by,
                &token.created_at_ms,
                &token.expires_at_ms,
                &token.revoked_at_ms,
            ],
        )
        .await?;
    Ok(())
}

/// Read on every authenticated request: the statement is prepared once per connection.
pub(super) async fn token(store: &PostgresStore, id: &str) -> Result<Option<TokenRecord>> {
    let client = store.client().await?;
    let statement = client
        .prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"))
        .await?;
    client
        .query_opt(&statement, &[&id])
        .await?
        .as_ref()
        .map(token_from_row)
        .transpose()
}

pub(super) async fn tokens(
    store: &PostgresStore,
    principal: Option<&str>,
) -> Result<Vec<TokenRecord>> {
    let client = store.client().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens \
                 WHERE $1::text IS NULL OR principal = $1 ORDER BY created_at_ms, id"
            ),
            &[&principal],
        )
        .await?;
    rows.iter().map(token_from_row).collect()
}

pub(super) async fn revoke_token(store: &PostgresStore, id: &str, now_ms: i64) -> Result<bool> {
    let client = store.client().await?;
    let exists = client
        .execute(
            "UPDATE tokens SET revoked_at_ms = COALESCE(revoked_at_ms, $2) WHERE id = $1",
            &[&id, &now_ms],
        )
        .await?;
    Ok(exists > 0)
}
