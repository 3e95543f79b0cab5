//! Approvals, in one module: requested and checked by the pipeline's gate, consumed at
//! dispatch, resolved and listed by the approval tools ([`tools`]) and `larkgate approvals`.
//!
//! An approval is for exactly one {principal, tool, canonical-arguments hash, call chain}. The
//! chain is empty for a call made directly; for a call made inside script runs it names who
//! started each run and who wrote each script ([`larkgate_store::CallChain`]). The gate
//! ([`admit`]) lets a call through with an approved, unexpired, unused approval and otherwise
//! records a pending request (one per call: principal, tool, hash and chain) and refuses;
//! dispatch ([`consume`]) marks it used in one store statement, after the intent is written,
//! so a refusal after the gate never burns it and two calls racing for it run once.
//!
//! Threat model: approval is a person's act. [`resolve`] refuses a principal without the
//! approver or admin role, and refuses everyone their own call's approval, so a caller cannot
//! approve itself through any edge. A call made inside a script run is the act of everyone in
//! its chain: nobody in it (whoever started a run on the way, a script that called the next)
//! nor any script's author may resolve its approval, so nobody approves their own request by
//! wrapping it in a script, and a script cannot be written to ask for what its author then
//! approves. An approval is consumed only by a call through the same chain: another caller of
//! the same script, with the same arguments, needs its own. The approval tools are not reachable
//! from script runs at all ([`crate::access::reachable`]). A resolution is an audit event; if
//! it cannot be recorded, the caller is told the resolution failed. Expiry is the policy's
//! `ttl_seconds`, counted from the resolution; a request nobody decides expires after
//! `pending_ttl_seconds` (`approval_expired`), and the caller's next call asks anew.
//!
//! An approver is shown what they approve: the tool, the principal and chain, the run and
//! script, and the canonical arguments ([`shown_arguments`]), with the fields the policy names
//! in `redact` replaced by `"<redacted>"`. What is shown is a record of the first refused call;
//! what the approval binds to is the hash of the whole arguments, so a redacted field cannot be
//! changed after approval either.

pub mod tools;
pub mod wait;

use larkgate_binding::{Map, Value, canonical_map_json};
use larkgate_store::{
    Approval, ApprovalCursor, ApprovalDetails, ApprovalFor, ApprovalQuery, ApprovalRequest,
    ApprovalStatus, Asked, CallChain, PendingCapReached, PendingCaps, Principal, Resolution, Store,
    StoreError,
};

use crate::access::{APPROVERS, has_any_role};
use crate::audit::{AuditEntry, AuditSink, EventKind};
use crate::envelope::{Code, Refusal};
use crate::services::Services;

/// The value an approver sees for a redacted argument field.
pub const REDACTED: &str = "<redacted>";

/// The longest reason an approver may give.
pub const MAX_REASON_BYTES: usize = 1000;

/// A gated call, as the gate asks about it.
#[derive(Debug)]
pub struct GatedCall<'a> {
    /// Who calls.
    pub principal: &'a str,
    /// The tool (or `resources/read <uri>`, `prompts/get <name>`).
    pub tool: &'a str,
    /// SHA-256 (hex) of the canonical arguments.
    pub args_hash: &'a str,
    /// The chain the call came through.
    pub chain: &'a CallChain,
    /// The canonical arguments, shown to an approver if this call creates the request.
    pub arguments: Option<&'a Map>,
    /// The script run the call is made in, if any.
    pub run_id: Option<&'a str>,
}

impl GatedCall<'_> {
    /// What an approver is shown of this call: its arguments as [`shown_arguments`] renders
    /// them, its run, and the script that run is of (`name v3` for a published version,
    /// `name (draft)` for a saved draft, `an unsaved draft`; none when the run's record cannot
    /// be read: the approval binds to the call as it is either way). Made only when the call
    /// creates a request, not for every gated call.
    async fn details(&self, services: &Services) -> ApprovalDetails {
        let script = match self.run_id {
            Some(id) => services.store.run(id).await.ok().flatten().map(|run| {
                match (run.script, run.version) {
                    (Some(name), Some(version)) => format!("{name} v{version}"),
                    (Some(name), None) => format!("{name} (draft)"),
                    (None, _) => "an unsaved draft".to_owned(),
                }
            }),
            None => None,
        };
        let shown = self
            .arguments
            .map(|arguments| shown_arguments(arguments, &services.policy().approvals.redact));
        ApprovalDetails {
            arguments_bytes: shown.as_ref().map(|shown| shown.bytes),
            arguments: shown.map(|shown| shown.text),
            run_id: self.run_id.map(str::to_owned),
            script,
        }
    }
}

