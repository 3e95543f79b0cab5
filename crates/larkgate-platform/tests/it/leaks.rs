//! Every refusal code, provoked for real, tells the caller what was wrong and nothing of
//! larkgate's insides: no store or library error text, no Rust type paths, no machine paths.
//! The upstream codes (`upstream_unavailable`, `upstream_error`) are provoked against real
//! upstream servers in larkgate-upstream's federation tests, and `unauthenticated` at the HTTP
//! edge (larkgate's edge tests); both check the same.

use std::collections::BTreeSet;
use std::time::Duration;

use larkgate_binding::Value;
use larkgate_caller::{Caller, RunKind};
use larkgate_platform::Code;

use crate::harness::{Harness, args, refusal};

/// What a caller must never read.
const INSIDES: &[&str] = &[
    "::",
    "rusqlite",
    "Sqlite",
    "sqlite",
    "database is locked",
    "no such table",
    "SQLITE",
    "Os {",
    "Error {",
    "/tmp",
    "panicked",
    "larkgate.sqlite3",
];

fn assert_clean(code: Code, text: &str) {
    for inside in INSIDES {
        assert!(
            !text.contains(inside),
            "{code}: the caller reads {inside:?} in {text:?}"
        );
    }
    assert!(text.starts_with(code.as_str()), "{code}: {text:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_refusal_code_reaches_the_caller_without_internals() {
    let h = Harness::new().await;
    let mut seen = BTreeSet::new();
    let mut check = |refused: larkgate_caller::RefusalError| {
        assert_clean(refused.code, &refused.text);
        seen.insert(refused.code.as_str());
        refused
    };
    let (root, _r) = h.session("root").await;
    let (vera, _v) = h.session("vera").await;
    let (wes, _w) = h.session("wes").await;
    let (alice, _a) = h.session("alice").await;
    let kv = |key: &str| args(&[("key", Value::from(key)), ("value", Value::from("v"))]);

    check(refusal(&vera, "kv_set", kv("k")).await);
    check(refusal(&root, "no_such_tool", args(&[])).await);
    check(refusal(&root, "kv_get", args(&[("key", Value::from(3))])).await);
    check(refusal(&root, &"x".repeat(200), args(&[])).await);
    // A value written beside larkgate that is over the result limit.
    let huge = "x".repeat(larkgate_binding::Limits::DEFAULT_MAX_BYTES + 1);
    larkgate_store::KvStore::kv_set(h.store.as_ref(), "huge", &huge)
        .await
        .unwrap();
    check(refusal(&root, "kv_get", args(&[("key", Value::from("huge"))])).await);
    let required = check(refusal(&wes, "kv_delete", args(&[("key", Value::from("k"))])).await);
    let id = required.approval_id.expect("an approval id");
    alice
        .call_tool("approvals_deny", args(&[("id", Value::from(id.as_str()))]))
        .await
        .unwrap();
    check(refusal(&wes, "kv_delete", args(&[("key", Value::from("k"))])).await);
    // A request nobody decided in time: approving it is `approval_expired`.
    let waited = check(refusal(&wes, "kv_delete", args(&[("key", Value::from("k2"))])).await);
    let waited = waited.approval_id.expect("an approval id");
    crate::audit::raw(h.dir.path())
        .execute(
            "UPDATE approvals SET created_at_ms = 0 WHERE id = ?1",
            [waited.as_str()],
        )
        .unwrap();
    let late = alice
        .call_tool(
            "approvals_approve",
            args(&[("id", Value::from(waited.as_str()))]),
        )
        .await;
    match late {
        Err(larkgate_caller::CallError::Refused(refused)) => {
            assert_eq!(refused.code, Code::ApprovalExpired, "{}", refused.text);
            check(refused);
        }
        other => panic!("an expired request was resolved: {other:?}"),
    }
    for _ in 0..5 {
        wes.call_tool("clock_now", args(&[])).await.unwrap();
    }
    check(refusal(&wes, "clock_now", args(&[])).await);
    let (draft, _d) = h.session_kind("root", RunKind::Draft).await;
    check(refusal(&draft, "kv_set", kv("k")).await);

    // A store another process holds locked past the busy timeout: a timeout, in larkgate's
    // words.
    let raw = crate::audit::hold_write_lock(h.dir.path());
    let locked = tokio::spawn({
        let root = root.clone();
        async move { refusal(&root, "kv_set", kv("k")).await }
    });
    let timed_out = locked.await.unwrap();
    raw.execute_batch("ROLLBACK").unwrap();
    assert_eq!(timed_out.code, Code::Timeout, "{}", timed_out.text);
    check(timed_out);

    // A broken store: the caller is told larkgate failed, with a correlation id; the store's
    // words are in the log only.
    raw.execute_batch("DROP TABLE kv").unwrap();
    let broken = check(refusal(&root, "kv_get", args(&[("key", Value::from("k"))])).await);
    assert_eq!(broken.code, Code::Internal);
    assert!(broken.text.contains("correlation id"), "{}", broken.text);
    tokio::time::sleep(Duration::from_millis(10)).await;

    // (`script_failed` is a run's: `larkgate-script`'s and the serve tests provoke it;
    // `script_suspended` is a published script's: the command's upstream script tests do.)
    let provoked_elsewhere = [
        "unauthenticated",
        "upstream_unavailable",
        "upstream_error",
        "script_failed",
        "script_suspended",
    ];
    let all: BTreeSet<&str> = Code::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !provoked_elsewhere.contains(c))
        .collect();
    assert_eq!(seen, all);
}
