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
//!
//! ## One owner, and events from other processes
//!
//! One process owns the chain (it holds `audit.lock`): two processes appending to one chain
//! would fork it. An operator's command run beside a gateway that owns it (`larkgate principal
//! add`, `token revoke`, `approvals approve`) still has an event to record. It hands the entry
//! over through [`ForwardingAudit`]: the entry is committed to the store's audit inbox, and
//! the owner's flusher chains it (with the time it was forwarded) and deletes it from the inbox
//! in the same transaction that stores the record, so each forwarded entry is chained exactly
//! once, across crashes too: the journal line of an adopted record names its inbox entry, and a
//! replay deletes it with the record. A forwarding process cannot record calls: an intent
//! needs its sequence at once, so [`ForwardingAudit`] refuses them and a call fails closed.
//!
//! The inbox trusts nothing new: whoever can write to the database can already rewrite the
//! unkeyed chain; the chain shows edits, insertions and deletions made by anything less.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_store::{AuditHead, AuditKind, AuditQuery, AuditRecord, Store, StoreError, now_ms};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

/// The hash before the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The live journal. Rotated journals are named `audit.journal.<last sequence>`.
const JOURNAL: &str = "audit.journal";
/// Held (an exclusive file lock) by the one process that owns the chain.
const LOCK: &str = "audit.lock";

/// What a caller records; the log adds sequence, time and hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// This process does not own the chain, so it cannot give a record its sequence now.
    #[error(
        "this larkgate process does not own the audit log (a running larkgate does), so it \
         cannot record calls; make calls through that process"
    )]
    NotOwner,
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

    /// Records an event whose sequence nobody needs (an approval resolved, a principal
    /// changed); returns once it is durable against a process crash.
    fn record_event(&self, entry: AuditEntry) -> Result<(), AuditError> {
        self.append(entry).map(|_| ())
    }

    /// Chains the events other processes have forwarded so far, so that what follows comes
    /// after them (a call under an approval resolved beside the gateway follows its
    /// approval). Nothing to do for a sink that adopts nothing.
    fn catch_up(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The sink of a process that does not own the chain: events go to the store's audit inbox,
/// for the owner to chain (see the module documentation). Calls are refused
/// ([`AuditError::NotOwner`]), so nothing runs unaudited.
#[derive(Debug)]
pub struct ForwardingAudit {
    store: Arc<dyn Store>,
}

impl ForwardingAudit {
    /// Forwards to the inbox of `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        ForwardingAudit { store }
    }
}

impl AuditSink for ForwardingAudit {
    fn append(&self, _entry: AuditEntry) -> Result<u64, AuditError> {
        Err(AuditError::NotOwner)
    }

    fn record_event(&self, entry: AuditEntry) -> Result<(), AuditError> {
        let text = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
        self.store.forward_audit(now_ms(), &text)?;
        Ok(())
    }
}

/// How many forwarded entries one flush adopts.
const ADOPT_BATCH: usize = 256;

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
    /// Inbox ids of the forwarded entries among `pending`.
    pending_adopted: Vec<i64>,
    /// Inbox ids chained but not yet deleted from the inbox (pending, or in a flush under way):
    /// never chained twice.
    adopted: std::collections::BTreeSet<i64>,
}

/// A journal line: a record, and the inbox entry it adopted, if it did.
#[derive(Deserialize)]
struct JournalLine {
    #[serde(flatten)]
    record: AuditRecord,
    #[serde(default)]
    adopted: Option<i64>,
}

/// A journal line, written.
#[derive(Serialize)]
struct JournalLineRef<'a> {
    #[serde(flatten)]
    record: &'a AuditRecord,
    adopted: i64,
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

