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
//! `ttl_seconds`, counted from the resolution.

pub mod tools;

use larkgate_store::{Approval, ApprovalStatus, CallChain, Principal, Store, StoreError, now_ms};

use crate::access::{APPROVERS, has_any_role};
use crate::audit::{AuditEntry, AuditSink, EventKind};
use crate::envelope::{Code, Refusal};
use crate::services::Services;

/// The gate's check: the id of the approval this call may run under, or the refusal that says
/// why not (`approval_denied`, or `approval_required` with a pending request's id).
pub async fn admit(
    store: &dyn Store,
    principal: &str,
    tool: &str,
    args_hash: &str,
    chain: &CallChain,
) -> Result<String, Refusal> {
    let resolved = store
        .resolved_approval(principal, tool, args_hash, chain)
        .await
        .map_err(|e| Refusal::store("approvals could not be read", e))?;
    match resolved {
        Some(a)
            if a.status == ApprovalStatus::Approved
                && a.expires_at_ms.is_some_and(|t| t > now_ms()) =>
        {
            Ok(a.id)
        }
        Some(a) if a.status == ApprovalStatus::Denied => Err(Refusal {
            approval_id: Some(a.id.clone()),
            ..Refusal::new(
                Code::ApprovalDenied,
                format!(
                    "{} denied this call of {tool} with these arguments",
                    a.resolved_by.as_deref().unwrap_or("an approver"),
                ),
            )
        }),
        _ => {
            let pending = store
                .pending_approval(principal, tool, args_hash, chain, now_ms())
                .await
                .map_err(|e| Refusal::store("the approval request could not be recorded", e))?;
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

/// Consumes approval `id` at dispatch: once, and only while it is unexpired.
pub async fn consume(store: &dyn Store, id: &str) -> Result<(), Refusal> {
    match store.consume_approval(id, now_ms()).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(Refusal::new(
            Code::ApprovalRequired,
            format!("approval {id} was used or expired before this call ran"),
        )
        .with_hint("ask an approver for a new approval")),
        Err(e) => Err(Refusal::store(
            "the approval could not be consumed, so the call did not run",
            e,
        )),
    }
}

/// Resolves pending approval `id` as `approver`: approved for `ttl_seconds`, or denied. Only
/// `approver` and `admin` principals resolve approvals, and none its own call's. The resolution
/// is recorded on `audit` as an event.
pub async fn resolve(
    store: &dyn Store,
    audit: &dyn AuditSink,
    ttl_seconds: u64,
    approver: &Principal,
    id: &str,
    approve: bool,
) -> Result<Approval, Refusal> {
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
    let now = now_ms();
    let ttl_ms = i64::try_from(ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let resolved = store
        .resolve_approval(id, &approver.id, approve, now, now.saturating_add(ttl_ms))
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
            "approval {} for {} {verdict}",
            resolved.id, resolved.principal
        )),
        ..Default::default()
    };
    audit
        .record_event(event)
        .map_err(|e| Refusal::internal("the resolution could not be audited", e))?;
    Ok(resolved)
}

/// [`resolve`] on a platform's services: its store, its audit sink and its policy's lifetime.
pub async fn resolve_in(
    services: &Services,
    approver: &Principal,
    id: &str,
    approve: bool,
) -> Result<Approval, Refusal> {
    resolve(
        services.store.as_ref(),
        services.audit.as_ref(),
        services.policy.approvals.ttl_seconds,
        approver,
        id,
        approve,
    )
    .await
}

/// The approvals with `status` (`pending`, `approved`, `denied`, `used`; `all` for every one),
/// newest first.
pub async fn list(store: &dyn Store, status: &str) -> Result<Vec<Approval>, Refusal> {
    let filter = match status {
        "all" => None,
        other => Some(ApprovalStatus::parse(other).ok_or_else(|| {
            Refusal::new(
                Code::InvalidArguments,
                format!("the status must be pending, approved, denied, used or all, not {other:?}"),
            )
        })?),
    };
    store
        .approvals(filter)
        .await
        .map_err(|e| Refusal::store("approvals could not be read", e))
}
