//! Stored upstreams, the pins of their tools, the gateway's view of them and their sealed
//! credentials in PostgreSQL.

use tokio_postgres::Row;

use super::PostgresStore;
use crate::{PinStatus, Result, ToolPin, UpstreamRecord, UpstreamStatusRecord};

const PIN_COLUMNS: &str = "alias, tool, hash, definition, status, pending_hash, \
     pending_definition, reviewed_by, updated_at_ms";

fn pin_from_row(row: &Row) -> Result<ToolPin> {
    let status: String = row.try_get(4)?;
    let pending_hash: Option<String> = row.try_get(5)?;
    let pending_definition: Option<String> = row.try_get(6)?;
    Ok(ToolPin {
        alias: row.try_get(0)?,
        tool: row.try_get(1)?,
        hash: row.try_get(2)?,
        definition: row.try_get(3)?,
        // An unknown status reads as quarantined: fail closed.
        status: PinStatus::parse(&status).unwrap_or(PinStatus::Quarantined),
        pending: pending_hash.zip(pending_definition),
        reviewed_by: row.try_get(7)?,
        updated_at_ms: row.try_get(8)?,
    })
}

pub(super) async fn save_pins(store: &PostgresStore, pins: &[ToolPin]) -> Result<()> {
    let mut client = store.client().await?;
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

pub(super) async fn save_upstream(store: &PostgresStore, upstream: UpstreamRecord) -> Result<()> {
    let client = store.client().await?;
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

pub(super) async fn upstreams(store: &PostgresStore) -> Result<Vec<UpstreamRecord>> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT alias, config, added_by, added_at_ms FROM upstreams ORDER BY alias",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(UpstreamRecord {
                alias: row.try_get(0)?,
                config: row.try_get(1)?,
                added_by: row.try_get(2)?,
                added_at_ms: row.try_get(3)?,
            })
        })
        .collect()
}

pub(super) async fn remove_upstream(store: &PostgresStore, alias: &str) -> Result<bool> {
    let mut client = store.client().await?;
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

pub(super) async fn pins(store: &PostgresStore, alias: &str) -> Result<Vec<ToolPin>> {
    let client = store.client().await?;
    let rows = client
        .query(
            &format!("SELECT {PIN_COLUMNS} FROM upstream_pins WHERE alias = $1 ORDER BY tool"),
            &[&alias],
        )
        .await?;
    rows.iter().map(pin_from_row).collect()
}

pub(super) async fn revision(store: &PostgresStore) -> Result<i64> {
    let client = store.client().await?;
    let statement = client
        .prepare_cached("SELECT revision FROM upstream_revision WHERE id = 1")
        .await?;
    Ok(client.query_one(&statement, &[]).await?.try_get(0)?)
}

pub(super) async fn save_statuses(
    store: &PostgresStore,
    statuses: &[UpstreamStatusRecord],
) -> Result<()> {
    let mut client = store.client().await?;
    let tx = client.transaction().await?;
    tx.execute("DELETE FROM upstream_status", &[]).await?;
    let statement = tx
        .prepare("INSERT INTO upstream_status (alias, status, updated_at_ms) VALUES ($1, $2, $3)")
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

pub(super) async fn statuses(store: &PostgresStore) -> Result<Vec<UpstreamStatusRecord>> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT alias, status, updated_at_ms FROM upstream_status ORDER BY alias",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(UpstreamStatusRecord {
                alias: row.try_get(0)?,
                status: row.try_get(1)?,
                updated_at_ms: row.try_get(2)?,
            })
        })
        .collect()
}

pub(super) async fn credentials(store: &PostgresStore, alias: &str) -> Result<Option<Vec<u8>>> {
    let client = store.client().await?;
    Ok(client
        .query_opt(
            "SELECT sealed FROM upstream_credentials WHERE alias = $1",
            &[&alias],
        )
        .await?
        .map(|row| row.try_get(0))
        .transpose()?)
}

pub(super) async fn save_credentials(
    store: &PostgresStore,
    alias: &str,
    sealed: &[u8],
    now_ms: i64,
) -> Result<()> {
    let client = store.client().await?;
    client
        .execute(
            "INSERT INTO upstream_credentials (alias, sealed, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (alias) DO UPDATE SET sealed = excluded.sealed, \
                 updated_at_ms = excluded.updated_at_ms",
            &[&alias, &sealed, &now_ms],
        )
        .await?;
    Ok(())
}

pub(super) async fn remove_credentials(store: &PostgresStore, alias: &str) -> Result<bool> {
    let client = store.client().await?;
    Ok(client
        .execute(
            "DELETE FROM upstream_credentials WHERE alias = $1",
            &[&alias],
        )
        .await?
        > 0)
}
