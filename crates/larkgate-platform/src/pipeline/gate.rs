//! `approval gate`: a tool the operator gates (by policy, or an upstream configured
//! `approval = "always"`) runs only under an approved, unexpired, unused approval for exactly
//! this {principal, tool, arguments hash, call chain}. It is checked here
//! ([`crate::approvals::admit`]) and consumed at dispatch ([`super::journal`]). Nothing a tool
//! declares about itself clears the gate. A resource read or prompt get is gated only when the
//! policy's `resources` or `prompts` approval patterns name it.
//!
//! A call straight from a client whose `require` rule has a `wait_seconds` is held while its
//! request is pending, and goes on when it is approved ([`crate::approvals::wait`]).

use std::sync::Arc;

use larkgate_store::CallChain;

use crate::RunKind;
use crate::approvals;
use crate::envelope::{Code, Refusal};
use crate::review::ReviewGate;
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct Gate {
    /// The platform's services.
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Step for Gate {
    const NAME: &'static str = "approval gate";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let operator_gated = request
            .resolved
            .as_ref()
            .is_some_and(|t| t.spec.requires_approval);
        let policy = self.services.policy();
        if policy.reads_calls_of(&request.target) {
            request.ensure_facts(&self.services);
        }
        let gated = operator_gated
            || request.approval_rule.is_some()
            || policy.requires_approval_of(request.kind, &request.target, request.facts.as_ref());
        if request.intercepted {
            // A review run's intended write is recorded, never made: nothing is approved or
            // spent; the record says when its real run would ask for an approval.
            if gated {
                request.review_gate = Some(ReviewGate::Needed);
            }
            return Ok(());
        }
        // A subscription reads nothing: each read of the resource waits for its approval.
        if !gated || request.subscribing.is_some() {
            return Ok(());
        }
        if request.completing.is_some() {
            return Err(Refusal::new(
                Code::Forbidden,
                format!(
                    "completions are not offered for {}: an approval rule gates it",
                    request.target
                ),
            )
            .with_hint("get the prompt or read the resource itself, which waits for its approval")
            .decided_by("an approval is needed, and nobody approves a completion"));
        }
        let review = request
            .identity
            .as_ref()
            .is_some_and(|i| i.run.kind == RunKind::Review);
        let principal = request.principal_id().to_owned();
        let waiting = request.waiting.take();
        let hash = request.args_hash.clone().unwrap_or_default();
        let direct = CallChain::default();
        let chain = request.identity.as_ref().map_or(&direct, |i| &i.run.chain);
        let call = approvals::GatedCall {
            principal: &principal,
            tool: &request.tool,
            args_hash: &hash,
            chain,
            arguments: request.canonical.as_ref(),
            run_id: request
                .identity
                .as_ref()
                .and_then(|i| i.run.run_id.as_deref()),
        };
        if review {
            // A review run collects every approval its real run would need in one pass: the
            // request is made (or found), the call recorded, never made, and nothing spent.
            let said = match approvals::admit(&self.services, &call).await {
                Ok(id) => ReviewGate::Approved(id),
                Err(refusal) if refusal.code == Code::ApprovalRequired => {
                    match refusal.approval_id {
                        Some(id) => ReviewGate::Requested(id),
                        None => return Err(refusal),
                    }
                }
                Err(refusal) => return Err(refusal),
            };
            request.intercepted = true;
            request.review_gate = Some(said);
            return Ok(());
        }
        let wait = policy.approval_wait(request.kind, &request.target);
        // The operator's audit of a call held or refused here names the rule that gated it.
        let rule = request.approval_rule.as_deref();
        let named = |refusal: Refusal| match rule {
            Some(rule) => refusal.decided_by(format!("rule {rule}: its condition holds")),
            None => refusal,
        };
        let id = match approvals::admit(&self.services, &call).await {
            Ok(id) => id,
            Err(asked) => match (asked.code, waiting, wait) {
                (Code::ApprovalRequired, Some(waiting), Some(wait)) => {
                    approvals::wait::until_decided(&self.services, &call, asked, waiting, wait)
                        .await
                        .map_err(named)?
                }
                _ => return Err(named(asked)),
            },
        };
        request.approval_id = Some(id);
        Ok(())
    }
}
