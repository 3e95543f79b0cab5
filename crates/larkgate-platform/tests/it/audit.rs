//! The audit chain: journaled appends, batched moves into the store, replay after a crash, and
//! verification that catches edits and deletions.

use std::sync::Arc;

use larkgate_platform::audit::{
    AuditCode, AuditEntry, AuditError, AuditLog, AuditOptions, AuditSink, ForwardingAudit, verify,
};
use larkgate_store::{AuditKind, AuditQuery, AuditStore, SqliteStore};

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
            code: Some(AuditCode::Ok),
            duration_us: Some(i as u64),
            ..entry(AuditKind::Outcome, "alice", "kv_get")
        })
        .unwrap();
    }
    log.append(entry(AuditKind::Refusal, "bob", "kv_set"))
        .unwrap();
    log.flush().await.unwrap();
}

pub(crate) fn raw(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(larkgate_store::DATABASE_FILE)).unwrap()
}

/// How many audit journal segments are in `dir`.
pub(crate) fn journal_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("audit.journal")
        })
        .count()
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
    assert_eq!(store.audit_head().await.unwrap().unwrap().seq, 11);
    // Every record names this directory's replica and its own numbering; each outcome names
    // its intent's place in the chain.
    let replica = std::fs::read_to_string(dir.path().join("replica")).unwrap();
    assert_eq!(log.replica(), replica.trim());
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.replica.as_deref(), Some(log.replica()));
        assert_eq!(record.local_seq, Some(i as u64 + 1));
        if record.kind == AuditKind::Outcome {
            assert_eq!(record.intent_seq, Some(record.seq - 1));
        }
    }
    assert_eq!(log.local_head(), (11, 11));
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
        // No background flush during the test: only explicit ones.
        let (store, log) = open_quiet(dir.path()).await;
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

const CHILD_ENV: &str = "LARKGATE_AUDIT_CRASH_CHILD_DIR";

/// The child process of `acknowledged_audit_records_survive_kill_9`, not a test of its own:
/// it appends records forever, printing each acknowledged sequence, until killed.
#[tokio::test]
#[ignore = "the child process of acknowledged_audit_records_survive_kill_9; run only by it"]
async fn audit_crash_child_writer() {
    let dir =
        std::env::var(CHILD_ENV).expect("started by acknowledged_audit_records_survive_kill_9");
    let dir = std::path::Path::new(&dir);
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let log = AuditLog::open(dir, store, AuditOptions::default())
        .await
        .unwrap();
    loop {
        let seq = log.append(entry(AuditKind::Intent, "child", "t")).unwrap();
        println!("ack {seq}");
        if seq % 64 == 0 {
            tokio::task::yield_now().await; // let the flusher move some into the store
        }
    }
}

#[test]
fn acknowledged_audit_records_survive_kill_9() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "audit::audit_crash_child_writer",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = 0u64;
    while acknowledged < 5_000 {
        let line = lines.next().expect("the child keeps writing").unwrap();
        if let Some(seq) = line.strip_prefix("ack ") {
            acknowledged = seq.parse().unwrap();
        }
    }
    child.kill().unwrap(); // SIGKILL: no flush, no destructor
    child.wait().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (store, _log) = open(dir.path()).await; // replays what the journal holds
        let records = store.audit_records(AuditQuery::default()).await.unwrap();
        assert!(
            records.len() as u64 >= acknowledged,
            "{} < {acknowledged}",
            records.len()
        );
        assert!(verify(store.as_ref()).await.unwrap().intact());
    });
}

/// A log that flushes only when told to.
async fn open_quiet(dir: &std::path::Path) -> (Arc<SqliteStore>, Arc<AuditLog>) {
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let options = AuditOptions {
        flush_interval: std::time::Duration::from_secs(3600),
        ..Default::default()
    };
    let log = AuditLog::open(dir, store.clone(), options).await.unwrap();
    (store, log)
}

