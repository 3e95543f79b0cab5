//! Review runs: a draft run that records the calls it would make to tools that may write,
//! instead of refusing or making them; and publishing that demands and shows one.

use larkgate_store::ApprovalStore;
use serde_json::json;

use crate::harness::Harness;

/// Approvals on deletes, a redacted value, one kv_set an hour, and a review before publishing.
const REVIEW_POLICY: &str = r#"
[approvals]
require = ["kv_delete"]
redact = ["value"]

[[rate_limits]]
per = "principal_tool"
tools = ["kv_set"]
calls = 1
period_seconds = 3600

[publishing]
require_review = true
"#;

/// Reads, then writes twice (once through a computed name), and tries a tool its author may
/// not call.
const TIDY: &str = r#"
def main(*, name: str):
    """Counts a visit and clears the old record."""
    seen = kv_get(key = name, default = "0")["value"]
    first = kv_set(key = name, value = "secret-" + str(int(seen) + 1))
    second = call("kv_" + "delete", key = "old-" + name)
    sneaky = try_call("script_" + "publish", name = "tidy")
    return {"first": first, "second": second, "sneaky": sneaky.ok}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_run_records_the_writes_it_would_make_and_publishing_needs_and_shows_it() {
    let h = Harness::with(REVIEW_POLICY, Default::default()).await;
    let root = h.session("root").await;
    root.call("kv_set", json!({"key": "old-Ada", "value": "kept"}))
        .await
        .unwrap();
    h.save("ada", "tidy", TIDY).await;
    let (ada, pat) = (h.session("ada").await, h.session("pat").await);

    // The policy wants a review before publishing: none yet, so nothing is published.
    let refused = pat.refused("script_publish", json!({"name": "tidy"})).await;
    assert_eq!(refused.code.as_str(), "forbidden");
    assert!(
        refused.text.contains("no successful review run"),
        "{refused}"
    );
    // A plain draft run stops at the first write.
    let plain = ada
        .refused(
            "script_run_draft",
            json!({"name": "tidy", "args": {"name": "Ada"}}),
        )
        .await;
    assert!(plain.text.contains("write_barrier"), "{plain}");

    // A review run goes on past it: twice, neither rate-limited (one kv_set an hour) nor
    // gated (kv_delete needs an approval), and nothing is written.
    let expected_writes = json!([
        {"tool": "kv_set", "arguments": {"key": "Ada", "value": "<redacted>"}},
        // Gated: the run that makes it (published, as its own principal) asks then.
        {"tool": "kv_delete", "arguments": {"key": "old-Ada"}, "approval": "needed"},
    ]);
    let mut review_id = String::new();
    for _ in 0..2 {
        let answer = ada
            .call(
                "script_run_draft",
                json!({"name": "tidy", "review": true, "args": {"name": "Ada"}}),
            )
            .await
            .unwrap();
        assert_eq!(
            answer["result"],
            json!({
                "first": {"intercepted": true, "tool": "kv_set", "write": 1},
                "second": {"intercepted": true, "tool": "kv_delete", "write": 2},
                "sneaky": false,
            })
        );
        assert_eq!(answer["intended_writes"], expected_writes);
        assert!(!answer.to_string().contains("secret-1"), "{answer}");
        review_id = answer["run_id"].as_str().unwrap().to_owned();
    }
    let kept = root
        .call("kv_get", json!({"key": "old-Ada"}))
        .await
        .unwrap();
    assert_eq!(kept["value"], "kept");
    let unset = root
        .call("kv_get", json!({"key": "Ada", "default": "none"}))
        .await
        .unwrap();
    assert_eq!(unset["value"], "none");
    assert!(
        h.store
            .approvals(larkgate_store::ApprovalQuery {
                status: None,
                after: None,
                limit: 10
            })
            .await
            .unwrap()
            .is_empty(),
        "a review asks no approver"
    );
    let record = ada.run_record(&review_id).await.unwrap();
    assert_eq!(record["kind"], "review");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["intended_writes"], expected_writes);

    // A dry run shows what publishing would bring; publishing shows it again.
    let dry = pat
        .call("script_publish", json!({"name": "tidy", "dry_run": true}))
        .await
        .unwrap();
    assert_eq!(dry["published"], false);
    assert_eq!(dry["review"]["run_id"], review_id.as_str());
    assert_eq!(dry["review"]["intended_writes"], expected_writes);
    let published = h.publish("pat", "tidy").await;
    assert_eq!(published["version"], 1);
    assert_eq!(published["review"]["run_id"], review_id.as_str());

    // A changed source needs its own review; the publisher then sees the diff.
    h.save(
        "ada",
        "tidy",
        &TIDY.replace("\"old-\" + name", "\"older-\" + name"),
    )
    .await;
    let refused = pat.refused("script_publish", json!({"name": "tidy"})).await;
    assert!(
        refused.text.contains("no successful review run"),
        "{refused}"
    );
    ada.call(
        "script_run_draft",
        json!({"name": "tidy", "review": true, "args": {"name": "Bo"}}),
    )
    .await
    .unwrap();
    let second = h.publish("pat", "tidy").await;
    assert_eq!(second["version"], 2);
    let diff = second["diff"].as_str().unwrap();
    assert!(
        diff.contains("-    second = call(\"kv_\" + \"delete\", key = \"old-\" + name)")
            && diff.contains("+    second = call(\"kv_\" + \"delete\", key = \"older-\" + name)"),
        "{diff}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_takes_only_true_or_false() {
    let h = Harness::new().await;
    let refused = h
        .session("ada")
        .await
        .refused(
            "script_run_draft",
            json!({"source": "def main():\n    return 1\n", "review": "yes"}),
        )
        .await;
    assert_eq!(refused.code.as_str(), "invalid_arguments");
    assert!(
        refused.text.contains("`review` must be true or false"),
        "{refused}"
    );
}
