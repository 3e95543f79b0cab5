//! A stored record read back: one column list and one decoder per record, for both databases.
//!
//! Both schemas give each record the same columns with the same types (text, 64-bit integers,
//! bytes), so a decoder reads a row of either through [`Columns`]. A value that does not read
//! as what it should be fails closed where a wrong reading could admit a call: an unknown
//! approval status reads as denied, an unknown pin status as quarantined, an unknown run status
//! as failed, an unknown run kind as a draft's, and an approval whose call chain does not
//! parse cannot be read at all.

use larkgate_wire::{Code, RunKind};

use crate::{
    Approval, ApprovalDetails, ApprovalStatus, AuditHead, AuditKind, AuditRecord, CallChain, Draft,
    ForwardedAudit, IssuerBinding, PinStatus, Principal, PrincipalKind, Result, Run, RunStats,
    RunStatus, ScriptVersion, ServerRecord, SharedSession, StoreError, TokenRecord, ToolPin,
    UpstreamRecord, UpstreamStatusRecord, split_roles,
};

/// A value both databases read into the same Rust type.
pub(crate) trait Column:
    rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a>
{
}

impl<T> Column for T where T: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a> {}

/// A row of either database, read by column index.
pub(crate) trait Columns {
    /// The value of column `index`.
    fn get<T: Column>(&self, index: usize) -> Result<T>;
}

impl Columns for rusqlite::Row<'_> {
    fn get<T: Column>(&self, index: usize) -> Result<T> {
        Ok(rusqlite::Row::get(self, index)?)
    }
}

impl Columns for tokio_postgres::Row {
    fn get<T: Column>(&self, index: usize) -> Result<T> {
        Ok(self.try_get(index)?)
    }
}

/// Integers are signed in both databases; a negative count or sequence (which larkgate never
/// writes) reads as 0.
fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A version number, which larkgate writes from a `u32`.
fn version_number(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) const PRINCIPAL_COLUMNS: &str = "id, kind, roles, issuer";

pub(crate) fn principal(row: &impl Columns) -> Result<Principal> {
    let kind: String = row.get(1)?;
    let roles: String = row.get(2)?;
    Ok(Principal {
        id: row.get(0)?,
        kind: PrincipalKind::parse(&kind).unwrap_or(PrincipalKind::User),
        roles: split_roles(&roles),
        issuer: IssuerBinding::from_stored(row.get(3)?),
    })
}

pub(crate) const TOKEN_COLUMNS: &str =
    "id, principal, secret_hash, created_by, created_at_ms, expires_at_ms, revoked_at_ms";

pub(crate) fn token(row: &impl Columns) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.get(0)?,
        principal: row.get(1)?,
        secret_hash: row.get(2)?,
        created_by: row.get(3)?,
        created_at_ms: row.get(4)?,
        expires_at_ms: row.get(5)?,
        revoked_at_ms: row.get(6)?,
    })
}

pub(crate) const APPROVAL_COLUMNS: &str = "id, principal, tool, args_hash, status, created_at_ms, \
     resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors, \
     arguments, run_id, script, reason, arguments_bytes";

/// A chain column read back. One that does not parse makes the approval unreadable, so it is
/// neither resolved nor used: fail closed.
fn chain_names(row: &impl Columns, column: usize) -> Result<Vec<String>> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text)
        .map_err(|e| StoreError::Invalid(format!("an approval's call chain cannot be read: {e}")))
}

pub(crate) fn approval(row: &impl Columns) -> Result<Approval> {
    let status: String = row.get(4)?;
    Ok(Approval {
        id: row.get(0)?,
        principal: row.get(1)?,
        tool: row.get(2)?,
        args_hash: row.get(3)?,
        // An unknown status reads as denied: fail closed.
        status: ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Denied),
        created_at_ms: row.get(5)?,
        resolved_by: row.get(6)?,
        resolved_at_ms: row.get(7)?,
        expires_at_ms: row.get(8)?,
        used_at_ms: row.get(9)?,
        chain: CallChain {
            through: chain_names(row, 10)?,
            authors: chain_names(row, 11)?,
        },
        details: ApprovalDetails {
            arguments: row.get(12)?,
            run_id: row.get(13)?,
            script: row.get(14)?,
            arguments_bytes: row.get::<Option<i64>>(16)?.map(|b| b.max(0) as u64),
        },
        reason: row.get(15)?,
    })
}

