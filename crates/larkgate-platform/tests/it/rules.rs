//! The policy's rules with conditions (`[[rules]]`, CEL over the call), through the whole
//! pipeline: what they refuse, allow and gate, what the caller is told (what a role's refusal
//! tells, nothing of the rule) and what the audit record says (the rule, for the operator).

use std::sync::Arc;

use larkgate_binding::Map;
use larkgate_caller::Caller;
use larkgate_platform::policy::Policy;
use larkgate_platform::registry::{Origin, Source, ToolHandler, ToolSpec};
use larkgate_platform::{CallContext, Refusal};
use larkgate_store::{AuditKind, AuditQuery, AuditStore};

use crate::harness::{Harness, POLICY, args, refusal};

/// The test policy, and rules: writers write only under `tmp/`; viewers may also write under
/// their own name; values over 10 bytes need an approval; nobody writes outside office hours.
fn policy() -> Policy {
    let text = format!(
        r#"{POLICY}
[[rules]]
name = "writes under tmp/ only"
tools = ["kv_set", "kv_delete"]
roles = ["writer"]
when = '!args.key.startsWith("tmp/")'
effect = "deny"
reason = "keys outside tmp/ belong to the deploy pipeline"

[[rules]]
name = "viewers write their own keys"
tools = ["kv_set"]
roles = ["viewer"]
when = 'args.key.startsWith(principal.name + "/")'
effect = "allow"

[[rules]]
name = "large values"
tools = ["kv_set"]
when = 'size(args.value) > 10'
effect = "require_approval"

[[rules]]
name = "office hours"
tools = ["kv_*"]
when = 'tool.read_only == false && (now.getHours("UTC") < 8 || now.getHours("UTC") >= 18)'
effect = "deny"
"#
    );
    let policy: Policy = toml::from_str(&text).unwrap();
    policy.validate().unwrap();
    policy
}

fn set(key: &str, value: &str) -> larkgate_binding::Map {
    args(&[("key", key.into()), ("value", value.into())])
}

/// 2026-12-07 12:00 UTC, inside office hours.
const NOON: i64 = 1_796_644_800_000;

