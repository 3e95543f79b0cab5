//! Virtual servers added at run time, in SQLite.

use rusqlite::params;

use super::SqliteStore;
use crate::rows::{self, SERVER_COLUMNS};
use crate::{Result, ServerRecord, ServerSave, ServerStore, StoreError};

#[async_trait::async_trait]
impl ServerStore for SqliteStore {
    async fn save_server(&self, server: ServerRecord, mode: ServerSave) -> Result<()> {
        self.with(move |c| {
            let values = params![
                server.name,
                server.spec,
                server.added_by,
                server.added_at_ms
            ];
            let saved = match mode {
                ServerSave::New => c.execute(
                    &format!(
                        "INSERT INTO servers ({SERVER_COLUMNS}) VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT (name) DO NOTHING"
                    ),
                    values,
                )?,
                ServerSave::Replace => c.execute(
                    "UPDATE servers SET spec = ?2, added_by = ?3, added_at_ms = ?4 \
                     WHERE name = ?1",
                    values,
                )?,
            };
            match (saved, mode) {
                (0, ServerSave::New) => {
                    Err(StoreError::Conflict(format!("server {:?}", server.name)))
                }
                (0, ServerSave::Replace) => {
                    Err(StoreError::Missing(format!("server {:?}", server.name)))
                }
                _ => Ok(()),
            }
        })
        .await
    }

    async fn servers(&self) -> Result<Vec<ServerRecord>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {SERVER_COLUMNS} FROM servers ORDER BY name"
            ))?
            .query_and_then([], |r| rows::server(r))?
            .collect()
        })
        .await
    }

    async fn remove_server(&self, name: &str) -> Result<bool> {
        let name = name.to_owned();
        self.with(move |c| Ok(c.execute("DELETE FROM servers WHERE name = ?1", params![name])? > 0))
            .await
    }

    async fn servers_revision(&self) -> Result<i64> {
        self.with(|c| {
            Ok(c.query_row(
                "SELECT revision FROM server_revision WHERE id = 1",
                [],
                |row| row.get(0),
            )?)
        })
        .await
    }
}
