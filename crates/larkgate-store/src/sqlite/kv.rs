//! The built-in key-value data in SQLite.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::{KvQuery, KvStore, Result, signed};

#[async_trait::async_trait]
impl KvStore for SqliteStore {
    async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_owned();
        self.with(move |c| {
            Ok(
                c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })
        .await
    }

    async fn kv_list(&self, query: KvQuery<'_>) -> Result<Vec<(String, String)>> {
        let prefix = query.prefix.to_owned();
        let after = query.after.map(str::to_owned);
        let limit = signed(query.limit as u64);
        self.with(move |c| {
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
        })
        .await
    }

    async fn kv_set(&self, key: &str, value: &str) -> Result<bool> {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.with(move |c| {
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
        })
        .await
    }

    async fn kv_delete(&self, key: &str) -> Result<bool> {
        let key = key.to_owned();
        self.with(move |c| Ok(c.execute("DELETE FROM kv WHERE key = ?1", params![key])? > 0))
            .await
    }
}