/// What another process (its own store handle, no audit lock) records.
fn forwarder(dir: &std::path::Path) -> ForwardingAudit {
    ForwardingAudit::new(Arc::new(SqliteStore::open(dir).unwrap()))
}

async fn principals_in_chain(store: &SqliteStore) -> Vec<String> {
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    records.into_iter().map(|r| r.principal).collect()
}

#[tokio::test]
async fn events_forwarded_by_another_process_are_chained_once_with_their_time() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open_quiet(dir.path()).await;
    let other = forwarder(dir.path());
    log.append(entry(AuditKind::Event, "owner", "a")).unwrap();
    other
        .record_event(entry(AuditKind::Event, "ada", "principal"))
        .unwrap();
    other
        .record_event(entry(AuditKind::Event, "bob", "token"))
        .unwrap();
    // A process that does not own the chain cannot give an intent its sequence: calls fail
    // closed, saying why.
    let refused = other
        .append(entry(AuditKind::Intent, "ada", "kv_set"))
        .unwrap_err();
    assert!(matches!(refused, AuditError::NotOwner), "{refused}");
    assert!(refused.to_string().contains("does not own the audit log"));
    // An entry that is not one (a hand-written row) is chained as what it was, not dropped.
    store.forward_audit(5, "not json").unwrap();
    // A forwarded entry is an event whatever it claims: it cannot open or close a call.
    other
        .record_event(AuditEntry {
            intent_seq: Some(1),
            ..entry(AuditKind::Outcome, "mallory", "kv_set")
        })
        .unwrap();

    log.flush().await.unwrap();
    log.append(entry(AuditKind::Event, "owner", "b")).unwrap();
    log.flush().await.unwrap();
    log.flush().await.unwrap();
    assert_eq!(
        principals_in_chain(&store).await,
        ["owner", "ada", "bob", "larkgate", "mallory", "owner"]
    );
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records[4].kind, AuditKind::Event);
    assert_eq!(records[4].intent_seq, None);
    assert_eq!(records[1].tool.as_deref(), Some("principal"));
    assert!(records[1].at_ms > 0 && records[1].at_ms <= records[5].at_ms);
    assert_eq!(records[3].at_ms, 5, "the time it was forwarded");
    assert_eq!(
        records[3].code.as_deref(),
        Some("unreadable_forwarded_entry")
    );
    assert!(records[3].detail.as_deref().unwrap().contains("not json"));
    assert!(store.forwarded_audit(10).await.unwrap().is_empty());
    assert!(verify(store.as_ref()).await.unwrap().intact());
}

/// Holds SQLite's write lock, as a long write in another process would: the store's next
/// commit fails once its busy timeout runs out.
pub(crate) fn hold_write_lock(dir: &std::path::Path) -> rusqlite::Connection {
    let connection = raw(dir);
    connection.execute_batch("BEGIN IMMEDIATE").unwrap();
    connection
}

#[tokio::test]
async fn forwarded_events_are_not_chained_twice_when_storing_them_fails_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open_quiet(dir.path()).await;
    let other = forwarder(dir.path());
    other
        .record_event(entry(AuditKind::Event, "ada", "p"))
        .unwrap();
    let lock = hold_write_lock(dir.path());
    log.flush().await.unwrap_err(); // chained and journaled; not stored, still in the inbox
    drop(lock);
    other
        .record_event(entry(AuditKind::Event, "bob", "p"))
        .unwrap();
    log.flush().await.unwrap();
    log.flush().await.unwrap();
    assert_eq!(principals_in_chain(&store).await, ["ada", "bob"]);
    assert!(store.forwarded_audit(10).await.unwrap().is_empty());
    assert!(verify(store.as_ref()).await.unwrap().intact());
}