/// The most bytes of a call's arguments an approval records: a preview beyond it. Each gated
/// call's request is kept until decided or expired, so a caller sending large arguments must
/// not fill the store nor every approver's page.
pub const MAX_SHOWN_ARGUMENT_BYTES: usize = 8 * 1024;

/// What an approver is shown of a call's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownArguments {
    /// Canonical JSON, redacted; within [`MAX_SHOWN_ARGUMENT_BYTES`], with what was left out
    /// said where it was.
    pub text: String,
    /// The size of the whole arguments so rendered: larger than `text` for a preview.
    pub bytes: u64,
}

/// `arguments` as an approver sees them: canonical JSON, with every field named in `redact`
/// (at any depth) replaced by [`REDACTED`]. Arguments larger than
/// [`MAX_SHOWN_ARGUMENT_BYTES`] are shown as a preview that is still JSON of the same shape:
/// long strings cut with `… [N more bytes not shown]`, long lists and maps with an entry
/// saying how many items or fields were left out, and deep values named by their size.
pub fn shown_arguments(arguments: &Map, redact: &[String]) -> ShownArguments {
    fn hide(map: &Map, redact: &[String]) -> Map {
        map.iter()
            .map(|(key, value)| {
                let shown = if redact.iter().any(|r| r == key) {
                    Value::from(REDACTED)
                } else {
                    hide_value(value, redact)
                };
                (key.clone(), shown)
            })
            .collect()
    }
    fn hide_value(value: &Value, redact: &[String]) -> Value {
        match value {
            Value::Map(map) => Value::Map(hide(map, redact)),
            Value::List(items) => {
                Value::List(items.iter().map(|v| hide_value(v, redact)).collect())
            }
            other => other.clone(),
        }
    }
    let hidden = hide(arguments, redact);
    let whole = canonical_map_json(&hidden);
    let bytes = whole.len() as u64;
    if whole.len() <= MAX_SHOWN_ARGUMENT_BYTES {
        return ShownArguments { text: whole, bytes };
    }
    // Ever smaller previews until one fits: characters per string, items per list or map,
    // and depth.
    for preview in [
        Preview::new(1024, 64, 8),
        Preview::new(256, 32, 6),
        Preview::new(64, 16, 4),
        Preview::new(16, 8, 3),
        Preview::new(8, 4, 2),
        Preview::new(8, 2, 1),
    ] {
        let text = canonical_map_json(&preview.map(&hidden, 1));
        if text.len() <= MAX_SHOWN_ARGUMENT_BYTES {
            return ShownArguments { text, bytes };
        }
    }
    // Only fields with very long names can get here.
    let text = canonical_map_json(&Map::from([(
        ELIDED_KEY.to_owned(),
        Value::from(format!(
            "[{} fields, {bytes} bytes, not shown]",
            hidden.len()
        )),
    )]));
    ShownArguments { text, bytes }
}

/// The field that says what a preview left out of a map.
const ELIDED_KEY: &str = "…";

/// How much of a value a preview keeps.
struct Preview {
    chars: usize,
    items: usize,
    depth: usize,
}

impl Preview {
    fn new(chars: usize, items: usize, depth: usize) -> Self {
        Preview {
            chars,
            items,
            depth,
        }
    }

    fn map(&self, map: &Map, depth: usize) -> Map {
        let mut kept: Map = map
            .iter()
            .take(self.items)
            .map(|(key, value)| (self.string(key), self.value(value, depth + 1)))
            .collect();
        if map.len() > self.items {
            kept.insert(
                ELIDED_KEY.to_owned(),
                Value::from(format!(
                    "[{} more fields not shown]",
                    map.len() - self.items
                )),
            );
        }
        kept
    }

