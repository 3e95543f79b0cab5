//! Copies of a SQLite store for `larkgate backup`.
//!
//! The copy is made with SQLite's online backup API from a connection of its own, in one step:
//! it reads one snapshot of the database (a read transaction, which in WAL mode never blocks a
//! running larkgate's writes), so the copy is consistent whatever is written meanwhile. What a
//! running larkgate has journaled but not yet chained is not in the database: the caller
//! replays the journal into the copy (see `larkgate backup`), then records the chain's head in
//! it ([`SqliteStore::record_backup_origin`]) and compacts it into one file
//! ([`SqliteStore::compact_into`]).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::{AuditHead, BackupOrigin, Result, StoreError};

impl SqliteStore {
    /// Copies this database into a new database file at `to` (which must not exist), with
    /// SQLite's online backup API, from one snapshot.
    pub fn backup_to(&self, to: &Path) -> Result<()> {
        if to.exists() {
            return Err(StoreError::Invalid(format!(
                "{} exists already: a backup is written to a new file",
                to.display()
            )));
        }
        let source = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        source.busy_timeout(super::BUSY_TIMEOUT)?;
        let mut copy = Connection::open(to)?;
        let backup = rusqlite::backup::Backup::new(&source, &mut copy)?;
        // All pages in one step (-1): one read transaction, so one snapshot. A step that finds
        // the source locked (a checkpoint under way) is tried again, within the busy timeout.
        let deadline = std::time::Instant::now() + super::BUSY_TIMEOUT;
        loop {
            match backup.step(-1)? {
                rusqlite::backup::StepResult::Done => return Ok(()),
                rusqlite::backup::StepResult::More => {}
                _ if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => {
                    return Err(StoreError::Invalid(
                        "the store stayed locked through the backup's busy timeout; try again"
                            .to_owned(),
                    ));
                }
            }
        }
    }

    /// Records, in this store (a copy [`SqliteStore::backup_to`] made), the chain's head it
    /// holds, as of `taken_at_ms`.
    pub async fn record_backup_origin(&self, taken_at_ms: i64) -> Result<BackupOrigin> {
        self.with(move |c| {
            let head: Option<AuditHead> = super::audit::head(c)?;
            let head = head.unwrap_or(AuditHead {
                seq: 0,
                hash: crate::GENESIS_HASH.to_owned(),
            });
            c.execute(
                "INSERT OR REPLACE INTO backup_origin (id, taken_at_ms, audit_seq, audit_hash) \
                 VALUES (1, ?1, ?2, ?3)",
                rusqlite::params![taken_at_ms, crate::signed(head.seq), head.hash],
            )?;
            Ok(BackupOrigin { taken_at_ms, head })
        })
        .await
    }

    /// Writes this database, compacted, into a new file at `to` (`VACUUM INTO`): one file, with
    /// nothing left in a write-ahead log beside it.
    pub async fn compact_into(&self, to: &Path) -> Result<()> {
        let to = to.to_str().map(str::to_owned).ok_or_else(|| {
            StoreError::Invalid("the backup's path is not valid UTF-8".to_owned())
        })?;
        self.with(move |c| {
            c.execute("VACUUM INTO ?1", [to])?;
            Ok(())
        })
        .await
    }
}

/// The backup origin recorded in `c`'s database, if it is a backup.
pub(super) fn origin(c: &Connection) -> Result<Option<BackupOrigin>> {
    c.prepare_cached("SELECT taken_at_ms, audit_seq, audit_hash FROM backup_origin WHERE id = 1")?
        .query_and_then([], |row| {
            let seq: i64 = row.get(1)?;
            Ok(BackupOrigin {
                taken_at_ms: row.get(0)?,
                head: AuditHead {
                    seq: u64::try_from(seq).unwrap_or_default(),
                    hash: row.get(2)?,
                },
            })
        })?
        .next()
        .transpose()
}

use super::SqliteStore;