impl AuditLog {
    /// Opens the log in `dir`: replays any journal a crash left behind into `store`, chains
    /// the entries other processes forwarded, then continues the chain from there. Spawns the
    /// background flusher on the current tokio runtime.
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
            let (records, adopted) = read_journal(path)?;
            store.append_audit_adopting(records, adopted).await?;
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
                pending_adopted: Vec::new(),
                adopted: std::collections::BTreeSet::new(),
            }),
            dir: dir.to_owned(),
            store,
            options,
            _lock: lock,
            wake: Arc::new(Notify::new()),
            flushing: tokio::sync::Mutex::new(()),
        });
        // Entries other processes forwarded while nobody owned the chain are chained now,
        // before anything this process appends.
        log.flush().await?;
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

    /// Chains the entries other processes forwarded, then moves every journaled record into
    /// the store now.
    pub async fn flush(&self) -> Result<(), AuditError> {
        let _one_at_a_time = self.flushing.lock().await;
        let forwarded = self.store.forwarded_audit(ADOPT_BATCH).await?;
        let (batch, adopted, rotated) = {
            let mut chain = self.lock();
            for forwarded in forwarded {
                if !chain.adopted.contains(&forwarded.id) {
                    let entry = serde_json::from_str(&forwarded.entry)
                        .map_or_else(|error| unreadable(&forwarded.entry, &error), as_event);
                    self.chain_record(&mut chain, entry, forwarded.at_ms, Some(forwarded.id))?;
                }
            }
            if chain.pending.is_empty() {
                return Ok(());
            }
            // Rotate: the live journal now holds nothing that is not in `pending`.
            let rotated = self.dir.join(format!("{JOURNAL}.{:020}", chain.seq));
            std::fs::rename(self.dir.join(JOURNAL), &rotated)?;
            chain.journal = open_journal(&self.dir.join(JOURNAL))?;
            chain.rotated.push(rotated);
            (
                std::mem::take(&mut chain.pending),
                std::mem::take(&mut chain.pending_adopted),
                chain.rotated.clone(),
            )
        };
        let stored = self
            .store
            .append_audit_adopting(batch.clone(), adopted.clone())
            .await;
        if let Err(error) = stored {
            // Keep the records (and their rotated files) for the next attempt.
            let mut chain = self.lock();
            let newer = std::mem::replace(&mut chain.pending, batch);
            chain.pending.extend(newer);
            let newer = std::mem::replace(&mut chain.pending_adopted, adopted);
            chain.pending_adopted.extend(newer);
            return Err(error.into());
        }
        for path in &rotated {
            std::fs::remove_file(path)?;
        }
        let mut chain = self.lock();
        chain.rotated.retain(|p| !rotated.contains(p));
        for id in &adopted {
            chain.adopted.remove(id);
        }
        Ok(())
    }

    /// Sequences, chains and journals one record (the chain is locked by the caller).
    fn chain_record(
        &self,
        chain: &mut Chain,
        entry: AuditEntry,
        at_ms: i64,
        adopted: Option<i64>,
    ) -> Result<u64, AuditError> {
        let mut record = AuditRecord {
            seq: chain.seq + 1,
            at_ms,
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
        let line = match adopted {
            None => serde_json::to_vec(&record),
            Some(adopted) => serde_json::to_vec(&JournalLineRef {
                record: &record,
                adopted,
            }),
        };
        let mut line = line.map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write: after it returns the record survives a process crash.
        chain.journal.write_all(&line)?;
        if self.options.fsync {
            chain.journal.sync_data()?;
        }
        chain.seq = record.seq;
        chain.prev_hash = record.hash.clone();
        chain.pending.push(record);
        if let Some(adopted) = adopted {
            chain.pending_adopted.push(adopted);
            chain.adopted.insert(adopted);
        }
        Ok(chain.seq)
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
        let seq = self.chain_record(&mut chain, entry, now_ms(), None)?;
        drop(chain);
        if seq.is_multiple_of(256) {
            self.wake.notify_one();
        }
        Ok(seq)
    }

    fn catch_up(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {
            // A failure leaves the entries for the next flush: the order is then looser, and
            // nothing is lost.
            if let Err(error) = self.flush().await {
                tracing::warn!(%error, "forwarded audit events could not be chained yet");
            }
        })
    }
}

/// A forwarded entry is an event, whatever it says: only the owner records calls, so nothing
/// else can open an intent or close one.
fn as_event(entry: AuditEntry) -> AuditEntry {
    AuditEntry {
        kind: Some(AuditKind::Event),
        intent_seq: None,
        ..entry
    }
}

/// The record of a forwarded entry that cannot be read: chained as what it was, not dropped.
fn unreadable(text: &str, error: &serde_json::Error) -> AuditEntry {
    AuditEntry {
        kind: Some(AuditKind::Event),
        principal: "larkgate".to_owned(),
        code: Some("unreadable_forwarded_entry".to_owned()),
        detail: Some(format!(
            "a forwarded audit entry could not be read ({error}): {text}"
        )),
        ..AuditEntry::default()
    }
}

fn open_journal(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Reads a journal: its records, and the inbox ids of the forwarded entries among them. A final
/// line cut short by a crash mid-write was never acknowledged and is skipped.
fn read_journal(path: &Path) -> std::io::Result<(Vec<AuditRecord>, Vec<i64>)> {
    let mut records = Vec::new();
    let mut adopted = Vec::new();
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        match serde_json::from_str::<JournalLine>(&line) {
            Ok(line) => {
                records.push(line.record);
                adopted.extend(line.adopted);
            }
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "skipping an unreadable audit journal line");
            }
        }
    }
    Ok((records, adopted))
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
