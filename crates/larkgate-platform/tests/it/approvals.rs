//! Approvals through real sessions: bound to principal, tool and arguments; used once;
//! resolved by someone else; kept when a later step refuses the call.

use std::time::Duration;

use larkgate_binding::{Map, Value};
use larkgate_caller::Caller;
use larkgate_store::{ApprovalStore, AuditKind, AuditQuery, AuditStore, PrincipalStore};

use crate::harness::{Harness, args, refusal};

fn delete(key: &str) -> Map {
    args(&[("key", Value::from(key))])
}

/// wes asks to delete `key`; returns the approval id from the refusal.
async fn ask(caller: &larkgate_session::SessionCaller, key: &str) -> String {
    let refused = refusal(caller, "kv_delete", delete(key)).await;
    assert_eq!(refused.code, "approval_required");
    assert!(
        refused.text.contains("larkgate approvals approve"),
        "{}",
        refused.text
    );
    refused
        .approval_id
        .expect("approval_required carries the approval's id")
}

async fn approve(h: &Harness, approver: &str, id: &str) -> Result<Map, larkgate_caller::CallError> {
    let (caller, _t) = h.session(approver).await;
    caller
        .call_tool("approvals_approve", args(&[("id", Value::from(id))]))
        .await
}

#[tokio::test]
async fn an_approved_call_runs_once() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    wes.call_tool(
        "kv_set",
        args(&[("key", "doomed".into()), ("value", "1".into())]),
    )
    .await
    .unwrap();
    let id = ask(&wes, "doomed").await;
    // Asking again reuses the same pending approval.
    assert_eq!(ask(&wes, "doomed").await, id);
    approve(&h, "alice", &id).await.unwrap();
    let deleted = wes.call_tool("kv_delete", delete("doomed")).await.unwrap();
    assert_eq!(deleted.get("deleted"), Some(&Value::Bool(true)));
    // Second use: a new approval is needed.
    let again = ask(&wes, "doomed").await;
    assert_ne!(again, id);
    // The chain ties the call to the approval that let it through; other calls name none.
    h.audit.flush().await.unwrap();
    let intents: Vec<_> = h
        .store
        .audit_records(AuditQuery::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == AuditKind::Intent)
        .map(|r| (r.tool.unwrap_or_default(), r.detail))
        .collect();
    assert_eq!(
        intents,
        [
            ("kv_set".to_owned(), None),
            ("approvals_approve".to_owned(), None),
            ("kv_delete".to_owned(), Some(format!("under approval {id}"))),
        ]
    );
}

#[tokio::test]
async fn an_approval_covers_only_its_arguments_and_its_principal() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "a").await;
    approve(&h, "alice", &id).await.unwrap();
    assert_eq!(
        refusal(&wes, "kv_delete", delete("b")).await.code,
        "approval_required"
    );
    let (root, _t2) = h.session("root").await;
    assert_eq!(
        refusal(&root, "kv_delete", delete("a")).await.code,
        "approval_required"
    );
    // The approved call itself still runs.
    assert!(wes.call_tool("kv_delete", delete("a")).await.is_ok());
}

#[tokio::test]
async fn a_denied_call_retried_is_approval_denied() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "k").await;
    let (alice, _t2) = h.session("alice").await;
    alice
        .call_tool("approvals_deny", args(&[("id", Value::from(id.as_str()))]))
        .await
        .unwrap();
    let refused = refusal(&wes, "kv_delete", delete("k")).await;
    assert_eq!(refused.code, "approval_denied");
    assert!(refused.text.contains("alice denied"), "{}", refused.text);
}

