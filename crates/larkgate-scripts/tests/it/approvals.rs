//! The approval a call inside a run asks for reaches whoever is waiting on the run: the
//! script (`try_call`'s error), the worker's pipe, and the caller of a published script.

use serde_json::json;

use crate::harness::Harness;

const GATED: &str = r#"
[approvals]
require = ["kv_delete"]
"#;

/// Deletes a key, raising on a refusal.
const CLEAR: &str = r#"
def main(*, key: str):
    return kv_delete(key = key)
"#;

/// Deletes a key without raising: returns what the refusal said.
const TRY_CLEAR: &str = r#"
def main(*, key: str):
    r = try_call("kv_delete", key = key)
    if r.ok:
        return {"ok": True}
    e = r.error
    return {"code": e.code, "tool": e.tool, "approval_id": e.approval_id,
            "retry_after_seconds": e.retry_after_seconds}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_id_of_a_call_inside_a_run_reaches_the_script_and_the_caller() {
    let h = Harness::with(GATED, Default::default()).await;
    h.save("ada", "clear", CLEAR).await;
    h.save("ada", "try_clear", TRY_CLEAR).await;
    h.publish("pat", "clear").await;
    h.publish("pat", "try_clear").await;
    let ada = h.session("ada").await;

    // In the script, through a real worker: try_call's error names the tool and the approval.
    let answer = ada
        .call("script__try_clear", json!({"key": "a"}))
        .await
        .unwrap()["result"]
        .clone();
    assert_eq!(answer["code"], "approval_required", "{answer}");
    assert_eq!(answer["tool"], "kv_delete");
    let id = answer["approval_id"].as_str().expect("an approval id");
    assert!(!id.is_empty());
    assert_eq!(answer["retry_after_seconds"], json!(null));
    let stored = larkgate_store::ApprovalStore::approval(h.store.as_ref(), id)
        .await
        .unwrap()
        .expect("the id the script read is the request's");
    assert_eq!(stored.tool, "kv_delete");

    // A published script called as a tool, whose call inside was refused: its caller gets
    // the inner call's approval id, and the refusal names the inner tool.
    let refused = ada.refused("script__clear", json!({"key": "b"})).await;
    assert_eq!(refused.code.as_str(), "approval_required", "{refused}");
    let inner = refused
        .approval_id
        .clone()
        .expect("the inner call's approval id");
    assert!(
        refused.text.contains("its call of kv_delete was refused"),
        "{refused}"
    );
    let stored = larkgate_store::ApprovalStore::approval(h.store.as_ref(), &inner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.tool.as_str(), stored.principal.as_str()),
        ("kv_delete", "script:clear")
    );
}

/// Reads a gated tool twice.
const TWO_READS: &str = r#"
def main():
    a = kv_get(key = "a", default = "none")
    b = kv_get(key = "b", default = "none")
    return {"a": a, "b": b}
"#;

/// One review run collects every approval the script's run would need, spending none: each
/// gated call is requested and recorded, not made; once they are approved, a second review
/// shows them approved and still unspent, and the draft run then goes through once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_run_collects_every_approval_in_one_pass_and_spends_none() {
    let h = Harness::with("[approvals]\nrequire = [\"kv_get\"]\n", Default::default()).await;
    h.save("ada", "two", TWO_READS).await;
    let (ada, root) = (h.session("ada").await, h.session("root").await);
    let review = json!({"name": "two", "review": true});
    let answer = ada.call("script_run_draft", review.clone()).await.unwrap();
    let writes = answer["intended_writes"].as_array().unwrap().clone();
    assert_eq!(writes.len(), 2, "{answer}");
    let mut ids = Vec::new();
    for (write, key) in writes.iter().zip(["a", "b"]) {
        assert_eq!(write["tool"], "kv_get");
        assert_eq!(write["arguments"]["key"], key);
        assert_eq!(write["approval"], "requested", "{write}");
        ids.push(write["approval_id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        root.call("approvals_approve", json!({"id": id}))
            .await
            .unwrap();
    }
    // Reviewed again: approved, and still not spent.
    let again = ada.call("script_run_draft", review).await.unwrap();
    for (write, id) in again["intended_writes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&ids)
    {
        assert_eq!(
            (write["approval"].as_str(), write["approval_id"].as_str()),
            (Some("approved"), Some(id.as_str())),
            "{again}"
        );
    }
    // The draft run goes through once, under both.
    let ran = ada
        .call("script_run_draft", json!({"name": "two"}))
        .await
        .unwrap();
    assert_eq!(ran["result"]["a"]["value"], "none", "{ran}");
    for id in &ids {
        let stored = larkgate_store::ApprovalStore::approval(h.store.as_ref(), id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.status, larkgate_store::ApprovalStatus::Used);
    }
}
