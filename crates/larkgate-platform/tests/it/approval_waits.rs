//! Calls that wait for their approval's decision (`require` rules with `wait_seconds`), through
//! the platform as an edge hands them over: approved elsewhere, denied, cancelled, stopped,
//! timed out, cut into 2026-07-28 rounds, and a script's call that never waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use larkgate_binding::Value;
use larkgate_platform::approvals::wait::{Progress, Rounds, Waiting};
use larkgate_platform::approvals::{self, Decision};
use larkgate_platform::envelope::Refusal;
use larkgate_platform::policy::Policy;
use larkgate_platform::registry::ToolOutput;
use larkgate_platform::{RunContext, RunKind, SessionIdentity};
use larkgate_store::{ApprovalStatus, ApprovalStore, AuditQuery, AuditStore, PrincipalStore};
use tokio::sync::{mpsc, oneshot};

use crate::harness::{Harness, args, refusal};

/// `kv_delete` waits up to 600 s for its decision (longer than any test runs: only a decision,
/// a cancellation or a stop ends it); `kv_set` 1 s; `kv_get` 2 s.
const POLICY: &str = r#"
[roles.writer]
call = ["kv_*"]
[roles.admin]
call = ["*"]
[approvals]
require = [
    { tool = "kv_delete", wait_seconds = 600 },
    { tool = "kv_set", wait_seconds = 1 },
    { tool = "kv_get", wait_seconds = 2 },
]
"#;

async fn harness() -> Harness {
    harness_with("").await
}

/// The harness on [`POLICY`] with `approvals` (TOML lines) added to its `[approvals]`.
async fn harness_with(approvals: &str) -> Harness {
    let policy: Policy = toml::from_str(&format!("{POLICY}{approvals}")).unwrap();
    policy.validate().unwrap();
    Harness::with(|b| b.policy(policy)).await
}

/// Progress as a waiting client is told it: (seconds waited, of total, message).
struct Told(mpsc::UnboundedSender<(f64, f64, String)>);

#[async_trait::async_trait]
impl Progress for Told {
    async fn tell(&self, progress: f64, total: f64, message: String) {
        let _ = self.0.send((progress, total, message));
    }
}

/// A waiting client: the progress it is told, and its cancel button.
struct Client {
    told: mpsc::UnboundedReceiver<(f64, f64, String)>,
    cancel: Option<oneshot::Sender<()>>,
}

impl Client {
    /// How the client waits, and the client.
    fn new(rounds: Option<Rounds>) -> (Waiting, Client) {
        let (told, told_rx) = mpsc::unbounded_channel();
        let (cancel, cancelled) = oneshot::channel::<()>();
        let cancelled: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            // Only a press cancels: a client dropped without pressing leaves the call be.
            if cancelled.await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        let waiting = Waiting {
            cancelled,
            progress: Some(Box::new(Told(told))),
            rounds,
        };
        (
            waiting,
            Client {
                told: told_rx,
                cancel: Some(cancel),
            },
        )
    }

    /// The approval the call waits for, once it is told it waits.
    async fn waiting_for(&mut self) -> String {
        let (done, _total, message) = self.told.recv().await.expect("told it waits");
        assert_eq!(done, 0.0, "{message}");
        message
            .strip_prefix("waiting for an approver: approval ")
            .and_then(|rest| rest.split_once(','))
            .map(|(id, _)| id.to_owned())
            .unwrap_or_else(|| panic!("{message}"))
    }
}

async fn identity(h: &Harness, id: &str, kind: RunKind) -> Arc<SessionIdentity> {
    let principal = h.store.principal(id).await.unwrap().unwrap();
    Arc::new(SessionIdentity {
        run: RunContext {
            kind,
            ..RunContext::direct(principal)
        },
        label: "test".to_owned(),
        server: None,
    })
}

/// `wes` calls `tool` with `key`, waiting as `waiting` says, in a task of its own.
async fn call(
    h: &Harness,
    tool: &str,
    key: &str,
    waiting: Waiting,
) -> tokio::task::JoinHandle<Result<ToolOutput, Refusal>> {
    let platform = h.platform.clone();
    let identity = identity(h, "wes", RunKind::Direct).await;
    let (tool, key) = (tool.to_owned(), key.to_owned());
    tokio::spawn(async move {
        let mut arguments = serde_json::Map::new();
        arguments.insert("key".to_owned(), key.into());
        if tool == "kv_set" {
            arguments.insert("value".to_owned(), "v".into());
        }
        platform
            .call_waiting(
                Some(identity),
                &tool,
                Some(arguments),
                waiting,
                larkgate_platform::Conversation::none(),
            )
            .await
    })
}