#[tokio::test]
async fn nobody_approves_their_own_call_and_only_approvers_approve() {
    let h = Harness::new().await;
    let (root, _t) = h.session("root").await;
    let id = ask(&root, "k").await;
    let refused = refusal(
        &root,
        "approvals_approve",
        args(&[("id", Value::from(id.as_str()))]),
    )
    .await;
    assert_eq!(refused.code, "forbidden");
    assert!(refused.text.contains("its own call"), "{}", refused.text);
    // wes cannot even see the approval tools.
    let (wes, _t2) = h.session("wes").await;
    let hidden = refusal(
        &wes,
        "approvals_approve",
        args(&[("id", Value::from(id.as_str()))]),
    )
    .await;
    assert_eq!(hidden.code, "not_found");
    // alice can.
    assert!(approve(&h, "alice", &id).await.is_ok());
    let (listing, _t3) = h.session("alice").await;
    let approved = listing
        .call_tool("approvals_list", args(&[("status", "approved".into())]))
        .await
        .unwrap();
    assert_eq!(
        approved
            .get("approvals")
            .and_then(Value::as_list)
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn an_expired_approval_does_not_admit_the_call() {
    let h = Harness::with(|b| {
        let mut policy: larkgate_platform::policy::Policy =
            toml::from_str(crate::harness::POLICY).unwrap();
        policy.approvals.ttl_seconds = 60;
        b.policy(policy)
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "k").await;
    approve(&h, "alice", &id).await.unwrap();
    // An approval lasts ttl_seconds from its resolution, and not a millisecond more.
    h.clock.advance(Duration::from_secs(60));
    let again = refusal(&wes, "kv_delete", delete("k")).await;
    assert_eq!(again.code, "approval_required");
    assert_ne!(
        again.approval_id.as_deref(),
        Some(id.as_str()),
        "a new request"
    );
    let stored = h.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(
        stored.status,
        larkgate_store::ApprovalStatus::Approved,
        "never used"
    );
}

#[tokio::test]
async fn a_call_refused_by_the_rate_limit_after_approval_keeps_the_approval() {
    let h = Harness::with(|b| {
        b.policy(
            toml::from_str(
                r#"
                [roles.writer]
                call = ["kv_*"]
                [roles.approver]
                [approvals]
                require = ["kv_delete"]
                [[rate_limits]]
                per = "principal_tool"
                tools = ["kv_delete"]
                calls = 1
                period_seconds = 10
                "#,
            )
            .unwrap(),
        )
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "k").await; // spends the one rate-limit slot
    approve(&h, "alice", &id).await.unwrap();
    assert_eq!(
        refusal(&wes, "kv_delete", delete("k")).await.code,
        "rate_limited"
    );
    let stored = h.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(
        stored.status,
        larkgate_store::ApprovalStatus::Approved,
        "not burnt"
    );
    h.clock.advance(Duration::from_secs(10));
    assert!(wes.call_tool("kv_delete", delete("k")).await.is_ok());
    let stored = h.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(stored.status, larkgate_store::ApprovalStatus::Used);
}

/// The self-approval found through a script: a principal whose call needs an approval cannot
/// have a script approve it, however the script runs and whatever roles it carries. From a
/// script run (draft or published) the approval tools are not listed and answer `not_found`,
/// as if they did not exist; the approval stays pending, and a person's own session still
/// resolves it.
#[tokio::test]
async fn no_script_run_reaches_the_approval_tools() {
    use larkgate_platform::RunKind;
    let h = Harness::new().await;
    h.store
        .add_principal(crate::harness::principal("script:appr", &["admin"]))
        .await
        .unwrap();
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "mine").await;
    for (who, kind) in [
        ("script:appr", RunKind::Published),
        ("root", RunKind::Draft),
        ("alice", RunKind::Published),
    ] {
        let (run, _t) = h.session_kind(who, kind).await;
        let listed: Vec<String> = run
            .tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        for tool in ["approvals_list", "approvals_approve", "approvals_deny"] {
            assert!(
                !listed.contains(&tool.to_owned()),
                "{who} ({kind:?}) lists {tool}"
            );
            let arguments = if tool == "approvals_list" {
                Map::new()
            } else {
                args(&[("id", Value::from(id.as_str()))])
            };
            let refused = refusal(&run, tool, arguments).await;
            assert_eq!(
                refused.code, "not_found",
                "{who} ({kind:?}) {tool}: {}",
                refused.text
            );
        }
    }
    let pending = h.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(pending.status, larkgate_store::ApprovalStatus::Pending);
    approve(&h, "alice", &id)
        .await
        .expect("a person still approves it");
}

/// Over MCP, as an approver sees it: a call made inside a script run names its chain in
/// `approvals_list`; an approver in the chain is refused; once another approves, only a call
/// through the same chain runs under it.
#[tokio::test]
async fn an_approval_from_inside_a_run_lists_its_chain_and_binds_to_it() {
    use larkgate_platform::{RunContext, RunKind};
    let h = Harness::new().await;
    h.store
        .add_principal(crate::harness::principal("script:w", &["writer"]))
        .await
        .unwrap();
    let run = RunContext {
        principal: h.store.principal("script:w").await.unwrap().unwrap(),
        run_id: Some("run-w".into()),
        kind: RunKind::Published,
        depth: 1,
        chain: larkgate_store::CallChain::default().then("root", "alice"),
        upstream_tools: None,
    };
    let (in_run, _t) =
        larkgate_session::connect(&h.platform, run, "script-published", Default::default())
            .await
            .unwrap();
    let id = ask(&in_run, "k").await;
    let (alice, _a) = h.session("alice").await;
    let listed = alice.call_tool("approvals_list", Map::new()).await.unwrap();
    let listed = larkgate_binding::to_json(&listed["approvals"]);
    let pending = &listed[0];
    assert_eq!(pending["id"], id.as_str());
    assert_eq!(pending["through"], serde_json::json!(["root"]));
    assert_eq!(pending["script_authors"], serde_json::json!(["alice"]));
    // root started the run, alice wrote the script: neither may resolve it.
    for barred in ["root", "alice"] {
        let refused = approve(&h, barred, &id).await.unwrap_err();
        assert!(
            refused.to_string().contains("inside a script run"),
            "{barred}: {refused}"
        );
    }
    h.store
        .add_principal(crate::harness::principal("ann", &["approver"]))
        .await
        .unwrap();
    approve(&h, "ann", &id).await.unwrap();
    // The same principal and arguments outside that chain: still needs its own approval.
    let direct = {
        let (direct, _d) = h.session("script:w").await;
        refusal(&direct, "kv_delete", delete("k")).await
    };
    assert_eq!(direct.code, "approval_required");
    assert_ne!(direct.approval_id.as_deref(), Some(id.as_str()));
    in_run.call_tool("kv_delete", delete("k")).await.unwrap();
}

#[tokio::test]
async fn a_request_nobody_decides_in_time_expires_and_the_next_call_asks_anew() {
    let h = Harness::with(|b| {
        let mut policy: larkgate_platform::policy::Policy =
            toml::from_str(crate::harness::POLICY).unwrap();
        policy.approvals.pending_ttl_seconds = 120;
        b.policy(policy)
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    let decided = ask(&wes, "decided").await;
    let undecided = ask(&wes, "undecided").await;
    // Up to its last second a request may be decided.
    h.clock.advance(Duration::from_secs(120));
    approve(&h, "alice", &decided).await.unwrap();

    h.clock.advance(Duration::from_millis(1));
    let late = match approve(&h, "alice", &undecided).await {
        Err(larkgate_caller::CallError::Refused(refusal)) => refusal,
        other => panic!("an approval past its time: {other:?}"),
    };
    assert_eq!(late.code, "approval_expired", "{late:?}");
    assert!(
        late.text.contains("expired before anyone decided"),
        "{late:?}"
    );
    let stored = h.store.approval(&undecided).await.unwrap().unwrap();
    assert_eq!(stored.status, larkgate_store::ApprovalStatus::Expired);
    let expired = larkgate_platform::approvals::list(
        h.store.as_ref(),
        120,
        "expired",
        None,
        20,
        larkgate_platform::clock::WallClock::now_ms(&h.clock),
    )
    .await
    .unwrap();
    assert_eq!(
        expired
            .approvals
            .iter()
            .map(|a| a.id.as_str())
            .collect::<Vec<_>>(),
        [undecided.as_str()]
    );
    // The caller's next call is a request of its own, which an approver may decide.
    let anew = ask(&wes, "undecided").await;
    assert_ne!(anew, undecided);
    approve(&h, "alice", &anew).await.unwrap();
    // The decided one still stands: expiry of requests is not expiry of approvals.
    let stored = h.store.approval(&decided).await.unwrap().unwrap();
    assert_eq!(stored.status, larkgate_store::ApprovalStatus::Approved);
}

/// `approvals_list` as `who`, with `arguments`; the answer, or the refusal's code.
async fn listed(h: &Harness, who: &str, arguments: Map) -> Result<serde_json::Value, String> {
    let (caller, _t) = h.session(who).await;
    match caller.call_tool("approvals_list", arguments).await {
        Ok(answer) => Ok(serde_json::to_value(Value::Map(answer)).unwrap()),
        Err(larkgate_caller::CallError::Refused(refusal)) => Err(refusal.code.to_string()),
        Err(other) => panic!("{other:?}"),
    }
}

/// A caller cannot bury the approvers: each principal may have a few requests waiting, and
/// everyone together a few more; a call beyond them is refused `limit_exceeded` and records
/// nothing, while the call already waiting is found as before.
#[tokio::test]
async fn waiting_requests_are_capped_per_caller_and_in_total() {
    let h = Harness::with(|b| {
        let mut policy: larkgate_platform::policy::Policy =
            toml::from_str(crate::harness::POLICY).unwrap();
        policy.approvals.max_pending_per_principal = 3;
        policy.approvals.max_pending = 4;
        b.policy(policy)
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    let first = ask(&wes, "a").await;
    ask(&wes, "b").await;
    ask(&wes, "c").await;
    let refused = refusal(&wes, "kv_delete", delete("d")).await;
    assert_eq!(refused.code, "limit_exceeded", "{refused:?}");
    assert!(
        refused
            .text
            .contains("you already have 3 calls waiting for one")
            && refused.text.contains("no request was recorded"),
        "{}",
        refused.text
    );
    assert_eq!(refused.approval_id, None);
    assert_eq!(ask(&wes, "a").await, first, "the waiting call is found");
    let (root, _r) = h.session("root").await;
    ask(&root, "a").await;
    let refused = refusal(&root, "kv_delete", delete("b")).await;
    assert_eq!(refused.code, "limit_exceeded");
    assert!(
        refused.text.contains("4 calls are already waiting"),
        "{}",
        refused.text
    );
    // Once an approver decides one, a new request fits.
    let (alice, _a) = h.session("alice").await;
    alice
        .call_tool(
            "approvals_deny",
            args(&[("id", Value::from(first.as_str()))]),
        )
        .await
        .unwrap();
    ask(&wes, "d").await;
    let pending = listed(&h, "alice", Map::new()).await.unwrap();
    assert_eq!(pending["approvals"].as_array().unwrap().len(), 4);
}

/// Approvers read requests a page at a time; every request is on exactly one page.
#[tokio::test]
async fn approvals_are_listed_a_page_at_a_time() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    let mut asked = Vec::new();
    for i in 0..5 {
        asked.push(ask(&wes, &format!("k{i}")).await);
        h.clock.advance(Duration::from_millis(1));
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut arguments = args(&[("limit", Value::Int(2))]);
        if let Some(after) = &after {
            arguments.insert("after".into(), Value::from(after.as_str()));
        }
        let page = listed(&h, "alice", arguments).await.unwrap();
        let ids: Vec<String> = page["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect();
        assert!(ids.len() <= 2);
        seen.extend(ids);
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    asked.reverse();
    assert_eq!(seen, asked, "newest first, each once");
    for bad in [
        args(&[("limit", Value::Int(0))]),
        args(&[("limit", Value::Int(101))]),
        args(&[("after", Value::from("not-a-cursor"))]),
        args(&[("after", Value::from("1.' OR 1=1 --"))]),
    ] {
        assert_eq!(
            listed(&h, "alice", bad.clone()).await.unwrap_err(),
            "invalid_arguments",
            "{bad:?}"
        );
    }
}

/// A request for a call with half a megabyte of arguments records a bounded preview; the
/// approver is told it is one, and approving it approves the whole call.
#[tokio::test]
async fn a_huge_call_is_recorded_as_a_preview_and_approved_whole() {
    let h = Harness::with(|b| {
        let policy = crate::harness::POLICY.replace(
            "require = [\"kv_delete\"]",
            "require = [\"kv_delete\", \"kv_set\"]",
        );
        b.policy(toml::from_str(&policy).unwrap())
    })
    .await;
    let (wes, _t) = h.session("wes").await;
    let value = format!("prod-{}", "x".repeat(512 * 1024));
    let set = || args(&[("key", "config".into()), ("value", value.as_str().into())]);
    let refused = refusal(&wes, "kv_set", set()).await;
    assert_eq!(refused.code, "approval_required");
    let id = refused.approval_id.unwrap();
    let page = listed(&h, "alice", Map::new()).await.unwrap();
    let shown = &page["approvals"][0];
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["arguments_whole"], false, "{shown}");
    assert!(shown["arguments_bytes"].as_u64().unwrap() > 512 * 1024);
    assert_eq!(shown["arguments"]["key"], "config");
    let text = shown["arguments"]["value"].as_str().unwrap();
    assert!(
        text.starts_with("prod-x") && text.contains("more bytes not shown"),
        "{}",
        &text[..100]
    );
    assert!(
        serde_json::to_string(&page).unwrap().len() < 16 * 1024,
        "the page stays small"
    );
    approve(&h, "alice", &id).await.unwrap();
    wes.call_tool("kv_set", set()).await.unwrap();
    let (root, _r) = h.session("root").await;
    let got = root
        .call_tool("kv_get", args(&[("key", "config".into())]))
        .await
        .unwrap();
    assert_eq!(
        got.get("value"),
        Some(&Value::from(value.as_str())),
        "stored whole"
    );
}

/// A gated call whose arguments cannot bind to the tool's input is refused for them, and no
/// person is asked to approve a call that cannot run.
#[tokio::test]
async fn bad_arguments_are_refused_before_the_gate_and_ask_nobody() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    for (arguments, says) in [
        (args(&[("kee", Value::from("doomed"))]), "kee"),
        (args(&[]), "key"),
        (args(&[("key", Value::Int(5))]), "key"),
        (
            args(&[("key", Value::from("k")), ("extra", Value::from("x"))]),
            "extra",
        ),
    ] {
        let refused = refusal(&wes, "kv_delete", arguments.clone()).await;
        assert_eq!(
            refused.code, "invalid_arguments",
            "{arguments:?}: {refused:?}"
        );
        assert!(refused.text.contains(says), "{}", refused.text);
        assert_eq!(refused.approval_id, None);
    }
    let pending = listed(&h, "alice", Map::new()).await.unwrap();
    assert_eq!(pending["approvals"], serde_json::json!([]), "{pending}");
}

/// A pending request is listed with until when it may be decided and how long it has waited.
#[tokio::test]
async fn a_pending_request_is_listed_with_its_expiry_and_age() {
    let h = Harness::new().await;
    let (wes, _t) = h.session("wes").await;
    let id = ask(&wes, "k").await;
    h.clock.advance(Duration::from_secs(90));
    let page = listed(&h, "alice", Map::new()).await.unwrap();
    let shown = &page["approvals"][0];
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["age_seconds"], 90, "{shown}");
    let created = shown["created_at_ms"].as_i64().unwrap();
    assert_eq!(
        shown["expires_at_ms"].as_i64(),
        Some(created + 3_600_000),
        "the policy's pending_ttl_seconds: {shown}"
    );
    let counted = || async {
        let now_ms = larkgate_platform::clock::WallClock::now_ms(&h.clock);
        larkgate_platform::approvals::pending_count(h.store.as_ref(), 3600, now_ms)
            .await
            .unwrap()
    };
    assert_eq!(counted().await, 1);
    // Past its time it is no longer counted, even before anything marks it expired.
    h.clock.advance(Duration::from_secs(3600));
    assert_eq!(counted().await, 0);
}
