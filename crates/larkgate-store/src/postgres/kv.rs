//! The built-in key-value data in PostgreSQL.

use super::PostgresStore;
use crate::{KvQuery, KvStore, Result, signed};

#[async_trait::async_trait]
impl KvStore for PostgresStore {
    async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT value FROM kv WHERE key = $1")
            .await?;
        Ok(client
            .query_opt(&statement, &[&key])
            .await?
            .map(|row| row.try_get(0))
            .transpose()?)
    }

    async fn kv_list(&self, query: KvQuery<'_>) -> Result<Vec<(String, String)>> {
        let KvQuery {
            prefix,
            after,
            limit,
        } = query;
        let limit = signed(limit as u64);
        let client = self.client().await?;
        // `key >= prefix` lets the primary key index find the start; `left` keeps only keys that
        // really start with the prefix (both count characters; the column's "C" collation orders
        // by code point, as SQLite does).
        let statement = client
            .prepare_cached(
                "SELECT key, value FROM kv \
             WHERE key >= $1 AND left(key, length($1)) = $1 \
               AND ($2::text IS NULL OR key > $2) \
             ORDER BY key LIMIT $3",
            )
            .await?;
        let rows = client.query(&statement, &[&prefix, &after, &limit]).await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    /// One statement: whether the row was inserted (rather than updated) is read from the
    /// system column `xmax`, which is 0 for a row this statement inserted.
    async fn kv_set(&self, key: &str, value: &str) -> Result<bool> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "INSERT INTO kv (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value \
             RETURNING (xmax = 0) AS created",
            )
            .await?;
        let row = client.query_one(&statement, &[&key, &value]).await?;
        Ok(row.try_get(0)?)
    }

    async fn kv_delete(&self, key: &str) -> Result<bool> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("DELETE FROM kv WHERE key = $1")
            .await?;
        Ok(client.execute(&statement, &[&key]).await? > 0)
    }
}
