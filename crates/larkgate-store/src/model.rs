//! The records a [`Store`](crate::Store) keeps.

use serde::{Deserialize, Serialize};

mod scripts;
mod servers;
mod upstreams;

pub use scripts::*;
pub use servers::*;
pub use upstreams::*;

/// What kind of party a principal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// A person.
    User,
    /// A program acting on its own (an agent, a service account).
    Service,
    /// A published script, `script:<name>`.
    Script,
}

impl PrincipalKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::User => "user",
            PrincipalKind::Service => "service",
            PrincipalKind::Script => "script",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user" => PrincipalKind::User,
            "service" => PrincipalKind::Service,
            "script" => PrincipalKind::Script,
            _ => return None,
        })
    }
}

/// Someone or something that calls tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The unique name (`alice`, `ci-bot`, `script:digest`).
    pub id: String,
    /// What kind of party it is.
    pub kind: PrincipalKind,
    /// Its roles, sorted and unique.
    pub roles: Vec<String>,
    /// Which identity provider's accounts sign in as it (`[[sign_in.issuers]]`).
    #[serde(default)]
    pub issuer: IssuerBinding,
}

/// Which identity provider's accounts may sign in as a principal.
///
/// An account maps to a principal's name through its claims, which the provider's users may
/// choose (a `sub` of `admin`); the binding makes that name reach only principals registered
/// for that provider, so no account takes over a principal that was meant for someone else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssuerBinding {
    /// None: the principal calls with larkgate's own tokens only.
    #[default]
    Local,
    /// The accounts of the configured issuer with this name.
    Issuer(String),
    /// Registered before principals were bound to issuers, and never given a token of
    /// larkgate's own (so it could only have been reached by signing in): the first sign-in
    /// through a configured issuer binds it to that issuer.
    FirstSignIn,
}

impl IssuerBinding {
    /// What the store keeps: NULL, the issuer's name, or `*`.
    pub fn stored(&self) -> Option<&str> {
        match self {
            IssuerBinding::Local => None,
            IssuerBinding::Issuer(name) => Some(name),
            IssuerBinding::FirstSignIn => Some(FIRST_SIGN_IN),
        }
    }

    /// From what the store keeps.
    pub fn from_stored(stored: Option<String>) -> Self {
        match stored {
            None => IssuerBinding::Local,
            Some(text) if text == FIRST_SIGN_IN => IssuerBinding::FirstSignIn,
            Some(name) => IssuerBinding::Issuer(name),
        }
    }
}

impl std::fmt::Display for IssuerBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IssuerBinding::Local => f.write_str("-"),
            IssuerBinding::Issuer(name) => f.write_str(name),
            IssuerBinding::FirstSignIn => f.write_str("(first sign-in)"),
        }
    }
}

/// How the store marks [`IssuerBinding::FirstSignIn`]: not a name an issuer can have.
pub(crate) const FIRST_SIGN_IN: &str = "*";

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for an approver.
    Pending,
    /// Approved: one matching call may run before it expires.
    Approved,
    /// Denied: matching calls are refused.
    Denied,
    /// Consumed by the call it approved.
    Used,
    /// Nobody decided while it was pending (the policy's `pending_ttl_seconds`); a new call
    /// asks anew.
    Expired,
    /// The caller gave up while its call waited for a decision (it cancelled the call): nobody
    /// is left to run it, so approvers are no longer asked. A new call asks anew.
    Withdrawn,
}

impl ApprovalStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Used => "used",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Withdrawn => "withdrawn",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "used" => ApprovalStatus::Used,
            "expired" => ApprovalStatus::Expired,
            "withdrawn" => ApprovalStatus::Withdrawn,
            _ => return None,
        })
    }
}

