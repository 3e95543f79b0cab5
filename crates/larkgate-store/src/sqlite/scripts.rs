//! Script drafts, published versions and runs in SQLite.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{join_roles, signed, split_roles};
use crate::{
    Draft, Result, Run, RunQuery, RunStats, RunStatus, ScriptPin, ScriptVersion, StoreError,
};

pub(super) fn draft_from_row(row: &Row<'_>) -> rusqlite::Result<Draft> {
    Ok(Draft {
        name: row.get(0)?,
        source: row.get(1)?,
        author: row.get(2)?,
        updated_at_ms: row.get(3)?,
    })
}

pub(super) const VERSION_COLUMNS: &str =
    "name, version, source, hash, author, author_roles, publisher, published_at_ms, pins";

pub(super) fn version_from_row(row: &Row<'_>) -> rusqlite::Result<ScriptVersion> {
    let roles: String = row.get(5)?;
    Ok(ScriptVersion {
        name: row.get(0)?,
        version: row.get::<_, i64>(1)? as u32,
        source: row.get(2)?,
        hash: row.get(3)?,
        author: row.get(4)?,
        author_roles: split_roles(&roles),
        publisher: row.get(6)?,
        published_at_ms: row.get(7)?,
        // Unreadable pins read as none recorded: the version's runs are then held to no list,
        // as for versions published before larkgate recorded them.
        pins: row
            .get::<_, Option<String>>(8)?
            .and_then(|json| serde_json::from_str(&json).ok()),
    })
}

pub(super) fn save_draft(
    c: &mut Connection,
    name: &str,
    source: &str,
    author: &str,
    now_ms: i64,
) -> Result<Draft> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let owner: Option<String> = tx
        .query_row(
            "SELECT author FROM script_drafts WHERE name = ?1",
            params![name],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(owner) = owner.filter(|o| o != author) {
        return Err(StoreError::Conflict(format!(
            "a draft named {name:?} by {owner}"
        )));
    }
    tx.execute(
        "INSERT INTO script_drafts (name, source, author, updated_at_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET source = excluded.source,
             updated_at_ms = excluded.updated_at_ms",
        params![name, source, author, now_ms],
    )?;
    tx.commit()?;
    Ok(Draft {
        name: name.to_owned(),
        source: source.to_owned(),
        author: author.to_owned(),
        updated_at_ms: now_ms,
    })
}

pub(super) fn publish(
    c: &mut Connection,
    name: &str,
    source: &str,
    hash: &str,
    publisher: &str,
    pins: Vec<ScriptPin>,
    now_ms: i64,
) -> Result<ScriptVersion> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let draft = tx
        .query_row(
            "SELECT name, source, author, updated_at_ms FROM script_drafts WHERE name = ?1",
            params![name],
            draft_from_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::Missing(format!("a draft named {name:?}")))?;
    if draft.source != source {
        return Err(StoreError::Invalid(format!(
            "the draft {name:?} changed while it was being published; publish again"
        )));
    }
    let roles: String = tx
        .query_row(
            "SELECT roles FROM principals WHERE id = ?1",
            params![draft.author],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "the draft's author {:?} is no longer a registered principal, so there are no \
                 roles to capture",
                draft.author
            ))
        })?;
    let version: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM script_versions WHERE name = ?1",
        params![name],
        |r| r.get(0),
    )?;
    let roles = join_roles(split_roles(&roles))?;
    let pins_json = serde_json::to_string(&pins)
        .map_err(|e| StoreError::Invalid(format!("the script's pins cannot be stored: {e}")))?;
    tx.execute(
        &format!(
            "INSERT INTO script_versions ({VERSION_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ),
        params![
            name,
            version,
            source,
            hash,
            draft.author,
            roles,
            publisher,
            now_ms,
            pins_json
        ],
    )?;
    tx.commit()?;
    Ok(ScriptVersion {
        name: name.to_owned(),
        version: version as u32,
        source: source.to_owned(),
        hash: hash.to_owned(),
        author: draft.author,
        author_roles: split_roles(&roles),
        publisher: publisher.to_owned(),
        published_at_ms: now_ms,
        pins: Some(pins),
    })
}

pub(super) const RUN_COLUMNS: &str = "id, script, version, hash, kind, principal, status, result, \
     error_code, error, tool_calls, paces, duration_ms, peak_memory_bytes, started_at_ms, \
     finished_at_ms, started_by, review";

