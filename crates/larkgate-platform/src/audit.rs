//! The audit chain: every refusal, and an intent before and an outcome after every admitted
//! call, on one SHA-256 hash chain.
//!
//! ## Durability without a commit per record
//!
//! A record is *acknowledged* when [`AuditLog::append`] returns. By then it has been written,
//! with one `write(2)`, to an append-only journal segment next to the database: from that
//! moment it is in the kernel's page cache and survives the larkgate process being killed. A
//! background task moves journaled records into the store in batches (one transaction per
//! batch), moving writing to a new segment first, and removes a segment only once the store
//! holds its last record. At start, the segments left behind by a crash are replayed into the
//! store — replay is idempotent, keyed by sequence — before new records are appended. So the
//! caller's path pays for one small write, not for two SQLite commits. Surviving power loss as
//! well needs an fsync per record: [`AuditOptions::fsync`].
//!
//! A store that is locked or down, a full disk, running out of descriptors and a crash at any
//! step lose no acknowledged record (`audit/segments.rs` says how). When the journal cannot be
//! written, a new call is refused before it runs (its intent cannot be recorded); the outcome
//! of a call that has already run is kept in memory until the journal or the store takes it.
//! Records wait in memory as well as in the journal while the store is unavailable.

//! ## The chain, across replicas
//!
//! Each record's `hash` is SHA-256 over its fields and the previous record's hash, and the
//! chain's head (sequence, hash) is also kept in its own table, moved in the same transaction
//! as each batch. [`verify`] recomputes the chain and names the first record that breaks it,
//! a head that is ahead of the table (deleted last records), outcomes chained before their
//! intents, and intents without an outcome.
//!
//! Every larkgate process that journals (a *replica*: one data directory, `audit/replica.rs`)
//! numbers its records in its own sequence, and journals them unchained. The store links each
//! flushed batch after the chain's head under its lock on the chain
//! ([`larkgate_store::AuditStore::chain_audit`]): a lock per batch, not per record, so any number of
//! replicas sharing a PostgreSQL database append to one chain. An outcome names its intent by
//! the intent's local sequence, translated to the intent's place in the chain when linked; a
//! replica's records are linked in its own order, so an outcome never precedes its intent. A
//! replayed journal is chained once (records are keyed by replica and local sequence).
//!
//! What a lost disk loses: the records of that replica not yet flushed (at most the flush
//! interval's worth, 50 ms by default, or more while the store is unreachable). With
//! [`AuditOptions::store_intents`] every intent is in the store before its call runs, so a lost
//! disk loses at most outcomes (shown by `verify` as intents without an outcome).
//!
//! ## Events from other processes
//!
//! An operator's command run beside a gateway in the same data directory (`larkgate principal
//! add`, `token revoke`, `approvals approve`) cannot journal there (the gateway holds
//! `audit.lock`), yet has an event to record. It hands the entry over through
//! [`ForwardingAudit`]: the entry is committed to the store's audit inbox, and a replica's
//! flusher journals it (with the time it was forwarded) and the store deletes it from the inbox
//! in the same transaction that chains the record, so each forwarded entry is chained exactly
//! once, by whichever replica's transaction deletes it, across crashes too. A forwarding
//! process cannot record calls: an intent needs its sequence at once, so [`ForwardingAudit`]
//! refuses them and a call fails closed.
//!
//! The inbox trusts nothing new: whoever can write to the database can already rewrite the
//! unkeyed chain; the chain shows edits, insertions and deletions made by anything less.
//!
//! ## Where each part lives
//!
//! | module | holds |
//! | --- | --- |
//! | `audit/journal.rs` | [`AuditLog`]: journaling, the batched moves into the chain, replay |
//! | `audit/replica.rs` | the data directory's name in the chain |
//! | `audit/segments.rs` | the journal's segment files, and what holds when the disk fails |
//! | `audit/chain.rs` | the hash every record carries, and [`verify`] |
//! | `audit/checkpoint.rs` | signed checkpoints of the chain's head, and their keys |
//! | `audit/bundle.rs` | a range of the chain in one file another machine checks |
//! | `audit/anchor.rs` | checkpoints sent outside the database: a file, syslog, a webhook |
//! | `audit/forwarding.rs` | [`ForwardingAudit`]: events from processes that do not own the chain |
//! | `audit/code.rs` | [`AuditCode`]: what a record's code says, typed |

pub mod anchor;
pub mod bundle;
mod chain;
pub mod checkpoint;
mod code;
mod forwarding;
mod journal;
mod replica;
mod segments;

use larkgate_store::{AuditKind, StoreError};

use larkgate_caller::RunKind;
use serde::{Deserialize, Serialize};

pub use chain::{
    GENESIS_HASH, KnownHead, VerifyReport, record_hash, verify, verify_against, verify_anchored,
    verify_trusting,
};
pub use code::{AuditCode, EventKind};
pub use forwarding::ForwardingAudit;
pub use journal::{AuditLog, AuditOptions, FlushStep, held_by, holder};

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
    pub run_kind: Option<RunKind>,
    /// The session's label.
    pub session: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// SHA-256 of the canonical arguments.
    pub args_hash: Option<String>,
    /// The canonical arguments, only when configured.
    pub args: Option<String>,
    /// The outcome (`ok` or a refusal code) or the event.
    pub code: Option<AuditCode>,
    /// For an outcome, its intent's sequence as [`AuditSink::append`] returned it.
    pub intent_seq: Option<u64>,
    /// For an outcome, the call's duration.
    pub duration_us: Option<u64>,
    /// Free text.
    pub detail: Option<String>,
}

impl AuditEntry {
    /// An event of `kind` under `principal`, saying `detail`.
    pub fn event(principal: &str, kind: EventKind, detail: String) -> Self {
        AuditEntry {
            kind: Some(AuditKind::Event),
            principal: principal.to_owned(),
            code: Some(kind.into()),
            detail: Some(detail),
            ..AuditEntry::default()
        }
    }
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
    /// Another live process journals under this directory's replica name.
    #[error(
        "another larkgate process is journaling as replica {replica} of {store} (a copy of \
         this data directory?); stop it, or give this directory its own name in its `replica` \
         file"
    )]
    ReplicaBusy {
        /// The name.
        replica: String,
        /// The store, described.
        store: String,
    },
    /// An anchor is failing and the operator requires anchors (`[audit] anchors_required`).
    #[error(
        "checkpoints cannot be anchored in {0} ([audit] anchors_required = true refuses calls \
         meanwhile); larkgate keeps trying, and calls run again once the anchor takes them"
    )]
    AnchorFailing(String),
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
    /// Appends a record; returns its sequence (in this replica's own numbering: what an
    /// outcome names its intent by) once it is durable against a process crash.
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

    /// Told the version ([`crate::policy::Policy::version`]) of the policy in force, at start
    /// and at each reload, for the checkpoints that name it. Nothing to do for a sink that
    /// signs none.
    fn policy_in_force(&self, _version: &str) {}

    /// Returns once the intent `seq` (as [`AuditSink::append`] returned it) is in the store,
    /// when the sink is configured to store intents before their calls run
    /// ([`AuditOptions::store_intents`]); at once otherwise.
    fn store_intent(&self, _seq: u64) -> futures::future::BoxFuture<'_, Result<(), AuditError>> {
        Box::pin(async { Ok(()) })
    }
}