/// A request to run one call: bound to {principal, tool, SHA-256 of the canonical arguments}.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The approval's id.
    pub id: String,
    /// Who asked to call.
    pub principal: String,
    /// The tool.
    pub tool: String,
    /// SHA-256 (hex) of the canonical arguments.
    pub args_hash: String,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// When the first refused call created it (Unix milliseconds).
    pub created_at_ms: i64,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// When it was resolved.
    pub resolved_at_ms: Option<i64>,
    /// Until when an approval may be used.
    pub expires_at_ms: Option<i64>,
    /// When it was used.
    pub used_at_ms: Option<i64>,
    /// The chain the call came through (empty for a call made directly).
    pub chain: CallChain,
    /// What an approver is shown of the call: see [`ApprovalDetails`].
    #[serde(default)]
    pub details: ApprovalDetails,
    /// Why the approver decided as they did, when they said.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What an approver is shown of a call, beside its tool and principal: recorded when the
/// first refused call creates the approval. The hash, not this, is what the approval binds to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDetails {
    /// The canonical arguments as JSON, with the fields the policy redacts shown as
    /// `"<redacted>"`. `None` for approvals made before larkgate recorded them.
    pub arguments: Option<String>,
    /// The script run the call was made in, if any.
    pub run_id: Option<String>,
    /// The published script (and version) the run is of, as `name v3`, if any.
    pub script: Option<String>,
    /// The size in bytes of the whole arguments as `arguments` renders them (redacted). When
    /// it is larger than `arguments`, that is a preview with parts left out (each place
    /// says so). `None` for approvals made before larkgate recorded it.
    #[serde(default)]
    pub arguments_bytes: Option<u64>,
}

impl ApprovalDetails {
    /// Whether `arguments` shows the whole arguments (`false` for a preview with parts left
    /// out, and for approvals without recorded arguments).
    pub fn arguments_whole(&self) -> bool {
        match (&self.arguments, self.arguments_bytes) {
            (Some(text), Some(bytes)) => text.len() as u64 >= bytes,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// The chain a call made inside a script run came through. A published script's run calls as
/// `script:<name>`; its approval binds to the runs it is part of: it is consumed only by a call
/// through the same chain, and resolved by nobody in it nor any of the scripts' authors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallChain {
    /// The principals that started each run on the way, outermost first: the person or agent
    /// that called the first script, then each script that called the next.
    pub through: Vec<String>,
    /// The authors of the scripts on the way.
    pub authors: Vec<String>,
}

/// The call an approval is for, matched on all four parts: who calls, which tool, the SHA-256
/// of the canonical arguments, and the chain of runs the call came through.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalFor<'a> {
    /// The calling principal.
    pub principal: &'a str,
    /// The tool's listed name.
    pub tool: &'a str,
    /// SHA-256 (hex) of the canonical arguments.
    pub args_hash: &'a str,
    /// The runs the call came through.
    pub chain: &'a CallChain,
}

/// A person's approval asked for one call: the call, what the approver is shown of it, and
/// when it was asked.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalRequest<'a> {
    /// The call the approval is for.
    pub call: ApprovalFor<'a>,
    /// What the approver is shown, kept with a new record.
    pub details: &'a ApprovalDetails,
    /// When it was asked (Unix ms): a new record's creation time.
    pub now_ms: i64,
    /// How many requests may wait at once: a new one beyond them is not recorded.
    pub caps: PendingCaps,
}

/// How many approval requests may be pending at once. Each is one caller's call waiting for a
/// person: without a bound, one caller could bury every approver's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingCaps {
    /// For one principal.
    pub per_principal: u64,
    /// For all principals together.
    pub total: u64,
}

/// What asking for an approval came to ([`crate::ApprovalStore::pending_approval`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// The pending request for the call: the one there was, or a new one.
    Pending(Box<Approval>),
    /// No request was recorded: a cap is reached.
    CapReached(PendingCapReached),
}

impl Asked {
    /// The pending request, if one was recorded.
    pub fn pending(self) -> Option<Approval> {
        match self {
            Asked::Pending(approval) => Some(*approval),
            Asked::CapReached(_) => None,
        }
    }
}

