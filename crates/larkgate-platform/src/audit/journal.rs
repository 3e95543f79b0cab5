//! [`AuditLog`]: the owner's side of the chain. A record is journaled with one `write(2)`
//! before [`AuditSink::append`] returns; a background task moves journaled records into the
//! store in batches and rotates the journal to a new segment; at start, the segments a crash
//! left behind are replayed (idempotently, by sequence) before anything new is appended. How
//! the segments hold up under faults: [`super::segments`].

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_store::{AuditHead, AuditKind, AuditRecord, Store, now_ms};
use serde::Serialize;
use tokio::sync::Notify;

use super::chain::{GENESIS_HASH, record_hash};
use super::forwarding::{as_event, unreadable};
use super::segments::{self, Segments, Written};
use super::{AuditEntry, AuditError, AuditSink};

/// Held (an exclusive file lock) by the one process that owns the chain.
const LOCK: &str = "audit.lock";

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
    /// Called at each [`FlushStep`]: fault-injection tests stop the process there. `None`
    /// outside them.
    pub at_step: Option<fn(FlushStep)>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            fsync: false,
            flush_interval: Duration::from_millis(50),
            at_step: None,
        }
    }
}

/// The steps of recovery and of a flush, where a crash must lose nothing
/// ([`AuditOptions::at_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStep {
    /// Recovery has put the records of the segments left behind into the store; the files are
    /// still there.
    Replayed,
    /// Forwarded entries are chained and journaled; nothing is rotated yet.
    Adopted,
    /// Writing has moved to a new segment; the batch is about to go to the store.
    Rotated,
    /// The batch is in the store; the segments it covers are still there.
    Stored,
    /// The segments the store covers are removed.
    Released,
}

#[derive(Debug)]
struct Chain {
    seq: u64,
    prev_hash: String,
    journal: Segments,
    /// Records chained but not yet in the store, in sequence order.
    pending: Vec<AuditRecord>,
    /// Inbox ids of the forwarded entries among `pending`.
    pending_adopted: Vec<i64>,
    /// Inbox ids chained but not yet deleted from the inbox (pending, or in a flush under way):
    /// never chained twice.
    adopted: std::collections::BTreeSet<i64>,
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
    store: Arc<dyn Store>,
    options: AuditOptions,
    /// The exclusive lock on `audit.lock`, held for the log's lifetime: two processes
    /// appending to one chain would fork it.
    _lock: File,
    /// The store's own claim on its chain, for stores shared by processes with other data
    /// directories (PostgreSQL): held for the log's lifetime too.
    _claim: larkgate_store::AuditChainClaim,
    wake: Arc<Notify>,
    /// Serializes flushes (the background task and explicit [`AuditLog::flush`] calls).
    flushing: tokio::sync::Mutex<()>,
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
        let Some(claim) = store.claim_audit_chain().await? else {
            return Err(AuditError::Busy(store.describe()));
        };
        let left_behind = segments::recover(dir)?;
        store
            .append_audit_adopting(left_behind.records, left_behind.adopted)
            .await?;
        step(&options, FlushStep::Replayed);
        segments::remove_recovered(&left_behind.files)?;
        let head = store.audit_head().await?;
        let (seq, prev_hash) = head
            .map(|h| (h.seq, h.hash))
            .unwrap_or((0, GENESIS_HASH.to_owned()));
        let journal = Segments::start(dir, options.fsync)?;
        let log = Arc::new(AuditLog {
            chain: Mutex::new(Chain {
                seq,
                prev_hash,
                journal,
                pending: Vec::new(),
                pending_adopted: Vec::new(),
                adopted: std::collections::BTreeSet::new(),
            }),
            store,
            options,
            _lock: lock,
            _claim: claim,
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
            let mut failing = crate::failing::Failing::default();
            let mut backoff = interval;
            loop {
                if failing.failing() {
                    // The store is failing: try again after a pause that grows to 5 s, not at
                    // every append (the records are safe in the journal meanwhile).
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                } else {
                    backoff = interval;
                    let _ = tokio::time::timeout(interval, wake.notified()).await;
                }
                let Some(log) = weak.upgrade() else { return };
                failing.note(
                    log.flush().await,
                    |error, failed| {
                        tracing::error!(
                            %error,
                            failed_attempts_since_last_logged = failed,
                            "audit records could not be moved into the store; they stay in the \
                             journal and larkgate keeps trying"
                        );
                    },
                    || tracing::info!("audit records are reaching the store again"),
                );
            }
        });
        Ok(log)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chain> {
        // A panic while holding the lock happens before the sequence moves (see `append`),
        // so the chain is consistent.
        self.chain.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Chains the entries other processes forwarded, then moves every chained record into the
    /// store now. On failure the records stay (in the journal, and pending here) for the next
    /// flush, which the background task makes on its own.
    pub async fn flush(&self) -> Result<(), AuditError> {
        let _one_at_a_time = self.flushing.lock().await;
        let forwarded = self.store.forwarded_audit(ADOPT_BATCH).await?;
        let (batch, adopted) = {
            let mut chain = self.lock();
            for forwarded in forwarded {
                if !chain.adopted.contains(&forwarded.id) {
                    let entry = serde_json::from_str(&forwarded.entry)
                        .map_or_else(|error| unreadable(&forwarded.entry, &error), as_event);
                    self.chain_record(&mut chain, entry, forwarded.at_ms, Some(forwarded.id))?;
                }
            }
            step(&self.options, FlushStep::Adopted);
            if chain.pending.is_empty() {
                return Ok(());
            }
            // Later records go to a new segment, so the closed ones hold only records of this
            // batch or earlier ones. Without a descriptor or space for a new segment the live
            // one stays live: it is released at a later rotation.
            if let Err(error) = chain.journal.rotate() {
                tracing::warn!(%error, "the audit journal could not move to a new segment yet");
            }
            step(&self.options, FlushStep::Rotated);
            (
                std::mem::take(&mut chain.pending),
                std::mem::take(&mut chain.pending_adopted),
            )
        };
        let stored_through = batch.last().map_or(0, |r| r.seq);
        let stored = self
            .store
            .append_audit_adopting(batch.clone(), adopted.clone())
            .await;
        let mut chain = self.lock();
        if let Err(error) = stored {
            // Put the batch back in front of what was chained meanwhile.
            let newer = std::mem::replace(&mut chain.pending, batch);
            chain.pending.extend(newer);
            let newer = std::mem::replace(&mut chain.pending_adopted, adopted);
            chain.pending_adopted.extend(newer);
            return Err(error.into());
        }
        step(&self.options, FlushStep::Stored);
        chain.journal.release(stored_through);
        for id in &adopted {
            chain.adopted.remove(id);
        }
        step(&self.options, FlushStep::Released);
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
            run_kind: entry.run_kind.map(|k| k.as_str().to_owned()),
            session: entry.session,
            tool: entry.tool,
            args_hash: entry.args_hash,
            args: entry.args,
            code: entry.code.map(String::from),
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
        // One write: after it returns the record survives a process crash. The outcome of a
        // call that has run is never dropped: if the journal cannot take it, it is held until
        // the journal or the store can (and a record after it cannot be journaled first).
        let hold = record.kind == AuditKind::Outcome;
        if chain.journal.write(record.seq, line, hold)? == Written::Held {
            tracing::error!(
                seq = record.seq,
                "the outcome of a call could not be journaled; it is kept in memory until the store takes it"
            );
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

/// Tells a fault-injection test where a flush is.
fn step(options: &AuditOptions, at: FlushStep) {
    if let Some(at_step) = options.at_step {
        at_step(at);
    }
}
