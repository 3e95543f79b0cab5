//! How the policy would decide a call, without making it (`larkgate policy explain`): the
//! tool, what the caller's roles grant, the arguments as the tool would get them, every rule
//! with its result, and the decision. Rate limits, the write barrier of script runs and the
//! approvals already granted are not consulted: they depend on what happened before the call,
//! not on the policy alone.

use larkgate_caller::Source;
use larkgate_store::{CallChain, Principal};

use crate::access;
use crate::pipeline::{canonical_arguments, facts};
use crate::platform::Platform;
use crate::policy::{Effect, Verdict};

/// What [`explain`] found: one line per finding, and the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The tool, the roles, the arguments and each rule, in the order they are considered.
    pub lines: Vec<String>,
    /// The outcome a direct call (not in a script run) would have: `allowed`, `allowed after
    /// an approval`, or a refusal's code, each with what decided it.
    pub decision: String,
}

/// How `platform`'s policy would decide `principal`'s direct call of `tool` with `arguments`.
pub fn explain(
    platform: &Platform,
    principal: &Principal,
    tool: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> Explanation {
    let services = platform.services();
    let policy = services.policy();
    let mut lines = Vec::new();
    let table = platform.tool_table().snapshot();
    let Some(registered) = table.get(tool) else {
        return Explanation {
            lines,
            decision: format!("not_found: no tool is named {tool}"),
        };
    };
    let spec = &registered.spec;
    lines.push(format!(
        "tool {tool}: {}, {}",
        match (spec.origin.source, spec.origin.alias.as_deref()) {
            (Source::Upstream, Some(alias)) => format!("from the upstream {alias}"),
            (Source::Script, _) => "a published script".to_owned(),
            _ => "built in".to_owned(),
        },
        if spec.read_only {
            "read-only"
        } else {
            "may write"
        }
    ));
    let roles = format!("{}'s roles [{}]", principal.id, principal.roles.join(", "));
    let granted = match spec.roles {
        Some(fixed) => access::has_any_role(principal, fixed),
        None => policy.roles_grant_call(principal, tool),
    };
    let sees = access::may_see(&policy, principal, spec);
    lines.push(match (granted, sees) {
        (true, _) => format!("roles: {roles} call it"),
        (false, true) => format!(
            "roles: {roles} do not call it (it is listed to them, or an allow rule names it)"
        ),
        (false, false) => {
            format!("roles: {roles} neither list nor call it, and no allow rule names it")
        }
    });
    if !sees {
        return Explanation {
            lines,
            decision: "not_found: the caller is told what it is told of a tool that does not \
                       exist"
                .to_owned(),
        };
    }
    let canonical = match canonical_arguments(&services.limits, tool, Some(registered), arguments) {
        Ok(canonical) => canonical,
        Err(refusal) => {
            return Explanation {
                lines,
                decision: format!("invalid_arguments: {}", refusal.message),
            };
        }
    };
    lines.push(format!(
        "arguments: {}",
        larkgate_binding::canonical_map_json(&canonical)
    ));
    let chain = CallChain::default();
    let values = facts(
        &canonical,
        principal,
        registered,
        &chain,
        services.clock.now_ms(),
    )
    .values();
    for rule in policy.trace(principal, tool, &values) {
        let effect = match rule.effect {
            Effect::Deny => "deny",
            Effect::Allow => "allow",
            Effect::RequireApproval => "require_approval",
        };
        let result = match (&rule.condition, rule.applies) {
            (_, false) => "does not apply to this caller and tool".to_owned(),
            (None, true) => "applies, without a condition".to_owned(),
            (Some(Ok(holds)), true) => format!("applies; its condition is {holds}"),
            (Some(Err(why)), true) => format!("applies; its condition fails: {why}"),
        };
        lines.push(format!("rule {} ({effect}): {result}", rule.name));
    }
    let decision = match policy.judge(principal, tool, granted, &values) {
        Verdict::Refuse { rule, why, .. } => format!("forbidden, by {rule}: {why}"),
        Verdict::Proceed {
            approval: Some(rule),
        } => format!("allowed after an approval, required by rule {rule}"),
        Verdict::Proceed { approval: None }
            if spec.requires_approval || policy.requires_approval(tool) =>
        {
            "allowed after an approval, required by [policy.approvals] require (or the \
             upstream's approval setting)"
                .to_owned()
        }
        Verdict::Proceed { approval: None } => "allowed".to_owned(),
    };
    Explanation { lines, decision }
}