/// Which cap refused a new approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingCapReached {
    /// The principal's own.
    PerPrincipal,
    /// All principals' together.
    Total,
}

/// Which approvals to list: newest first, a page at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalQuery {
    /// Only those with this status; all without.
    pub status: Option<ApprovalStatus>,
    /// Only those listed after this one (the last of the previous page).
    pub after: Option<ApprovalCursor>,
    /// At most this many.
    pub limit: u32,
}

/// Where a page of approvals ends: the creation time and id of its last approval (approvals
/// are listed by creation time, newest first, then by id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalCursor {
    /// The approval's creation time (Unix ms).
    pub created_at_ms: i64,
    /// The approval's id.
    pub id: String,
}

impl ApprovalCursor {
    /// The cursor after `approval`.
    pub fn after(approval: &Approval) -> Self {
        ApprovalCursor {
            created_at_ms: approval.created_at_ms,
            id: approval.id.clone(),
        }
    }

    /// As a caller passes it back: `<created_at_ms>.<id>`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at_ms, self.id)
    }

    /// From what [`ApprovalCursor::encode`] wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let (at, id) = text.split_once('.')?;
        let valid_id = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        valid_id.then_some(())?;
        Some(ApprovalCursor {
            created_at_ms: at.parse().ok()?,
            id: id.to_owned(),
        })
    }
}

/// An approver's decision on a pending approval.
#[derive(Clone, Copy, Debug)]
pub struct Resolution<'a> {
    /// Who decided.
    pub approver: &'a str,
    /// Approved (`true`) or denied.
    pub approve: bool,
    /// The approver's reason, if they gave one.
    pub reason: Option<&'a str>,
    /// When they decided (Unix ms).
    pub now_ms: i64,
    /// Until when an approved call may be made (ignored for a denial).
    pub expires_at_ms: i64,
}

impl CallChain {
    /// Whether `principal` is in the chain or wrote one of its scripts.
    pub fn involves(&self, principal: &str) -> bool {
        self.through
            .iter()
            .chain(&self.authors)
            .any(|p| p == principal)
    }

    /// The chain one run further in: `caller` starts a run of a script by `author`.
    pub fn then(&self, caller: &str, author: &str) -> CallChain {
        let mut next = self.clone();
        next.through.push(caller.to_owned());
        next.authors.push(author.to_owned());
        next
    }
}

/// What an audit record records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// An admitted call, written before it runs.
    Intent,
    /// How an admitted call ended, written after it ran.
    Outcome,
    /// A call refused before it ran.
    Refusal,
    /// Anything else worth keeping: an approval resolved, a principal changed.
    Event,
    /// A call a review run would have made to a tool that may write: authorized, recorded,
    /// and answered with a placeholder instead of being made.
    Review,
}

impl AuditKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Intent => "intent",
            AuditKind::Outcome => "outcome",
            AuditKind::Refusal => "refusal",
            AuditKind::Event => "event",
            AuditKind::Review => "review",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "intent" => AuditKind::Intent,
            "outcome" => AuditKind::Outcome,
            "refusal" => AuditKind::Refusal,
            "event" => AuditKind::Event,
            "review" => AuditKind::Review,
            _ => return None,
        })
    }
}

/// An audit entry handed over by a process that does not own the chain, waiting for the
/// owner to chain it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedAudit {
    /// Its inbox id (increasing: the order entries were forwarded in).
    pub id: i64,
    /// When it was forwarded (Unix milliseconds): the time its record carries.
    pub at_ms: i64,
    /// The entry, in the audit log's own format.
    pub entry: String,
}

