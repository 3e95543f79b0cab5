//! Principals and their tokens in SQLite: who may call, and the credentials that name them.

use rusqlite::params;

use super::SqliteStore;
use crate::model::FIRST_SIGN_IN;
use crate::rows::{self, PRINCIPAL_COLUMNS, TOKEN_COLUMNS};
use crate::{
    IssuerBinding, Principal, PrincipalStore, Result, StoreError, TokenRecord, join_roles,
};

#[async_trait::async_trait]
impl PrincipalStore for SqliteStore {
    async fn add_principal(&self, principal: Principal) -> Result<()> {
        self.with(move |c| {
            let roles = join_roles(principal.roles)?;
            let inserted = c.execute(
                "INSERT INTO principals (id, kind, roles, issuer) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (id) DO NOTHING",
                params![
                    principal.id,
                    principal.kind.as_str(),
                    roles,
                    principal.issuer.stored()
                ],
            )?;
            if inserted == 0 {
                return Err(StoreError::Conflict(format!(
                    "principal {:?}",
                    principal.id
                )));
            }
            Ok(())
        })
        .await
    }

    /// Read on every authenticated request: on the request's thread (see
    /// [`SqliteStore::read`]), with a statement prepared once.
    async fn principal(&self, id: &str) -> Result<Option<Principal>> {
        let id = id.to_owned();
        self.read(move |c| {
            c.prepare_cached(&format!(
                "SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE id = ?1"
            ))?
            .query_and_then(params![id], |r| rows::principal(r))?
            .next()
            .transpose()
        })
        .await
    }

    async fn principals(&self) -> Result<Vec<Principal>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {PRINCIPAL_COLUMNS} FROM principals ORDER BY id"
            ))?
            .query_and_then([], |r| rows::principal(r))?
            .collect()
        })
        .await
    }

    async fn set_issuer(&self, id: &str, issuer: IssuerBinding) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE principals SET issuer = ?2 WHERE id = ?1",
                params![id, issuer.stored()],
            )?;
            if changed == 0 {
                return Err(StoreError::Missing(format!("principal {id:?}")));
            }
            Ok(())
        })
        .await
    }

    async fn bind_at_first_sign_in(&self, id: &str, issuer: &str) -> Result<bool> {
        let (id, issuer) = (id.to_owned(), issuer.to_owned());
        self.with(move |c| {
            let changed = c.execute(
                "UPDATE principals SET issuer = ?2 WHERE id = ?1 AND issuer = ?3",
                params![id, issuer, FIRST_SIGN_IN],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            let roles = join_roles(roles)?;
            let changed = c.execute(
                "UPDATE principals SET roles = ?2 WHERE id = ?1",
                params![id, roles],
            )?;
            if changed == 0 {
                return Err(StoreError::Missing(format!("principal {id:?}")));
            }
            Ok(())
        })
        .await
    }

    async fn remove_principal(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.with(move |c| {
            let changed = c.execute("DELETE FROM principals WHERE id = ?1", params![id])?;
            if changed == 0 {
                return Err(StoreError::Missing(format!("principal {id:?}")));
            }
            Ok(())
        })
        .await
    }

    async fn add_token(&self, token: TokenRecord) -> Result<()> {
        self.with(move |c| {
            c.execute(
                &format!(
                    "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                ),
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
        })
        .await
    }

    /// Read on every authenticated request, as [`PrincipalStore::principal`] is.
    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_owned();
        self.read(move |c| {
            c.prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"))?
                .query_and_then(params![id], |r| rows::token(r))?
                .next()
                .transpose()
        })
        .await
    }

    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
        let principal = principal.map(str::to_owned);
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens \
                 WHERE ?1 IS NULL OR principal = ?1 ORDER BY created_at_ms, id"
            ))?
            .query_and_then(params![principal], |r| rows::token(r))?
            .collect()
        })
        .await
    }

    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.with(move |c| {
            let exists = c.execute(
                "UPDATE tokens SET revoked_at_ms = COALESCE(revoked_at_ms, ?2) WHERE id = ?1",
                params![id, now_ms],
            )?;
            Ok(exists > 0)
        })
        .await
    }
}