#[tokio::test]
async fn rules_refuse_allow_and_gate_calls_by_their_arguments() {
    let h = Harness::with(|b| {
        b.policy(policy()).wall_clock(std::sync::Arc::new(
            larkgate_platform::clock::ManualClock::at(NOON),
        ))
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    wes.call_tool("kv_set", set("tmp/a", "v")).await.unwrap();
    // Outside tmp/: refused as a role's refusal is, nothing of the rule told.
    let refused = refusal(&wes, "kv_set", set("etc/passwd", "v")).await;
    assert_eq!(refused.code, "forbidden");
    assert!(
        refused.text.contains("wes may not call kv_set"),
        "{}",
        refused.text
    );
    assert!(!refused.text.contains("tmp/"), "{}", refused.text);
    // A read is not a write: the rule names kv_set and kv_delete only.
    wes.call_tool("kv_get", args(&[("key", "etc/passwd".into())]))
        .await
        .unwrap();

    // A viewer's roles do not call kv_set; the allow rule does, for its own keys only.
    let (vera, _t) = h.session("vera").await;
    vera.call_tool("kv_set", set("vera/notes", "v"))
        .await
        .unwrap();
    let refused = refusal(&vera, "kv_set", set("wes/notes", "v")).await;
    assert_eq!(refused.code, "forbidden");
    // A principal whose roles neither call nor see kv_set is not told it exists.
    let (nobody, _t) = h.session("nobody").await;
    let refused = refusal(&nobody, "kv_set", set("nobody/x", "v")).await;
    assert_eq!(refused.code, "not_found");

    // A large value needs an approval for its exact arguments; a small one does not.
    let refused = refusal(&wes, "kv_set", set("tmp/big", "0123456789abcdef")).await;
    assert_eq!(refused.code, "approval_required", "{}", refused.text);

    // The audit names the rule and its reason for the operator.
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let details: Vec<&str> = records
        .iter()
        .filter(|r| r.kind == AuditKind::Refusal && r.code.as_deref() == Some("forbidden"))
        .filter_map(|r| r.detail.as_deref())
        .collect();
    assert!(
        details.iter().any(|d| d.contains(
            "decided by rule writes under tmp/ only: keys outside tmp/ belong to the deploy pipeline"
        )),
        "{details:?}"
    );
    assert!(
        details
            .iter()
            .any(|d| d.contains("decided by rule viewers write their own keys")),
        "{details:?}"
    );
    // The call an approval rule held names it too.
    assert!(
        records
            .iter()
            .filter(|r| r.code.as_deref() == Some("approval_required"))
            .filter_map(|r| r.detail.as_deref())
            .any(|d| d.contains("decided by rule large values: its condition holds")),
        "{records:?}"
    );
}

#[tokio::test]
async fn outside_office_hours_writes_are_refused_by_the_platform_s_clock() {
    let clock = larkgate_platform::clock::ManualClock::at(NOON);
    let h = Harness::with(|b| {
        b.policy(policy())
            .wall_clock(std::sync::Arc::new(clock.clone()))
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    wes.call_tool("kv_set", set("tmp/a", "v")).await.unwrap();
    clock.advance(std::time::Duration::from_secs(7 * 3600));
    let refused = refusal(&wes, "kv_set", set("tmp/a", "v")).await;
    assert_eq!(refused.code, "forbidden");
    wes.call_tool("kv_get", args(&[("key", "tmp/a".into())]))
        .await
        .unwrap();
}

/// The caller of a tool it may not see reads what the caller of a typo reads (`not_found`,
/// the same text); the operator's audit tells the two apart.
#[tokio::test]
async fn the_audit_tells_a_tool_hidden_by_the_policy_from_a_typo() {
    let h = Harness::new().await;
    let (nobody, _t) = h.session("nobody").await;
    let hidden = refusal(&nobody, "kv_set", set("k", "v")).await;
    let typo = refusal(&nobody, "kv_sett", set("k", "v")).await;
    assert_eq!(
        (hidden.code.as_str(), typo.code.as_str()),
        ("not_found", "not_found")
    );
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let detail = |tool: &str| {
        records
            .iter()
            .find(|r| r.kind == AuditKind::Refusal && r.tool.as_deref() == Some(tool))
            .and_then(|r| r.detail.clone())
            .unwrap_or_default()
    };
    assert!(
        detail("kv_set").contains("no role of nobody lists or calls it"),
        "{}",
        detail("kv_set")
    );
    assert!(
        detail("kv_sett").contains("no tool has this name"),
        "{}",
        detail("kv_sett")
    );
}

/// A rule whose condition cannot be evaluated on a call (here `int()` of a value that is not a
/// number) refuses it whatever the rule's effect: the caller reads a `forbidden` with a
/// correlation id to quote and nothing of the rule or the value; the audit has the rule and
/// the error. The same rule decides the calls it can evaluate as written.
#[tokio::test]
async fn a_rule_that_cannot_be_evaluated_refuses_with_a_correlation_id() {
    let policy: Policy = toml::from_str(&format!(
        r#"{POLICY}
[[rules]]
name = "numbered values"
tools = ["kv_set"]
when = 'args.key.startsWith("n/") && int(args.value) > 100'
effect = "require_approval"
"#
    ))
    .unwrap();
    let h = Harness::with(|b| b.policy(policy)).await;
    let (wes, _t) = h.session("wes").await;
    wes.call_tool("kv_set", set("tmp/a", "anything"))
        .await
        .unwrap();
    wes.call_tool("kv_set", set("n/a", "7")).await.unwrap();
    let gated = refusal(&wes, "kv_set", set("n/a", "700")).await;
    assert_eq!(gated.code, "approval_required", "{}", gated.text);

    let refused = refusal(&wes, "kv_set", set("n/a", "seven hundred")).await;
    assert_eq!(refused.code, "forbidden", "{}", refused.text);
    let (said, id) = refused
        .text
        .split_once("(correlation id ")
        .unwrap_or_else(|| panic!("no correlation id: {}", refused.text));
    assert!(
        said.starts_with(
            "forbidden: wes may not call kv_set: a policy rule could not be evaluated"
        ),
        "{}",
        refused.text
    );
    let id: String = id.chars().take_while(char::is_ascii_hexdigit).collect();
    assert_eq!(id.len(), 16, "{}", refused.text);
    for secret in ["seven hundred", "numbered values", "int("] {
        assert!(!refused.text.contains(secret), "{}", refused.text);
    }
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    assert!(
        records
            .iter()
            .filter(|r| r.kind == AuditKind::Refusal && r.code.as_deref() == Some("forbidden"))
            .filter_map(|r| r.detail.as_deref())
            .any(|d| d
                .contains("decided by rule numbered values: its condition could not be evaluated")),
        "{records:?}"
    );
}

/// Rate limits and approval rules take the same conditions: a budget that counts only the
/// calls it names by their arguments, and an approval only for the calls that need one.
#[tokio::test]
async fn rate_limits_and_approval_rules_count_only_the_calls_their_condition_holds_of() {
    let policy: Policy = toml::from_str(
        r#"
        [roles.writer]
        call = ["kv_*"]

        [approvals]
        require = [{ tool = "kv_delete", when = 'args.key.startsWith("prod/")' }]

        [[rate_limits]]
        per = "principal_tool"
        tools = ["kv_set"]
        calls = 1
        period_seconds = 3600
        when = 'size(args.value) > 10'
        "#,
    )
    .unwrap();
    policy.validate().unwrap();
    let h = Harness::with(|b| b.policy(policy)).await;
    let (wes, _t) = h.session("wes").await;
    // Small values are not counted; the first large one spends the budget, the next waits.
    for _ in 0..3 {
        wes.call_tool("kv_set", set("tmp/a", "small"))
            .await
            .unwrap();
    }
    wes.call_tool("kv_set", set("tmp/b", "0123456789abcdef"))
        .await
        .unwrap();
    let limited = refusal(&wes, "kv_set", set("tmp/b", "0123456789abcdef")).await;
    assert_eq!(limited.code, "rate_limited", "{}", limited.text);
    wes.call_tool("kv_set", set("tmp/a", "small"))
        .await
        .unwrap();
    // Deleting under prod/ needs an approval; elsewhere it does not.
    wes.call_tool("kv_set", set("prod/a", "v")).await.unwrap();
    wes.call_tool("kv_delete", args(&[("key", "tmp/a".into())]))
        .await
        .unwrap();
    let gated = refusal(&wes, "kv_delete", args(&[("key", "prod/a".into())])).await;
    assert_eq!(gated.code, "approval_required", "{}", gated.text);
}

/// An upstream's tool `fs__read` whose input schema lists `field`, answering `{}`.
fn fs_read(field: &str) -> Vec<(ToolSpec, Arc<dyn ToolHandler>)> {
    struct Answers;
    #[async_trait::async_trait]
    impl ToolHandler for Answers {
        async fn call(&self, _: &CallContext, _: Map) -> Result<Map, Refusal> {
            Ok(Map::new())
        }
    }
    let spec = ToolSpec {
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {field: {"type": "string"}},
        })
        .as_object()
        .unwrap()
        .clone(),
        read_only: true,
        ..ToolSpec::new(
            "fs__read",
            Origin {
                source: Source::Upstream,
                alias: Some("fs".into()),
                original_name: "read".into(),
            },
        )
    };
    vec![(spec, Arc::new(Answers))]
}

/// When an upstream's tool changes its schema so that a rule naming it reads an argument it no
/// longer takes, the rule fails closed: it refuses every call of the tool (a `has()` guard
/// would otherwise turn the deny rule off, and `file: "secret/..."` would pass), the operator's
/// audit says why, and the rule holds again once the tool fits it. A rule that matches the tool
/// by a wildcard only is evaluated as written.
#[tokio::test]
async fn a_rule_that_no_longer_fits_its_tool_s_schema_refuses_its_calls_until_it_does() {
    let policy = format!(
        r#"{POLICY}
[[rules]]
name = "no secrets"
tools = ["fs__read"]
when = 'has(args.path) && args.path.startsWith("secret/")'
effect = "deny"

[[rules]]
name = "wide"
tools = ["fs__*"]
when = 'has(args.mode) && args.mode == "raw"'
effect = "deny"
"#
    );
    let policy: Policy = toml::from_str(&policy).unwrap();
    let h = Harness::with(|b| b.policy(policy)).await;
    let table = h.platform.tool_table();
    table.replace_upstream("fs", fs_read("path")).unwrap();
    let (root, _t) = h.session("root").await;
    let path = |p: &str| args(&[("path", p.into())]);
    let file = |p: &str| args(&[("file", p.into())]);
    root.call_tool("fs__read", path("docs/a")).await.unwrap();
    assert_eq!(
        refusal(&root, "fs__read", path("secret/k")).await.code,
        "forbidden"
    );

    // The upstream renames `path` to `file`: every call is refused, the harmless one too.
    table.replace_upstream("fs", fs_read("file")).unwrap();
    for arguments in [file("secret/k"), file("docs/a")] {
        let refused = refusal(&root, "fs__read", arguments).await;
        assert_eq!(refused.code, "forbidden");
        assert!(!refused.text.contains("path"), "{}", refused.text);
    }
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let unfit = "decided by rule no secrets: its condition reads `args.path`, which fs__read \
                 does not take now";
    assert!(
        records
            .iter()
            .filter_map(|r| r.detail.as_deref())
            .any(|d| d.contains(unfit)),
        "{records:?}"
    );

    // The tool takes `path` again: the rule is evaluated again.
    table.replace_upstream("fs", fs_read("path")).unwrap();
    root.call_tool("fs__read", path("docs/a")).await.unwrap();
    assert_eq!(
        refusal(&root, "fs__read", path("secret/k")).await.code,
        "forbidden"
    );
    // `wide` reads `mode`, which fs__read never took: it names the tool by a wildcard, so
    // its guard decides (a `larkgate check` warning, not a refusal).
    root.call_tool("fs__read", path("docs/b")).await.unwrap();
}
