//! The PostgreSQL schema, in versions. `larkgate_schema` records how far a schema is; every
//! migration runs under a transaction-scoped advisory lock on that schema, so several
//! processes migrating at once (replicas starting together, `larkgate migrate` twice) apply
//! each step exactly once: the others wait, then find nothing left to do.
//!
//! PostgreSQL's versions count on their own. Version 1 is the whole of what SQLite reached in
//! its version 11 (the PostgreSQL store began there), with the same tables, columns and
//! meanings; text that is sorted or compared by range (keys, names, ids) uses the `C`
//! collation, so that orders and prefixes are by code point as in SQLite.

use tokio_postgres::Client;

use crate::{Result, StoreError};

/// Each entry moves the schema one version forward. Never edit a released entry: add one.
const MIGRATIONS: &[&str] = &[
    // 1: everything the SQLite store has at its version 11.
    r#"CREATE TABLE principals (
        id TEXT COLLATE "C" PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('user', 'service', 'script')),
        roles TEXT NOT NULL
    );
    CREATE TABLE tokens (
        id TEXT COLLATE "C" PRIMARY KEY,
        principal TEXT NOT NULL,
        secret_hash TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        expires_at_ms BIGINT,
        revoked_at_ms BIGINT
    );
    CREATE INDEX tokens_by_principal ON tokens (principal);
    CREATE TABLE kv (
        key TEXT COLLATE "C" PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE approvals (
        ord BIGINT GENERATED ALWAYS AS IDENTITY,
        id TEXT COLLATE "C" PRIMARY KEY,
        principal TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('pending', 'approved', 'denied', 'used', 'expired')),
        created_at_ms BIGINT NOT NULL,
        resolved_by TEXT,
        resolved_at_ms BIGINT,
        expires_at_ms BIGINT,
        used_at_ms BIGINT,
        chain_through TEXT NOT NULL DEFAULT '[]',
        chain_authors TEXT NOT NULL DEFAULT '[]',
        arguments TEXT,
        run_id TEXT,
        script TEXT,
        reason TEXT
    );
    CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, chain_through, status);
    CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash, chain_through)
        WHERE status = 'pending';
    CREATE INDEX approvals_pending_since ON approvals (created_at_ms) WHERE status = 'pending';
    CREATE TABLE audit (
        seq BIGINT PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        principal TEXT NOT NULL,
        run_id TEXT,
        run_kind TEXT,
        session TEXT,
        tool TEXT,
        args_hash TEXT,
        args TEXT,
        code TEXT,
        intent_seq BIGINT,
        duration_us BIGINT,
        detail TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX audit_by_principal ON audit (principal, seq);
    CREATE INDEX audit_by_tool ON audit (tool, seq);
    CREATE TABLE audit_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq BIGINT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE TABLE audit_inbox (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        entry TEXT NOT NULL
    );
    CREATE TABLE script_drafts (
        name TEXT COLLATE "C" PRIMARY KEY,
        source TEXT NOT NULL,
        author TEXT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );
    CREATE TABLE script_versions (
        name TEXT COLLATE "C" NOT NULL,
        version BIGINT NOT NULL,
        source TEXT NOT NULL,
        hash TEXT NOT NULL,
        author TEXT NOT NULL,
        author_roles TEXT NOT NULL,
        publisher TEXT NOT NULL,
        published_at_ms BIGINT NOT NULL,
        pins TEXT,
        PRIMARY KEY (name, version)
    );
    CREATE TABLE runs (
        ord BIGINT GENERATED ALWAYS AS IDENTITY,
        id TEXT COLLATE "C" PRIMARY KEY,
        script TEXT,
        version BIGINT,
        hash TEXT NOT NULL,
        kind TEXT NOT NULL,
        principal TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
        result TEXT,
        error_code TEXT,
        error TEXT,
        tool_calls BIGINT NOT NULL,
        paces BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        peak_memory_bytes BIGINT,
        started_at_ms BIGINT NOT NULL,
        finished_at_ms BIGINT,
        started_by TEXT,
        review TEXT
    );
    CREATE INDEX runs_by_start ON runs (started_at_ms);
    CREATE INDEX runs_reviews ON runs (script, hash, started_at_ms) WHERE kind = 'review';
    CREATE TABLE upstreams (
        alias TEXT COLLATE "C" PRIMARY KEY,
        config TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at_ms BIGINT NOT NULL
    );
    CREATE TABLE upstream_pins (
        alias TEXT COLLATE "C" NOT NULL,
        tool TEXT COLLATE "C" NOT NULL,
        hash TEXT NOT NULL,
        definition TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('approved', 'quarantined')),
        pending_hash TEXT,
        pending_definition TEXT,
        reviewed_by TEXT,
        updated_at_ms BIGINT NOT NULL,
        PRIMARY KEY (alias, tool)
    );
    CREATE TABLE upstream_revision (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision BIGINT NOT NULL
    );
    INSERT INTO upstream_revision (id, revision) VALUES (1, 0);
    CREATE FUNCTION larkgate_upstreams_changed() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            UPDATE upstream_revision SET revision = revision + 1;
            RETURN NULL;
        END $$;
    CREATE TRIGGER upstreams_changed AFTER INSERT OR UPDATE OR DELETE ON upstreams
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_upstreams_changed();
    CREATE TRIGGER upstream_pins_changed AFTER INSERT OR UPDATE OR DELETE ON upstream_pins
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_upstreams_changed();
    CREATE TABLE upstream_status (
        alias TEXT COLLATE "C" PRIMARY KEY,
        status TEXT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );
    CREATE TABLE upstream_credentials (
        alias TEXT COLLATE "C" PRIMARY KEY,
        sealed BYTEA NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );"#,
    // 2: a notification on the channel `larkgate_changes` (payload: the table) when published
    // scripts, upstreams or pins change, from whichever process changed them, so that every
    // process serving from this database can notice at once.
    r#"CREATE FUNCTION larkgate_notify_change() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            PERFORM pg_notify('larkgate_changes', current_schema() || '.' || TG_TABLE_NAME);
            RETURN NULL;
        END $$;
    CREATE TRIGGER script_versions_notify AFTER INSERT OR UPDATE OR DELETE ON script_versions
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_notify_change();
    CREATE TRIGGER upstreams_notify AFTER INSERT OR UPDATE OR DELETE ON upstreams
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_notify_change();
    CREATE TRIGGER upstream_pins_notify AFTER INSERT OR UPDATE OR DELETE ON upstream_pins
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_notify_change();"#,
    // 3: which replica recorded each audit record, and its sequence in that replica's journal
    // (NULL for records chained before): a replayed journal is chained once.
    r#"ALTER TABLE audit ADD COLUMN replica TEXT COLLATE "C";
    ALTER TABLE audit ADD COLUMN local_seq BIGINT;
    CREATE UNIQUE INDEX audit_by_replica ON audit (replica, local_seq) WHERE replica IS NOT NULL;"#,
    // 4: 2025-11-25 sessions as every replica sees them: who opened each (the only principal
    // that may use it), what a replica needs to continue it, and when it expires unless used.
    r#"CREATE TABLE sessions (
        id TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT COLLATE "C" NOT NULL,
        state TEXT,
        expires_at_ms BIGINT NOT NULL
    );
    CREATE INDEX sessions_by_owner ON sessions (owner, expires_at_ms);
    CREATE INDEX sessions_by_expiry ON sessions (expires_at_ms);"#,
    // 5: which identity provider's accounts may sign in as each principal (NULL: none, only
    // larkgate's tokens). A person or service registered before, never given a token, could
    // only have been reached by signing in: it is bound by its first sign-in (`*`). One that
    // has a token (the first `admin` has) is no provider account's.
    r#"ALTER TABLE principals ADD COLUMN issuer TEXT COLLATE "C";
    UPDATE principals SET issuer = '*' WHERE kind IN ('user', 'service')
        AND id NOT IN (SELECT principal FROM tokens);"#,
    // 6: the size of an approval's whole arguments (what it records is a bounded preview),
    // and approvals by status and age, for listing a page at a time.
    r#"ALTER TABLE approvals ADD COLUMN arguments_bytes BIGINT;
    CREATE INDEX approvals_by_status ON approvals (status, created_at_ms, id);"#,
    // 7: an approval its caller withdrew (it cancelled the call that waited for a decision);
    // and a notification on `larkgate_changes` whenever a pending approval is decided,
    // withdrawn or expires, so the replica holding a call that waits for it learns at once.
    r#"ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
    ALTER TABLE approvals ADD CONSTRAINT approvals_status_check CHECK (status IN
        ('pending', 'approved', 'denied', 'used', 'expired', 'withdrawn'));
    CREATE TRIGGER approvals_notify AFTER UPDATE OF status ON approvals FOR EACH ROW
        WHEN (OLD.status = 'pending' AND NEW.status <> 'pending')
        EXECUTE FUNCTION larkgate_notify_change();"#,
    // 8: virtual servers added at run time; a revision that moves with each row changed, and a
    // notification on `larkgate_changes`, for every process serving from this database.
    r#"CREATE TABLE servers (
        name TEXT COLLATE "C" PRIMARY KEY,
        spec TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at_ms BIGINT NOT NULL
    );
    CREATE TABLE server_revision (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision BIGINT NOT NULL
    );
    INSERT INTO server_revision (id, revision) VALUES (1, 0);
    CREATE FUNCTION larkgate_servers_changed() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
        BEGIN
            UPDATE server_revision SET revision = revision + 1;
            RETURN NULL;
        END $$;
    CREATE TRIGGER servers_changed AFTER INSERT OR UPDATE OR DELETE ON servers
        FOR EACH ROW EXECUTE FUNCTION larkgate_servers_changed();
    CREATE TRIGGER servers_notify AFTER INSERT OR UPDATE OR DELETE ON servers
        FOR EACH STATEMENT EXECUTE FUNCTION larkgate_notify_change();"#,
];

