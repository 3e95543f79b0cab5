//! Audit under load: every admitted call has an intent and an outcome, every refusal one
//! record, and the chain verifies.

use larkgate_binding::{Map, Value};
use larkgate_caller::Caller;
use larkgate_platform::audit::verify;
use larkgate_store::{AuditKind, AuditQuery, AuditStore};

use crate::harness::{Harness, args};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_leave_a_complete_verifiable_chain() {
    const SESSIONS: usize = 32;
    const CALLS: usize = 1_000;
    let h = Harness::new().await;
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let (caller, teardown) = h.session("wes").await;
        tasks.push(tokio::spawn(async move {
            let mut refused = 0;
            for i in 0..CALLS {
                let result = if i % 10 == 9 {
                    // A refusal: a tool wes cannot see.
                    caller.call_tool("approvals_list", Map::new()).await
                } else {
                    caller
                        .call_tool("kv_get", args(&[("key", Value::from(format!("s{s}-{i}")))]))
                        .await
                };
                refused += usize::from(result.is_err());
            }
            teardown.close().await;
            refused
        }));
    }
    let mut refused = 0;
    for task in tasks {
        refused += task.await.unwrap();
    }
    assert_eq!(refused, SESSIONS * CALLS / 10);
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let count = |kind| records.iter().filter(|r| r.kind == kind).count();
    let admitted = SESSIONS * CALLS - refused;
    assert_eq!(count(AuditKind::Intent), admitted);
    assert_eq!(count(AuditKind::Outcome), admitted);
    assert_eq!(count(AuditKind::Refusal), refused);
    let report = verify(h.store.as_ref()).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert!(report.intents_without_outcome.is_empty());
    assert_eq!(report.records as usize, records.len());
}

#[tokio::test]
async fn records_name_the_principal_run_kind_session_and_tool() {
    let h = Harness::new().await;
    let (draft, _t) = h
        .session_kind("wes", larkgate_platform::RunKind::Draft)
        .await;
    draft
        .call_tool("kv_get", args(&[("key", "k".into())]))
        .await
        .unwrap();
    let _ = draft
        .call_tool(
            "kv_set",
            args(&[("key", "k".into()), ("value", "v".into())]),
        )
        .await;
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let intent = records
        .iter()
        .find(|r| r.kind == AuditKind::Intent)
        .unwrap();
    assert_eq!(intent.principal, "wes");
    assert_eq!(intent.run_kind.as_deref(), Some("draft"));
    assert_eq!(intent.session.as_deref(), Some("draft"));
    assert_eq!(intent.run_id.as_deref(), Some("run-wes"));
    assert_eq!(intent.tool.as_deref(), Some("kv_get"));
    assert_eq!(intent.args_hash.as_ref().map(String::len), Some(64));
    assert_eq!(
        intent.args, None,
        "arguments are not recorded unless configured"
    );
    let outcome = records
        .iter()
        .find(|r| r.kind == AuditKind::Outcome)
        .unwrap();
    assert_eq!(outcome.intent_seq, Some(intent.seq));
    assert_eq!(outcome.code.as_deref(), Some("ok"));
    let refusal = records
        .iter()
        .find(|r| r.kind == AuditKind::Refusal)
        .unwrap();
    assert_eq!(refusal.code.as_deref(), Some("write_barrier"));
    assert_eq!(refusal.tool.as_deref(), Some("kv_set"));
}

#[tokio::test]
async fn canonical_arguments_are_recorded_only_when_configured() {
    let h = Harness::with(|b| b.record_arguments(true)).await;
    let (caller, _t) = h.session("wes").await;
    caller
        .call_tool(
            "kv_set",
            args(&[("value", "v".into()), ("key", "k".into())]),
        )
        .await
        .unwrap();
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let intent = records
        .iter()
        .find(|r| r.kind == AuditKind::Intent)
        .unwrap();
    assert_eq!(intent.args.as_deref(), Some(r#"{"key":"k","value":"v"}"#));
    let hash = larkgate_platform::pipeline::arguments_hash(&args(&[
        ("key", "k".into()),
        ("value", "v".into()),
    ]));
    assert_eq!(intent.args_hash.as_deref(), Some(hash.as_str()));
}