async fn decide(h: &Harness, id: &str, approve: bool) {
    let alice = h.store.principal("alice").await.unwrap().unwrap();
    let decision = Decision {
        approve,
        reason: Some("looked at it"),
    };
    approvals::resolve_in(h.platform.services(), &alice, id, decision)
        .await
        .unwrap();
}

async fn status(h: &Harness, id: &str) -> ApprovalStatus {
    h.store.approval(id).await.unwrap().unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_runs_once_approved_and_spends_its_approval() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    let id = client.waiting_for().await;
    assert_eq!(status(&h, &id).await, ApprovalStatus::Pending);
    decide(&h, &id, true).await;
    let answer = held.await.unwrap().unwrap();
    assert_eq!(answer.value.get("deleted"), Some(&Value::Bool(false)));
    assert_eq!(status(&h, &id).await, ApprovalStatus::Used);
    // The intent names the approval that let the held call through.
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let intent = records
        .iter()
        .find(|r| {
            r.tool.as_deref() == Some("kv_delete") && r.kind == larkgate_store::AuditKind::Intent
        })
        .expect("the held call's intent");
    assert_eq!(intent.detail, Some(format!("under approval {id}")));
    drop(client.cancel.take());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_denied_answers_approval_denied_with_the_reason() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    let id = client.waiting_for().await;
    decide(&h, &id, false).await;
    let refused = held.await.unwrap().unwrap_err();
    assert_eq!(refused.code, "approval_denied");
    assert_eq!(refused.approval_id.as_deref(), Some(id.as_str()));
    assert!(
        refused.message.contains("looked at it"),
        "{}",
        refused.message
    );
}

/// A decision made through another process (here: a second handle on the same SQLite file,
/// as `larkgate approvals approve` beside `serve` has) reaches the held call by the store
/// being read again: nothing in this process is told of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_made_in_another_process_is_found_by_reading_the_store() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    let id = client.waiting_for().await;
    let mut told = h.platform.services().decisions.watch();
    told.borrow_and_update();
    let beside = larkgate_store::SqliteStore::open(h.dir.path()).unwrap();
    let alice = h.store.principal("alice").await.unwrap().unwrap();
    approvals::resolve(
        &beside,
        h.audit.as_ref(),
        &h.platform.services().policy().approvals,
        &alice,
        &id,
        Decision {
            approve: true,
            reason: None,
        },
        larkgate_store::now_ms(),
    )
    .await
    .unwrap();
    held.await.unwrap().unwrap();
    assert!(
        !told.has_changed().unwrap(),
        "the decision was told in-process"
    );
    drop(client.cancel.take());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_withdraws_its_request_and_the_next_call_asks_anew() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    let id = client.waiting_for().await;
    client.cancel.take().unwrap().send(()).unwrap();
    let refused = held.await.unwrap().unwrap_err();
    assert_eq!(refused.code, "approval_required");
    assert!(refused.message.contains("withdrawn"), "{}", refused.message);
    let withdrawn = h.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(withdrawn.status, ApprovalStatus::Withdrawn);
    assert_eq!(withdrawn.resolved_by.as_deref(), Some("wes"));
    // Nobody can decide it now.
    let alice = h.store.principal("alice").await.unwrap().unwrap();
    let late = approvals::resolve_in(
        h.platform.services(),
        &alice,
        &id,
        Decision {
            approve: true,
            reason: None,
        },
    )
    .await
    .unwrap_err();
    assert!(
        late.message.contains("already withdrawn"),
        "{}",
        late.message
    );
    // The withdrawal is in the audit chain.
    h.audit.flush().await.unwrap();
    let records = h.store.audit_records(AuditQuery::default()).await.unwrap();
    let event = records
        .iter()
        .find(|r| r.code.as_deref() == Some("withdrawn"))
        .expect("a withdrawn event");
    assert_eq!(event.principal, "wes");
    assert!(
        event.detail.as_deref().unwrap_or("").contains(&id),
        "{event:?}"
    );
    // Calling again asks anew.
    let (wes, _t) = h.session("wes").await;
    let again = refusal(&wes, "kv_delete", args(&[("key", "k".into())])).await;
    assert_ne!(again.approval_id.as_deref(), Some(id.as_str()));
}

