//! Who a run runs as: a draft as its caller with only read-only tools, a published version as
//! `script:NAME` with the roles its author had when it was published, and who may read a run.

use larkgate_store::{AuditKind, PrincipalStore};
use serde_json::json;

use crate::harness::{GREET, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_runs_as_its_caller_and_may_only_read() {
    let h = Harness::new().await;
    let ada = h.session("ada").await;
    let answer = ada.run_source(GREET, json!({"name": "Ada"})).await.unwrap();
    assert_eq!(answer["result"], json!({"hello": "Ada", "saved": false}));
    assert_eq!(answer["printed"], "not saved: write_barrier\n");
    let record = ada
        .run_record(answer["run_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(record["principal"], "ada");
    assert_eq!(record["kind"], "draft");
    assert_eq!(record["status"], "succeeded");
    // kv_get left the worker; kv_set was refused by the draft barrier before the pipeline.
    assert_eq!(record["tool_calls"], 1, "{record}");
    // Nothing was written, though ada may write when she calls kv_set herself.
    let root = h.session("root").await;
    let read = root
        .call("kv_get", json!({"key": "Ada", "default": "none"}))
        .await
        .unwrap();
    assert_eq!(read["value"], "none");
    ada.call("kv_set", json!({"key": "Ada", "value": "1"}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_draft_is_its_authors_alone_to_save_over_and_run() {
    let h = Harness::new().await;
    h.save("ada", "greet", GREET).await;
    let bob = h.session("bob").await;
    // Someone else's draft and a missing one get the same answer.
    let theirs = bob
        .refused(
            "script_run_draft",
            json!({"name": "greet", "args": {"name": "x"}}),
        )
        .await;
    assert_eq!(theirs.code.as_str(), "not_found");
    assert!(
        theirs.text.contains("bob has no draft named \"greet\""),
        "{theirs}"
    );
    let missing = bob
        .refused(
            "script_run_draft",
            json!({"name": "nope", "args": {"name": "x"}}),
        )
        .await;
    assert!(
        missing.text.contains("bob has no draft named \"nope\""),
        "{missing}"
    );
    let over = bob
        .refused(
            "script_save_draft",
            json!({"name": "greet", "source": "def main():\n    return 1\n"}),
        )
        .await;
    assert_eq!(over.code.as_str(), "forbidden");
    assert!(over.text.contains("belongs to another author"), "{over}");
    // Nobody without the author role saves at all.
    let nobody = h.session("nobody").await;
    let refused = nobody
        .refused(
            "script_save_draft",
            json!({"name": "mine", "source": GREET}),
        )
        .await;
    // (A platform tool outside one's roles is not even listed: unknown, as a missing one.)
    assert_eq!(refused.code.as_str(), "not_found", "{refused}");
    assert!(refused.text.contains("no tool named"), "{refused}");
    // The author's run: the draft she saved, unchanged by bob's attempt.
    let answer = h
        .session("ada")
        .await
        .call(
            "script_run_draft",
            json!({"name": "greet", "args": {"name": "Ada"}}),
        )
        .await
        .unwrap();
    assert_eq!(answer["result"]["hello"], "Ada");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_run_runs_as_the_script_with_its_authors_roles_at_publish_time() {
    let h = Harness::new().await;
    h.save("ada", "greet", GREET).await;
    // Only a publisher publishes, and not the author's own say-so.
    let ada = h.session("ada").await;
    let refused = ada
        .refused("script_publish", json!({"name": "greet"}))
        .await;
    // (A platform tool outside one's roles is not even listed: unknown, as a missing one.)
    assert_eq!(refused.code.as_str(), "not_found", "{refused}");
    assert!(refused.text.contains("no tool named"), "{refused}");
    let published = h.publish("pat", "greet").await;
    assert_eq!(published["version"], 1);
    assert_eq!(published["author"], "ada");
    assert_eq!(published["publisher"], "pat");
    assert_eq!(published["author_roles"], json!(["author", "writer"]));
    assert_eq!(published["tool"], "script__greet");

    // ada loses the writer role after publishing: version 1 keeps the roles it was given.
    h.store
        .set_roles("ada", vec!["author".to_owned()])
        .await
        .unwrap();
    let root = h.session("root").await;
    let answer = root
        .call("script__greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(answer["result"], json!({"hello": "Ada", "saved": true}));
    let record = root
        .run_record(answer["run_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(record["principal"], "script:greet");
    assert_eq!(record["kind"], "published");
    assert_eq!(record["started_by"], "root");
    assert_eq!(record["version"], 1);
    let written: Vec<_> = h
        .audit_records()
        .await
        .into_iter()
        .filter(|r| r.kind == AuditKind::Outcome && r.tool.as_deref() == Some("kv_set"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0].principal, "script:greet");
    assert_eq!(written[0].code.as_deref(), Some("ok"));

    // Version 2, published now, carries the roles ada has now: it may no longer write. (Its
    // tool name is computed: ada may no longer name kv_set in a draft she saves.)
    let again = r#"
def main(*, name: str):
    saved = try_call("kv_" + "set", key = name, value = "1")
    print("saved" if saved.ok else "not saved: " + saved.error.code)
    return {"hello": name, "saved": saved.ok}
"#;
    h.save("ada", "greet", again).await;
    let second = h.publish("pat", "greet").await;
    assert_eq!(second["version"], 2);
    assert_eq!(second["author_roles"], json!(["author"]));
    let answer = root
        .call("script__greet", json!({"name": "Bo"}))
        .await
        .unwrap();
    assert_eq!(answer["result"], json!({"hello": "Bo", "saved": false}));
    assert_eq!(answer["printed"], "not saved: not_found\n", "{answer}");
    let history = root
        .call("script_history", json!({"name": "greet"}))
        .await
        .unwrap();
    let roles: Vec<_> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].clone(), v["author_roles"].clone()))
        .collect();
    assert_eq!(
        roles,
        [
            (json!(1), json!(["author", "writer"])),
            (json!(2), json!(["author"]))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_read_by_who_started_it_who_it_ran_as_and_admins_only() {
    let h = Harness::new().await;
    h.save("ada", "greet", GREET).await;
    h.publish("pat", "greet").await;
    let (ada, bob, root) = (
        h.session("ada").await,
        h.session("bob").await,
        h.session("root").await,
    );
    let draft = ada.run_source(GREET, json!({"name": "a"})).await.unwrap();
    let draft = draft["run_id"].as_str().unwrap();
    assert!(ada.run_record(draft).await.is_ok());
    assert!(
        root.run_record(draft).await.is_ok(),
        "an admin reads every run"
    );
    let hidden = bob.run_record(draft).await.unwrap_err();
    assert_eq!(hidden.code.as_str(), "not_found", "{hidden}");

    // bob starts a run of ada's published script: his to read, not the author's.
    let published = bob
        .call("script__greet", json!({"name": "b"}))
        .await
        .unwrap();
    let published = published["run_id"].as_str().unwrap();
    assert_eq!(
        bob.run_record(published).await.unwrap()["started_by"],
        "bob"
    );
    assert!(
        ada.run_record(published).await.is_err(),
        "the author did not start it"
    );
    assert!(root.run_record(published).await.is_ok());
    // Listing shows the same: each reader's runs and no one else's.
    let listed = bob.call("runs_list", json!({})).await.unwrap();
    let ids: Vec<_> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [published.to_owned()]);
    let all = root.call("runs_list", json!({})).await.unwrap();
    assert_eq!(all["runs"].as_array().unwrap().len(), 2);
}

/// A published script whose author is a publisher, asked by a caller without that role to
/// publish someone else's never-reviewed draft: publishing is a person's act, so no run
/// reaches `script_publish`, by its literal name or a computed one, and the draft
/// stays unpublished. Refused as unknown (`not_found`), as for a tool that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_script_cannot_publish_whatever_roles_its_author_had() {
    let h = Harness::new().await;
    // pat publishes and writes scripts.
    h.store
        .set_roles("pat", vec!["author".to_owned(), "publisher".to_owned()])
        .await
        .unwrap();
    let autopub = r#"
def main(*, name: str):
    """Publishes the draft it is given."""
    codes = []
    for tool in ["script_publish", "script_" + "publish"]:
        published = try_call(tool, name = name)
        codes.append("ok" if published.ok else published.error.code)
    return {"codes": codes}
"#;
    h.save("pat", "autopub", autopub).await;
    h.publish("pat", "autopub").await;
    h.save("bob", "victim", "def main():\n    return 1\n").await;

    // ada may call published scripts but publishes nothing herself.
    let ada = h.session("ada").await;
    let answer = ada
        .call("script__autopub", json!({"name": "victim"}))
        .await
        .unwrap();
    assert_eq!(
        answer["result"],
        json!({"codes": ["not_found", "not_found"]}),
        "{answer}"
    );
    // Nothing was published: bob's draft is not a tool, and its history is empty.
    let missing = ada.refused("script__victim", json!({})).await;
    assert_eq!(missing.code.as_str(), "not_found", "{missing}");
    let root = h.session("root").await;
    let listed = root.call("script_list", json!({})).await.unwrap();
    let published: Vec<_> = listed["published"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(published, ["autopub"], "{listed}");
    // The same tool still works from a person's own session.
    h.publish("pat", "victim").await;
}
