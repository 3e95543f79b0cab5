//! Sessions across replicas, in one process: three edges on one PostgreSQL schema, on one
//! clock the test moves. A session's shared entry expires an idle timeout after its last use
//! through any replica (moved at most every quarter of it per replica), and a replica that
//! never held the session continues it only while that entry stands, and only for its owner.
//!
//! Needs PostgreSQL (`LARKGATE_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`;
//! the failure says how to start one when it is missing).

use std::sync::Arc;
use std::time::Duration;

use larkgate_platform::clock::{ManualClock, WallClock};
use larkgate_store::postgres::testing::TestSchema;
use larkgate_store::{PostgresStore, Store};

use crate::harness::{Edge, INITIALIZE, POLICY, PRINCIPALS, add_principals};

/// An idle timeout no real time in this test comes near: only the moved clock reaches it.
const IDLE: Duration = Duration::from_secs(600);

async fn replicas(schema: &TestSchema, clock: &ManualClock) -> Vec<Edge> {
    let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&schema.settings()).await.unwrap());
    add_principals(store.as_ref(), PRINCIPALS).await;
    let server = format!("session_idle_timeout_ms = {}\n", IDLE.as_millis());
    let mut edges = Vec::new();
    for _ in 0..3 {
        // Each replica its own pool on the schema, as separate processes would have.
        let store: Arc<dyn Store> =
            Arc::new(PostgresStore::open(&schema.settings()).await.unwrap());
        let clock: Arc<dyn WallClock> = Arc::new(clock.clone());
        edges.push(Edge::replica(store, clock, POLICY, &server).await);
    }
    edges
}

/// Opens a 2025-11-25 session on `edge` with `token`: its id.
async fn open(edge: &Edge, token: &str) -> String {
    let response = edge.post(token, &[], INITIALIZE).await;
    assert_eq!(response.status(), 200);
    response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A `ping` in `session` through `edge`: the HTTP status.
async fn ping(edge: &Edge, token: &str, session: &str) -> u16 {
    let headers = [
        ("mcp-session-id", session),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let response = edge
        .post(
            token,
            &headers,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
        )
        .await;
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lives_an_idle_timeout_past_its_last_use_through_any_replica() {
    let schema = TestSchema::create().await;
    let clock = ManualClock::default();
    let edges = replicas(&schema, &clock).await;
    let admin = edges[0].token("admin").await;
    let bob = edges[0].token("bob").await;

    let session = open(&edges[0], &admin).await;
    // Used through replica 2, which never held it, late in its first idle timeout...
    clock.advance(IDLE - Duration::from_secs(1));
    assert_eq!(ping(&edges[1], &admin, &session).await, 200);
    // ...it is not over when the timeout from its opening is: replica 3 continues it.
    clock.advance(Duration::from_secs(2));
    assert_eq!(ping(&edges[2], &admin, &session).await, 200);
    // Someone else's token never continues it, on any replica: refused, not found anew.
    assert_eq!(ping(&edges[2], &bob, &session).await, 403);
    assert_eq!(ping(&edges[0], &bob, &session).await, 403);

    // Left alone for an idle timeout, no replica that does not hold it continues it.
    let other = open(&edges[0], &admin).await;
    clock.advance(IDLE);
    assert_eq!(ping(&edges[1], &admin, &other).await, 404);
    // (replica 1 holds it still, until its own idle timer ends it: that is rmcp's, on real
    // time, and the edge's own sessions test moves that one.)

    for edge in edges {
        edge.stop().await;
    }
}

/// A call held for its approval on one replica learns of the decision made through another as
/// the database tells of it (PostgreSQL's notification), not at its next reading of the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_on_one_replica_is_told_at_once_of_a_decision_made_through_another() {
    use larkgate_platform::approvals::wait::{Progress, Waiting};
    use larkgate_platform::approvals::{self, Decision};

    struct Told(tokio::sync::mpsc::UnboundedSender<String>);
    #[async_trait::async_trait]
    impl Progress for Told {
        async fn tell(&self, _progress: f64, _total: f64, message: String) {
            let _ = self.0.send(message);
        }
    }

    const WAITING: &str = r#"
        [roles.author]
        call = ["kv_delete"]
        [approvals]
        require = [{ tool = "kv_delete", wait_seconds = 600 }]
    "#;
    let schema = TestSchema::create().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&schema.settings()).await.unwrap());
    add_principals(
        store.as_ref(),
        &[("ada", &["author"]), ("eve", &["approver"])],
    )
    .await;
    let mut edges = Vec::new();
    for _ in 0..2 {
        let store: Arc<dyn Store> =
            Arc::new(PostgresStore::open(&schema.settings()).await.unwrap());
        let clock: Arc<dyn WallClock> = Arc::new(larkgate_platform::clock::SystemClock);
        edges.push(Edge::replica(store, clock, WAITING, "").await);
    }
    let (holding, deciding) = (&edges[0], &edges[1]);
    let mut told = holding.platform.services().decisions.watch();
    told.borrow_and_update();
    let (progress, mut waits) = tokio::sync::mpsc::unbounded_channel();
    let waiting = Waiting {
        cancelled: Box::pin(std::future::pending()),
        progress: Some(Box::new(Told(progress))),
        rounds: None,
    };
    let ada = store.principal("ada").await.unwrap().unwrap();
    let identity = Arc::new(larkgate_platform::SessionIdentity {
        run: larkgate_platform::RunContext::direct(ada),
        label: "test".to_owned(),
        server: None,
    });
    let platform = holding.platform.clone();
    let held = tokio::spawn(async move {
        let arguments = serde_json::json!({"key": "k"}).as_object().cloned();
        platform
            .call_waiting(
                Some(identity),
                "kv_delete",
                arguments,
                waiting,
                larkgate_platform::Conversation::none(),
            )
            .await
    });
    let message = waits.recv().await.unwrap();
    let id = message
        .strip_prefix("waiting for an approver: approval ")
        .and_then(|rest| rest.split_once(','))
        .map(|(id, _)| id.to_owned())
        .unwrap();
    // The holding replica follows the database's notifications from its first wait on; once
    // it does (it first says anything may have changed), a decision anywhere is told to it.
    told.changed().await.unwrap();
    let eve = store.principal("eve").await.unwrap().unwrap();
    approvals::resolve_in(
        deciding.platform.services(),
        &eve,
        &id,
        Decision {
            approve: true,
            reason: None,
        },
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(60), told.changed())
        .await
        .expect("the holding replica is told of the decision")
        .unwrap();
    let answer = held.await.unwrap().unwrap();
    assert!(answer.value.contains_key("deleted"), "{:?}", answer.value);
    for edge in edges {
        edge.stop().await;
    }
}