    fn value(&self, value: &Value, depth: usize) -> Value {
        match value {
            Value::Str(text) => Value::from(self.string(text)),
            Value::Map(map) if depth > self.depth => {
                Value::from(format!("[a map of {} fields not shown]", map.len()))
            }
            Value::List(items) if depth > self.depth => {
                Value::from(format!("[a list of {} items not shown]", items.len()))
            }
            Value::Map(map) => Value::Map(self.map(map, depth)),
            Value::List(items) => {
                let mut kept: Vec<Value> = items
                    .iter()
                    .take(self.items)
                    .map(|item| self.value(item, depth + 1))
                    .collect();
                if items.len() > self.items {
                    kept.push(Value::from(format!(
                        "[{} more items not shown]",
                        items.len() - self.items
                    )));
                }
                Value::List(kept)
            }
            other => other.clone(),
        }
    }

    fn string(&self, text: &str) -> String {
        match text.char_indices().nth(self.chars) {
            None => text.to_owned(),
            Some((cut, _)) => format!(
                "{}… [{} more bytes not shown]",
                &text[..cut],
                text.len() - cut
            ),
        }
    }
}

/// Expires requests that have waited longer than `pending_ttl_seconds` at `now_ms`.
async fn expire_pending(
    store: &dyn Store,
    pending_ttl_seconds: u64,
    now_ms: i64,
) -> Result<(), Refusal> {
    let ttl_ms = i64::try_from(pending_ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    store
        .expire_approvals(now_ms.saturating_sub(ttl_ms))
        .await
        .map(drop)
        .map_err(|e| Refusal::store("approvals could not be read", e))
}

/// The gate's check: the id of the approval this call may run under, or the refusal that says
/// why not (`approval_denied`, or `approval_required` with a pending request's id).
pub async fn admit(services: &Services, call: &GatedCall<'_>) -> Result<String, Refusal> {
    let store = services.store.as_ref();
    let GatedCall {
        principal,
        tool,
        args_hash,
        chain,
        ..
    } = *call;
    let now_ms = services.clock.now_ms();
    expire_pending(
        store,
        services.policy().approvals.pending_ttl_seconds,
        now_ms,
    )
    .await?;
    let resolved = store
        .resolved_approval(ApprovalFor {
            principal,
            tool,
            args_hash,
            chain,
        })
        .await
        .map_err(|e| Refusal::store("approvals could not be read", e))?;
    match resolved {
        Some(a)
            if a.status == ApprovalStatus::Approved
                && a.expires_at_ms.is_some_and(|t| t > now_ms) =>
        {
            Ok(a.id)
        }
        Some(a) if a.status == ApprovalStatus::Denied => Err(Refusal {
            approval_id: Some(a.id.clone()),
            ..Refusal::new(
                Code::ApprovalDenied,
                format!(
                    "{} denied this call of {tool} with these arguments{}",
                    a.resolved_by.as_deref().unwrap_or("an approver"),
                    a.reason
                        .as_deref()
                        .map(|reason| format!(": {reason}"))
                        .unwrap_or_default(),
                ),
            )
        }),
        _ => {
            let details = call.details(services).await;
            let rules = &services.policy().approvals;
            let asked = store
                .pending_approval(ApprovalRequest {
                    call: ApprovalFor {
                        principal,
                        tool,
                        args_hash,
                        chain,
                    },
                    details: &details,
                    now_ms,
                    caps: PendingCaps {
                        per_principal: rules.max_pending_per_principal,
                        total: rules.max_pending,
                    },
                })
                .await
                .map_err(|e| Refusal::store("the approval request could not be recorded", e))?;
            let pending = match asked {
                Asked::Pending(pending) => *pending,
                Asked::CapReached(cap) => return Err(too_many_pending(cap, rules)),
            };
            Err(Refusal {
                approval_id: Some(pending.id.clone()),
                ..Refusal::new(
                    Code::ApprovalRequired,
                    format!(
                        "calling {tool} with these arguments needs an approval (id {})",
                        pending.id
                    ),
                )
                .with_hint(format!(
                    "an approver runs `larkgate approvals approve {}`; then call again with the \
                     same arguments",
                    pending.id
                ))
            })
        }
    }
}

/// The refusal of a gated call whose request would be one too many.
fn too_many_pending(cap: PendingCapReached, rules: &crate::policy::ApprovalRules) -> Refusal {
    let waiting = match cap {
        PendingCapReached::PerPrincipal => format!(
            "you already have {} calls waiting for one, the most one caller may have \
             (`max_pending_per_principal`)",
            rules.max_pending_per_principal
        ),
        PendingCapReached::Total => format!(
            "{} calls are already waiting for one, the most larkgate keeps (`max_pending`)",
            rules.max_pending
        ),
    };
    Refusal::new(
        Code::LimitExceeded,
        format!("this call needs an approval, but {waiting}: no request was recorded"),
    )
    .with_hint(format!(
        "call again once approvers have decided on the waiting requests, or they have expired \
         (after {} s)",
        rules.pending_ttl_seconds
    ))
}

/// The refusal of approval `id`, which expired: while pending (nobody decided in time) or
/// after it was granted (nobody used it in time).
fn expired(id: &str, while_pending: bool) -> Refusal {
    let (what, hint) = if while_pending {
        (
            "expired before anyone decided on it",
            "the caller calls again with the same arguments for a new request, and an \
             approver decides on that one",
        )
    } else {
        (
            "expired before the call it approved ran",
            "call again with the same arguments for a new request, and ask an approver",
        )
    };
    Refusal {
        approval_id: Some(id.to_owned()),
        ..Refusal::new(Code::ApprovalExpired, format!("approval {id} {what}")).with_hint(hint)
    }
}

/// Whether a call that ended with `refusal` reached its tool, so that the approval it ran
/// under is spent. Only `upstream_unavailable` says it did not: larkgate could not reach the
/// upstream (it is down, its connection failed, or it refused larkgate's own credentials).
/// Everything else spends it: an answer of any kind (an `isError` result is
/// `upstream_error`), a `timeout` (the request was sent, and the upstream may have acted on
/// it), a response over the byte limit, and a published script's run however it ended. The
/// refusals before dispatch (an intent that could not be written, say) never consumed it.
pub fn reached_the_tool(refusal: &Refusal) -> bool {
    refusal.code != Code::UpstreamUnavailable
}

/// Gives back approval `id`, consumed at `used_at_ms` by a call that did not reach its tool
/// ([`reached_the_tool`]); whether it was given back (a failure is logged: the caller then
/// asks anew, as for a spent approval).
pub async fn restore(store: &dyn Store, id: &str, used_at_ms: i64) -> bool {
    match store.restore_approval(id, used_at_ms).await {
        Ok(restored) => restored,
        Err(error) => {
            tracing::warn!(%error, approval = id, "an unspent approval could not be given back");
            false
        }
    }
}

/// Consumes approval `id` at dispatch (at `now_ms`): once, and only while it is unexpired.
pub async fn consume(store: &dyn Store, id: &str, now_ms: i64) -> Result<(), Refusal> {
    match store.consume_approval(id, now_ms).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            let approval = store.approval(id).await.ok().flatten();
            if approval.is_some_and(|a| a.status == ApprovalStatus::Approved) {
                // Still approved, so not used: its time ran out.
                return Err(expired(id, false));
            }
            Err(Refusal::new(
                Code::ApprovalRequired,
                format!("approval {id} was used by another call before this one ran"),
            )
            .with_hint("call again with the same arguments for a new request"))
        }
        Err(e) => Err(Refusal::store(
            "the approval could not be consumed, so the call did not run",
            e,
        )),
    }
}