/// A stopping server holds no call for a decision: the held call answers `approval_required`
/// at once, and its request stays pending for the caller's next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_every_wait_and_leaves_the_request_pending() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    let id = client.waiting_for().await;
    h.platform.services().decisions.stop();
    let refused = held.await.unwrap().unwrap_err();
    assert_eq!(refused.code, "approval_required");
    assert_eq!(refused.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(status(&h, &id).await, ApprovalStatus::Pending);
    // And a call made while stopping is not held at all.
    let (waiting, _client) = Client::new(None);
    let refused = call(&h, "kv_delete", "k", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.approval_id.as_deref(), Some(id.as_str()));
    drop(client.cancel.take());
}

/// Nobody decides within the rule's wait: `approval_required` with the id, as without a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_up_answers_approval_required_and_the_request_stays_pending() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let refused = call(&h, "kv_set", "k", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    let id = client.waiting_for().await;
    assert_eq!(refused.code, "approval_required");
    assert_eq!(refused.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(refused.wait_state, None);
    assert_eq!(status(&h, &id).await, ApprovalStatus::Pending);
    drop(client.cancel.take());
}

/// 2026-07-28: a wait is held a round at a time; a round that ends with time left answers
/// with a state the client echoes; the echoed state carries the wait to its end, and one whose
/// deadline has passed is not held at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_wait_comes_in_rounds_carried_by_the_state_the_client_echoes() {
    let h = harness().await;
    let (waiting, _first) = Client::new(Some(Rounds::default()));
    let refused = call(&h, "kv_get", "k", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code, "approval_required");
    let id = refused.approval_id.clone().unwrap();
    let state = *refused
        .wait_state
        .clone()
        .expect("a round ended with time left");
    assert!(
        state.starts_with(&format!("larkgate-wait:v1:{id}:")),
        "{state}"
    );
    // The retry, a round later, waits out the rest, then answers as any wait that is up.
    h.clock.advance(Duration::from_secs(1));
    let (waiting, _retry) = Client::new(Some(Rounds {
        echoed: Some(state.clone()),
    }));
    let refused = call(&h, "kv_get", "k", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(refused.wait_state, None, "the wait was up");
    // A state whose deadline is past is not held again.
    h.clock.advance(Duration::from_secs(1));
    let (waiting, mut late) = Client::new(Some(Rounds {
        echoed: Some(state),
    }));
    let refused = call(&h, "kv_get", "k", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.wait_state, None);
    assert!(
        late.told.try_recv().is_err(),
        "told of a wait that was over"
    );
}

/// Only a client's call over an edge is held. A script's calls never are (its run has a worker
/// and a deadline of its own), nor the command line's one-shot `call`: each session opened in
/// this process has its gated call refused at once (here: by a rule whose wait no test could
/// sit out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_a_session_opened_in_process_is_refused_at_once() {
    let h = harness().await;
    for kind in [RunKind::Published, RunKind::Direct] {
        let (session, _t) = h.session_kind("wes", kind).await;
        let refused = tokio::time::timeout(
            Duration::from_secs(120),
            refusal(&session, "kv_delete", args(&[("key", "k".into())])),
        )
        .await
        .expect("a script's call is not held for its decision");
        assert_eq!(refused.code, "approval_required");
    }
}

