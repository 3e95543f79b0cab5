//! Script drafts, published versions and runs in SQLite.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use larkgate_wire::Code;

use super::SqliteStore;
use crate::publishing::Publishing;
use crate::rows::{self, DRAFT_COLUMNS, RUN_COLUMNS, VERSION_COLUMNS};
use crate::{
    Draft, Publication, Result, Run, RunQuery, ScriptStore, ScriptVersion, StoreError, signed,
};

/// Inserts `run`, or updates the run of its id; returns how many rows changed.
fn write_run(c: &Connection, run: &Run, insert: bool) -> Result<usize> {
    let sql = if insert {
        format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
        )
    } else {
        "UPDATE runs SET script = ?2, version = ?3, hash = ?4, kind = ?5, principal = ?6, \
         status = ?7, result = ?8, error_code = ?9, error = ?10, tool_calls = ?11, paces = ?12, \
         duration_ms = ?13, peak_memory_bytes = ?14, started_at_ms = ?15, finished_at_ms = ?16, \
         started_by = ?17, review = ?18 WHERE id = ?1"
            .to_owned()
    };
    Ok(c.execute(
        &sql,
        params![
            run.id,
            run.script,
            run.version.map(i64::from),
            run.hash,
            run.kind.as_str(),
            run.principal,
            run.status.as_str(),
            run.result,
            run.error_code.map(Code::as_str),
            run.error,
            signed(run.stats.tool_calls),
            signed(run.stats.paces),
            signed(run.stats.duration_ms),
            run.stats.peak_memory_bytes.map(signed),
            run.started_at_ms,
            run.finished_at_ms,
            run.started_by,
            run.review,
        ],
    )?)
}

#[async_trait::async_trait]
impl ScriptStore for SqliteStore {
    async fn save_draft(&self, draft: Draft) -> Result<Draft> {
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let owner: Option<String> = tx
                .query_row(
                    "SELECT author FROM script_drafts WHERE name = ?1",
                    params![draft.name],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(owner) = owner.filter(|o| *o != draft.author) {
                return Err(StoreError::Conflict(format!(
                    "a draft named {:?} by {owner}",
                    draft.name
                )));
            }
            tx.execute(
                &format!(
                    "INSERT INTO script_drafts ({DRAFT_COLUMNS}) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (name) DO UPDATE SET source = excluded.source, \
                         updated_at_ms = excluded.updated_at_ms"
                ),
                params![draft.name, draft.source, draft.author, draft.updated_at_ms],
            )?;
            tx.commit()?;
            Ok(draft)
        })
        .await
    }

    async fn draft(&self, name: &str) -> Result<Option<Draft>> {
        let name = name.to_owned();
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {DRAFT_COLUMNS} FROM script_drafts WHERE name = ?1"
            ))?
            .query_and_then(params![name], |r| rows::draft(r))?
            .next()
            .transpose()
        })
        .await
    }

    async fn drafts(&self) -> Result<Vec<Draft>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {DRAFT_COLUMNS} FROM script_drafts ORDER BY name"
            ))?
            .query_and_then([], |r| rows::draft(r))?
            .collect()
        })
        .await
    }

    async fn publish(&self, publication: Publication<'_>) -> Result<ScriptVersion> {
        let mut publishing = Publishing::new(&publication);
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let name = publishing.name().to_owned();
            let draft = tx
                .prepare(&format!(
                    "SELECT {DRAFT_COLUMNS} FROM script_drafts WHERE name = ?1"
                ))?
                .query_and_then(params![name], |r| rows::draft(r))?
                .next()
                .transpose()?;
            let author = publishing.draft(draft)?;
            let roles: Option<String> = tx
                .query_row(
                    "SELECT roles FROM principals WHERE id = ?1",
                    params![author],
                    |r| r.get(0),
                )
                .optional()?;
            let number: i64 = tx.query_row(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM script_versions WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )?;
            let numbered = publishing.numbered(roles, number)?;
            let version = numbered.version;
            tx.execute(
                &format!(
                    "INSERT INTO script_versions ({VERSION_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                ),
                params![
                    version.name,
                    version.version,
                    version.source,
                    version.hash,
                    version.author,
                    numbered.roles,
                    version.publisher,
                    version.published_at_ms,
                    numbered.pins
                ],
            )?;
            tx.commit()?;
            Ok(version)
        })
        .await
    }

    async fn versions(&self, name: &str) -> Result<Vec<ScriptVersion>> {
        let name = name.to_owned();
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM script_versions WHERE name = ?1 ORDER BY version"
            ))?
            .query_and_then(params![name], |r| rows::version(r))?
            .collect()
        })
        .await
    }

    /// Read on every call of a script's tool: the statement is prepared once.
    async fn latest_version(&self, name: &str) -> Result<Option<ScriptVersion>> {
        let name = name.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {VERSION_COLUMNS} FROM script_versions WHERE name = ?1 \
                 ORDER BY version DESC LIMIT 1"
            ))?
            .query_and_then(params![name], |r| rows::version(r))?
            .next()
            .transpose()
        })
        .await
    }

    async fn latest_versions(&self) -> Result<Vec<ScriptVersion>> {
        self.with(|c| {
            c.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM script_versions AS v WHERE version = \
                 (SELECT MAX(version) FROM script_versions WHERE name = v.name) ORDER BY name"
            ))?
            .query_and_then([], |r| rows::version(r))?
            .collect()
        })
        .await
    }

    async fn start_run(&self, run: Run) -> Result<()> {
        self.with(move |c| {
            write_run(c, &run, true).map_err(|e| match e {
                StoreError::Database(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    StoreError::Conflict(format!("run {:?}", run.id))
                }
                other => other,
            })?;
            Ok(())
        })
        .await
    }

    async fn finish_run(&self, run: Run) -> Result<()> {
        self.with(move |c| {
            if write_run(c, &run, false)? == 0 {
                return Err(StoreError::Missing(format!("run {:?}", run.id)));
            }
            Ok(())
        })
        .await
    }

    async fn run(&self, id: &str) -> Result<Option<Run>> {
        let id = id.to_owned();
        self.with(move |c| {
            c.prepare(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
                .query_and_then(params![id], |r| rows::run(r))?
                .next()
                .transpose()
        })
        .await
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<Run>> {
        let query = query.clone();
        self.with(move |c| {
            let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
            c.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE (?1 IS NULL OR script = ?1) AND (?2 IS NULL OR principal = ?2) \
                   AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR started_at_ms >= ?4) \
                   AND (?5 IS NULL OR principal = ?5 OR started_by = ?5) \
                 ORDER BY started_at_ms DESC, rowid DESC LIMIT ?6"
            ))?
            .query_and_then(
                params![
                    query.script,
                    query.principal,
                    query.status.map(|s| s.as_str()),
                    query.since_ms,
                    query.reader,
                    limit
                ],
                |r| rows::run(r),
            )?
            .collect()
        })
        .await
    }

    async fn latest_review(&self, script: &str, hash: &str) -> Result<Option<Run>> {
        let (script, hash) = (script.to_owned(), hash.to_owned());
        self.with(move |c| {
            c.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE script = ?1 AND hash = ?2 AND kind = 'review' AND status = 'succeeded' \
                 ORDER BY started_at_ms DESC, rowid DESC LIMIT 1"
            ))?
            .query_and_then(params![script, hash], |r| rows::run(r))?
            .next()
            .transpose()
        })
        .await
    }
}
