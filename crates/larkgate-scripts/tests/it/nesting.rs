//! Published scripts call each other as tools, each run one level deeper than its caller, up
//! to `[scripts] max_depth`; a draft may not call a script at all.

use larkgate_scripts::RunBounds;
use serde_json::json;

use crate::harness::Harness;

const COUNTDOWN: &str = r#"
def main(*, n: int):
    """Counts down by calling itself as a tool."""
    if n == 0:
        return 0
    return script.countdown(n = n - 1)["result"] + 1
"#;

async fn countdown(bounds: RunBounds) -> Harness {
    let h = Harness::with("", bounds).await;
    h.save("ada", "countdown", COUNTDOWN).await;
    h.publish("pat", "countdown").await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_scripts_call_each_other_up_to_the_default_depth() {
    let h = countdown(RunBounds::default()).await;
    let root = h.session("root").await;
    // Depth 1 (this run) calls depth 2, 3 and 4: the limit is 4.
    let answer = root
        .call("script__countdown", json!({"n": 3}))
        .await
        .unwrap();
    assert_eq!(answer["result"], 3);
    // A fifth level is refused, and every level above fails with that refusal.
    let refused = root.refused("script__countdown", json!({"n": 4})).await;
    assert_eq!(refused.code.as_str(), "limit_exceeded", "{refused}");
    assert!(
        refused.text.contains("script nesting depth limit"),
        "{refused}"
    );
    // The chain of runs, each started by the one above, is in the records.
    let runs = root
        .call("runs_list", json!({"script": "countdown"}))
        .await
        .unwrap();
    let started_by: Vec<_> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["started_by"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        started_by.iter().filter(|s| *s == "root").count(),
        2,
        "{started_by:?}"
    );
    assert!(
        started_by
            .iter()
            .filter(|s| *s == "script:countdown")
            .count()
            >= 3,
        "{started_by:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_limit_is_the_configured_one() {
    let h = countdown(RunBounds {
        max_depth: 2,
        ..RunBounds::default()
    })
    .await;
    let root = h.session("root").await;
    let answer = root
        .call("script__countdown", json!({"n": 1}))
        .await
        .unwrap();
    assert_eq!(answer["result"], 1);
    let refused = root.refused("script__countdown", json!({"n": 2})).await;
    assert_eq!(refused.code.as_str(), "limit_exceeded", "{refused}");
    assert!(refused.text.contains("at most 2 deep"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_may_not_call_a_script_tool() {
    let h = countdown(RunBounds::default()).await;
    // ada may call script tools herself (the policy's author role)...
    let ada = h.session("ada").await;
    ada.call("script__countdown", json!({"n": 0}))
        .await
        .unwrap();
    // ...but not from a draft: a script tool may write.
    let refused = ada
        .run_source(
            "def main():\n    return script.countdown(n = 0)\n",
            json!({}),
        )
        .await
        .unwrap_err();
    assert!(refused.text.contains("write_barrier"), "{refused}");
}