/// The newest schema version this larkgate knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What a migration did: the version found and the version left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The schema's version before (0 for a schema larkgate had not used).
    pub from: i64,
    /// Its version now.
    pub to: i64,
}

/// Applies every migration up to `target` that the schema has not seen, in one transaction
/// under the schema's advisory lock. Refuses a schema newer than this larkgate knows.
pub(super) async fn run(client: &mut Client, schema: &str, target: i64) -> Result<Migrated> {
    let tx = client.transaction().await?;
    // One lock per schema: the first key is larkgate's, the second the schema's.
    tx.execute(
        "SELECT pg_advisory_xact_lock(1818325607, hashtext($1))",
        &[&schema],
    )
    .await?;
    // Created only when missing: `CREATE SCHEMA IF NOT EXISTS` would need the right to
    // create schemas even when this one exists.
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await?
        .is_some();
    if !exists {
        tx.batch_execute(&format!("CREATE SCHEMA {schema}")).await?;
    }
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {schema}.larkgate_schema (
             id INTEGER PRIMARY KEY CHECK (id = 1),
             version BIGINT NOT NULL
         );"
    ))
    .await?;
    let from: i64 = tx
        .query_opt(
            &format!("SELECT version FROM {schema}.larkgate_schema WHERE id = 1"),
            &[],
        )
        .await?
        .map_or(0, |row| row.get(0));
    if from > SCHEMA_VERSION {
        return Err(StoreError::Invalid(format!(
            "the PostgreSQL schema {schema:?} is at larkgate schema version {from}, newer than \
             this larkgate knows ({SCHEMA_VERSION}): a newer larkgate migrated it; run that \
             version (or newer) here too"
        )));
    }
    let target = target.clamp(0, SCHEMA_VERSION);
    for version in (from + 1)..=target {
        let sql = MIGRATIONS[usize::try_from(version - 1).unwrap_or(0)];
        tx.batch_execute(sql).await?;
    }
    let to = from.max(target);
    tx.execute(
        &format!(
            "INSERT INTO {schema}.larkgate_schema (id, version) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET version = excluded.version"
        ),
        &[&to],
    )
    .await?;
    tx.commit().await?;
    Ok(Migrated { from, to })
}
