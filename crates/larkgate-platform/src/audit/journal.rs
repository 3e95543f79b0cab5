//! [`AuditLog`]: a replica's side of the chain. A record is numbered in the replica's own
//! sequence and journaled with one `write(2)` before [`AuditSink::append`] returns; a background
//! task hands journaled records to the store in batches, which chains them (global sequence and
//! hashes, under its lock on the chain), and rotates the journal to a new segment; at start,
//! the segments a crash left behind are replayed (idempotently, by replica and local sequence)
//! before anything new is appended. How the segments hold up under faults:
//! [`super::segments`].

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larkgate_store::{AuditKind, AuditRecord, JournaledAudit, Store, now_ms};
use tokio::sync::Notify;

use super::anchor::Anchors;
use super::checkpoint::{CHECKPOINT_PRINCIPAL, Checkpoint, Checkpoints, Signer};
use super::forwarding::{as_event, unreadable};
use super::replica;
use super::segments::{self, Segments, Written};
use super::{AuditEntry, AuditError, AuditSink, EventKind};

/// Held (an exclusive file lock) by the one process that journals in a data directory.
const LOCK: &str = "audit.lock";

/// How many times (100 ms apart) a replica's name is claimed before another live process is
/// taken to hold it.
const CLAIM_ATTEMPTS: u32 = 30;

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
    /// Chain each intent in the store before its call runs ([`AuditSink::store_intent`]), for
    /// deployments that cannot lose a record with a replica's disk; costs a store round trip
    /// per call.
    pub store_intents: bool,
    /// How large the live journal segment may grow before a flush moves writing to a new one
    /// (its records stored, the old one is then removed). Between rotations the live segment
    /// also holds records the store already has, which a restart replays idempotently; 0
    /// rotates at every flush that moved records.
    pub segment_bytes: u64,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            fsync: false,
            flush_interval: Duration::from_millis(50),
            at_step: None,
            store_intents: false,
            segment_bytes: 4 * 1024 * 1024,
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
    /// The last local sequence given out.
    local_seq: u64,
    journal: Segments,
    /// Records journaled but not yet in the store, in local order.
    pending: Vec<JournaledAudit>,
    /// Inbox ids journaled but not yet chained (pending, or in a flush under way): never
    /// journaled twice by this replica.
    adopted: std::collections::BTreeSet<i64>,
    /// The store holds this replica's records through this local sequence.
    stored_through: u64,
}

/// The journaled, chained audit log. See the module documentation.
#[derive(Debug)]
pub struct AuditLog {
    chain: Mutex<Chain>,
    store: Arc<dyn Store>,
    /// This data directory's name in the chain.
    replica: String,
    options: AuditOptions,
    /// The exclusive lock on `audit.lock`, held for the log's lifetime: two processes
    /// journaling in one directory would number their records alike.
    _lock: File,
    /// The store's claim on this replica's name, for stores shared by processes with other
    /// data directories (PostgreSQL): held for the log's lifetime too.
    _claim: larkgate_store::AuditChainClaim,
    wake: Arc<Notify>,
    /// Serializes flushes (the background task and explicit [`AuditLog::flush`] calls).
    flushing: tokio::sync::Mutex<()>,
    /// Signed checkpoints, once [`AuditLog::set_checkpoints`] turned them on.
    checkpointing: Mutex<Option<Checkpointing>>,
    /// SHA-256 of the policy in force, for checkpoints ([`AuditSink::policy_in_force`]).
    policy: Mutex<String>,
    /// Where checkpoints are anchored too, once [`AuditLog::set_anchors`] named them. Set
    /// once, so that every append reads it without a lock.
    anchors: std::sync::OnceLock<Arc<Anchors>>,
}

/// Where this replica is between two checkpoints.
#[derive(Debug)]
struct Checkpointing {
    config: Checkpoints,
    /// Records this replica chained since its last checkpoint (its checkpoints not counted).
    chained: u64,
    /// When it last checkpointed (or turned checkpoints on).
    since: std::time::Instant,
    /// The position its last checkpoint signed.
    signed_through: u64,
}

/// The process that holds the audit log in `dir`, as it wrote into the lock file when it took
/// it (`None` when nobody wrote one, or the file is unreadable). A hint for messages only: the
/// lock, not this, decides who owns the log.
pub fn held_by(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(LOCK))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The process holding the audit log in `dir` now: [`held_by`], when the lock is in fact held
/// (a process that ended leaves its pid in the file, and its lock released).
pub fn holder(dir: &Path) -> Option<u32> {
    let lock = OpenOptions::new().read(true).open(dir.join(LOCK)).ok()?;
    match lock.try_lock_shared() {
        Ok(()) => None,
        Err(_) => held_by(dir),
    }
}

