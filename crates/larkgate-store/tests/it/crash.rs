//! An acknowledged write survives `kill -9` of the process that made it.
//!
//! The test re-runs its own binary as a child that appends audit records and key-value
//! entries one commit at a time, printing each acknowledged sequence; the parent kills it with
//! SIGKILL mid-stream, reopens the file and checks that every acknowledged write is there.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use larkgate_store::{AuditQuery, SqliteStore, Store};

const CHILD_ENV: &str = "LARKGATE_STORE_CRASH_CHILD_DIR";

/// The child process of `acknowledged_writes_survive_kill_9`, not a test of its own: it writes
/// forever, acknowledging each commit on stdout, until the parent kills it.
#[tokio::test]
#[ignore = "the child process of acknowledged_writes_survive_kill_9; run only by it"]
async fn crash_child_writer() {
    let dir = std::env::var(CHILD_ENV).expect("started by acknowledged_writes_survive_kill_9");
    let store = SqliteStore::open(std::path::Path::new(&dir)).unwrap();
    for seq in 1.. {
        store
            .append_audit(vec![crate::audit::record(seq, "child", "t")])
            .await
            .unwrap();
        store.kv_set(&format!("k{seq}"), "v").await.unwrap();
        println!("ack {seq}");
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::crash_child_writer",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir.path())
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

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(dir.path()).unwrap();
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
    });
}
