//! The journal on disk: a sequence of append-only segment files, the newest one live.
//!
//! A record is acknowledged once its line is in a segment, before it is in the store, so the
//! journal must keep every acknowledged line readable through any order of store outage, full
//! disk, descriptor exhaustion and crash. What holds, and how:
//!
//! - **No segment is overwritten or renamed.** Each is created with `O_CREAT | O_EXCL` under a
//!   number that only grows (`audit.journal.<n>`); rotation opens a new one, nothing moves.
//!   A segment is rotated once it is full ([`Segments::rotate_when_full`]), not at every
//!   flush, so a busy log does not create and remove a file twenty times a second; until then
//!   it holds records the store already has as well, which a restart replays idempotently.
//! - **No segment is removed before the store holds its last record**
//!   ([`Segments::release`] is told how far the store holds the chain; the live one goes
//!   when the log closes with all of it stored).
//! - **Rotation that cannot happen changes nothing.** The next segment is opened before the
//!   live one is closed: without a descriptor or space for it, the live segment stays live and
//!   is released at a later rotation.
//! - **A failed write leaves no torn line.** A write or fsync that fails (disk full, I/O error)
//!   is cut back to the last whole line; if even that fails, the segment is closed and the next
//!   line goes to a new one, so no later line is glued onto a torn one.
//! - **A line that must not be lost is held.** A caller may ask for a line to be held in memory
//!   when it cannot be written (the outcome of a call that already ran): it is written before
//!   any later line, so the journal never holds a record whose predecessor it lacks unless the
//!   store already has that predecessor.
//! - **A crash at any step** leaves whole segments, the live one possibly ending in a line cut
//!   short (never acknowledged). [`recover`] reads every segment, orders the records by
//!   their local sequence, and the replay into the store is idempotent.
//!
//! Limits: without `fsync` a line survives the process being killed, not the machine losing
//! power; a held line lives only in memory until the store takes it.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use larkgate_store::{AuditRecord, JournaledAudit};
use serde::Deserialize;

/// Every journal file's name starts with this (older versions wrote `audit.journal` and
/// `audit.journal.<last sequence>`; [`recover`] reads those too).
pub(super) const PREFIX: &str = "audit.journal";

/// How many numbers [`Segments::open_next`] tries past one that is taken.
const NAME_ATTEMPTS: u64 = 1_000;

/// A journal line written before records were chained at flush: a chained record, and the
/// inbox entry it adopted, if it did.
#[derive(Deserialize)]
struct ChainedLine {
    #[serde(flatten)]
    record: AuditRecord,
    #[serde(default)]
    adopted: Option<i64>,
}

/// What a crash left behind: the records of every segment and the files. Lines written by this
/// version are `journaled` (in local order); lines of a journal an earlier version left behind
/// are already `chained` (in sequence order, with the inbox entries they adopted).
#[derive(Debug, Default)]
pub(super) struct Recovered {
    pub(super) journaled: Vec<JournaledAudit>,
    pub(super) chained: Vec<AuditRecord>,
    pub(super) adopted: Vec<i64>,
    pub(super) files: Vec<PathBuf>,
}

/// Reads every journal segment in `dir`. A line that does not parse (the last one, cut short
/// by a crash mid-write, which was never acknowledged) is skipped with a warning.
pub(super) fn recover(dir: &Path) -> std::io::Result<Recovered> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_journal = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PREFIX));
        if is_journal {
            files.push(path);
        }
    }
    files.sort();
    let mut journaled = BTreeMap::new();
    let mut chained = BTreeMap::new();
    let mut adopted = Vec::new();
    for path in &files {
        for line in BufReader::new(File::open(path)?).split(b'\n') {
            let line = line?;
            match serde_json::from_slice::<JournaledAudit>(&line) {
                Ok(entry) if entry.record.hash.is_empty() => {
                    if let Some(local) = entry.record.local_seq {
                        journaled.entry(local).or_insert(entry);
                    }
                    continue;
                }
                _ => {}
            }
            match serde_json::from_slice::<ChainedLine>(&line) {
                Ok(line) => {
                    adopted.extend(line.adopted);
                    chained.entry(line.record.seq).or_insert(line.record);
                }
                Err(error) => {
                    tracing::warn!(%error, path = %path.display(), "skipping an unreadable audit journal line");
                }
            }
        }
    }
    adopted.sort_unstable();
    adopted.dedup();
    Ok(Recovered {
        journaled: journaled.into_values().collect(),
        chained: chained.into_values().collect(),
        adopted,
        files,
    })
}