impl AuditLog {
    /// Opens the log in `dir`: replays any journal a crash left behind into `store`'s chain,
    /// chains the entries other processes forwarded, then continues this replica's numbering
    /// from there. Spawns the background flusher on the current tokio runtime.
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
        // Who holds it, for the next process that finds it held ([`held_by`]).
        lock.set_len(0)?;
        (&lock).write_all(format!("{}\n", std::process::id()).as_bytes())?;
        let replica = replica::name(dir)?;
        // A process of this directory that was just killed may hold the name for a moment
        // more (until the database notices its connection is gone): wait that out, briefly.
        let mut claimed = None;
        for attempt in 0..CLAIM_ATTEMPTS {
            claimed = store.claim_audit_replica(&replica).await?;
            if claimed.is_some() || attempt + 1 == CLAIM_ATTEMPTS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Some(claim) = claimed else {
            return Err(AuditError::ReplicaBusy {
                replica,
                store: store.describe(),
            });
        };
        let left_behind = segments::recover(dir)?;
        // Lines of a journal written before records were chained at flush carry their
        // sequence and hash already: they go back in as they are, then this replica's own.
        store
            .append_audit_adopting(left_behind.chained, left_behind.adopted)
            .await?;
        let recovered_through = left_behind
            .journaled
            .last()
            .and_then(|e| e.record.local_seq)
            .unwrap_or(0);
        store.chain_audit(&replica, left_behind.journaled).await?;
        step(&options, FlushStep::Replayed);
        segments::remove_recovered(&left_behind.files)?;
        let local_seq = store
            .audit_local_head(&replica)
            .await?
            .max(recovered_through);
        let journal = Segments::start(dir, options.fsync)?;
        let log = Arc::new(AuditLog {
            chain: Mutex::new(Chain {
                local_seq,
                journal,
                pending: Vec::new(),
                adopted: std::collections::BTreeSet::new(),
                stored_through: local_seq,
            }),
            store,
            replica,
            options,
            _lock: lock,
            _claim: claim,
            wake: Arc::new(Notify::new()),
            flushing: tokio::sync::Mutex::new(()),
            checkpointing: Mutex::new(None),
            policy: Mutex::new(String::new()),
            anchors: std::sync::OnceLock::new(),
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
                    || {
                        tracing::info!(
                            target: crate::failing::RECOVERED,
                            "audit records are reaching the store again"
                        )
                    },
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

    /// This data directory's name in the chain.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Signs checkpoints from now on ([`super::checkpoint`]): after every
    /// `checkpoints.every_records` records this replica chains, or `checkpoints.every` after
    /// the first record since the last one.
    pub fn set_checkpoints(&self, checkpoints: Checkpoints) {
        *self.checkpointing.lock().unwrap_or_else(|p| p.into_inner()) = Some(Checkpointing {
            config: checkpoints,
            chained: 0,
            since: std::time::Instant::now(),
            signed_through: 0,
        });
    }

    /// The public key this replica signs checkpoints with, when it does.
    pub fn signing_key(&self) -> Option<String> {
        self.checkpointing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|c| c.config.signer.public_key().to_owned())
    }

    /// Anchors every checkpoint this replica signs from now on ([`super::anchor`]). A log's
    /// anchors are named once; a later call changes nothing and says so in the log.
    pub fn set_anchors(&self, anchors: Arc<Anchors>) {
        if self.anchors.set(anchors).is_err() {
            tracing::warn!("the audit log's anchors were named already; the first ones stay");
        }
    }

    /// The anchors checkpoints go to, when set.
    pub fn anchors(&self) -> Option<&Arc<Anchors>> {
        self.anchors.get()
    }

    /// Journals the entries other processes forwarded, then chains every journaled record
    /// into the store now, and signs a checkpoint when one is due. On failure the records
    /// stay (in the journal, and pending here) for the next flush, which the background task
    /// makes on its own.
    pub async fn flush(&self) -> Result<(), AuditError> {
        self.flush_signing(false).await
    }

    /// [`AuditLog::flush`], then a checkpoint of what this replica chained since its last one
    /// whether or not one is due: what a larkgate that serves does as it stops, so that its
    /// last records are signed (and anchored) now rather than by the next larkgate to chain.
    /// Nothing is signed when this replica chained nothing since its last checkpoint.
    pub async fn flush_and_sign(&self) -> Result<(), AuditError> {
        self.flush_signing(true).await
    }

    /// What a larkgate does with its log as it stops: [`AuditLog::flush`] (with `sign`,
    /// [`AuditLog::flush_and_sign`]), then, with every journaled record in the store, the
    /// journal moves to a new, empty segment and the stored one is removed, so that a stopped
    /// larkgate leaves no journal for the next start to replay. (A live segment is otherwise
    /// rotated only once full; see [`AuditOptions::segment_bytes`].) Records appended after it
    /// are journaled as ever.
    pub async fn flush_at_stop(&self, sign: bool) -> Result<(), AuditError> {
        self.flush_signing(sign).await?;
        let _one_at_a_time = self.flushing.lock().await;
        let mut chain = self.lock();
        if chain.pending.is_empty() {
            let stored_through = chain.stored_through;
            if let Err(error) = chain.journal.rotate() {
                tracing::warn!(%error, "the audit journal could not move to a new segment yet");
            }
            chain.journal.release(stored_through);
        }
        Ok(())
    }

    async fn flush_signing(&self, sign: bool) -> Result<(), AuditError> {
        let _one_at_a_time = self.flushing.lock().await;
        let chained = self.chain_pending().await?;
        if let Some(checkpoint) = self.checkpoint_if_due(chained, sign).await? {
            // Chained at once, so that a flush leaves the checkpoint in the store too, and
            // anchored once it is there.
            self.chain_pending().await?;
            self.anchor(&checkpoint);
        }
        Ok(())
    }

    /// Moves this replica's signing to `next`: a checkpoint signed by the current key
    /// announces `next` (its `next_key`), is chained and anchored, and only then are later
    /// checkpoints signed by `next`; the announcing checkpoint. A verifier that holds the old
    /// public key accepts the new one from that checkpoint on.
    pub async fn rotate_key(&self, next: Signer) -> Result<Checkpoint, AuditError> {
        let _one_at_a_time = self.flushing.lock().await;
        self.chain_pending().await?;
        let head = self.store.audit_head().await?;
        let policy = self.policy_now();
        let checkpoint = {
            let mut state = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let state = state.as_mut().ok_or_else(|| {
                AuditError::Journal(std::io::Error::other(
                    "this larkgate does not sign checkpoints, so it has no key to rotate",
                ))
            })?;
            let (seq, hash) = head.map_or((0, super::GENESIS_HASH.to_owned()), |h| (h.seq, h.hash));
            state.chained = 0;
            state.since = std::time::Instant::now();
            state.signed_through = state.signed_through.max(seq);
            state.config.signer.sign(Checkpoint {
                seq,
                hash,
                at_ms: now_ms(),
                replica: self.replica.clone(),
                policy,
                key: String::new(),
                next_key: Some(next.public_key().to_owned()),
                signature: String::new(),
            })
        };
        self.journal_checkpoint(&checkpoint)?;
        self.chain_pending().await?;
        if let Some(state) = self
            .checkpointing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            state.config.signer = next;
        }
        self.anchor(&checkpoint);
        Ok(checkpoint)
    }

    fn anchor(&self, checkpoint: &Checkpoint) {
        if let Some(anchors) = self.anchors() {
            anchors.send(checkpoint);
        }
    }

    fn policy_now(&self) -> String {
        self.policy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Journals a checkpoint as its record (never refused for a failing anchor: it is what
    /// the anchor is waiting for).
    fn journal_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), AuditError> {
        let detail = serde_json::to_string(checkpoint).map_err(std::io::Error::other)?;
        let mut chain = self.lock();
        self.journal(
            &mut chain,
            AuditEntry::event(CHECKPOINT_PRINCIPAL, EventKind::Checkpoint, detail),
            now_ms(),
            None,
        )?;
        Ok(())
    }

    /// Counts `chained` records and, when a checkpoint is due (or `now`, when this replica
    /// chained any record since its last), signs the chain's head and journals the checkpoint;
    /// the checkpoint, if it did.
    async fn checkpoint_if_due(
        &self,
        chained: u64,
        now: bool,
    ) -> Result<Option<Checkpoint>, AuditError> {
        let due = {
            let mut state = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let Some(state) = state.as_mut() else {
                return Ok(None);
            };
            state.chained += chained;
            state.chained >= state.config.every_records
                || (state.chained > 0 && (now || state.since.elapsed() >= state.config.every))
        };
        if !due {
            return Ok(None);
        }
        let Some(head) = self.store.audit_head().await? else {
            return Ok(None);
        };
        let policy = self.policy_now();
        let checkpoint = {
            let mut state = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let Some(state) = state.as_mut() else {
                return Ok(None);
            };
            state.chained = 0;
            state.since = std::time::Instant::now();
            if head.seq <= state.signed_through {
                return Ok(None);
            }
            state.signed_through = head.seq;
            state.config.signer.sign(Checkpoint {
                seq: head.seq,
                hash: head.hash,
                at_ms: now_ms(),
                replica: self.replica.clone(),
                policy,
                key: String::new(),
                next_key: None,
                signature: String::new(),
            })
        };
        self.journal_checkpoint(&checkpoint)?;
        Ok(Some(checkpoint))
    }

    /// [`AuditLog::flush`]'s moving of records: how many of them (checkpoints not counted)
    /// it chained.
    async fn chain_pending(&self) -> Result<u64, AuditError> {
        let forwarded = self.store.forwarded_audit(ADOPT_BATCH).await?;
        let batch = {
            let mut chain = self.lock();
            for forwarded in forwarded {
                if !chain.adopted.contains(&forwarded.id) {
                    let entry = serde_json::from_str(&forwarded.entry)
                        .map_or_else(|error| unreadable(&forwarded.entry, &error), as_event);
                    self.journal(&mut chain, entry, forwarded.at_ms, Some(forwarded.id))?;
                }
            }
            step(&self.options, FlushStep::Adopted);
            if chain.pending.is_empty() {
                return Ok(0);
            }
            // Once the live segment is full, later records go to a new one, so the closed ones
            // hold only records of this batch or earlier ones. Without a descriptor or space
            // for a new segment the live one stays live: it is released at a later rotation.
            if let Err(error) = chain.journal.rotate_when_full(self.options.segment_bytes) {
                tracing::warn!(%error, "the audit journal could not move to a new segment yet");
            }
            step(&self.options, FlushStep::Rotated);
            std::mem::take(&mut chain.pending)
        };
        let stored_through = batch.last().and_then(|e| e.record.local_seq).unwrap_or(0);
        let counted = batch
            .iter()
            .filter(|e| e.record.code.as_deref() != Some(EventKind::Checkpoint.as_str()))
            .count() as u64;
        let adopted: Vec<i64> = batch.iter().filter_map(|e| e.adopted).collect();
        let stored = self.store.chain_audit(&self.replica, batch.clone()).await;
        let mut chain = self.lock();
        if let Err(error) = stored {
            // Put the batch back in front of what was journaled meanwhile.
            let newer = std::mem::replace(&mut chain.pending, batch);
            chain.pending.extend(newer);
            return Err(error.into());
        }
        step(&self.options, FlushStep::Stored);
        chain.stored_through = chain.stored_through.max(stored_through);
        chain.journal.release(stored_through);
        for id in &adopted {
            chain.adopted.remove(id);
        }
        step(&self.options, FlushStep::Released);
        Ok(counted)
    }

    /// Numbers and journals one record (the chain is locked by the caller); the store chains
    /// it at the next flush.
    fn journal(
        &self,
        chain: &mut Chain,
        entry: AuditEntry,
        at_ms: i64,
        adopted: Option<i64>,
    ) -> Result<u64, AuditError> {
        let local_seq = chain.local_seq + 1;
        let entry = JournaledAudit {
            record: AuditRecord {
                seq: 0,
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
                replica: Some(self.replica.clone()),
                local_seq: Some(local_seq),
                prev_hash: String::new(),
                hash: String::new(),
            },
            adopted,
        };
        let mut line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write: after it returns the record survives a process crash. The outcome of a
        // call that has run is never dropped: if the journal cannot take it, it is held until
        // the journal or the store can (and a record after it cannot be journaled first).
        let hold = entry.record.kind == AuditKind::Outcome;
        if chain.journal.write(local_seq, line, hold)? == Written::Held {
            tracing::error!(
                local_seq,
                "the outcome of a call could not be journaled; it is kept in memory until the store takes it"
            );
        }
        chain.local_seq = local_seq;
        chain.pending.push(entry);
        if let Some(adopted) = adopted {
            chain.adopted.insert(adopted);
        }
        Ok(local_seq)
    }

    /// The last local sequence given out, and how far the store holds this replica's records.
    pub fn local_head(&self) -> (u64, u64) {
        let chain = self.lock();
        (chain.local_seq, chain.stored_through)
    }

    /// Returns once the store holds this replica's records through `local_seq`, flushing now
    /// if it does not yet.
    pub async fn stored(&self, local_seq: u64) -> Result<(), AuditError> {
        if self.lock().stored_through >= local_seq {
            return Ok(());
        }
        self.flush().await?;
        if self.lock().stored_through >= local_seq {
            Ok(())
        } else {
            // Only a record journaled after this call began can be pending; ours was taken.
            Err(AuditError::Journal(std::io::Error::other(
                "the record was not chained by the flush",
            )))
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
        if let Some(anchor) = self.anchors().and_then(|a| a.refusing()) {
            return Err(AuditError::AnchorFailing(anchor));
        }
        let mut chain = self.lock();
        let seq = self.journal(&mut chain, entry, now_ms(), None)?;
        drop(chain);
        if seq.is_multiple_of(256) {
            self.wake.notify_one();
        }
        Ok(seq)
    }

    fn policy_in_force(&self, version: &str) {
        *self.policy.lock().unwrap_or_else(|p| p.into_inner()) = version.to_owned();
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

    fn store_intent(&self, seq: u64) -> futures::future::BoxFuture<'_, Result<(), AuditError>> {
        Box::pin(async move {
            if self.options.store_intents {
                self.stored(seq).await
            } else {
                Ok(())
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
