//! The audit chain: every refusal, and an intent before and an outcome after every admitted
//! call, on one SHA-256 hash chain.
//!
//! ## Durability without a commit per record
//!
//! A record is *acknowledged* when [`AuditLog::append`] returns. By then it has been written,
//! with one `write(2)`, to an append-only journal file next to the database: from that moment
//! it is in the kernel's page cache and survives the larkgate process being killed. A
//! background task moves journaled records into the store in batches (one transaction per
//! batch) and then rotates the journal away. At start, any journal left behind by a crash is
//! replayed into the store — replay is idempotent, keyed by sequence — before new records are
//! appended. So the caller's path pays for one small write, not for two SQLite commits.
//! Surviving power loss as well needs an fsync per record: [`AuditOptions::fsync`].
//!
//! ## The chain
//!
//! Each record's `hash` is SHA-256 over its fields and the previous record's hash, and the
//! chain's head (sequence, hash) is also kept in its own table, moved in the same transaction
//! as each batch. [`verify`] recomputes the chain and names the first record that breaks it,
//! a head that is ahead of the table (deleted last records), and intents without an outcome.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_store::{AuditHead, AuditKind, AuditQuery, AuditRecord, Store, StoreError};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

/// The hash before the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The live journal. Rotated journals are named `audit.journal.<last sequence>`.
const JOURNAL: &str = "audit.journal";
/// Held (an exclusive file lock) by the one process that owns the chain.
const LOCK: &str = "audit.lock";

/// What a caller records; the log adds sequence, time and hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditEntry {
    /// What the record records.
    pub kind: Option<AuditKind>,
    /// Who called.
    pub principal: String,
    /// The run the call came from.
    pub run_id: Option<String>,
    /// The run kind.
    pub run_kind: Option<String>,
    /// The session's label.
    pub session: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// SHA-256 of the canonical arguments.
    pub args_hash: Option<String>,
    /// The canonical arguments, only when configured.
    pub args: Option<String>,
    /// Refusal or outcome code.
    pub code: Option<String>,
    /// For an outcome, its intent's sequence.
    pub intent_seq: Option<u64>,
    /// For an outcome, the call's duration.
    pub duration_us: Option<u64>,
    /// Free text.
    pub detail: Option<String>,
}

/// Why a record could not be written. A call whose intent cannot be written does not run.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The journal could not be written.
    #[error("the audit journal could not be written: {0}")]
    Journal(#[from] std::io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another process owns the audit chain in this directory.
    #[error(
        "another larkgate process is using the audit log in {0}; stop it or point this one at \
         another data directory"
    )]
    Busy(String),
}

/// Where records go. [`AuditLog`] is the real one; tests substitute a failing one to prove the
/// pipeline fails closed.
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Appends a record; returns its sequence once it is durable against a process crash.
    fn append(&self, entry: AuditEntry) -> Result<u64, AuditError>;
}

/// Options of the audit log.
#[derive(Clone, Copy, Debug)]
pub struct AuditOptions {
    /// fsync the journal after every record (survives power loss; costs a disk flush per
    /// record).
    pub fsync: bool,
    /// How often the background task moves records into the store.
    pub flush_interval: Duration,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            fsync: false,
            flush_interval: Duration::from_millis(50),
        }
    }
}

#[derive(Debug)]
struct Chain {
    seq: u64,
    prev_hash: String,
    journal: File,
    /// Records journaled but not yet in the store.
    pending: Vec<AuditRecord>,
    /// Rotated journals whose records are not yet known to be in the store.
    rotated: Vec<PathBuf>,
}

/// The journaled, chained audit log. See the module documentation.
#[derive(Debug)]
pub struct AuditLog {
    chain: Mutex<Chain>,
    dir: PathBuf,
    store: Arc<dyn Store>,
    options: AuditOptions,
    /// The exclusive lock on `audit.lock`, held for the log's lifetime: two processes
    /// appending to one chain would fork it.
    _lock: File,
    wake: Arc<Notify>,
    /// Serializes flushes (the background task and explicit [`AuditLog::flush`] calls).
    flushing: tokio::sync::Mutex<()>,
}

/// The fields a record's hash covers, in a fixed order.
#[derive(Serialize)]
struct HashInput<'a> {
    seq: u64,
    at_ms: i64,
    kind: &'a str,
    principal: &'a str,
    run_id: &'a Option<String>,
    run_kind: &'a Option<String>,
    session: &'a Option<String>,
    tool: &'a Option<String>,
    args_hash: &'a Option<String>,
    args: &'a Option<String>,
    code: &'a Option<String>,
    intent_seq: Option<u64>,
    duration_us: Option<u64>,
    detail: &'a Option<String>,
    prev_hash: &'a str,
}

