//! An acknowledged write survives `kill -9` of the process that made it, on both stores.
//!
//! The test re-runs its own binary as a child that appends audit records and key-value
//! entries one commit at a time, printing each acknowledged sequence; the parent kills it with
//! SIGKILL mid-stream, reopens the store and checks that every acknowledged write is there.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use larkgate_store::postgres::testing::TestSchema;
use larkgate_store::{AuditQuery, PostgresStore, SqliteStore, Store};

/// `sqlite:DIR` or `postgres:SCHEMA`: the store the child writes to.
const CHILD_ENV: &str = "LARKGATE_STORE_CRASH_CHILD_STORE";

/// The child process of `acknowledged_writes_survive_kill_9`, not a test of its own: it writes
/// forever, acknowledging each commit on stdout, until the parent kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of acknowledged_writes_survive_kill_9; run only by it"]
async fn crash_child_writer() {
    let place = std::env::var(CHILD_ENV).expect("started by acknowledged_writes_survive_kill_9");
    let store: Box<dyn Store> = match place.split_once(':') {
        Some(("sqlite", dir)) => Box::new(SqliteStore::open(std::path::Path::new(dir)).unwrap()),
        Some(("postgres", schema)) => {
            let settings = larkgate_store::PostgresSettings {
                schema: schema.to_owned(),
                ..larkgate_store::PostgresSettings::new(larkgate_store::postgres::testing::url())
            };
            Box::new(PostgresStore::open(&settings).await.unwrap())
        }
        _ => panic!("{CHILD_ENV}={place}"),
    };
    for seq in 1.. {
        store
            .append_audit(vec![crate::audit::record(seq, "child", "t")])
            .await
            .unwrap();
        store.kv_set(&format!("k{seq}"), "v").await.unwrap();
        println!("ack {seq}");
    }
}

/// Starts the child on `place`, lets it acknowledge 200 writes, kills it with SIGKILL, and
/// answers the last acknowledged sequence.
fn write_then_kill_9(place: &str) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::crash_child_writer",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, place)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = 0;
    while acknowledged < 200 {
        let line = lines.next().expect("the child keeps writing").unwrap();
        if let Some(seq) = line.strip_prefix("ack ") {
            acknowledged = seq.parse().unwrap();
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    acknowledged
}

async fn every_acknowledged_write_is_there(store: &dyn Store, acknowledged: u64) {
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert!(
        records.len() as u64 >= acknowledged,
        "{} < {acknowledged}",
        records.len()
    );
    for seq in 1..=acknowledged {
        assert!(
            store.kv_get(&format!("k{seq}")).await.unwrap().is_some(),
            "k{seq} lost"
        );
    }
    assert!(store.audit_head().await.unwrap().unwrap().seq >= acknowledged);
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let acknowledged = write_then_kill_9(&format!("sqlite:{}", dir.path().display()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(dir.path()).unwrap();
        every_acknowledged_write_is_there(&store, acknowledged).await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_on_postgres() {
    let schema = TestSchema::create().await;
    let name = schema.name().to_owned();
    let acknowledged =
        tokio::task::spawn_blocking(move || write_then_kill_9(&format!("postgres:{name}")))
            .await
            .unwrap();
    let store = PostgresStore::open(&schema.settings()).await.unwrap();
    every_acknowledged_write_is_there(&store, acknowledged).await;
}