/// One record of the audit chain. `hash` covers every other field and `prev_hash`, so editing,
/// inserting or removing a record breaks the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the chain, from 1, without gaps.
    pub seq: u64,
    /// When (Unix milliseconds).
    pub at_ms: i64,
    /// What it records.
    pub kind: AuditKind,
    /// Who called (`anonymous` when nobody was authenticated).
    pub principal: String,
    /// The script run the call came from, if any.
    pub run_id: Option<String>,
    /// The run kind: `direct`, `draft` or `published`.
    pub run_kind: Option<String>,
    /// The session's label, telling run kinds apart in logs.
    pub session: Option<String>,
    /// The tool called.
    pub tool: Option<String>,
    /// SHA-256 (hex) of the canonical arguments.
    pub args_hash: Option<String>,
    /// The canonical arguments themselves, only when configured.
    pub args: Option<String>,
    /// The refusal or outcome code (`ok` for success).
    pub code: Option<String>,
    /// For an outcome: the sequence of its intent.
    pub intent_seq: Option<u64>,
    /// For an outcome: how long the call took, in microseconds.
    pub duration_us: Option<u64>,
    /// Free text: a refusal's message, an event's description.
    pub detail: Option<String>,
    /// The replica (a data directory of a larkgate process) that recorded it; `None` for
    /// records chained before replicas were named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// Its sequence in that replica's own journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_seq: Option<u64>,
    /// The previous record's hash (64 zeros for the first).
    pub prev_hash: String,
    /// SHA-256 (hex) over this record.
    pub hash: String,
}

/// The last record of the chain: its sequence and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    /// The last sequence.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

/// What a copy made by `larkgate backup` records of its origin: when it was made, and the
/// chain's head it holds (every record the original had chained or journaled by then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupOrigin {
    /// When the backup was made (Unix milliseconds).
    pub taken_at_ms: i64,
    /// The chain's head in the backup.
    pub head: AuditHead,
}

/// Which key-value entries [`crate::KvStore::kv_list`] answers, in key order.
#[derive(Clone, Copy, Debug)]
pub struct KvQuery<'a> {
    /// Only keys starting with this.
    pub prefix: &'a str,
    /// Only keys sorting after this one (the last key of the previous page).
    pub after: Option<&'a str>,
    /// At most this many.
    pub limit: usize,
}

/// Which audit records to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only records after this sequence.
    pub after_seq: Option<u64>,
    /// At most this many (the *last* ones when `newest` is set).
    pub limit: Option<usize>,
    /// Take the newest records rather than the oldest (results still in sequence order).
    pub newest: bool,
    /// Only this principal's records.
    pub principal: Option<String>,
    /// Only records of this tool.
    pub tool: Option<String>,
}

/// A bearer token as stored: never its secret, only the secret's SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The token's public id (the part of the token before its secret).
    pub id: String,
    /// The principal it authenticates.
    pub principal: String,
    /// SHA-256 (hex) of the secret.
    pub secret_hash: String,
    /// Who created it.
    pub created_by: String,
    /// When (Unix ms).
    pub created_at_ms: i64,
    /// When it stops working, if ever.
    pub expires_at_ms: Option<i64>,
    /// When it was revoked, if it was.
    pub revoked_at_ms: Option<i64>,
}

/// A 2025-11-25 session as every replica sees it ([`crate::Store::session`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedSession {
    /// The principal that opened it: the only one that may use it, on any replica.
    pub owner: String,
    /// What a replica needs to continue it (its `initialize` parameters), once it has them.
    pub state: Option<String>,
    /// When it expires unless used (Unix ms).
    pub expires_at_ms: i64,
}

/// A 2025-11-25 session to open, under its caps ([`crate::SessionStore::open_session`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSession {
    /// Its id.
    pub id: String,
    /// The principal opening it.
    pub owner: String,
    /// Now (Unix ms): sessions that expired by then count no more.
    pub now_ms: i64,
    /// When it expires unless used (Unix ms).
    pub expires_at_ms: i64,
    /// How many sessions one principal may have open.
    pub per_principal: usize,
    /// How many sessions may be open in all.
    pub total: usize,
}

/// Which cap refused a session ([`crate::SessionStore::open_session`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCapReached {
    /// The owner's own.
    PerPrincipal,
    /// All principals' together.
    Total,
}