/// An approver's decision.
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    /// Approve (`true`) or deny.
    pub approve: bool,
    /// Why, when the approver says (at most [`MAX_REASON_BYTES`]); recorded with the approval
    /// and in the audit chain.
    pub reason: Option<&'a str>,
}

impl Decision<'static> {
    /// Approve, giving no reason.
    pub const APPROVE: Decision<'static> = Decision {
        approve: true,
        reason: None,
    };
    /// Deny, giving no reason.
    pub const DENY: Decision<'static> = Decision {
        approve: false,
        reason: None,
    };
}

/// Resolves pending approval `id` as `approver`: approved for the policy's `ttl_seconds`, or
/// denied. Only `approver` and `admin` principals resolve approvals, and none its own call's;
/// a request older than `pending_ttl_seconds` at `now_ms` is `approval_expired`. The
/// resolution is recorded on `audit` as an event, with the reason.
pub async fn resolve(
    store: &dyn Store,
    audit: &dyn AuditSink,
    rules: &crate::policy::ApprovalRules,
    approver: &Principal,
    id: &str,
    decision: Decision<'_>,
    now_ms: i64,
) -> Result<Approval, Refusal> {
    let Decision { approve, reason } = decision;
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if let Some(reason) = reason
        && (reason.len() > MAX_REASON_BYTES || reason.chars().any(char::is_control))
    {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "a reason is one line of at most {MAX_REASON_BYTES} bytes (this one is {} bytes{})",
                reason.len(),
                if reason.chars().any(char::is_control) {
                    ", with control characters"
                } else {
                    ""
                }
            ),
        )
        .with_hint("say why in a sentence"));
    }
    if !has_any_role(approver, APPROVERS) {
        return Err(Refusal::new(
            Code::Forbidden,
            format!("{} may not resolve approvals", approver.id),
        )
        .with_hint("approvals are resolved by principals with the approver or admin role"));
    }
    let approval = store
        .approval(id)
        .await
        .map_err(|e| Refusal::store("the approval could not be read", e))?
        .ok_or_else(|| {
            Refusal::new(
                Code::NotFound,
                format!("there is no approval with id {id:?}"),
            )
        })?;
    if approval.principal == approver.id {
        return Err(Refusal::new(
            Code::Forbidden,
            format!(
                "{} may not resolve an approval of its own call",
                approver.id
            ),
        )
        .with_hint("another approver must decide"));
    }
    if approval.chain.involves(&approver.id) {
        return Err(Refusal::new(
            Code::Forbidden,
            format!(
                "{who} may not resolve this approval: the call was made inside a script run that \
                 {who} started, or whose script {who} wrote",
                who = approver.id
            ),
        )
        .with_hint(
            "an approver who is neither in the run's chain nor a script's author must decide",
        ));
    }
    let pending_ttl_ms =
        i64::try_from(rules.pending_ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let waited_too_long = approval.status == ApprovalStatus::Pending
        && approval.created_at_ms < now_ms.saturating_sub(pending_ttl_ms);
    if waited_too_long || approval.status == ApprovalStatus::Expired {
        expire_pending(store, rules.pending_ttl_seconds, now_ms).await?;
        return Err(expired(id, true));
    }
    let ttl_ms = i64::try_from(rules.ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let resolved = store
        .resolve_approval(
            id,
            Resolution {
                approver: &approver.id,
                approve,
                reason,
                now_ms,
                expires_at_ms: now_ms.saturating_add(ttl_ms),
            },
        )
        .await
        .map_err(|e| match e {
            StoreError::Invalid(message) => Refusal::new(Code::InvalidArguments, message),
            other => Refusal::store("the approval could not be resolved", other),
        })?;
    let (verdict, kind) = if approve {
        ("approved", EventKind::Approved)
    } else {
        ("denied", EventKind::Denied)
    };
    let event = AuditEntry {
        kind: Some(larkgate_store::AuditKind::Event),
        principal: approver.id.clone(),
        tool: Some(resolved.tool.clone()),
        args_hash: Some(resolved.args_hash.clone()),
        code: Some(kind.into()),
        detail: Some(format!(
            "approval {} for {} {verdict}{}",
            resolved.id,
            resolved.principal,
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        )),
        ..Default::default()
    };
    audit
        .record_event(event)
        .map_err(|e| Refusal::internal("the resolution could not be audited", e))?;
    Ok(resolved)
}

/// [`resolve`] on a platform's services: its store, its audit sink, its policy's lifetime and
/// its clock; calls of this process waiting for the decision learn of it at once.
pub async fn resolve_in(
    services: &Services,
    approver: &Principal,
    id: &str,
    decision: Decision<'_>,
) -> Result<Approval, Refusal> {
    resolve(
        services.store.as_ref(),
        services.audit.as_ref(),
        &services.policy().approvals,
        approver,
        id,
        decision,
        services.clock.now_ms(),
    )
    .await
    .inspect(|_| services.decisions.told())
}

/// How many requests wait for a decision at `now_ms` (those older than `pending_ttl_seconds`
/// have expired).
pub async fn pending_count(
    store: &dyn Store,
    pending_ttl_seconds: u64,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let ttl_ms = i64::try_from(pending_ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    store.pending_approvals(now_ms.saturating_sub(ttl_ms)).await
}

/// The most approvals one page lists.
pub const MAX_PAGE: u32 = 100;

/// One page of approvals, newest first, and where the next begins.
#[derive(Clone, Debug)]
pub struct ApprovalPage {
    /// The approvals.
    pub approvals: Vec<Approval>,
    /// Pass as `after` for the next page; `None` on the last.
    pub next: Option<String>,
}

/// A page of at most `limit` (1 to [`MAX_PAGE`]) approvals with `status` (`pending`,
/// `approved`, `denied`, `used`, `expired`; `all` for every one), newest first, after the
/// cursor `after` (a page's `next`); requests that waited past `pending_ttl_seconds` at
/// `now_ms` are expired first.
pub async fn list(
    store: &dyn Store,
    pending_ttl_seconds: u64,
    status: &str,
    after: Option<&str>,
    limit: i64,
    now_ms: i64,
) -> Result<ApprovalPage, Refusal> {
    let filter = match status {
        "all" => None,
        other => Some(ApprovalStatus::parse(other).ok_or_else(|| {
            Refusal::new(
                Code::InvalidArguments,
                format!(
                    "the status must be pending, approved, denied, used, expired, withdrawn or all, not \
                     {other:?}"
                ),
            )
        })?),
    };
    let limit = match u32::try_from(limit) {
        Ok(limit) if (1..=MAX_PAGE).contains(&limit) => limit,
        _ => {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!("the limit must be 1 to {MAX_PAGE}, not {limit}"),
            ));
        }
    };
    let after = match after {
        None => None,
        Some(text) => Some(ApprovalCursor::decode(text).ok_or_else(|| {
            Refusal::new(
                Code::InvalidArguments,
                "`after` is not where a page of approvals ended: pass the `next` of the page \
                 before, as it was given",
            )
        })?),
    };
    expire_pending(store, pending_ttl_seconds, now_ms).await?;
    // One more than asked says whether there is a next page.
    let mut approvals = store
        .approvals(ApprovalQuery {
            status: filter,
            after,
            limit: limit + 1,
        })
        .await
        .map_err(|e| Refusal::store("approvals could not be read", e))?;
    let more = approvals.len() > limit as usize;
    approvals.truncate(limit as usize);
    // A pending request expires too: until when it may be decided.
    let pending_ttl_ms =
        i64::try_from(pending_ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    for approval in &mut approvals {
        if approval.status == ApprovalStatus::Pending {
            approval.expires_at_ms = Some(approval.created_at_ms.saturating_add(pending_ttl_ms));
        }
    }
    let next = more
        .then(|| {
            approvals
                .last()
                .map(|last| ApprovalCursor::after(last).encode())
        })
        .flatten();
    Ok(ApprovalPage { approvals, next })
}

#[cfg(test)]
mod tests {
    use larkgate_binding::{Map, Value};

    use super::*;

    #[test]
    fn redacted_fields_are_hidden_at_any_depth_and_nothing_else_is() {
        let nested = Map::from([
            ("token".to_owned(), Value::from("t0ps3cret")),
            ("name".to_owned(), Value::from("n")),
        ]);
        let arguments = Map::from([
            ("password".to_owned(), Value::from("hunter2")),
            ("user".to_owned(), Value::from("ada")),
            ("nested".to_owned(), Value::Map(nested.clone())),
            ("list".to_owned(), Value::List(vec![Value::Map(nested)])),
        ]);
        let redact = ["password".to_owned(), "token".to_owned()];
        let shown: serde_json::Value =
            serde_json::from_str(&shown_arguments(&arguments, &redact).text).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({
                "list": [{"name": "n", "token": REDACTED}],
                "nested": {"name": "n", "token": REDACTED},
                "password": REDACTED,
                "user": "ada",
            })
        );
        let text = shown_arguments(&arguments, &redact).text;
        assert!(
            !text.contains("hunter2") && !text.contains("t0ps3cret"),
            "{text}"
        );
        // Nothing configured: the arguments as they are, canonical.
        let whole = shown_arguments(&arguments, &[]);
        assert_eq!(whole.text, canonical_map_json(&arguments));
        assert_eq!(whole.bytes, whole.text.len() as u64);
    }

    fn string(text: String) -> Value {
        Value::Str(text)
    }

    /// Arguments of every hostile shape an approval might be asked for: each is recorded as a
    /// preview within the bound that is still JSON, says what it left out, keeps redaction,
    /// and reports the whole size.
    #[test]
    fn large_arguments_are_recorded_as_a_bounded_preview_that_says_what_it_left_out() {
        let huge = "x".repeat(512 * 1024);
        let wide: Map = (0..5000)
            .map(|i| (format!("field{i:05}"), Value::Int(i)))
            .collect();
        let mut deep = Value::from("bottom");
        for _ in 0..60 {
            deep = Value::List(vec![deep, string("y".repeat(300))]);
        }
        let long_keys: Map = (0..200)
            .map(|i| (format!("{i:03}{}", "k".repeat(2000)), Value::Int(i)))
            .collect();
        let cases: Vec<(&str, Map, &str)> = vec![
            (
                "one huge string",
                Map::from([
                    ("target".to_owned(), string("prod-db".into())),
                    ("payload".to_owned(), string(huge.clone())),
                    ("password".to_owned(), string(huge.clone())),
                ]),
                "more bytes not shown",
            ),
            (
                "a huge list",
                Map::from([(
                    "rows".to_owned(),
                    Value::List((0..100_000).map(Value::Int).collect()),
                )]),
                "more items not shown",
            ),
            ("thousands of fields", wide, "more fields not shown"),
            (
                "deep nesting",
                Map::from([("tree".to_owned(), deep)]),
                "not shown",
            ),
            ("long field names", long_keys, "not shown"),
            (
                "multi-byte text cut at a character",
                Map::from([("text".to_owned(), string("é€😀".repeat(20_000)))]),
                "more bytes not shown",
            ),
        ];
        let redact = ["password".to_owned()];
        for (name, arguments, says) in cases {
            let shown = shown_arguments(&arguments, &redact);
            let whole = shown_arguments(&arguments, &[]).bytes;
            assert!(
                shown.text.len() <= MAX_SHOWN_ARGUMENT_BYTES,
                "{name}: {} bytes",
                shown.text.len()
            );
            assert!(shown.text.contains(says), "{name}: {}", &shown.text[..200]);
            assert!(
                shown.bytes > shown.text.len() as u64 && shown.bytes <= whole,
                "{name}: {} of {}",
                shown.text.len(),
                shown.bytes
            );
            let parsed: serde_json::Value = serde_json::from_str(&shown.text)
                .unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
            assert!(parsed.is_object(), "{name}");
        }
        // A small field beside a huge one is shown whole, and a redacted one stays hidden.
        let arguments = Map::from([
            ("target".to_owned(), string("prod-db".into())),
            ("payload".to_owned(), string(huge)),
            ("password".to_owned(), string("hunter2".into())),
        ]);
        let shown = shown_arguments(&arguments, &redact);
        let parsed: serde_json::Value = serde_json::from_str(&shown.text).unwrap();
        assert_eq!(parsed["target"], "prod-db");
        assert_eq!(parsed["password"], REDACTED);
        assert!(!shown.text.contains("hunter2"));
    }
}