#[tokio::test]
async fn forwarded_events_journaled_before_a_crash_are_chained_once_after_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_store, log) = open_quiet(dir.path()).await;
        let other = forwarder(dir.path());
        log.append(entry(AuditKind::Event, "owner", "a")).unwrap();
        other
            .record_event(entry(AuditKind::Event, "ada", "p"))
            .unwrap();
        let lock = hold_write_lock(dir.path());
        log.flush().await.unwrap_err();
        drop(lock);
        other
            .record_event(entry(AuditKind::Event, "bob", "p"))
            .unwrap();
        drop(log); // the process dies: ada's record is only in the journal, her entry in the inbox
    }
    let (store, log) = open_quiet(dir.path()).await;
    log.flush().await.unwrap();
    assert_eq!(principals_in_chain(&store).await, ["owner", "ada", "bob"]);
    assert!(store.forwarded_audit(10).await.unwrap().is_empty());
    assert!(verify(store.as_ref()).await.unwrap().intact());
}

#[tokio::test]
async fn events_forwarded_while_nobody_owns_the_chain_are_chained_when_it_opens() {
    let dir = tempfile::tempdir().unwrap();
    drop(open_quiet(dir.path()).await);
    forwarder(dir.path())
        .record_event(entry(AuditKind::Event, "ada", "p"))
        .unwrap();
    let (store, _log) = open_quiet(dir.path()).await;
    assert_eq!(principals_in_chain(&store).await, ["ada"]);
    assert!(store.forwarded_audit(10).await.unwrap().is_empty());
}

/// The finding: delete the chain's tail and roll the stored head back to the record now last,
/// and the chain verifies as a valid, shorter one. Checked against a head kept elsewhere
/// (`larkgate audit verify --head SEQ:HASH`), it does not.
#[tokio::test]
async fn a_head_kept_elsewhere_catches_a_deleted_tail_with_the_head_rolled_back() {
    use larkgate_platform::audit::{KnownHead, verify_against};
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 5).await;
    let head = store.audit_head().await.unwrap().unwrap();
    let printed = format!("{} {}", head.seq, head.hash);
    let known: KnownHead = printed.parse().unwrap();
    assert_eq!(
        known,
        format!("{}:{}", head.seq, head.hash).parse().unwrap()
    );
    let report = verify_against(store.as_ref(), Some(&known)).await.unwrap();
    assert!(report.intact(), "{report:?}");

    let keep = head.seq - 3;
    let raw = raw(dir.path());
    let kept_hash: String = raw
        .query_row(
            "SELECT hash FROM audit WHERE seq = ?1",
            [keep as i64],
            |r| r.get(0),
        )
        .unwrap();
    raw.execute("DELETE FROM audit WHERE seq > ?1", [keep as i64])
        .unwrap();
    raw.execute(
        "UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1",
        rusqlite::params![keep as i64, kept_hash],
    )
    .unwrap();
    assert!(
        verify(store.as_ref()).await.unwrap().intact(),
        "without a head kept elsewhere, the shortened chain passes"
    );
    let report = verify_against(store.as_ref(), Some(&known)).await.unwrap();
    assert!(!report.intact());
    let why = report.known_head_mismatch.unwrap();
    assert!(
        why.contains(&format!(
            "ends at record {keep}, before the head recorded at {}",
            head.seq
        )),
        "{why}"
    );
    // A kept head whose record is still there but different: the chain was rewritten.
    let rewritten = KnownHead {
        seq: keep,
        hash: "0".repeat(64),
    };
    let why = verify_against(store.as_ref(), Some(&rewritten))
        .await
        .unwrap()
        .known_head_mismatch
        .unwrap();
    assert!(why.contains("does not have the hash recorded"), "{why}");
    for bad in ["12", "x:abc", "12:nothex", "12:abcd"] {
        assert!(bad.parse::<KnownHead>().is_err(), "{bad}");
    }
}

