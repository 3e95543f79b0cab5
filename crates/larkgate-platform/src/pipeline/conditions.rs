//! `conditions`: the policy's rules ([`crate::policy::Rule`]), on the call's canonical
//! arguments. It runs after `arguments` (a condition reads what the tool will be given, bound
//! and checked) and before anything counts or holds the call (the write barrier, the rate
//! limit, the approval gate); the same step for every edge (HTTP, stdio, the console, a
//! script's host calls). See [`crate::policy::Policy::judge`] for the order of evaluation.
//!
//! A refusal tells the caller what a role's refusal tells (`forbidden`: "P may not call T"),
//! never the rule or its reason, which may describe what the operator guards; the audit record
//! and the log name the rule. A `require_approval` rule that holds marks the call for the gate.

use std::sync::Arc;

use larkgate_binding::Map;
use larkgate_caller::Source;

use crate::access;
use crate::envelope::{Code, Refusal};
use crate::policy::{Facts, TargetKind, Verdict};
use crate::registry::RegisteredTool;
use crate::services::Services;

use super::{CallRequest, Step};

/// The step. See the module documentation.
#[derive(Debug)]
pub struct Conditions {
    /// The platform's services.
    pub services: Arc<Services>,
}

/// What a condition reads of a call of `tool` by `principal` with `args`, through `chain`, at
/// `now_ms`.
pub fn facts<'a>(
    args: &'a Map,
    principal: &'a larkgate_store::Principal,
    tool: &'a RegisteredTool,
    chain: &'a larkgate_store::CallChain,
    now_ms: i64,
) -> Facts<'a> {
    let spec = &tool.spec;
    Facts {
        args,
        principal,
        tool: &spec.name,
        source: match spec.origin.source {
            Source::Capability | Source::Platform => "builtin",
            Source::Upstream => "upstream",
            Source::Script => "script",
        },
        alias: spec.origin.alias.as_deref().unwrap_or_default(),
        read_only: spec.read_only,
        chain,
        now_ms,
        arguments: tool.arguments.as_ref(),
    }
}

#[async_trait::async_trait]
impl Step for Conditions {
    const NAME: &'static str = "conditions";
    async fn check(&self, request: &mut CallRequest) -> Result<(), Refusal> {
        let (TargetKind::Tool, Some(identity), Some(tool)) =
            (request.kind, &request.identity, &request.resolved)
        else {
            return Ok(());
        };
        let (identity, tool) = (Arc::clone(identity), Arc::clone(tool));
        let policy = self.services.policy();
        let principal = &identity.run.principal;
        let spec = &tool.spec;
        if !policy.has_rules_for(principal, &spec.name) {
            return Ok(());
        }
        let granted = match spec.roles {
            Some(roles) => access::has_any_role(principal, roles),
            None => policy.roles_grant_call(principal, &spec.name),
        };
        request.ensure_facts(&self.services);
        let fallback;
        let facts = match &request.facts {
            Some(facts) => facts,
            // Not after `arguments`; the rules are judged on no arguments rather than skipped.
            None => {
                let now_ms = self.services.clock.now_ms();
                fallback = self::facts(&Map::new(), principal, &tool, &identity.run.chain, now_ms)
                    .values();
                &fallback
            }
        };
        match policy.judge(principal, &spec.name, granted, facts) {
            Verdict::Proceed { approval } => {
                request.approval_rule = approval;
                Ok(())
            }
            Verdict::Refuse {
                rule,
                why,
                failed: false,
            } => {
                tracing::warn!(
                    principal = %principal.id,
                    tool = %spec.name,
                    %rule,
                    %why,
                    "a policy rule refused a call"
                );
                Err(Refusal::new(
                    Code::Forbidden,
                    format!("{} may not call {}", principal.id, spec.name),
                )
                .with_hint("ask an administrator for a role or rule that allows it")
                .decided_by(format!("rule {rule}: {why}")))
            }
            // The rule could not be judged on this call: refused all the same (a rule never
            // silently stops applying), and the caller gets a correlation id to quote; the
            // error, which may quote the arguments, goes to the log under it, never to them.
            Verdict::Refuse {
                rule,
                why,
                failed: true,
            } => Err(Refusal::logged(
                Code::Forbidden,
                format!(
                    "{} may not call {}: a policy rule could not be evaluated on this call",
                    principal.id, spec.name
                ),
                format_args!(
                    "principal {} calling {}: rule {rule}: {why}",
                    principal.id, spec.name
                ),
            )
            .with_hint(
                "check the arguments' types against the tool's schema; if they are right, tell \
                 the operator the correlation id (their log has the rule and its error)",
            )
            .decided_by(format!("rule {rule}: {why}"))),
        }
    }
}
