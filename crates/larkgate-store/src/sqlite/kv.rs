//! The built-in key-value data in SQLite.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::Result;

pub(super) fn kv_get(c: &mut Connection, key: &str) -> Result<Option<String>> {
    Ok(
        c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
            r.get(0)
        })
        .optional()?,
    )
}

pub(super) fn kv_list(
    c: &mut Connection,
    prefix: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<(String, String)>> {
    // `key >= prefix` lets the primary key index find the start; `substr` keeps only
    // keys that really start with the prefix (both count characters, not bytes).
    let mut statement = c.prepare_cached(
        "SELECT key, value FROM kv \
             WHERE key >= ?1 AND substr(key, 1, length(?1)) = ?1 \
               AND (?2 IS NULL OR key > ?2) \
             ORDER BY key LIMIT ?3",
    )?;
    let rows = statement.query_map(params![prefix, after, limit], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn kv_set(c: &mut Connection, key: &str, value: &str) -> Result<bool> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let existed: bool = tx
        .query_row("SELECT 1 FROM kv WHERE key = ?1", params![key], |_| Ok(()))
        .optional()?
        .is_some();
    tx.execute(
        "INSERT INTO kv (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    tx.commit()?;
    Ok(!existed)
}

pub(super) fn kv_delete(c: &mut Connection, key: &str) -> Result<bool> {
    Ok(c.execute("DELETE FROM kv WHERE key = ?1", params![key])? > 0)
}
