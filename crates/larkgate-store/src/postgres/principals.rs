//! Principals and their tokens in PostgreSQL.

use super::PostgresStore;
use crate::PrincipalStore;
use crate::join_roles;
use crate::model::FIRST_SIGN_IN;
use crate::rows::{self, PRINCIPAL_COLUMNS, TOKEN_COLUMNS};
use crate::{IssuerBinding, Principal, Result, StoreError, TokenRecord};

#[async_trait::async_trait]
impl PrincipalStore for PostgresStore {
    async fn add_principal(&self, principal: Principal) -> Result<()> {
        let roles = join_roles(principal.roles)?;
        let client = self.client().await?;
        let inserted = client
            .execute(
                "INSERT INTO principals (id, kind, roles, issuer) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO NOTHING",
                &[
                    &principal.id,
                    &principal.kind.as_str(),
                    &roles,
                    &principal.issuer.stored(),
                ],
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
    async fn principal(&self, id: &str) -> Result<Option<Principal>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE id = $1"
            ))
            .await?;
        client
            .query_opt(&statement, &[&id])
            .await?
            .as_ref()
            .map(rows::principal)
            .transpose()
    }

    async fn principals(&self) -> Result<Vec<Principal>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {PRINCIPAL_COLUMNS} FROM principals ORDER BY id"),
                &[],
            )
            .await?;
        rows.iter().map(rows::principal).collect()
    }

    async fn set_issuer(&self, id: &str, issuer: IssuerBinding) -> Result<()> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE principals SET issuer = $2 WHERE id = $1",
                &[&id, &issuer.stored()],
            )
            .await?;
        if changed == 0 {
            return Err(StoreError::Missing(format!("principal {id:?}")));
        }
        Ok(())
    }

    async fn bind_at_first_sign_in(&self, id: &str, issuer: &str) -> Result<bool> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE principals SET issuer = $2 WHERE id = $1 AND issuer = $3",
                &[&id, &issuer, &FIRST_SIGN_IN],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn set_roles(&self, id: &str, roles: Vec<String>) -> Result<()> {
        let roles = join_roles(roles)?;
        let client = self.client().await?;
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

    async fn remove_principal(&self, id: &str) -> Result<()> {
        let client = self.client().await?;
        let changed = client
            .execute("DELETE FROM principals WHERE id = $1", &[&id])
            .await?;
        if changed == 0 {
            return Err(StoreError::Missing(format!("principal {id:?}")));
        }
        Ok(())
    }

    async fn add_token(&self, token: TokenRecord) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                &format!(
                    "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                ),
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
    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"))
            .await?;
        client
            .query_opt(&statement, &[&id])
            .await?
            .as_ref()
            .map(rows::token)
            .transpose()
    }

    async fn tokens(&self, principal: Option<&str>) -> Result<Vec<TokenRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens \
                 WHERE $1::text IS NULL OR principal = $1 ORDER BY created_at_ms, id"
                ),
                &[&principal],
            )
            .await?;
        rows.iter().map(rows::token).collect()
    }

    async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<bool> {
        let client = self.client().await?;
        let exists = client
            .execute(
                "UPDATE tokens SET revoked_at_ms = COALESCE(revoked_at_ms, $2) WHERE id = $1",
                &[&id, &now_ms],
            )
            .await?;
        Ok(exists > 0)
    }
}
