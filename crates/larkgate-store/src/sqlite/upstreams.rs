//! Stored upstreams, the pins of their tools, their sealed credentials and the running
//! gateway's view of them, in SQLite.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::rows::{self, PIN_COLUMNS, UPSTREAM_COLUMNS, UPSTREAM_STATUS_COLUMNS};
use crate::{
    Result, ToolPin, UpstreamCredentials, UpstreamRecord, UpstreamStatusRecord, UpstreamStore,
};

#[async_trait::async_trait]
impl UpstreamStore for SqliteStore {
    async fn save_upstream(&self, upstream: UpstreamRecord) -> Result<()> {
        self.with(move |c| {
            c.execute(
                &format!(
                    "INSERT OR REPLACE INTO upstreams ({UPSTREAM_COLUMNS}) VALUES (?1, ?2, ?3, ?4)"
                ),
                params![
                    upstream.alias,
                    upstream.config,
                    upstream.added_by,
                    upstream.added_at_ms
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn upstreams(&self) -> Result<Vec<UpstreamRecord>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {UPSTREAM_COLUMNS} FROM upstreams ORDER BY alias"
            ))?
            .query_and_then([], |r| rows::upstream(r))?
            .collect()
        })
        .await
    }

    async fn remove_upstream(&self, alias: &str) -> Result<bool> {
        let alias = alias.to_owned();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let removed = tx.execute("DELETE FROM upstreams WHERE alias = ?1", params![alias])?;
            tx.execute("DELETE FROM upstream_pins WHERE alias = ?1", params![alias])?;
            tx.execute(
                "DELETE FROM upstream_credentials WHERE alias = ?1",
                params![alias],
            )?;
            tx.commit()?;
            Ok(removed > 0)
        })
        .await
    }

    async fn pins(&self, alias: &str) -> Result<Vec<ToolPin>> {
        let alias = alias.to_owned();
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {PIN_COLUMNS} FROM upstream_pins WHERE alias = ?1 ORDER BY tool"
            ))?
            .query_and_then(params![alias], |r| rows::pin(r))?
            .collect()
        })
        .await
    }

    async fn save_pins(&self, pins: Vec<ToolPin>) -> Result<()> {
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut statement = tx.prepare(&format!(
                    "INSERT OR REPLACE INTO upstream_pins ({PIN_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                ))?;
                for pin in &pins {
                    let (pending_hash, pending_definition) = match &pin.pending {
                        Some((hash, definition)) => (Some(hash), Some(definition)),
                        None => (None, None),
                    };
                    statement.execute(params![
                        pin.alias,
                        pin.tool,
                        pin.hash,
                        pin.definition,
                        pin.status.as_str(),
                        pending_hash,
                        pending_definition,
                        pin.reviewed_by,
                        pin.updated_at_ms,
                    ])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn upstreams_revision(&self) -> Result<i64> {
        self.with(|c| {
            Ok(c.query_row(
                "SELECT revision FROM upstream_revision WHERE id = 1",
                [],
                |row| row.get(0),
            )?)
        })
        .await
    }

    async fn save_upstream_statuses(&self, statuses: Vec<UpstreamStatusRecord>) -> Result<()> {
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute("DELETE FROM upstream_status", [])?;
            {
                let mut statement = tx.prepare(&format!(
                    "INSERT INTO upstream_status ({UPSTREAM_STATUS_COLUMNS}) VALUES (?1, ?2, ?3)"
                ))?;
                for status in &statuses {
                    statement.execute(params![
                        status.alias,
                        status.status,
                        status.updated_at_ms
                    ])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn upstream_statuses(&self) -> Result<Vec<UpstreamStatusRecord>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {UPSTREAM_STATUS_COLUMNS} FROM upstream_status ORDER BY alias"
            ))?
            .query_and_then([], |r| rows::upstream_status(r))?
            .collect()
        })
        .await
    }

    async fn upstream_credentials(&self, alias: &str) -> Result<Option<Vec<u8>>> {
        let alias = alias.to_owned();
        self.with(move |c| {
            Ok(c.query_row(
                "SELECT sealed FROM upstream_credentials WHERE alias = ?1",
                params![alias],
                |row| row.get(0),
            )
            .optional()?)
        })
        .await
    }

    async fn save_upstream_credentials(&self, credentials: UpstreamCredentials) -> Result<()> {
        let UpstreamCredentials {
            alias,
            sealed,
            updated_at_ms,
        } = credentials;
        self.with(move |c| {
            c.execute(
                "INSERT INTO upstream_credentials (alias, sealed, updated_at_ms) \
                 VALUES (?1, ?2, ?3) \
                 ON CONFLICT (alias) DO UPDATE SET sealed = excluded.sealed, \
                     updated_at_ms = excluded.updated_at_ms",
                params![alias, sealed, updated_at_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn remove_upstream_credentials(&self, alias: &str) -> Result<bool> {
        let alias = alias.to_owned();
        self.with(move |c| {
            let removed = c.execute(
                "DELETE FROM upstream_credentials WHERE alias = ?1",
                params![alias],
            )?;
            Ok(removed > 0)
        })
        .await
    }
}
