//! Stored upstreams, the pins of their tools, the gateway's view of them and their sealed
//! credentials in PostgreSQL.

use super::PostgresStore;
use crate::UpstreamStore;
use crate::rows::{self, PIN_COLUMNS, UPSTREAM_COLUMNS, UPSTREAM_STATUS_COLUMNS};
use crate::{Result, ToolPin, UpstreamCredentials, UpstreamRecord, UpstreamStatusRecord};

#[async_trait::async_trait]
impl UpstreamStore for PostgresStore {
    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO upstreams (alias, config, added_by, added_at_ms) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (alias) DO UPDATE SET config = excluded.config, \
                 added_by = excluded.added_by, added_at_ms = excluded.added_at_ms",
                &[
                    &upstream.alias,
                    &upstream.config,
                    &upstream.added_by,
                    &upstream.added_at_ms,
                ],
            )
            .await?;
        Ok(())
    }

    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {UPSTREAM_COLUMNS} FROM upstreams ORDER BY alias"),
                &[],
            )
            .await?;
        rows.iter().map(rows::upstream).collect()
    }

    async fn remove_upstream(&self, alias: &str) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let removed = tx
            .execute("DELETE FROM upstreams WHERE alias = $1", &[&alias])
            .await?;
        tx.execute("DELETE FROM upstream_pins WHERE alias = $1", &[&alias])
            .await?;
        tx.execute(
            "DELETE FROM upstream_credentials WHERE alias = $1",
            &[&alias],
        )
        .await?;
        tx.commit().await?;
        Ok(removed > 0)
    }

    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {PIN_COLUMNS} FROM upstream_pins WHERE alias = $1 ORDER BY tool"),
                &[&alias],
            )
            .await?;
        rows.iter().map(rows::pin).collect()
    }

    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()> {
        let pins = &pins;

        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let statement = tx
            .prepare(&format!(
                "INSERT INTO upstream_pins ({PIN_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (alias, tool) DO UPDATE SET hash = excluded.hash, \
                 definition = excluded.definition, status = excluded.status, \
                 pending_hash = excluded.pending_hash, \
                 pending_definition = excluded.pending_definition, \
                 reviewed_by = excluded.reviewed_by, updated_at_ms = excluded.updated_at_ms"
            ))
            .await?;
        for pin in pins {
            let (pending_hash, pending_definition) = match &pin.pending {
                Some((hash, definition)) => (Some(hash), Some(definition)),
                None => (None, None),
            };
            tx.execute(
                &statement,
                &[
                    &pin.alias,
                    &pin.tool,
                    &pin.hash,
                    &pin.definition,
                    &pin.status.as_str(),
                    &pending_hash,
                    &pending_definition,
                    &pin.reviewed_by,
                    &pin.updated_at_ms,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn upstreams_revision(&self) -> Result<i64> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT revision FROM upstream_revision WHERE id = 1")
            .await?;
        Ok(client.query_one(&statement, &[]).await?.try_get(0)?)
    }

    async fn save_upstream_statuses(&self, statuses: Vec<UpstreamStatusRecord>) -> Result<()> {
        let statuses = &statuses;

        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute("DELETE FROM upstream_status", &[]).await?;
        let statement = tx
            .prepare(
                "INSERT INTO upstream_status (alias, status, updated_at_ms) VALUES ($1, $2, $3)",
            )
            .await?;
        for status in statuses {
            tx.execute(
                &statement,
                &[&status.alias, &status.status, &status.updated_at_ms],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn upstream_statuses(&self) -> Result<Vec<UpstreamStatusRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {UPSTREAM_STATUS_COLUMNS} FROM upstream_status ORDER BY alias"),
                &[],
            )
            .await?;
        rows.iter().map(rows::upstream_status).collect()
    }

    async fn upstream_credentials(&self, alias: &str) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        Ok(client
            .query_opt(
                "SELECT sealed FROM upstream_credentials WHERE alias = $1",
                &[&alias],
            )
            .await?
            .map(|row| row.try_get(0))
            .transpose()?)
    }

    async fn save_upstream_credentials(&self, credentials: UpstreamCredentials) -> Result<()> {
        let client = self.client().await?;
        client
        .execute(
            "INSERT INTO upstream_credentials (alias, sealed, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (alias) DO UPDATE SET sealed = excluded.sealed, \
                 updated_at_ms = excluded.updated_at_ms",
            &[
                &credentials.alias,
                &credentials.sealed,
                &credentials.updated_at_ms,
            ],
        )
        .await?;
        Ok(())
    }

    async fn remove_upstream_credentials(&self, alias: &str) -> Result<bool> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "DELETE FROM upstream_credentials WHERE alias = $1",
                &[&alias],
            )
            .await?
            > 0)
    }
}
