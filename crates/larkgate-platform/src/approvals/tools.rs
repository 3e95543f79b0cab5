//! The approval tools: `approvals_list`, `approvals_approve` and `approvals_deny`, platform
//! tools for principals with the `approver` or `admin` role. They call the operations of
//! [`crate::approvals`], as `larkgate approvals ...` does on the command line.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::APPROVERS;
use crate::identity::CallContext;
use crate::registry::{Registry, RegistryError};
use crate::typed::{Annotations, CapabilityInfo, Declared, HandlerFn, TypedCapability};

/// Input of `approvals_list`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ApprovalsListInput {
    /// Only approvals with this status (`pending`, `approved`, `denied`, `used`, `expired`,
    /// or `all`); default `pending`.
    pub status: Option<String>,
    /// At most this many (1 to 100); default 20.
    pub limit: Option<i64>,
    /// Only those after this point: the `next` of the page before.
    pub after: Option<String>,
}

/// How many approvals a page lists unless asked for another number.
pub const DEFAULT_PAGE: i64 = 20;

/// One approval as listed.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApprovalView {
    /// Its id.
    pub id: String,
    /// Who asked.
    pub principal: String,
    /// The tool.
    pub tool: String,
    /// The canonical arguments as the first refused call sent them, with the fields the
    /// policy redacts shown as `"<redacted>"` (`null` for approvals made before larkgate
    /// recorded them). Arguments larger than 8 KiB are a preview: long strings, lists and
    /// maps are cut, each saying what it left out (`arguments_whole` is then false). The
    /// approval binds to `args_hash`, the hash of the whole arguments.
    pub arguments: Option<serde_json::Value>,
    /// Whether `arguments` shows them whole.
    pub arguments_whole: bool,
    /// The size of the whole arguments, in bytes of canonical JSON.
    pub arguments_bytes: Option<u64>,
    /// SHA-256 of the canonical arguments.
    pub args_hash: String,
    /// The script run the call was made in, if any.
    pub run_id: Option<String>,
    /// The script that run is of, as `name v3` (published) or `name (draft)`, if any.
    pub script: Option<String>,
    /// Its status.
    pub status: String,
    /// When it was created (Unix ms).
    pub created_at_ms: i64,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// Why, when they said.
    pub reason: Option<String>,
    /// Until when it may be used; for a pending request, until when it may be decided.
    pub expires_at_ms: Option<i64>,
    /// How long ago it was asked, in whole seconds, when it was listed.
    pub age_seconds: Option<u64>,
    /// For a call made inside script runs: who started each run on the way, outermost first
    /// (empty for a call made directly). None of them may resolve it.
    pub through: Vec<String>,
    /// The authors of the scripts on the way, who may not resolve it either.
    pub script_authors: Vec<String>,
}

impl ApprovalView {
    /// `approval` as listed at `now_ms`, with its age.
    pub fn listed(approval: larkgate_store::Approval, now_ms: i64) -> Self {
        let age_ms = now_ms.saturating_sub(approval.created_at_ms).max(0);
        ApprovalView {
            age_seconds: Some((age_ms / 1000) as u64),
            ..approval.into()
        }
    }
}

impl From<larkgate_store::Approval> for ApprovalView {
    fn from(a: larkgate_store::Approval) -> Self {
        ApprovalView {
            id: a.id,
            principal: a.principal,
            tool: a.tool,
            arguments_whole: a.details.arguments_whole(),
            arguments_bytes: a.details.arguments_bytes,
            arguments: a
                .details
                .arguments
                .and_then(|text| serde_json::from_str(&text).ok()),
            args_hash: a.args_hash,
            run_id: a.details.run_id,
            script: a.details.script,
            status: a.status.as_str().to_owned(),
            created_at_ms: a.created_at_ms,
            resolved_by: a.resolved_by,
            reason: a.reason,
            expires_at_ms: a.expires_at_ms,
            age_seconds: None,
            through: a.chain.through,
            script_authors: a.chain.authors,
        }
    }
}

/// Output of `approvals_list`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApprovalsListOutput {
    /// The approvals, newest first.
    pub approvals: Vec<ApprovalView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Input of `approvals_approve` and `approvals_deny`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ApprovalIdInput {
    /// The approval's id.
    pub id: String,
    /// Why (one line, at most 1000 bytes): recorded with the approval and in the audit chain.
    pub reason: Option<String>,
}

/// Output of `approvals_approve` and `approvals_deny`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApprovalResolved {
    /// The approval as resolved.
    pub approval: ApprovalView,
}

/// A decision on an approval: a write of larkgate's own state, the same if repeated.
const DECIDE: Annotations = Annotations {
    read_only: false,
    ..Annotations::READ
};

fn resolver(approve: bool) -> HandlerFn<ApprovalIdInput, ApprovalResolved> {
    Arc::new(move |ctx: CallContext, input: ApprovalIdInput| {
        Box::pin(async move {
            let decision = super::Decision {
                approve,
                reason: input.reason.as_deref(),
            };
            let approval = super::resolve_in(
                &ctx.services,
                &ctx.identity.run.principal,
                &input.id,
                decision,
            )
            .await?;
            Ok(ApprovalResolved {
                approval: approval.into(),
            })
        })
    })
}

/// Registers the platform tools.
pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    let invalid = RegistryError::shape("platform tool");
    TypedCapability::new(
        Declared::new(CapabilityInfo::new(
            "approvals_list",
            "List approvals",
            "Lists approval requests, newest first, a page at a time (20 unless `limit` says \
             otherwise; pass `next` as `after` for the next page): pending ones by default. \
             Each shows the tool, who asked and through which runs, the script, and the call's \
             arguments (redacted fields as <redacted>; a preview of arguments over 8 KiB).",
            Annotations::READ,
        ))
        .map_err(&invalid)?,
        Arc::new(|ctx: CallContext, input: ApprovalsListInput| {
            Box::pin(async move {
                let status = input.status.as_deref().unwrap_or("pending");
                let pending_ttl = ctx.services.policy().approvals.pending_ttl_seconds;
                let now_ms = ctx.services.clock.now_ms();
                let page = super::list(
                    ctx.services.store.as_ref(),
                    pending_ttl,
                    status,
                    input.after.as_deref(),
                    input.limit.unwrap_or(DEFAULT_PAGE),
                    now_ms,
                )
                .await?;
                Ok(ApprovalsListOutput {
                    approvals: page
                        .approvals
                        .into_iter()
                        .map(|a| ApprovalView::listed(a, now_ms))
                        .collect(),
                    next: page.next,
                })
            })
        }),
    )
    .platform(APPROVERS)
    .people_only()
    .register(registry)?;
    TypedCapability::new(
        Declared::new(CapabilityInfo::new(
            "approvals_approve",
            "Approve a call",
            "Approves a pending request: the requesting principal may then make that one call, \
             with exactly those arguments, once, before the approval expires. Nobody approves \
             their own call.",
            DECIDE,
        ))
        .map_err(&invalid)?,
        resolver(true),
    )
    .platform(APPROVERS)
    .people_only()
    .register(registry)?;
    TypedCapability::new(
        Declared::new(CapabilityInfo::new(
            "approvals_deny",
            "Deny a call",
            "Denies a pending request: the call is refused with approval_denied.",
            DECIDE,
        ))
        .map_err(&invalid)?,
        resolver(false),
    )
    .platform(APPROVERS)
    .people_only()
    .register(registry)?;
    Ok(())
}