pub(crate) const DRAFT_COLUMNS: &str = "name, source, author, updated_at_ms";

pub(crate) fn draft(row: &impl Columns) -> Result<Draft> {
    Ok(Draft {
        name: row.get(0)?,
        source: row.get(1)?,
        author: row.get(2)?,
        updated_at_ms: row.get(3)?,
    })
}

pub(crate) const VERSION_COLUMNS: &str =
    "name, version, source, hash, author, author_roles, publisher, published_at_ms, pins";

pub(crate) fn version(row: &impl Columns) -> Result<ScriptVersion> {
    let roles: String = row.get(5)?;
    Ok(ScriptVersion {
        name: row.get(0)?,
        version: version_number(row.get(1)?),
        source: row.get(2)?,
        hash: row.get(3)?,
        author: row.get(4)?,
        author_roles: split_roles(&roles),
        publisher: row.get(6)?,
        published_at_ms: row.get(7)?,
        // Unreadable pins read as none recorded: the version's runs are then held to no list,
        // as for versions published before larkgate recorded them.
        pins: row
            .get::<Option<String>>(8)?
            .and_then(|json| serde_json::from_str(&json).ok()),
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, script, version, hash, kind, principal, status, result, \
     error_code, error, tool_calls, paces, duration_ms, peak_memory_bytes, started_at_ms, \
     finished_at_ms, started_by, review";

pub(crate) fn run(row: &impl Columns) -> Result<Run> {
    let kind: String = row.get(4)?;
    let status: String = row.get(6)?;
    Ok(Run {
        id: row.get(0)?,
        script: row.get(1)?,
        version: row.get::<Option<i64>>(2)?.map(version_number),
        hash: row.get(3)?,
        // An unknown kind reads as a draft's run: the kind with the least authority.
        kind: RunKind::parse(&kind).unwrap_or(RunKind::Draft),
        principal: row.get(5)?,
        // An unknown status reads as failed: never as a success.
        status: RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
        result: row.get(7)?,
        // An unknown code (written by a later larkgate) reads as larkgate's own failure.
        error_code: row
            .get::<Option<String>>(8)?
            .map(|code| Code::parse(&code).unwrap_or(Code::Internal)),
        error: row.get(9)?,
        stats: RunStats {
            tool_calls: unsigned(row.get(10)?),
            paces: unsigned(row.get(11)?),
            duration_ms: unsigned(row.get(12)?),
            peak_memory_bytes: row.get::<Option<i64>>(13)?.map(unsigned),
        },
        started_at_ms: row.get(14)?,
        finished_at_ms: row.get(15)?,
        started_by: row.get(16)?,
        review: row.get(17)?,
    })
}

pub(crate) const UPSTREAM_COLUMNS: &str = "alias, config, added_by, added_at_ms";

pub(crate) fn upstream(row: &impl Columns) -> Result<UpstreamRecord> {
    Ok(UpstreamRecord {
        alias: row.get(0)?,
        config: row.get(1)?,
        added_by: row.get(2)?,
        added_at_ms: row.get(3)?,
    })
}

pub(crate) const SERVER_COLUMNS: &str = "name, spec, added_by, added_at_ms";

pub(crate) fn server(row: &impl Columns) -> Result<ServerRecord> {
    Ok(ServerRecord {
        name: row.get(0)?,
        spec: row.get(1)?,
        added_by: row.get(2)?,
        added_at_ms: row.get(3)?,
    })
}

pub(crate) const UPSTREAM_STATUS_COLUMNS: &str = "alias, status, updated_at_ms";

pub(crate) fn upstream_status(row: &impl Columns) -> Result<UpstreamStatusRecord> {
    Ok(UpstreamStatusRecord {
        alias: row.get(0)?,
        status: row.get(1)?,
        updated_at_ms: row.get(2)?,
    })
}

pub(crate) const PIN_COLUMNS: &str = "alias, tool, hash, definition, status, pending_hash, \
     pending_definition, reviewed_by, updated_at_ms";

pub(crate) fn pin(row: &impl Columns) -> Result<ToolPin> {
    let status: String = row.get(4)?;
    let pending_hash: Option<String> = row.get(5)?;
    let pending_definition: Option<String> = row.get(6)?;
    Ok(ToolPin {
        alias: row.get(0)?,
        tool: row.get(1)?,
        hash: row.get(2)?,
        definition: row.get(3)?,
        // An unknown status reads as quarantined: fail closed.
        status: PinStatus::parse(&status).unwrap_or(PinStatus::Quarantined),
        pending: pending_hash.zip(pending_definition),
        reviewed_by: row.get(7)?,
        updated_at_ms: row.get(8)?,
    })
}

pub(crate) const AUDIT_COLUMNS: &str = "seq, at_ms, kind, principal, run_id, run_kind, session, \
     tool, args_hash, args, code, intent_seq, duration_us, detail, prev_hash, hash, replica, \
     local_seq";

pub(crate) fn audit(row: &impl Columns) -> Result<AuditRecord> {
    let kind: String = row.get(2)?;
    Ok(AuditRecord {
        seq: unsigned(row.get(0)?),
        at_ms: row.get(1)?,
        kind: AuditKind::parse(&kind).unwrap_or(AuditKind::Event),
        principal: row.get(3)?,
        run_id: row.get(4)?,
        run_kind: row.get(5)?,
        session: row.get(6)?,
        tool: row.get(7)?,
        args_hash: row.get(8)?,
        args: row.get(9)?,
        code: row.get(10)?,
        intent_seq: row.get::<Option<i64>>(11)?.map(unsigned),
        duration_us: row.get::<Option<i64>>(12)?.map(unsigned),
        detail: row.get(13)?,
        prev_hash: row.get(14)?,
        hash: row.get(15)?,
        replica: row.get(16)?,
        local_seq: row.get::<Option<i64>>(17)?.map(unsigned),
    })
}

pub(crate) const AUDIT_HEAD_COLUMNS: &str = "seq, hash";

pub(crate) fn audit_head(row: &impl Columns) -> Result<AuditHead> {
    Ok(AuditHead {
        seq: unsigned(row.get(0)?),
        hash: row.get(1)?,
    })
}

pub(crate) const FORWARDED_COLUMNS: &str = "id, at_ms, entry";

pub(crate) fn forwarded(row: &impl Columns) -> Result<ForwardedAudit> {
    Ok(ForwardedAudit {
        id: row.get(0)?,
        at_ms: row.get(1)?,
        entry: row.get(2)?,
    })
}

pub(crate) const SESSION_COLUMNS: &str = "owner, state, expires_at_ms";

pub(crate) fn session(row: &impl Columns) -> Result<SharedSession> {
    Ok(SharedSession {
        owner: row.get(0)?,
        state: row.get(1)?,
        expires_at_ms: row.get(2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run row as a later larkgate might have written it: a kind and a code this one does not
    /// know.
    fn run_with(kind: &str, code: &str) -> Run {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        connection
            .query_row(
                "SELECT 'r', NULL, NULL, 'h', ?1, 'ada', 'failed', NULL, ?2, 'why', 0, 0, 0, NULL, \
                 1, 2, NULL, NULL",
                rusqlite::params![kind, code],
                |row| Ok(run(row)),
            )
            .unwrap()
            .unwrap()
    }

    #[test]
    fn an_unknown_run_kind_reads_as_a_drafts_and_an_unknown_code_as_internal() {
        let known = run_with("published", "rate_limited");
        assert_eq!(known.kind, RunKind::Published);
        assert_eq!(known.error_code, Some(Code::RateLimited));
        let unknown = run_with("scheduled", "quota_spent");
        assert_eq!(unknown.kind, RunKind::Draft);
        assert_eq!(unknown.error_code, Some(Code::Internal));
    }
}