/// Removes recovered files once their records are in the store.
pub(super) fn remove_recovered(files: &[PathBuf]) -> std::io::Result<()> {
    for path in files {
        match std::fs::remove_file(path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// What became of a line given to [`Segments::write`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Written {
    /// In the live segment.
    Journaled,
    /// Not writable now; held in memory and written before any later line.
    Held,
}

#[derive(Debug)]
struct Live {
    file: File,
    path: PathBuf,
    /// Bytes of whole lines: where a failed write is cut back to.
    len: u64,
    last_seq: Option<u64>,
    /// A failed write could not be cut back: no line may follow it in this file.
    torn: bool,
}

#[derive(Debug)]
struct Closed {
    path: PathBuf,
    /// Its last record (0 if it holds none): it may go once the store holds that.
    last_seq: u64,
}

/// The segments of a running log. See the module documentation.
#[derive(Debug)]
pub(super) struct Segments {
    dir: PathBuf,
    fsync: bool,
    next_number: u64,
    live: Live,
    closed: Vec<Closed>,
    held: VecDeque<(u64, Vec<u8>)>,
    /// How far the store holds the chain, as [`Segments::release`] was last told.
    stored_through: u64,
}

impl Segments {
    /// Starts a journal in `dir`, which holds no segment (they were recovered and removed).
    pub(super) fn start(dir: &Path, fsync: bool) -> std::io::Result<Self> {
        let (live, next_number) = open_next(dir, 1, fsync)?;
        Ok(Segments {
            dir: dir.to_owned(),
            fsync,
            next_number,
            live,
            closed: Vec::new(),
            held: VecDeque::new(),
            stored_through: 0,
        })
    }

    /// Writes record `seq`'s line (ending in a newline) after any held lines. When it cannot
    /// be written: with `hold`, it is held and written before any later line; without, the
    /// error is returned and nothing of it stays on disk.
    pub(super) fn write(
        &mut self,
        seq: u64,
        line: Vec<u8>,
        hold: bool,
    ) -> std::io::Result<Written> {
        let mut result = self.write_held();
        if result.is_ok() {
            result = self.write_line(seq, &line);
        }
        match result {
            Ok(()) => Ok(Written::Journaled),
            Err(error) if hold => {
                tracing::warn!(%error, seq, "the audit journal could not take a line that must not be lost");
                self.held.push_back((seq, line));
                Ok(Written::Held)
            }
            Err(error) => Err(error),
        }
    }

    fn write_held(&mut self) -> std::io::Result<()> {
        while let Some((seq, line)) = self.held.pop_front() {
            if let Err(error) = self.write_line(seq, &line) {
                self.held.push_front((seq, line));
                return Err(error);
            }
        }
        Ok(())
    }

    fn write_line(&mut self, seq: u64, line: &[u8]) -> std::io::Result<()> {
        if self.live.torn {
            self.rotate()?;
        }
        let written = self.live.file.write_all(line).and_then(|()| {
            if self.fsync {
                self.live.file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.live.len += line.len() as u64;
                self.live.last_seq = Some(seq);
                Ok(())
            }
            Err(error) => {
                // Cut back to the last whole line (the file is opened for appending, so the next
                // write lands at the new end); if that fails too, no line may follow here.
                if self.live.file.set_len(self.live.len).is_err() {
                    self.live.torn = true;
                }
                Err(error)
            }
        }
    }

    /// Moves writing to a new segment, if the live one holds anything. If the new one cannot be
    /// opened, the live one stays live and the error is returned.
    pub(super) fn rotate(&mut self) -> std::io::Result<()> {
        if self.live.last_seq.is_none() && !self.live.torn {
            return Ok(());
        }
        let (live, next_number) = open_next(&self.dir, self.next_number, self.fsync)?;
        self.next_number = next_number;
        let old = std::mem::replace(&mut self.live, live);
        self.closed.push(Closed {
            path: old.path,
            last_seq: old.last_seq.unwrap_or(0),
        });
        Ok(())
    }

    /// [`Self::rotate`] once the live segment holds `limit` bytes or more (or a torn line).
    pub(super) fn rotate_when_full(&mut self, limit: u64) -> std::io::Result<()> {
        if self.live.len >= limit || self.live.torn {
            self.rotate()
        } else {
            Ok(())
        }
    }

    /// The store now holds the chain through `stored_through`: closed segments it covers are
    /// removed, and held lines it covers need no journal any more. A removal that fails is
    /// retried at the next release.
    pub(super) fn release(&mut self, stored_through: u64) {
        self.stored_through = self.stored_through.max(stored_through);
        self.held.retain(|(seq, _)| *seq > stored_through);
        self.closed.retain(|segment| {
            if segment.last_seq > stored_through {
                return true;
            }
            match std::fs::remove_file(&segment.path) {
                Ok(()) => false,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
                Err(error) => {
                    tracing::warn!(%error, path = %segment.path.display(), "a stored audit journal segment could not be removed yet");
                    true
                }
            }
        });
    }
}

impl Drop for Segments {
    /// A live segment whose lines are all in the store (or that never took one) is removed,
    /// so a log that closes with everything stored leaves no journal behind. One that holds a
    /// line the store may lack stays for the next start to replay.
    fn drop(&mut self) {
        let stored = self
            .live
            .last_seq
            .is_none_or(|last| last <= self.stored_through && self.held.is_empty());
        if stored && !self.live.torn {
            let _ = std::fs::remove_file(&self.live.path);
        }
    }
}

/// Creates the first free segment numbered `from` or above; returns it and the next number.
fn open_next(dir: &Path, from: u64, fsync: bool) -> std::io::Result<(Live, u64)> {
    let mut number = from;
    loop {
        let path = dir.join(format!("{PREFIX}.{number}"));
        match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(file) => {
                if fsync {
                    // The new name must survive power loss as well as its lines.
                    File::open(dir)?.sync_all()?;
                }
                let live = Live {
                    file,
                    path,
                    len: 0,
                    last_seq: None,
                    torn: false,
                };
                return Ok((live, number + 1));
            }
            Err(error)
                if error.kind() == std::io::ErrorKind::AlreadyExists
                    && number < from + NAME_ATTEMPTS =>
            {
                number += 1;
            }
            Err(error) => return Err(error),
        }
    }
}
