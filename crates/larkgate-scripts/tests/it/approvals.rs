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
