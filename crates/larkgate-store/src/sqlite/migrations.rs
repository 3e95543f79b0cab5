//! Schema migrations, applied in order at open; `PRAGMA user_version` records how far.

use rusqlite::Connection;

use crate::{Result, StoreError};

/// Each entry moves the schema one version forward. Never edit a released entry: add one.
const MIGRATIONS: &[&str] = &[
    // 1: principals, key-value data, approvals, audit chain and its head.
    "CREATE TABLE principals (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('user', 'service', 'script')),
        roles TEXT NOT NULL
    ) STRICT;
    CREATE TABLE kv (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) STRICT;
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
        created_at_ms INTEGER NOT NULL,
        resolved_by TEXT,
        resolved_at_ms INTEGER,
        expires_at_ms INTEGER,
        used_at_ms INTEGER
    ) STRICT;
    CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, status);
    CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash)
        WHERE status = 'pending';
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        principal TEXT NOT NULL,
        run_id TEXT,
        run_kind TEXT,
        session TEXT,
        tool TEXT,
        args_hash TEXT,
        args TEXT,
        code TEXT,
        intent_seq INTEGER,
        duration_us INTEGER,
        detail TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    ) STRICT;
    CREATE INDEX audit_by_principal ON audit (principal, seq);
    CREATE INDEX audit_by_tool ON audit (tool, seq);
    CREATE TABLE audit_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL
    ) STRICT;",
    // 2: script drafts, published versions and runs.
    "CREATE TABLE script_drafts (
        name TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        author TEXT NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE script_versions (
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        source TEXT NOT NULL,
        hash TEXT NOT NULL,
        author TEXT NOT NULL,
        author_roles TEXT NOT NULL,
        publisher TEXT NOT NULL,
        published_at_ms INTEGER NOT NULL,
        PRIMARY KEY (name, version)
    ) STRICT;
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        script TEXT,
        version INTEGER,
        hash TEXT NOT NULL,
        kind TEXT NOT NULL,
        principal TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
        result TEXT,
        error_code TEXT,
        error TEXT,
        tool_calls INTEGER NOT NULL,
        paces INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        peak_memory_bytes INTEGER,
        started_at_ms INTEGER NOT NULL,
        finished_at_ms INTEGER
    ) STRICT;",
    // 3: federated upstreams added at run time, and the pinned definitions of their tools.
    "CREATE TABLE upstreams (
        alias TEXT PRIMARY KEY,
        config TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at_ms INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE upstream_pins (
        alias TEXT NOT NULL,
        tool TEXT NOT NULL,
        hash TEXT NOT NULL,
        definition TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('approved', 'quarantined')),
        pending_hash TEXT,
        pending_definition TEXT,
        reviewed_by TEXT,
        updated_at_ms INTEGER NOT NULL,
        PRIMARY KEY (alias, tool)
    ) STRICT;",
    // 4: bearer tokens, stored only as hashes of their secrets.
    "CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        secret_hash TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        expires_at_ms INTEGER,
        revoked_at_ms INTEGER
    ) STRICT;
    CREATE INDEX tokens_by_principal ON tokens (principal);",
    // 5: who started a run (a published run runs as `script:<name>`, started by someone else).
    "ALTER TABLE runs ADD COLUMN started_by TEXT;",
    // 6: audit entries handed over by a process that does not own the chain (the owner, a
    // running `larkgate serve`, chains them and deletes them in one transaction).
    "CREATE TABLE audit_inbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        entry TEXT NOT NULL
    ) STRICT;",
    // 7: the chain a call came through, for calls made inside script runs: its approval is
    // resolved by nobody in it (nor the scripts' authors) and consumed only by the same chain.
    "ALTER TABLE approvals ADD COLUMN chain_through TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE approvals ADD COLUMN chain_authors TEXT NOT NULL DEFAULT '[]';
    DROP INDEX approvals_by_call;
    DROP INDEX approvals_one_pending;
    CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, chain_through, status);
    CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash, chain_through)
        WHERE status = 'pending';",
    // 8: a revision of the upstreams and their pins, moved by every change to either (so a
    // running `larkgate serve` notices an upstream added, removed or approved beside it), and
    // how the running gateway last saw each upstream (for `larkgate upstream list` beside it).
    "CREATE TABLE upstream_revision (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision INTEGER NOT NULL
    ) STRICT;
    INSERT INTO upstream_revision (id, revision) VALUES (1, 0);
    CREATE TRIGGER upstreams_inserted AFTER INSERT ON upstreams
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TRIGGER upstreams_updated AFTER UPDATE ON upstreams
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TRIGGER upstreams_deleted AFTER DELETE ON upstreams
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TRIGGER upstream_pins_inserted AFTER INSERT ON upstream_pins
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TRIGGER upstream_pins_updated AFTER UPDATE ON upstream_pins
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TRIGGER upstream_pins_deleted AFTER DELETE ON upstream_pins
        BEGIN UPDATE upstream_revision SET revision = revision + 1; END;
    CREATE TABLE upstream_status (
        alias TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;",
    // 9: an OAuth-protected upstream's credentials (tokens, client registration), sealed by
    // larkgate with the operator's credential key before they reach the store.
    "CREATE TABLE upstream_credentials (
        alias TEXT PRIMARY KEY,
        sealed BLOB NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;",
    // 10: what an approver is shown of a call (its canonical arguments, redacted as the policy
    // says; the run and script it was made in), why they decided, and pending approvals that
    // expire. The status check gains `expired`, which SQLite changes only by rebuilding. And
    // runs by when they started, newest first, for `runs list`.
    "CREATE TABLE approvals_new (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('pending', 'approved', 'denied', 'used', 'expired')),
        created_at_ms INTEGER NOT NULL,
        resolved_by TEXT,
        resolved_at_ms INTEGER,
        expires_at_ms INTEGER,
        used_at_ms INTEGER,
        chain_through TEXT NOT NULL DEFAULT '[]',
        chain_authors TEXT NOT NULL DEFAULT '[]',
        arguments TEXT,
        run_id TEXT,
        script TEXT,
        reason TEXT
    ) STRICT;
    INSERT INTO approvals_new (id, principal, tool, args_hash, status, created_at_ms,
        resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors)
        SELECT id, principal, tool, args_hash, status, created_at_ms, resolved_by,
            resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors
        FROM approvals;
    DROP TABLE approvals;
    ALTER TABLE approvals_new RENAME TO approvals;
    CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, chain_through, status);
    CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash, chain_through)
        WHERE status = 'pending';
    CREATE INDEX approvals_pending_since ON approvals (created_at_ms) WHERE status = 'pending';
    CREATE INDEX runs_by_start ON runs (started_at_ms);",
    // 11: what a review run would have written (the calls it recorded instead of making them),
    // and review runs by the exact source they ran, for `script publish`; the upstream tools a
    // published version refers to, with the definitions it was published against (NULL for
    // versions published before).
    "ALTER TABLE runs ADD COLUMN review TEXT;
    ALTER TABLE script_versions ADD COLUMN pins TEXT;
    CREATE INDEX runs_reviews ON runs (script, hash, started_at_ms) WHERE kind = 'review';",
    // 12: which replica recorded each audit record, and its sequence in that replica's journal
    // (NULL for records chained before): a replayed journal is chained once.
    "ALTER TABLE audit ADD COLUMN replica TEXT;
    ALTER TABLE audit ADD COLUMN local_seq INTEGER;
    CREATE UNIQUE INDEX audit_by_replica ON audit (replica, local_seq) WHERE replica IS NOT NULL;",
    // 13: 2025-11-25 sessions as every replica sees them: who opened each (the only principal
    // that may use it), what a replica needs to continue it, and when it expires unless used.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        state TEXT,
        expires_at_ms INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX sessions_by_owner ON sessions (owner, expires_at_ms);
    CREATE INDEX sessions_by_expiry ON sessions (expires_at_ms);",
    // 14: which identity provider's accounts may sign in as each principal (NULL: none, only
    // larkgate's tokens). A person or service registered before, never given a token, could
    // only have been reached by signing in: it is bound by its first sign-in (`*`). One that
    // has a token (the first `admin` has) is no provider account's.
    "ALTER TABLE principals ADD COLUMN issuer TEXT;
    UPDATE principals SET issuer = '*' WHERE kind IN ('user', 'service')
        AND id NOT IN (SELECT principal FROM tokens);",
    // 15: the size of an approval's whole arguments (what it records is a bounded preview),
    // and approvals by status and age, for listing a page at a time.
    "ALTER TABLE approvals ADD COLUMN arguments_bytes INTEGER;
    CREATE INDEX approvals_by_status ON approvals (status, created_at_ms, id);",
    // 16: an approval its caller withdrew (it cancelled the call that waited for a decision).
    // The status check gains `withdrawn`, which SQLite changes only by rebuilding.
    "CREATE TABLE approvals_new (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN
            ('pending', 'approved', 'denied', 'used', 'expired', 'withdrawn')),
        created_at_ms INTEGER NOT NULL,
        resolved_by TEXT,
        resolved_at_ms INTEGER,
        expires_at_ms INTEGER,
        used_at_ms INTEGER,
        chain_through TEXT NOT NULL DEFAULT '[]',
        chain_authors TEXT NOT NULL DEFAULT '[]',
        arguments TEXT,
        run_id TEXT,
        script TEXT,
        reason TEXT,
        arguments_bytes INTEGER
    ) STRICT;
    INSERT INTO approvals_new SELECT id, principal, tool, args_hash, status, created_at_ms,
        resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors,
        arguments, run_id, script, reason, arguments_bytes FROM approvals;
    DROP TABLE approvals;
    ALTER TABLE approvals_new RENAME TO approvals;
    CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, chain_through, status);
    CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash, chain_through)
        WHERE status = 'pending';
    CREATE INDEX approvals_pending_since ON approvals (created_at_ms) WHERE status = 'pending';
    CREATE INDEX approvals_by_status ON approvals (status, created_at_ms, id);",
    // 17: in a copy made by `larkgate backup`, the chain's head when it was made (see
    // `SqliteStore::backup_to`); empty in a store that is not a backup.
    "CREATE TABLE IF NOT EXISTS backup_origin (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        taken_at_ms INTEGER NOT NULL,
        audit_seq INTEGER NOT NULL,
        audit_hash TEXT NOT NULL
    ) STRICT;",
    // 18: virtual servers added at run time, and a revision that moves with each change, for
    // a running gateway to notice changes made beside it. (Written to be applied again over
    // itself, as the steps before it are.)
    "CREATE TABLE IF NOT EXISTS servers (
        name TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at_ms INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE IF NOT EXISTS server_revision (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision INTEGER NOT NULL
    ) STRICT;
    INSERT OR IGNORE INTO server_revision (id, revision) VALUES (1, 0);
    CREATE TRIGGER IF NOT EXISTS servers_inserted AFTER INSERT ON servers
        BEGIN UPDATE server_revision SET revision = revision + 1; END;
    CREATE TRIGGER IF NOT EXISTS servers_updated AFTER UPDATE ON servers
        BEGIN UPDATE server_revision SET revision = revision + 1; END;
    CREATE TRIGGER IF NOT EXISTS servers_deleted AFTER DELETE ON servers
        BEGIN UPDATE server_revision SET revision = revision + 1; END;",
];

/// Applies every migration the database has not seen, each in its own transaction.
pub(super) fn run(connection: &mut Connection) -> Result<()> {
    let current: i64 = connection.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let current = usize::try_from(current).unwrap_or(usize::MAX);
    if current > MIGRATIONS.len() {
        return Err(StoreError::Invalid(format!(
            "the database is at schema version {current}, newer than this larkgate knows \
             ({}); run a newer larkgate",
            MIGRATIONS.len()
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        // Immediate: a second process migrating at the same moment waits here, then finds the
        // step done and skips it.
        let tx = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if now > index as i64 {
            tx.commit()?;
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (index + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}
