//! Stored upstreams and the pins of their tools in SQLite.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::{PinStatus, Result, ToolPin, UpstreamRecord, UpstreamStatusRecord};

pub(super) fn upstream_from_row(row: &Row<'_>) -> rusqlite::Result<UpstreamRecord> {
    Ok(UpstreamRecord {
        alias: row.get(0)?,
        config: row.get(1)?,
        added_by: row.get(2)?,
        added_at_ms: row.get(3)?,
    })
}

pub(super) const PIN_COLUMNS: &str = "alias, tool, hash, definition, status, pending_hash, \
     pending_definition, reviewed_by, updated_at_ms";

pub(super) fn pin_from_row(row: &Row<'_>) -> rusqlite::Result<ToolPin> {
    let status: String = row.get(4)?;
    let pending_hash: Option<String> = row.get(5)?;
    let pending_definition: Option<String> = row.get(6)?;
    Ok(ToolPin {
        alias: row.get(0)?,
        tool: row.get(1)?,
        hash: row.get(2)?,
        definition: row.get(3)?,
        status: PinStatus::parse(&status).unwrap_or(PinStatus::Quarantined),
        pending: pending_hash.zip(pending_definition),
        reviewed_by: row.get(7)?,
        updated_at_ms: row.get(8)?,
    })
}

pub(super) fn save_pins(c: &mut Connection, pins: &[ToolPin]) -> Result<()> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut statement = tx.prepare(&format!(
            "INSERT OR REPLACE INTO upstream_pins ({PIN_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ))?;
        for pin in pins {
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
}

pub(super) fn save_upstream(c: &mut Connection, upstream: UpstreamRecord) -> Result<()> {
    c.execute(
        "INSERT OR REPLACE INTO upstreams (alias, config, added_by, added_at_ms) \
             VALUES (?1, ?2, ?3, ?4)",
        params![
            upstream.alias,
            upstream.config,
            upstream.added_by,
            upstream.added_at_ms
        ],
    )?;
    Ok(())
}

pub(super) fn upstreams(c: &mut Connection) -> Result<Vec<UpstreamRecord>> {
    let mut statement =
        c.prepare("SELECT alias, config, added_by, added_at_ms FROM upstreams ORDER BY alias")?;
    let rows = statement.query_map([], upstream_from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn remove_upstream(c: &mut Connection, alias: &str) -> Result<bool> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let removed = tx.execute("DELETE FROM upstreams WHERE alias = ?1", params![alias])?;
    tx.execute("DELETE FROM upstream_pins WHERE alias = ?1", params![alias])?;
    tx.execute(
        "DELETE FROM upstream_credentials WHERE alias = ?1",
        params![alias],
    )?;
    tx.commit()?;
    Ok(removed > 0)
}

pub(super) fn pins(c: &mut Connection, alias: &str) -> Result<Vec<ToolPin>> {
    let mut statement = c.prepare(&format!(
        "SELECT {} FROM upstream_pins WHERE alias = ?1 ORDER BY tool",
        PIN_COLUMNS
    ))?;
    let rows = statement.query_map(params![alias], pin_from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn revision(c: &mut Connection) -> Result<i64> {
    Ok(c.query_row(
        "SELECT revision FROM upstream_revision WHERE id = 1",
        [],
        |row| row.get(0),
    )?)
}

pub(super) fn save_statuses(c: &mut Connection, statuses: &[UpstreamStatusRecord]) -> Result<()> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute("DELETE FROM upstream_status", [])?;
    {
        let mut statement = tx.prepare(
            "INSERT INTO upstream_status (alias, status, updated_at_ms) VALUES (?1, ?2, ?3)",
        )?;
        for status in statuses {
            statement.execute(params![status.alias, status.status, status.updated_at_ms])?;
        }
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn statuses(c: &mut Connection) -> Result<Vec<UpstreamStatusRecord>> {
    let mut statement =
        c.prepare("SELECT alias, status, updated_at_ms FROM upstream_status ORDER BY alias")?;
    let rows = statement.query_map([], |row| {
        Ok(UpstreamStatusRecord {
            alias: row.get(0)?,
            status: row.get(1)?,
            updated_at_ms: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

pub(super) fn credentials(c: &mut Connection, alias: &str) -> Result<Option<Vec<u8>>> {
    let sealed = c
        .query_row(
            "SELECT sealed FROM upstream_credentials WHERE alias = ?1",
            params![alias],
            |row| row.get(0),
        )
        .optional()?;
    Ok(sealed)
}

pub(super) fn save_credentials(
    c: &mut Connection,
    alias: &str,
    sealed: &[u8],
    now_ms: i64,
) -> Result<()> {
    c.execute(
        "INSERT INTO upstream_credentials (alias, sealed, updated_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (alias) DO UPDATE SET sealed = excluded.sealed,
             updated_at_ms = excluded.updated_at_ms",
        params![alias, sealed, now_ms],
    )?;
    Ok(())
}

pub(super) fn remove_credentials(c: &mut Connection, alias: &str) -> Result<bool> {
    let removed = c.execute(
        "DELETE FROM upstream_credentials WHERE alias = ?1",
        params![alias],
    )?;
    Ok(removed > 0)
}