#[tokio::test]
async fn a_log_closed_with_everything_stored_leaves_no_journal_behind() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_store, log) = open_quiet(dir.path()).await;
        fill(&log, 3).await;
        // Unflushed records keep their segment when the log closes.
        log.append(entry(AuditKind::Refusal, "bob", "kv_set"))
            .unwrap();
    }
    assert_eq!(journal_files(dir.path()), 1);
    {
        let (store, log) = open_quiet(dir.path()).await; // replays the last record
        assert_eq!(store.audit_head().await.unwrap().unwrap().seq, 8);
        log.flush().await.unwrap();
    }
    assert_eq!(journal_files(dir.path()), 0);
}

/// The names of the audit journal segments in `dir`, sorted.
fn journal_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("audit.journal"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_busy_log_writes_one_journal_segment_until_it_is_full_then_rotates_and_releases() {
    // The default: flush after flush goes to the same segment (no file made and removed per
    // flush), which a restart after a crash would replay, the stored records idempotently.
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, log) = open_quiet(dir.path()).await;
        let first = journal_names(dir.path());
        assert_eq!(first.len(), 1, "{first:?}");
        for _ in 0..20 {
            fill(&log, 2).await;
            assert_eq!(
                journal_names(dir.path()),
                first,
                "one segment through every flush"
            );
        }
        assert_eq!(store.audit_head().await.unwrap().unwrap().seq, 20 * 5);
        // As a larkgate stops (the process may end without dropping the log): what is left
        // on disk holds no record for the next start to replay.
        log.flush_at_stop(false).await.unwrap();
        for name in journal_names(dir.path()) {
            let length = std::fs::metadata(dir.path().join(&name)).unwrap().len();
            assert_eq!(length, 0, "{name} is left with records in it");
        }
    }
    assert_eq!(
        journal_files(dir.path()),
        0,
        "closed with everything stored"
    );

    // A small segment: full after a few records, it is rotated at the next flush and removed
    // once the store holds it; the chain has every record once.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let options = AuditOptions {
        flush_interval: std::time::Duration::from_secs(3600),
        segment_bytes: 2_000,
        ..Default::default()
    };
    let log = AuditLog::open(dir.path(), store.clone(), options)
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        fill(&log, 2).await;
        let names = journal_names(dir.path());
        assert!(names.len() <= 2, "{names:?}");
        seen.extend(names);
    }
    assert!(seen.len() > 3, "rotated: {seen:?}");
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records.len(), 30 * 5);
    assert!(verify(store.as_ref()).await.unwrap().intact());
    drop(log);
    assert_eq!(journal_files(dir.path()), 0);
}

/// Two data directories (two replicas) on one store: one chain, each outcome after its own
/// intent, each replica's numbering its own, and verify intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_store_append_to_one_chain() {
    let data = tempfile::tempdir().unwrap();
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Arc::new(SqliteStore::open(data.path()).unwrap());
    let first = AuditLog::open(one.path(), store.clone(), AuditOptions::default())
        .await
        .unwrap();
    let second = AuditLog::open(
        two.path(),
        Arc::new(SqliteStore::open(data.path()).unwrap()),
        AuditOptions::default(),
    )
    .await
    .unwrap();
    assert_ne!(first.replica(), second.replica());
    let (a, b) = (first.clone(), second.clone());
    let writers = [
        tokio::spawn(async move { fill(&a, 50).await }),
        tokio::spawn(async move { fill(&b, 50).await }),
    ];
    for writer in writers {
        writer.await.unwrap();
    }
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records.len(), 2 * 101);
    for log in [&first, &second] {
        let mine: Vec<_> = records
            .iter()
            .filter(|r| r.replica.as_deref() == Some(log.replica()))
            .collect();
        assert_eq!(
            mine.iter()
                .map(|r| r.local_seq.unwrap())
                .collect::<Vec<_>>(),
            (1..=101).collect::<Vec<_>>()
        );
        for outcome in mine.iter().filter(|r| r.kind == AuditKind::Outcome) {
            let intent = &records[outcome.intent_seq.unwrap() as usize - 1];
            assert_eq!(intent.replica.as_deref(), Some(log.replica()));
            assert_eq!(intent.local_seq, Some(outcome.local_seq.unwrap() - 1));
        }
    }
    let report = verify(store.as_ref()).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert!(report.intents_without_outcome.is_empty());
}