/// One principal holds at most `max_waiting_per_principal` calls at once: a call beyond them is
/// answered at once, saying why, and the next is held again once one has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_holds_only_so_many_calls_at_once() {
    let h = harness_with("max_waiting_per_principal = 2\n").await;
    let mut held = Vec::new();
    for key in ["a", "b"] {
        let (waiting, mut client) = Client::new(None);
        let call = call(&h, "kv_delete", key, waiting).await;
        let id = client.waiting_for().await;
        held.push((call, client, id));
    }
    let (waiting, mut third) = Client::new(None);
    let refused = call(&h, "kv_delete", "c", waiting)
        .await
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code, "approval_required");
    let hint = refused.hint.unwrap_or_default();
    assert!(hint.contains("2 calls of yours already wait"), "{hint}");
    assert!(third.told.try_recv().is_err(), "the third call was held");
    // One decided, a place is free again.
    let (call_a, _client_a, id_a) = held.remove(0);
    decide(&h, &id_a, false).await;
    assert_eq!(call_a.await.unwrap().unwrap_err().code, "approval_denied");
    let (waiting, mut again) = Client::new(None);
    let _held_again = call(&h, "kv_delete", "c", waiting).await;
    again.waiting_for().await;
    // Another principal is not counted with wes.
    let admin = identity(&h, "root", RunKind::Direct).await;
    let (waiting, mut root) = Client::new(None);
    let platform = h.platform.clone();
    let _root_held = tokio::spawn(async move {
        let arguments = serde_json::json!({"key": "r"}).as_object().cloned();
        platform
            .call_waiting(
                Some(admin),
                "kv_delete",
                arguments,
                waiting,
                larkgate_platform::Conversation::none(),
            )
            .await
    });
    root.waiting_for().await;
    h.platform.services().decisions.stop();
}

/// Two calls held for the same request (same caller, tool and arguments): one approval runs
/// exactly one of them. The other either lost the race to spend it (told another call used
/// it) or, finding it used, asked anew and waits for its own request, which it is told of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_runs_one_of_two_calls_held_for_it() {
    let h = harness().await;
    let (first_waiting, mut first) = Client::new(None);
    let mut first_call = call(&h, "kv_delete", "k", first_waiting).await;
    let id = first.waiting_for().await;
    let (second_waiting, mut second) = Client::new(None);
    let mut second_call = call(&h, "kv_delete", "k", second_waiting).await;
    assert_eq!(second.waiting_for().await, id, "one request for both");
    decide(&h, &id, true).await;
    let lost = |refusal: Refusal| {
        assert!(
            refusal.message.contains("used by another call"),
            "{}",
            refusal.message
        );
    };
    // The one that answers first ran, or lost the race to spend the approval.
    let (answer, mut other, mut other_client) = tokio::select! {
        answer = &mut first_call => (answer.unwrap(), second_call, second),
        answer = &mut second_call => (answer.unwrap(), first_call, first),
    };
    if let Err(refusal) = answer {
        lost(refusal);
        let ran = other.await.unwrap().expect("the other call ran");
        assert!(ran.value.contains_key("deleted"), "{:?}", ran.value);
        return;
    }
    assert_eq!(status(&h, &id).await, ApprovalStatus::Used);
    // The other lost the race (and answers so), or found the approval used and asked anew:
    // told of its new request, it waits.
    let told = tokio::select! {
        answer = &mut other => return lost(answer.unwrap().unwrap_err()),
        told = other_client.told.recv() => told,
    };
    let Some((_, _, message)) = told else {
        return lost(other.await.unwrap().unwrap_err());
    };
    let anew = message
        .strip_prefix("waiting for an approver: approval ")
        .and_then(|rest| rest.split_once(','))
        .map(|(id, _)| id.to_owned())
        .unwrap();
    assert_ne!(anew, id);
    assert_eq!(status(&h, &anew).await, ApprovalStatus::Pending);
    other_client.cancel.take().unwrap().send(()).unwrap();
    let withdrawn = other.await.unwrap().unwrap_err();
    assert!(
        withdrawn.message.contains("withdrawn"),
        "{}",
        withdrawn.message
    );
}

/// The store failing while a call waits (its approvals table gone): the held call answers
/// `internal` with a correlation id, and nothing of the store's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_under_a_held_call_ends_it_as_internal_saying_nothing_of_the_store() {
    let h = harness().await;
    let (waiting, mut client) = Client::new(None);
    let held = call(&h, "kv_delete", "k", waiting).await;
    client.waiting_for().await;
    let raw = rusqlite::Connection::open(h.dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    raw.execute_batch("DROP TABLE approvals").unwrap();
    // Told of a decision, it reads the store again.
    h.platform.services().decisions.told();
    let refused = held.await.unwrap().unwrap_err();
    assert_eq!(refused.code, "internal");
    assert!(refused.correlation_id.is_some());
    let message = refused.message.to_lowercase();
    for leak in ["no such table", "sqlite", "approvals"] {
        assert!(!message.contains(leak), "{message}");
    }
    drop(client.cancel.take());
}
