//! The audit chain: journaled appends, batched moves into the store, replay after a crash, and
//! verification that catches edits and deletions.

use std::sync::Arc;

use larkgate_platform::audit::{AuditEntry, AuditLog, AuditOptions, AuditSink, verify};
use larkgate_store::{AuditKind, AuditQuery, SqliteStore, Store};

fn entry(kind: AuditKind, principal: &str, tool: &str) -> AuditEntry {
    AuditEntry {
        kind: Some(kind),
        principal: principal.into(),
        tool: Some(tool.into()),
        ..Default::default()
    }
}

async fn open(dir: &std::path::Path) -> (Arc<SqliteStore>, Arc<AuditLog>) {
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let log = AuditLog::open(dir, store.clone(), AuditOptions::default())
        .await
        .unwrap();
    (store, log)
}

/// Appends `n` intent/outcome pairs and one refusal, then flushes.
async fn fill(log: &AuditLog, n: usize) {
    for i in 0..n {
        let intent = log
            .append(entry(AuditKind::Intent, "alice", "kv_get"))
            .unwrap();
        log.append(AuditEntry {
            intent_seq: Some(intent),
            code: Some("ok".into()),
            duration_us: Some(i as u64),
            ..entry(AuditKind::Outcome, "alice", "kv_get")
        })
        .unwrap();
    }
    log.append(entry(AuditKind::Refusal, "bob", "kv_set"))
        .unwrap();
    log.flush().await.unwrap();
}

fn raw(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(larkgate_store::DATABASE_FILE)).unwrap()
}

#[tokio::test]
async fn records_are_chained_and_verify_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 5).await;
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records.len(), 11);
    assert_eq!(records[0].prev_hash, larkgate_platform::audit::GENESIS_HASH);
    for pair in records.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
        assert_eq!(pair[1].seq, pair[0].seq + 1);
    }
    let report = verify(store.as_ref()).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.records, 11);
    assert!(report.intents_without_outcome.is_empty());
    assert_eq!(log.head(), store.audit_head().await.unwrap().unwrap());
}

#[tokio::test]
async fn an_edited_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 5).await;
    raw(dir.path())
        .execute("UPDATE audit SET principal = 'mallory' WHERE seq = 4", [])
        .unwrap();
    let report = verify(store.as_ref()).await.unwrap();
    let (seq, why) = report.first_broken.unwrap();
    assert_eq!(seq, 4);
    assert!(why.contains("edited"), "{why}");
}

#[tokio::test]
async fn a_deleted_middle_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 5).await;
    raw(dir.path())
        .execute("DELETE FROM audit WHERE seq = 6", [])
        .unwrap();
    let report = verify(store.as_ref()).await.unwrap();
    let (seq, why) = report.first_broken.unwrap();
    assert_eq!(seq, 7);
    assert!(why.contains("expected sequence 6"), "{why}");
}

#[tokio::test]
async fn deleted_last_records_are_detected_by_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 5).await;
    raw(dir.path())
        .execute("DELETE FROM audit WHERE seq > 8", [])
        .unwrap();
    let report = verify(store.as_ref()).await.unwrap();
    assert_eq!(report.first_broken, None, "what remains is a valid chain");
    let why = report.head_mismatch.unwrap();
    assert!(
        why.contains("head is at sequence 11 but the last record is 8"),
        "{why}"
    );
}

#[tokio::test]
async fn an_intent_without_an_outcome_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 2).await;
    let open_intent = log
        .append(entry(AuditKind::Intent, "alice", "kv_set"))
        .unwrap();
    log.flush().await.unwrap();
    let report = verify(store.as_ref()).await.unwrap();
    assert!(report.intact());
    assert_eq!(report.intents_without_outcome, [open_intent]);
}

#[tokio::test]
async fn journaled_records_not_yet_flushed_are_replayed_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        // No background flush during the test: only explicit ones.
        let options = AuditOptions {
            flush_interval: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let log = AuditLog::open(dir.path(), store.clone(), options)
            .await
            .unwrap();
        fill(&log, 3).await;
        // Acknowledged but never flushed: as if the process died here.
        for _ in 0..4 {
            log.append(entry(AuditKind::Event, "operator", "x"))
                .unwrap();
        }
        assert_eq!(
            store
                .audit_records(AuditQuery::default())
                .await
                .unwrap()
                .len(),
            7
        );
        drop(log);
    }
    let (store, log) = open(dir.path()).await;
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records.len(), 11);
    assert!(verify(store.as_ref()).await.unwrap().intact());
    // The chain continues from the replayed head.
    let next = log
        .append(entry(AuditKind::Event, "operator", "y"))
        .unwrap();
    assert_eq!(next, 12);
    log.flush().await.unwrap();
    assert!(verify(store.as_ref()).await.unwrap().intact());
}

#[tokio::test]
async fn a_second_log_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    let err = AuditLog::open(dir.path(), store.clone(), AuditOptions::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("another larkgate process"),
        "{err}"
    );
    drop(log);
}
