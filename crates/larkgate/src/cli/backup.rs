//! `larkgate backup FILE` and `larkgate restore FILE`: a consistent copy of a SQLite data
//! directory's store, made while `serve` runs, and a new data directory from one.
//!
//! A backup is one SQLite file:
//!
//! 1. the audit journal's segments copied, then the store copied with SQLite's online backup
//!    API, from one snapshot ([`SqliteStore::backup_to`]), beside a running `serve` (which
//!    keeps writing meanwhile);
//! 2. the segments replayed into the copy, as a larkgate starting after a crash would replay
//!    them: the records `serve` had journaled but not yet chained are in the backup too, and a
//!    record in both is chained once. Up to the snapshot the backup's chain is the original's
//!    record for record; after it, it holds the records journaled by then, in their order;
//! 3. the chain's head it then holds recorded in it ([`BackupOrigin`]), and printed, so that
//!    `audit verify` on a restored store can say it holds that head;
//! 4. compacted into FILE (`VACUUM INTO`), written under a temporary name first.
//!
//! Not in it: the configuration file (`larkgate.toml`, which an operator keeps elsewhere) and
//! `LARKGATE_CREDENTIAL_KEY`, which seals upstream credentials and must never sit beside
//! them. On PostgreSQL, `pg_dump` is the tool (see `docs/operations.md`).
//!
//! `restore` writes only into a data directory without a store, so that it never overwrites
//! one, and verifies the restored chain against the head the backup recorded.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use larkgate_platform::audit::{AuditLog, AuditOptions, KnownHead, verify_against};
use larkgate_store::{
    ApprovalQuery, ApprovalStore, AuditStore, BackupOrigin, DATABASE_FILE, PrincipalStore,
    ScriptStore, ServerStore, SqliteStore, UpstreamStore, now_ms,
};

/// The name the journal's segments start with in a data directory.
const JOURNAL_PREFIX: &str = "audit.journal";
/// The file naming the replica that journals in a data directory.
const REPLICA_FILE: &str = "replica";

/// A folder removed when dropped: the work in progress of a backup or restore that failed.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `larkgate backup FILE`.
pub(crate) async fn backup(
    config: &crate::config::Config,
    data_dir: &Path,
    file: &Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if config
        .store
        .postgres(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?
        .is_some()
    {
        bail!(
            "the store is PostgreSQL ([store] url): back it up with pg_dump, as \
             docs/operations.md (\"Back up and restore\") says; `larkgate backup` copies a SQLite store"
        );
    }
    if !data_dir.join(DATABASE_FILE).exists() {
        bail!(
            "there is no store in {} to back up (no {DATABASE_FILE}): is --data-dir the one \
             `serve` uses?",
            data_dir.display()
        );
    }
    if file.exists() {
        bail!(
            "{} exists already: a backup is written to a new file",
            file.display()
        );
    }
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = file
        .file_name()
        .context("the backup's path names no file")?
        .to_string_lossy()
        .into_owned();
    let staging = Staging(parent.join(format!(".{name}.partial-{}", std::process::id())));
    std::fs::create_dir(&staging.0)
        .with_context(|| format!("cannot write beside {}", file.display()))?;

    // The journal first, then the store: a record not yet chained when the store's snapshot is
    // taken was journaled before it, and its segment is deleted only once it is chained, so it
    // is in the segments copied here (a segment gone meanwhile was chained, and is in the
    // snapshot). Taken the other way round, a segment chained and deleted between the two
    // would be in neither.
    // With the file naming the replica that wrote them: its records are replayed as its own.
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(JOURNAL_PREFIX) || name == REPLICA_FILE) {
            continue;
        }
        match std::fs::copy(entry.path(), staging.0.join(entry.file_name())) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    SqliteStore::open(data_dir)?.backup_to(&staging.0.join(DATABASE_FILE))?;
    let copy = Arc::new(SqliteStore::open(&staging.0)?);
    let log = AuditLog::open(&staging.0, copy.clone(), AuditOptions::default()).await?;
    log.flush().await?;
    drop(log);
    let origin = copy.record_backup_origin(now_ms()).await?;
    let counts = Counts::of(&copy).await?;
    let written = parent.join(format!(".{name}.written-{}", std::process::id()));
    copy.compact_into(&written).await?;
    std::fs::rename(&written, file)?;
    writeln!(
        out,
        "backed up {} to {}: {counts}; the audit chain up to record {} (head {}:{}), recorded \
         in the backup",
        data_dir.display(),
        file.display(),
        origin.head.seq,
        origin.head.seq,
        origin.head.hash
    )?;
    writeln!(
        out,
        "not in it: the configuration file, and LARKGATE_CREDENTIAL_KEY (which seals upstream \
         credentials): keep those yourself"
    )?;
    Ok(())
}

