//! The runs' budget: how many go at once and the memory they reserve together. A run waits
//! for its turn; one that cannot get it in time is refused, saying what holds the budget.

use std::time::Duration;

use larkgate_scripts::RunBounds;
use serde_json::json;

use crate::harness::Harness;

const OUTER: &str = r#"
def main():
    """Calls a script while its own run holds a turn."""
    return script.inner()["result"]
"#;

const INNER: &str = "def main():\n    return 1\n";

/// `outer` and `inner` published, under `bounds`.
async fn nested(bounds: RunBounds) -> Harness {
    let h = Harness::with("", bounds).await;
    for (name, source) in [("inner", INNER), ("outer", OUTER)] {
        h.save("ada", name, source).await;
        h.publish("pat", name).await;
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_the_slots_wait_their_turn_and_all_finish() {
    let h = Harness::with(
        "",
        RunBounds {
            max_concurrent_runs: 1,
            start_wait: Duration::from_secs(600),
            ..RunBounds::default()
        },
    )
    .await;
    let ada = h.session("ada").await;
    let runs =
        (0..3).map(|i| ada.run_source("def main(*, i: int):\n    return i * 2\n", json!({"i": i})));
    // Started together: each run asks for its turn at its first poll.
    let answers = futures::future::join_all(runs).await;
    let results: Vec<_> = answers
        .into_iter()
        .map(|answer| answer.unwrap()["result"].clone())
        .collect();
    assert_eq!(results, [json!(0), json!(2), json!(4)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_get_a_slot_in_time_is_refused_saying_what_holds_it() {
    // One slot: the outer run holds it, so the run it starts can never get one.
    let h = nested(RunBounds {
        max_concurrent_runs: 1,
        start_wait: Duration::from_millis(300),
        ..RunBounds::default()
    })
    .await;
    let root = h.session("root").await;
    let refused = root.refused("script__outer", json!({})).await;
    assert_eq!(refused.code.as_str(), "limit_exceeded", "{refused}");
    assert!(
        refused.text.contains("did not get its turn within")
            && refused.text.contains("runs going: 1 of at most 1"),
        "{refused}"
    );
    // The slot is free again once the outer run ended: a run on its own goes.
    let answer = root.call("script__inner", json!({})).await.unwrap();
    assert_eq!(answer["result"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_of_one_run_lets_one_go_and_refuses_the_run_it_starts() {
    let limits = larkgate_script::ScriptLimits::default();
    let one = larkgate_scripts::turns::reservation(limits.max_memory_bytes);
    let h = nested(RunBounds {
        max_concurrent_runs: 8,
        memory_budget_bytes: one,
        start_wait: Duration::from_millis(300),
        ..RunBounds::default()
    })
    .await;
    assert!(
        h.scripts.memory_budget().contains(": 1 can go at once"),
        "{}",
        h.scripts.memory_budget()
    );
    let root = h.session("root").await;
    let refused = root.refused("script__outer", json!({})).await;
    assert_eq!(refused.code.as_str(), "limit_exceeded", "{refused}");
    assert!(
        refused.text.contains("runs going: 1 of at most 8")
            && refused.text.contains("script memory budget"),
        "{refused}"
    );
    let answer = root.call("script__inner", json!({})).await.unwrap();
    assert_eq!(answer["result"], 1);
}