/// A journal an earlier larkgate left behind (records already sequenced and hashed) is
/// replayed as it is, and this version's records follow it on the same chain.
#[tokio::test]
async fn a_journal_from_before_replicas_is_replayed_then_continued() {
    let dir = tempfile::tempdir().unwrap();
    let mut record = larkgate_store::AuditRecord {
        seq: 1,
        at_ms: 5,
        kind: AuditKind::Event,
        principal: "old".into(),
        run_id: None,
        run_kind: None,
        session: None,
        tool: None,
        args_hash: None,
        args: None,
        code: Some("principal_added".into()),
        intent_seq: None,
        duration_us: None,
        detail: None,
        replica: None,
        local_seq: None,
        prev_hash: larkgate_platform::audit::GENESIS_HASH.into(),
        hash: String::new(),
    };
    record.hash = larkgate_platform::audit::record_hash(&record);
    let line = serde_json::to_string(&record).unwrap();
    assert!(!line.contains("replica"), "{line}");
    std::fs::write(dir.path().join("audit.journal.7"), format!("{line}\n")).unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 1).await;
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(records[0], record);
    assert_eq!(records.len(), 4);
    assert_eq!(records[1].local_seq, Some(1));
    assert!(verify(store.as_ref()).await.unwrap().intact());
    assert_eq!(journal_files(dir.path()), 1); // the live segment only
}

/// An outcome chained before its intent (a reordered chain, rehashed by whoever reordered it)
/// is named by verify.
#[tokio::test]
async fn an_outcome_before_its_intent_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = open(dir.path()).await;
    fill(&log, 2).await;
    // Record 2 is the outcome of intent 1: point it at 3 and rehash the chain from there.
    let connection = raw(dir.path());
    connection
        .execute("UPDATE audit SET intent_seq = 3 WHERE seq = 2", [])
        .unwrap();
    let mut records = store.audit_records(AuditQuery::default()).await.unwrap();
    for i in 1..records.len() {
        records[i].prev_hash = records[i - 1].hash.clone();
        records[i].hash = larkgate_platform::audit::record_hash(&records[i]);
        connection
            .execute(
                "UPDATE audit SET prev_hash = ?1, hash = ?2 WHERE seq = ?3",
                rusqlite::params![records[i].prev_hash, records[i].hash, records[i].seq as i64],
            )
            .unwrap();
    }
    let last = records.last().unwrap();
    connection
        .execute("UPDATE audit_head SET hash = ?1 WHERE id = 1", [&last.hash])
        .unwrap();
    let report = verify(store.as_ref()).await.unwrap();
    let (seq, why) = report.first_broken.unwrap();
    assert_eq!(seq, 2);
    assert!(why.contains("outcome chained before its intent"), "{why}");
}

/// With `store_intents`, an intent is in the store when `store_intent` returns, without waiting
/// for the flusher; without it, `store_intent` returns at once and the record waits.
#[tokio::test]
async fn store_intents_puts_the_intent_in_the_store_before_the_call_runs() {
    for store_intents in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let options = AuditOptions {
            flush_interval: std::time::Duration::from_secs(3600),
            store_intents,
            ..Default::default()
        };
        let log = AuditLog::open(dir.path(), store.clone(), options)
            .await
            .unwrap();
        let seq = log
            .append(entry(AuditKind::Intent, "alice", "kv_set"))
            .unwrap();
        log.store_intent(seq).await.unwrap();
        let stored = store.audit_records(AuditQuery::default()).await.unwrap();
        assert_eq!(stored.len(), usize::from(store_intents), "{store_intents}");
    }
}