/// `larkgate restore FILE`: into `data_dir`, which must hold no store.
pub(crate) async fn restore(
    file: &Path,
    data_dir: &Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if !file.is_file() {
        bail!("there is no backup at {}", file.display());
    }
    let occupied = std::fs::read_dir(data_dir).ok().is_some_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(DATABASE_FILE) || name.starts_with(JOURNAL_PREFIX)
        })
    });
    if occupied {
        bail!(
            "{} holds a store already: restore writes only into a data directory without one \
             (give another with --data-dir, then point larkgate at it)",
            data_dir.display()
        );
    }
    std::fs::create_dir_all(data_dir)?;
    let staging = Staging(data_dir.join(format!(".restore-{}", std::process::id())));
    std::fs::create_dir(&staging.0)?;
    std::fs::copy(file, staging.0.join(DATABASE_FILE))?;
    // Opening it brings an older backup's schema to this larkgate's.
    let store = SqliteStore::open(&staging.0)
        .with_context(|| format!("{} is not a larkgate store", file.display()))?;
    let Some(origin) = store.backup_origin().await? else {
        bail!(
            "{} is a larkgate store but not a backup made by `larkgate backup` (it records no \
             backup origin): copy a stopped data directory whole instead",
            file.display()
        );
    };
    let report = verify_against(&store, Some(&known(&origin))).await?;
    if !report.intact() {
        bail!(
            "the backup's audit chain does not verify ({}); nothing was restored",
            report
                .first_broken
                .map(|(seq, why)| format!("record {seq}: {why}"))
                .or(report.head_mismatch)
                .or(report.known_head_mismatch)
                .unwrap_or_default()
        );
    }
    let counts = Counts::of(&store).await?;
    drop(store);
    std::fs::rename(staging.0.join(DATABASE_FILE), data_dir.join(DATABASE_FILE))?;
    writeln!(
        out,
        "restored {} into {}: {counts}; the audit chain verifies up to record {}, the head \
         recorded when the backup was taken ({})",
        file.display(),
        data_dir.display(),
        origin.head.seq,
        larkgate_platform::capabilities::rfc3339_from_ms(origin.taken_at_ms)
    )?;
    Ok(())
}

/// The head a backup recorded, as `audit verify --head` takes one.
pub(crate) fn known(origin: &BackupOrigin) -> KnownHead {
    KnownHead {
        seq: origin.head.seq,
        hash: origin.head.hash.clone(),
    }
}

/// What a store holds, counted for an operator.
struct Counts {
    principals: usize,
    tokens: usize,
    scripts: usize,
    approvals: usize,
    upstreams: usize,
    servers: usize,
}

impl Counts {
    async fn of(store: &SqliteStore) -> anyhow::Result<Self> {
        Ok(Counts {
            principals: store.principals().await?.len(),
            tokens: store.tokens(None).await?.len(),
            scripts: store.latest_versions().await?.len(),
            approvals: store
                .approvals(ApprovalQuery {
                    status: None,
                    after: None,
                    limit: u32::MAX,
                })
                .await?
                .len(),
            upstreams: store.upstreams().await?.len(),
            servers: store.servers().await?.len(),
        })
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} principals, {} tokens, {} published scripts, {} approvals, {} upstreams added \
             with `upstream add`, {} servers added with `server add`",
            self.principals,
            self.tokens,
            self.scripts,
            self.approvals,
            self.upstreams,
            self.servers
        )
    }
}
