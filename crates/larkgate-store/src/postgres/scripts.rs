//! Script drafts, published versions and runs in PostgreSQL.

use tokio_postgres::error::SqlState;

use larkgate_wire::Code;

use super::PostgresStore;
use crate::ScriptStore;
use crate::publishing::Publishing;
use crate::rows::{self, DRAFT_COLUMNS, RUN_COLUMNS, VERSION_COLUMNS};
use crate::signed;
use crate::{Draft, Publication, Result, Run, RunQuery, ScriptVersion, StoreError};

async fn write_run(store: &PostgresStore, run: &Run, insert: bool) -> Result<u64> {
    let sql = if insert {
        format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        )
    } else {
        "UPDATE runs SET script = $2, version = $3, hash = $4, kind = $5, principal = $6, \
         status = $7, result = $8, error_code = $9, error = $10, tool_calls = $11, paces = $12, \
         duration_ms = $13, peak_memory_bytes = $14, started_at_ms = $15, finished_at_ms = $16, \
         started_by = $17, review = $18 WHERE id = $1"
            .to_owned()
    };
    let client = store.client().await?;
    Ok(client
        .execute(
            &sql,
            &[
                &run.id,
                &run.script,
                &run.version.map(i64::from),
                &run.hash,
                &run.kind.as_str(),
                &run.principal,
                &run.status.as_str(),
                &run.result,
                &run.error_code.map(Code::as_str),
                &run.error,
                &signed(run.stats.tool_calls),
                &signed(run.stats.paces),
                &signed(run.stats.duration_ms),
                &run.stats.peak_memory_bytes.map(signed),
                &run.started_at_ms,
                &run.finished_at_ms,
                &run.started_by,
                &run.review,
            ],
        )
        .await?)
}

#[async_trait::async_trait]
impl ScriptStore for PostgresStore {
    async fn save_draft(&self, draft: Draft) -> Result<Draft> {
        let Draft {
            name,
            source,
            author,
            updated_at_ms,
        } = &draft;
        let client = self.client().await?;
        // One statement: the draft is replaced only if `author` wrote it.
        let saved = client
            .query_opt(
                "INSERT INTO script_drafts (name, source, author, updated_at_ms) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET source = excluded.source, \
                 updated_at_ms = excluded.updated_at_ms \
             WHERE script_drafts.author = excluded.author \
             RETURNING name",
                &[name, source, author, updated_at_ms],
            )
            .await?;
        if saved.is_none() {
            let owner: Option<String> = client
                .query_opt("SELECT author FROM script_drafts WHERE name = $1", &[name])
                .await?
                .map(|row| row.try_get(0))
                .transpose()?;
            return Err(StoreError::Conflict(format!(
                "a draft named {name:?} by {}",
                owner.unwrap_or_else(|| "another principal".to_owned())
            )));
        }
        Ok(draft)
    }

    async fn draft(&self, name: &str) -> Result<Option<Draft>> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("SELECT {DRAFT_COLUMNS} FROM script_drafts WHERE name = $1"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(rows::draft)
            .transpose()
    }

    async fn drafts(&self) -> Result<Vec<Draft>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {DRAFT_COLUMNS} FROM script_drafts ORDER BY name"),
                &[],
            )
            .await?;
        rows.iter().map(rows::draft).collect()
    }

    async fn publish(&self, publication: Publication<'_>) -> Result<ScriptVersion> {
        let mut publishing = Publishing::new(&publication);
        let name = publication.name;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The draft's row lock makes concurrent publishes of one script take turns, so each
        // numbers its version after the last one committed.
        let draft = tx
            .query_opt(
                &format!("SELECT {DRAFT_COLUMNS} FROM script_drafts WHERE name = $1 FOR UPDATE"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(rows::draft)
            .transpose()?;
        let author = publishing.draft(draft)?;
        // The author's roles as they are now, locked until this commits.
        let roles: Option<String> = tx
            .query_opt(
                "SELECT roles FROM principals WHERE id = $1 FOR SHARE",
                &[&author],
            )
            .await?
            .map(|row| row.try_get(0))
            .transpose()?;
        let number: i64 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM script_versions WHERE name = $1",
                &[&name],
            )
            .await?
            .try_get(0)?;
        let numbered = publishing.numbered(roles, number)?;
        let version = numbered.version;
        tx.execute(
            &format!(
                "INSERT INTO script_versions ({VERSION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            &[
                &version.name,
                &i64::from(version.version),
                &version.source,
                &version.hash,
                &version.author,
                &numbered.roles,
                &version.publisher,
                &version.published_at_ms,
                &numbered.pins,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(version)
    }

    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM script_versions WHERE name = $1 ORDER BY version"
                ),
                &[&name],
            )
            .await?;
        rows.iter().map(rows::version).collect()
    }

    /// Read on every call of a script's tool: the statement is prepared once per connection.
    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {VERSION_COLUMNS} FROM script_versions WHERE name = $1 \
             ORDER BY version DESC LIMIT 1"
            ))
            .await?;
        client
            .query_opt(&statement, &[&name])
            .await?
            .as_ref()
            .map(rows::version)
            .transpose()
    }

    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT DISTINCT ON (name) {VERSION_COLUMNS} FROM script_versions \
                 ORDER BY name, version DESC"
                ),
                &[],
            )
            .await?;
        rows.iter().map(rows::version).collect()
    }

    async fn start_run(&self, run: Run) -> Result<()> {
        match write_run(self, &run, true).await {
            Err(StoreError::Postgres(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(StoreError::Conflict(format!("run {:?}", run.id)))
            }
            other => other.map(drop),
        }
    }

    async fn finish_run(&self, run: Run) -> Result<()> {
        if write_run(self, &run, false).await? == 0 {
            return Err(StoreError::Missing(format!("run {:?}", run.id)));
        }
        Ok(())
    }

    async fn run(&self, id: &str) -> Result<Option<Run>> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
                &[&id],
            )
            .await?
            .as_ref()
            .map(rows::run)
            .transpose()
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<Run>> {
        let client = self.client().await?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE ($1::text IS NULL OR script = $1) AND ($2::text IS NULL OR principal = $2) \
                   AND ($3::text IS NULL OR status = $3) \
                   AND ($4::bigint IS NULL OR started_at_ms >= $4) \
                   AND ($5::text IS NULL OR principal = $5 OR started_by = $5) \
                 ORDER BY started_at_ms DESC, ord DESC LIMIT $6"
                ),
                &[
                    &query.script,
                    &query.principal,
                    &query.status.map(|s| s.as_str()),
                    &query.since_ms,
                    &query.reader,
                    &limit,
                ],
            )
            .await?;
        rows.iter().map(rows::run).collect()
    }

    async fn latest_review(&self, script: &str, hash: &str) -> Result<Option<Run>> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE script = $1 AND hash = $2 AND kind = 'review' AND status = 'succeeded' \
                 ORDER BY started_at_ms DESC, ord DESC LIMIT 1"
                ),
                &[&script, &hash],
            )
            .await?
            .as_ref()
            .map(rows::run)
            .transpose()
    }
}
