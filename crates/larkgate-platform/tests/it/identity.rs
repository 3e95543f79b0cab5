//! Listings are filtered by roles; the session's identity cannot be changed by the client.

use larkgate_binding::Value;
use larkgate_caller::{CallError, Caller, Source};
use larkgate_platform::PlatformServer;
use larkgate_store::PrincipalStore;
use rmcp::model::CallToolRequestParams;

use crate::harness::{Harness, args, refusal};

async fn names(h: &Harness, id: &str) -> Vec<String> {
    let (caller, _teardown) = h.session(id).await;
    caller
        .tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect()
}

#[tokio::test]
async fn listings_show_exactly_the_tools_a_principal_may_see() {
    let h = Harness::new().await;
    let caps = ["clock_now", "kv_delete", "kv_get", "kv_list", "kv_set"];
    let approvals = ["approvals_approve", "approvals_deny", "approvals_list"];
    let mut admin: Vec<&str> = caps.iter().chain(&approvals).copied().collect();
    admin.sort();
    assert_eq!(names(&h, "root").await, admin);
    assert_eq!(
        names(&h, "vera").await,
        caps,
        "viewer sees all capabilities"
    );
    assert_eq!(names(&h, "wes").await, caps);
    assert_eq!(
        names(&h, "alice").await,
        approvals,
        "approver sees the approval tools"
    );
    assert!(names(&h, "nobody").await.is_empty(), "no roles, no tools");
}

#[tokio::test]
async fn listings_carry_origin_signature_shape_and_annotations() {
    let h = Harness::new().await;
    let (caller, _t) = h.session("root").await;
    let tools = caller.tools().await.unwrap();
    let kv_get = tools.iter().find(|t| t.name == "kv_get").unwrap();
    assert_eq!(kv_get.origin.source, Source::Capability);
    assert_eq!(kv_get.origin.original_name, "kv_get");
    assert_eq!(
        kv_get.signature.as_deref(),
        Some("kv_get(*, key: str, default: str | None = None) -> dict")
    );
    assert_eq!(kv_get.input_shape.as_ref().unwrap().len(), 2);
    assert_eq!(kv_get.annotations.read_only, Some(true));
    let approve = tools
        .iter()
        .find(|t| t.name == "approvals_approve")
        .unwrap();
    assert_eq!(approve.origin.source, Source::Platform);
    // A write is listed as one: the annotation never claims read-only for it.
    let kv_set = tools.iter().find(|t| t.name == "kv_set").unwrap();
    assert_ne!(kv_set.annotations.read_only, Some(true));
}

#[tokio::test]
async fn a_client_naming_another_principal_in_meta_is_still_served_as_itself() {
    let h = Harness::new().await;
    // A raw rmcp client on a fresh session, sending `_meta` that claims to be root.
    let (raw, _raw_teardown) = raw_client(&h).await;
    let mut params = CallToolRequestParams::new("kv_set");
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.insert("principal".into(), "root".into());
    meta.insert("larkgate/principal".into(), "root".into());
    params.meta = Some(meta);
    params.arguments = Some(
        serde_json::json!({"key": "k", "value": "v"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let result = raw.call_tool(params).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    let envelope =
        result.meta.clone().expect("an envelope in _meta").0["larkgate/envelope"].clone();
    assert_eq!(envelope["code"], "forbidden", "{envelope}");
    assert!(
        envelope["message"]
            .as_str()
            .unwrap()
            .starts_with("vera may not call")
    );
}

/// A raw rmcp client on a session bound to vera.
async fn raw_client(
    h: &Harness,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    larkgate_session::ServerTask<PlatformServer>,
) {
    let principal = h.store.principal("vera").await.unwrap().unwrap();
    let identity = std::sync::Arc::new(larkgate_platform::SessionIdentity {
        run: larkgate_platform::RunContext {
            principal,
            run_id: None,
            kind: larkgate_platform::RunKind::Direct,
            depth: 0,
            chain: Default::default(),
            upstream_tools: None,
        },
        label: "raw".into(),
        server: None,
    });
    let handler = PlatformServer::new(h.platform.clone(), Some(identity));
    larkgate_session::serve_in_memory(handler).await.unwrap()
}

#[tokio::test]
async fn an_unbound_session_is_unauthenticated_for_every_call() {
    let h = Harness::new().await;
    let handler = PlatformServer::new(h.platform.clone(), None);
    let (caller, _t) =
        larkgate_session::connect_handler(handler, larkgate_binding::Limits::default())
            .await
            .unwrap();
    assert!(caller.tools().await.unwrap().is_empty());
    let refused = refusal(&caller, "kv_get", args(&[("key", Value::from("k"))])).await;
    assert_eq!(refused.code, "unauthenticated");
    let refused = refusal(&caller, "no_such_tool", args(&[])).await;
    assert_eq!(
        refused.code, "unauthenticated",
        "authentication comes first"
    );
    assert!(matches!(
        caller.call_tool("kv_get", args(&[])).await,
        Err(CallError::Refused(_))
    ));
}