/// The hash a record should carry.
pub fn record_hash(record: &AuditRecord) -> String {
    let input = HashInput {
        seq: record.seq,
        at_ms: record.at_ms,
        kind: record.kind.as_str(),
        principal: &record.principal,
        run_id: &record.run_id,
        run_kind: &record.run_kind,
        session: &record.session,
        tool: &record.tool,
        args_hash: &record.args_hash,
        args: &record.args,
        code: &record.code,
        intent_seq: record.intent_seq,
        duration_us: record.duration_us,
        detail: &record.detail,
        prev_hash: &record.prev_hash,
    };
    // Serializing plain strings and integers cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl AuditLog {
    /// Opens the log in `dir`: replays any journal a crash left behind into `store`, then
    /// continues the chain from the store's head. Spawns the background flusher on the current
    /// tokio runtime.
    pub async fn open(
        dir: &Path,
        store: Arc<dyn Store>,
        options: AuditOptions,
    ) -> Result<Arc<Self>, AuditError> {
        std::fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK))?;
        if lock.try_lock().is_err() {
            return Err(AuditError::Busy(dir.display().to_string()));
        }
        let mut left_behind = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let is_journal = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(JOURNAL));
            if is_journal {
                left_behind.push(path);
            }
        }
        for path in &left_behind {
            let records = read_journal(path)?;
            store.append_audit(records).await?;
        }
        for path in &left_behind {
            std::fs::remove_file(path)?;
        }
        let head = store.audit_head().await?;
        let (seq, prev_hash) = head
            .map(|h| (h.seq, h.hash))
            .unwrap_or((0, GENESIS_HASH.to_owned()));
        let journal = open_journal(&dir.join(JOURNAL))?;
        let log = Arc::new(AuditLog {
            chain: Mutex::new(Chain {
                seq,
                prev_hash,
                journal,
                pending: Vec::new(),
                rotated: Vec::new(),
            }),
            dir: dir.to_owned(),
            store,
            options,
            _lock: lock,
            wake: Arc::new(Notify::new()),
            flushing: tokio::sync::Mutex::new(()),
        });
        // The flusher holds the log only while it flushes, so dropping the last handle ends it.
        let weak = Arc::downgrade(&log);
        let wake = Arc::clone(&log.wake);
        let interval = options.flush_interval;
        tokio::spawn(async move {
            loop {
                let _ = tokio::time::timeout(interval, wake.notified()).await;
                let Some(log) = weak.upgrade() else { return };
                if let Err(error) = log.flush().await {
                    tracing::error!(%error, "audit records could not be moved into the store; they stay in the journal");
                }
            }
        });
        Ok(log)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chain> {
        // A panic while holding the lock happens before the sequence moves (see `append`),
        // so the chain is consistent.
        self.chain.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves every journaled record into the store now.
    pub async fn flush(&self) -> Result<(), AuditError> {
        let _one_at_a_time = self.flushing.lock().await;
        let (batch, rotated) = {
            let mut chain = self.lock();
            if chain.pending.is_empty() {
                return Ok(());
            }
            // Rotate: the live journal now holds nothing that is not in `pending`.
            let rotated = self.dir.join(format!("{JOURNAL}.{:020}", chain.seq));
            std::fs::rename(self.dir.join(JOURNAL), &rotated)?;
            chain.journal = open_journal(&self.dir.join(JOURNAL))?;
            chain.rotated.push(rotated);
            (std::mem::take(&mut chain.pending), chain.rotated.clone())
        };
        if let Err(error) = self.store.append_audit(batch.clone()).await {
            // Keep the records (and their rotated files) for the next attempt.
            let mut chain = self.lock();
            let newer = std::mem::replace(&mut chain.pending, batch);
            chain.pending.extend(newer);
            return Err(error.into());
        }
        for path in &rotated {
            std::fs::remove_file(path)?;
        }
        self.lock().rotated.retain(|p| !rotated.contains(p));
        Ok(())
    }

    /// The last sequence and hash appended (possibly not yet in the store).
    pub fn head(&self) -> AuditHead {
        let chain = self.lock();
        AuditHead {
            seq: chain.seq,
            hash: chain.prev_hash.clone(),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // Let the flusher notice that the log is gone.
        self.wake.notify_one();
    }
}

impl AuditSink for AuditLog {
    fn append(&self, entry: AuditEntry) -> Result<u64, AuditError> {
        let mut chain = self.lock();
        let mut record = AuditRecord {
            seq: chain.seq + 1,
            at_ms: now_ms(),
            kind: entry.kind.unwrap_or(AuditKind::Event),
            principal: entry.principal,
            run_id: entry.run_id,
            run_kind: entry.run_kind,
            session: entry.session,
            tool: entry.tool,
            args_hash: entry.args_hash,
            args: entry.args,
            code: entry.code,
            intent_seq: entry.intent_seq,
            duration_us: entry.duration_us,
            detail: entry.detail,
            prev_hash: chain.prev_hash.clone(),
            hash: String::new(),
        };
        record.hash = record_hash(&record);
        let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write: after it returns the record survives a process crash.
        chain.journal.write_all(&line)?;
        if self.options.fsync {
            chain.journal.sync_data()?;
        }
        chain.seq = record.seq;
        chain.prev_hash = record.hash.clone();
        chain.pending.push(record);
        let seq = chain.seq;
        drop(chain);
        if seq.is_multiple_of(256) {
            self.wake.notify_one();
        }
        Ok(seq)
    }
}

fn open_journal(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Reads a journal; a final line cut short by a crash mid-write was never acknowledged and is
/// skipped.
fn read_journal(path: &Path) -> std::io::Result<Vec<AuditRecord>> {
    let mut records = Vec::new();
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        match serde_json::from_str::<AuditRecord>(&line) {
            Ok(record) => records.push(record),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "skipping an unreadable audit journal line");
            }
        }
    }
    Ok(records)
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// How many records were checked.
    pub records: u64,
    /// The first record that breaks the chain, and why.
    pub first_broken: Option<(u64, String)>,
    /// A head ahead of the last record: records were deleted from the end.
    pub head_mismatch: Option<String>,
    /// Intents with no outcome (a call still running, or one whose outcome was lost).
    pub intents_without_outcome: Vec<u64>,
}