pub(super) fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    let status: String = row.get(6)?;
    Ok(Run {
        id: row.get(0)?,
        script: row.get(1)?,
        version: row.get::<_, Option<i64>>(2)?.map(|v| v as u32),
        hash: row.get(3)?,
        kind: row.get(4)?,
        principal: row.get(5)?,
        // An unknown status reads as failed: never as a success.
        status: RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
        result: row.get(7)?,
        error_code: row.get(8)?,
        error: row.get(9)?,
        stats: RunStats {
            tool_calls: row.get::<_, i64>(10)? as u64,
            paces: row.get::<_, i64>(11)? as u64,
            duration_ms: row.get::<_, i64>(12)? as u64,
            peak_memory_bytes: row.get::<_, Option<i64>>(13)?.map(|b| b as u64),
        },
        started_at_ms: row.get(14)?,
        finished_at_ms: row.get(15)?,
        started_by: row.get(16)?,
        review: row.get(17)?,
    })
}

pub(super) fn write_run(c: &Connection, run: &Run, insert: bool) -> Result<usize> {
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
            run.kind,
            run.principal,
            run.status.as_str(),
            run.result,
            run.error_code,
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

pub(super) fn draft(c: &mut Connection, name: &str) -> Result<Option<Draft>> {
    Ok(c.query_row(
        "SELECT name, source, author, updated_at_ms FROM script_drafts WHERE name = ?1",
        params![name],
        draft_from_row,
    )
    .optional()?)
}

pub(super) fn drafts(c: &mut Connection) -> Result<Vec<Draft>> {
    let mut statement =
        c.prepare("SELECT name, source, author, updated_at_ms FROM script_drafts ORDER BY name")?;
    let rows = statement.query_map([], draft_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn versions(c: &mut Connection, name: &str) -> Result<Vec<ScriptVersion>> {
    let mut statement = c.prepare(&format!(
        "SELECT {} FROM script_versions WHERE name = ?1 ORDER BY version",
        VERSION_COLUMNS
    ))?;
    let rows = statement.query_map(params![name], version_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Read on every call of a script's tool: the statement is prepared once.
pub(super) fn latest_version(c: &mut Connection, name: &str) -> Result<Option<ScriptVersion>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {} FROM script_versions WHERE name = ?1 ORDER BY version DESC LIMIT 1",
        VERSION_COLUMNS
    ))?
    .query_row(params![name], version_from_row)
    .optional()?)
}

pub(super) fn latest_versions(c: &mut Connection) -> Result<Vec<ScriptVersion>> {
    let mut statement = c.prepare(&format!(
            "SELECT {} FROM script_versions AS v WHERE version =                  (SELECT MAX(version) FROM script_versions WHERE name = v.name) ORDER BY name",
            VERSION_COLUMNS
        ))?;
    let rows = statement.query_map([], version_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn start_run(c: &mut Connection, run: Run) -> Result<()> {
    write_run(c, &run, true).map_err(|e| match e {
        StoreError::Database(rusqlite::Error::SqliteFailure(f, _))
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            StoreError::Conflict(format!("run {:?}", run.id))
        }
        other => other,
    })?;
    Ok(())
}

pub(super) fn finish_run(c: &mut Connection, run: Run) -> Result<()> {
    if write_run(c, &run, false)? == 0 {
        return Err(StoreError::Missing(format!("run {:?}", run.id)));
    }
    Ok(())
}

pub(super) fn runs(c: &mut Connection, query: &RunQuery) -> Result<Vec<Run>> {
    let mut statement = c.prepare(&format!(
        "SELECT {RUN_COLUMNS} FROM runs \
             WHERE (?1 IS NULL OR script = ?1) AND (?2 IS NULL OR principal = ?2) \
               AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR started_at_ms >= ?4) \
               AND (?5 IS NULL OR principal = ?5 OR started_by = ?5) \
             ORDER BY started_at_ms DESC, rowid DESC LIMIT ?6"
    ))?;
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let rows = statement.query_map(
        params![
            query.script,
            query.principal,
            query.status.map(|s| s.as_str()),
            query.since_ms,
            query.reader,
            limit
        ],
        run_from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn latest_review(c: &mut Connection, script: &str, hash: &str) -> Result<Option<Run>> {
    Ok(c.query_row(
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE script = ?1 AND hash = ?2 AND kind = 'review' AND status = 'succeeded' \
             ORDER BY started_at_ms DESC, rowid DESC LIMIT 1"
        ),
        params![script, hash],
        run_from_row,
    )
    .optional()?)
}

pub(super) fn run(c: &mut Connection, id: &str) -> Result<Option<Run>> {
    Ok(c.query_row(
        &format!("SELECT {} FROM runs WHERE id = ?1", RUN_COLUMNS),
        params![id],
        run_from_row,
    )
    .optional()?)
}
