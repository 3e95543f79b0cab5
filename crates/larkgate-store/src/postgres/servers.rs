//! Virtual servers added at run time, in PostgreSQL.

use super::PostgresStore;
use crate::rows::{self, SERVER_COLUMNS};
use crate::{Result, ServerRecord, ServerSave, ServerStore, StoreError};

#[async_trait::async_trait]
impl ServerStore for PostgresStore {
    async fn save_server(&self, server: ServerRecord, mode: ServerSave) -> Result<()> {
        let client = self.client().await?;
        let values: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
            &server.name,
            &server.spec,
            &server.added_by,
            &server.added_at_ms,
        ];
        let saved = match mode {
            ServerSave::New => {
                client
                    .execute(
                        &format!(
                            "INSERT INTO servers ({SERVER_COLUMNS}) VALUES ($1, $2, $3, $4) \
                             ON CONFLICT (name) DO NOTHING"
                        ),
                        &values,
                    )
                    .await?
            }
            ServerSave::Replace => {
                client
                    .execute(
                        "UPDATE servers SET spec = $2, added_by = $3, added_at_ms = $4 \
                         WHERE name = $1",
                        &values,
                    )
                    .await?
            }
        };
        match (saved, mode) {
            (0, ServerSave::New) => Err(StoreError::Conflict(format!("server {:?}", server.name))),
            (0, ServerSave::Replace) => {
                Err(StoreError::Missing(format!("server {:?}", server.name)))
            }
            _ => Ok(()),
        }
    }

    async fn servers(&self) -> Result<Vec<ServerRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {SERVER_COLUMNS} FROM servers ORDER BY name"),
                &[],
            )
            .await?;
        rows.iter().map(rows::server).collect()
    }

    async fn remove_server(&self, name: &str) -> Result<bool> {
        let client = self.client().await?;
        let removed = client
            .execute("DELETE FROM servers WHERE name = $1", &[&name])
            .await?;
        Ok(removed > 0)
    }

    async fn servers_revision(&self) -> Result<i64> {
        let client = self.client().await?;
        // Read every second by each serving process: prepared once per connection.
        let statement = client
            .prepare_cached("SELECT revision FROM server_revision WHERE id = 1")
            .await?;
        Ok(client.query_one(&statement, &[]).await?.try_get(0)?)
    }
}