impl VerifyReport {
    /// Whether the chain is intact (open intents are reported but do not break it).
    pub fn intact(&self) -> bool {
        self.first_broken.is_none() && self.head_mismatch.is_none()
    }
}

/// Recomputes the whole chain in the store.
pub async fn verify(store: &dyn Store) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    let mut prev_hash = GENESIS_HASH.to_owned();
    let mut expected_seq = 1;
    let mut open_intents = std::collections::BTreeSet::new();
    let mut after = None;
    loop {
        let page = store
            .audit_records(AuditQuery {
                after_seq: after,
                limit: Some(10_000),
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        for record in &page {
            report.records += 1;
            if report.first_broken.is_none() {
                let problem = if record.seq != expected_seq {
                    Some(format!(
                        "expected sequence {expected_seq}, found {}: records are missing",
                        record.seq
                    ))
                } else if record.prev_hash != prev_hash {
                    Some("its previous hash does not match the record before it".to_owned())
                } else if record_hash(record) != record.hash {
                    Some("its contents do not match its hash: it was edited".to_owned())
                } else {
                    None
                };
                if let Some(problem) = problem {
                    report.first_broken = Some((record.seq, problem));
                }
            }
            match record.kind {
                AuditKind::Intent => {
                    open_intents.insert(record.seq);
                }
                AuditKind::Outcome => {
                    if let Some(intent) = record.intent_seq {
                        open_intents.remove(&intent);
                    }
                }
                AuditKind::Refusal | AuditKind::Event => {}
            }
            expected_seq = record.seq + 1;
            prev_hash = record.hash.clone();
        }
    }
    let last_seq = expected_seq - 1;
    match store.audit_head().await? {
        Some(head) if head.seq > last_seq => {
            report.head_mismatch = Some(format!(
                "the head is at sequence {} but the last record is {last_seq}: records were \
                 deleted from the end",
                head.seq
            ));
        }
        Some(head) if head.seq == last_seq && head.hash != prev_hash => {
            report.head_mismatch =
                Some(format!("the head's hash does not match record {last_seq}"));
        }
        None if last_seq > 0 => {
            report.head_mismatch = Some("records exist but the head is missing".to_owned());
        }
        _ => {}
    }
    report.intents_without_outcome = open_intents.into_iter().collect();
    Ok(report)
}
