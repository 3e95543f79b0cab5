//! Saving a draft: what a run would fail on is refused at save time, with its place, and
//! nothing is saved; a warning is answered, not refused.

use serde_json::json;

use crate::harness::{GREET, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_run_would_fail_on_is_refused_before_anything_is_saved() {
    let h = Harness::new().await;
    let ada = h.session("ada").await;
    for (name, source, expected) in [
        ("bad", "def main(city):\n    pass\n", "must be keyword-only"),
        ("Bad-Name", GREET, "is not a script name"),
        ("kv_get", GREET, "a built-in tool has this name"),
        (
            "slip",
            "def main():\n    return kv_gett(key = \"k\")\n",
            "slip.star:2:12-19: Use of undefined variable `kv_gett`",
        ),
        (
            "slip",
            "def main():\n    return call(\"kv_gett\", key = \"k\")\n",
            "there is no tool \"kv_gett\" that you may call",
        ),
        (
            "slip",
            "def main():\n    return kv_get(kee = \"k\")\n",
            "kv_get() takes no argument `kee` (it takes: default, key)",
        ),
        // A tool the saver may not call is as unknown as one that does not exist.
        (
            "slip",
            "def main():\n    return call(\"approvals_approve\", id = \"x\")\n",
            "there is no tool \"approvals_approve\"",
        ),
        ("slip", "def main(*):\n    return (\n", "slip"),
    ] {
        let refused = ada
            .refused("script_save_draft", json!({"name": name, "source": source}))
            .await;
        assert_eq!(
            refused.code.as_str(),
            "invalid_arguments",
            "{source}: {refused}"
        );
        assert!(refused.text.contains(expected), "{source}: {refused}");
        if name == "slip" && expected != "slip" {
            assert!(refused.text.contains("slip was not saved"), "{refused}");
        }
    }
    let listed = ada.call("script_list", json!({})).await.unwrap();
    assert_eq!(listed["drafts"], json!([]), "nothing was saved: {listed}");
    // A run of the same source is refused the same way, before any worker starts.
    let run = ada
        .run_source("def main(city):\n    pass\n", json!({}))
        .await
        .unwrap_err();
    assert!(run.text.contains("must be keyword-only"), "{run}");
    let runs = h
        .session("root")
        .await
        .call("runs_list", json!({}))
        .await
        .unwrap();
    assert_eq!(runs["runs"], json!([]), "no run was recorded: {runs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_is_answered_and_the_draft_is_saved_with_its_signature() {
    let h = Harness::new().await;
    let saved = h
        .save(
            "ada",
            "warned",
            "def main(*, key: str):\n    \"\"\"Reads nothing useful.\"\"\"\n    unused = kv_get(key = key)\n    return 1\n",
        )
        .await;
    assert_eq!(saved["name"], "warned");
    assert_eq!(saved["author"], "ada");
    assert_eq!(saved["description"], "Reads nothing useful.");
    assert!(
        saved["signature"].as_str().unwrap().contains("key: str"),
        "{saved}"
    );
    let warnings = saved["warnings"].to_string();
    assert!(
        warnings.contains("warned.star:3:5-11: Unused assignment of `unused`"),
        "{warnings}"
    );
    let listed = h
        .session("ada")
        .await
        .call("script_list", json!({}))
        .await
        .unwrap();
    assert_eq!(listed["drafts"][0]["name"], "warned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_run_fails_cleanly_and_the_next_run_works() {
    let h = Harness::new().await;
    let ada = h.session("ada").await;
    let boom = ada
        .run_source("def main():\n    return len([0] * 2000000000)\n", json!({}))
        .await
        .unwrap_err();
    assert_eq!(boom.code.as_str(), "limit_exceeded", "{boom}");
    let failed = ada
        .run_source(
            "def main():\n    print('looking for the key')\n    fail('the key is missing')\n",
            json!({}),
        )
        .await
        .unwrap_err();
    assert_eq!(failed.code.as_str(), "script_failed", "{failed}");
    assert!(failed.text.contains("the key is missing"), "{failed}");
    let missing = ada.run_source(GREET, json!({})).await.unwrap_err();
    assert!(
        missing
            .text
            .contains("missing the required argument `name`"),
        "{missing}"
    );
    let answer = ada.run_source(GREET, json!({"name": "x"})).await.unwrap();
    assert_eq!(answer["result"]["hello"], "x");
    // Both failed runs are recorded with their codes; the refused one never started.
    let runs = ada
        .call("runs_list", json!({"status": "failed"}))
        .await
        .unwrap();
    let mut codes: Vec<_> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error_code"].as_str().unwrap().to_owned())
        .collect();
    codes.sort();
    assert_eq!(codes, ["limit_exceeded", "script_failed"]);
}
