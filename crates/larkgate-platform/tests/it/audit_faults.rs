//! The audit journal under faults: each test runs a real child process that appends records
//! (printing every sequence `append` acknowledged) while the store is locked, the disk fills
//! up, descriptors run out, or it is stopped at a step of a flush or of recovery and killed
//! with SIGKILL. Then the log is opened again (a restart) and every acknowledged record must be
//! in the store, the chain intact, and no acknowledged call's intent without its outcome.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use larkgate_platform::audit::{
    AuditCode, AuditEntry, AuditLog, AuditOptions, AuditSink, FlushStep, ForwardingAudit, verify,
};
use larkgate_store::{AuditKind, AuditQuery, AuditStore, SqliteStore};

use crate::audit::{hold_write_lock, journal_files};

const SCENARIO_ENV: &str = "LARKGATE_AUDIT_FAULT";
const DIR_ENV: &str = "LARKGATE_AUDIT_FAULT_DIR";
const STEPS: [(&str, FlushStep); 5] = [
    ("replayed", FlushStep::Replayed),
    ("adopted", FlushStep::Adopted),
    ("rotated", FlushStep::Rotated),
    ("stored", FlushStep::Stored),
    ("released", FlushStep::Released),
];

// ---------------------------------------------------------------------------------------------
// The child's side.

/// Set once the child has reached the flush it is to be stopped in.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The step hook: at the scenario's step, once armed, say so and wait to be killed.
fn stop_at(at: FlushStep) {
    let wanted = std::env::var(SCENARIO_ENV).unwrap_or_default();
    let wanted = STEPS
        .iter()
        .find(|(name, _)| wanted == format!("kill-at-{name}"))
        .map(|(_, step)| *step);
    if ARMED.load(Ordering::SeqCst) && wanted == Some(at) {
        println!("stopped");
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

/// Flushes that got as far as the store with records to chain (each rotates the journal
/// first).
static ATTEMPTS: AtomicUsize = AtomicUsize::new(0);

/// The step hook of the outage scenario: counts [`ATTEMPTS`].
fn count_attempts(at: FlushStep) {
    if at == FlushStep::Rotated {
        ATTEMPTS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits until `done` holds, checking every 10 ms, for at most a minute (then the scenario
/// goes on, and the test's assertions say what did not happen).
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn entry(kind: AuditKind) -> AuditEntry {
    AuditEntry {
        kind: Some(kind),
        principal: "child".into(),
        tool: Some("kv_set".into()),
        ..Default::default()
    }
}

/// One call's records, as the pipeline writes them; prints what was acknowledged.
fn call(log: &AuditLog) -> bool {
    let Ok(intent) = log.append(entry(AuditKind::Intent)) else {
        println!("refused");
        return false;
    };
    println!("ack {intent}");
    let outcome = AuditEntry {
        code: Some(AuditCode::Ok),
        intent_seq: Some(intent),
        ..entry(AuditKind::Outcome)
    };
    match log.append(outcome) {
        Ok(seq) => {
            println!("ack {seq}");
            println!("call {intent}");
            true
        }
        Err(error) => panic!("an outcome is never refused: {error}"),
    }
}

#[allow(unsafe_code)]
fn set_limit(resource: libc::__rlimit_resource_t, soft: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(resource, &mut limit), 0);
        limit.rlim_cur = soft.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(resource, &limit), 0);
    }
}

/// Writes past RLIMIT_FSIZE then fail with EFBIG instead of killing the process.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    // SAFETY: installs the kernel's "ignore" disposition; no handler code runs.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// The child process of the tests below, not a test of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the audit fault tests; run only by them"]
async fn fault_child() {
    let scenario = std::env::var(SCENARIO_ENV).expect("started by an audit fault test");
    println!(); // ends the harness's "test fault_child ... ", so each report has its own line
    let dir = std::env::var(DIR_ENV).unwrap();
    let dir = Path::new(&dir);
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    // Every flush rotates the journal (as a full segment does), so each step of a rotation and
    // its release is tried under the fault.
    let quiet = AuditOptions {
        flush_interval: Duration::from_secs(3600),
        at_step: Some(stop_at),
        segment_bytes: 0,
        ..Default::default()
    };
    if scenario == "kill-at-replayed" {
        ARMED.store(true, Ordering::SeqCst);
        AuditLog::open(dir, store, quiet).await.unwrap();
        panic!("recovery never reached its step");
    }
    match scenario.as_str() {
        "write" => {
            // Leave segments behind for a recovery to replay.
            let log = AuditLog::open(dir, store, quiet).await.unwrap();
            for _ in 0..10 {
                call(&log);
            }
            log.flush().await.unwrap();
            for _ in 0..10 {
                call(&log);
            }
        }
        "outage" => {
            // The store is locked until two flushes have failed on it after the last call (so
            // a flush with nothing new is retried); then calls continue with the flusher
            // running. A short busy timeout keeps the outage brief; the counts, not the time,
            // say when it has lasted long enough.
            store.set_busy_timeout(Duration::from_millis(200)).unwrap();
            let counted = AuditOptions {
                at_step: Some(count_attempts),
                segment_bytes: 0,
                ..AuditOptions::default()
            };
            let log = AuditLog::open(dir, store, counted).await.unwrap();
            let lock = hold_write_lock(dir);
            for _ in 0..5 {
                call(&log);
            }
            let attempted = ATTEMPTS.load(Ordering::SeqCst);
            wait_until(|| ATTEMPTS.load(Ordering::SeqCst) >= attempted + 2).await;
            drop(lock);
            for _ in 0..100 {
                call(&log);
            }
            // The flusher recovers by itself: it releases the segments it stored.
            wait_until(|| journal_files(dir) <= 2).await;
            println!("files {}", journal_files(dir));
        }
        "disk-full" => {
            let log = AuditLog::open(dir, store, quiet).await.unwrap();
            for _ in 0..5 {
                call(&log);
            }
            log.flush().await.unwrap();
            let intent = log.append(entry(AuditKind::Intent)).unwrap();
            println!("ack {intent}");
            ignore_file_size_signal();
            let segment = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().contains("audit.journal"))
                .max_by_key(|p| std::fs::metadata(p).unwrap().len())
                .unwrap();
            let length = std::fs::metadata(&segment).unwrap().len();
            // Room for part of one line: the next write is cut short, then fails.
            set_limit(libc::RLIMIT_FSIZE, length + 100);
            // The outcome of the call that ran is held, not lost.
            let outcome = log
                .append(AuditEntry {
                    code: Some(AuditCode::Ok),
                    intent_seq: Some(intent),
                    ..entry(AuditKind::Outcome)
                })
                .expect("an outcome is held when the journal cannot take it");
            println!("ack {outcome}");
            println!("call {intent}");
            for _ in 0..5 {
                assert!(
                    !call(&log),
                    "nothing new is admitted while the disk is full"
                );
            }
            let _ = log.flush().await; // may fail: the store is on the same full disk
            set_limit(libc::RLIMIT_FSIZE, libc::RLIM_INFINITY);
            for _ in 0..5 {
                assert!(call(&log), "calls are admitted again once there is room");
            }
            log.flush().await.unwrap();
            for _ in 0..5 {
                call(&log);
            }
        }
        "descriptors" => {
            let log = AuditLog::open(dir, store, quiet).await.unwrap();
            for _ in 0..5 {
                call(&log);
            }
            log.flush().await.unwrap();
            set_limit(libc::RLIMIT_NOFILE, 256);
            let mut hoard = Vec::new();
            while let Ok(file) = std::fs::File::open("/dev/null") {
                hoard.push(file);
            }
            for _ in 0..5 {
                assert!(call(&log), "appending needs no new descriptor");
            }
            // Rotation cannot open a segment; whether the store can take the batch or not,
            // nothing is lost.
            let _ = log.flush().await;
            for _ in 0..5 {
                call(&log);
            }
            let _ = log.flush().await;
            drop(hoard);
            for _ in 0..5 {
                call(&log);
            }
            log.flush().await.unwrap();
            for _ in 0..5 {
                call(&log);
            }
            log.flush().await.unwrap();
            println!("files {}", journal_files(dir));
        }
        kill_at if kill_at.starts_with("kill-at-") => {
            let log = AuditLog::open(dir, store.clone(), quiet).await.unwrap();
            for _ in 0..10 {
                call(&log);
            }
            log.flush().await.unwrap();
            // A failed flush first, so the stopped one has more than one segment to release.
            for _ in 0..5 {
                call(&log);
            }
            let lock = hold_write_lock(dir);
            log.flush().await.unwrap_err();
            drop(lock);
            for _ in 0..5 {
                call(&log);
            }
            ForwardingAudit::new(store)
                .record_event(AuditEntry {
                    principal: "forwarded".into(),
                    ..entry(AuditKind::Event)
                })
                .unwrap();
            ARMED.store(true, Ordering::SeqCst);
            log.flush().await.unwrap();
            panic!("the flush never reached its step");
        }
        other => panic!("no scenario {other}"),
    }
    println!("done");
    std::future::pending::<()>().await;
}

// ---------------------------------------------------------------------------------------------
// The parent's side.

/// What the child reported before it was killed.
#[derive(Debug, Default)]
struct Acknowledged {
    records: BTreeSet<u64>,
    /// Intents of calls whose intent and outcome were both acknowledged.
    calls: Vec<u64>,
    refused: usize,
    files: Option<usize>,
}

/// Runs the child in `scenario` until it says it is done or stopped, then kills it (SIGKILL).
fn run_child(dir: &Path, scenario: &str) -> Acknowledged {
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "audit_faults::fault_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_ENV, scenario)
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = Acknowledged::default();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(seq) = line.strip_prefix("ack ") {
            seen.records.insert(seq.parse().unwrap());
        } else if let Some(seq) = line.strip_prefix("call ") {
            seen.calls.push(seq.parse().unwrap());
        } else if let Some(n) = line.strip_prefix("files ") {
            seen.files = Some(n.parse().unwrap());
        } else if line == "refused" {
            seen.refused += 1;
        } else if line == "done" || line == "stopped" {
            child.kill().unwrap();
            child.wait().unwrap();
            return seen;
        }
    }
    let status = child.wait().unwrap();
    panic!("the child of {scenario} ended before it was killed: {status}; {seen:?}");
}

/// Restarts (opens the log again, replaying what was left behind) and checks that everything
/// acknowledged is in a verified chain, and the `forwarded` events chained exactly once.
fn restart_and_check(dir: &Path, acknowledged: &Acknowledged, forwarded: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(dir).unwrap());
        let _log = AuditLog::open(dir, store.clone(), AuditOptions::default())
            .await
            .unwrap();
        let records = store.audit_records(AuditQuery::default()).await.unwrap();
        let stored: BTreeSet<u64> = records.iter().map(|r| r.seq).collect();
        let missing: Vec<_> = acknowledged.records.difference(&stored).collect();
        assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
        let report = verify(store.as_ref()).await.unwrap();
        assert!(report.intact(), "{report:?}");
        for intent in &acknowledged.calls {
            assert!(
                !report.intents_without_outcome.contains(intent),
                "the outcome of the call at {intent} was acknowledged and lost"
            );
        }
        let chained = records
            .iter()
            .filter(|r| r.principal == "forwarded")
            .count();
        assert_eq!(chained, forwarded, "forwarded events chained");
        assert!(store.forwarded_audit(10).await.unwrap().is_empty());
    });
}

#[test]
fn a_store_locked_past_its_busy_timeout_loses_nothing_and_the_flusher_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let seen = run_child(dir.path(), "outage");
    assert_eq!(seen.calls.len(), 105, "{seen:?}");
    // Before the fix, every rotation after the outage left a file behind and failed.
    assert!(seen.files.unwrap() <= 2, "{seen:?}");
    restart_and_check(dir.path(), &seen, 0);
}

#[test]
fn a_full_disk_refuses_new_calls_keeps_outcomes_and_leaves_no_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let seen = run_child(dir.path(), "disk-full");
    assert_eq!(seen.refused, 5, "{seen:?}");
    restart_and_check(dir.path(), &seen, 0);
}

#[test]
fn running_out_of_descriptors_at_rotation_loses_nothing_and_rotation_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let seen = run_child(dir.path(), "descriptors");
    assert_eq!(seen.calls.len(), 25, "{seen:?}");
    assert!(seen.files.unwrap() <= 2, "{seen:?}");
    restart_and_check(dir.path(), &seen, 0);
}

#[test]
fn a_kill_at_each_step_of_a_flush_loses_nothing() {
    std::thread::scope(|scope| {
        for (name, _) in &STEPS[1..] {
            scope.spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let seen = run_child(dir.path(), &format!("kill-at-{name}"));
                assert_eq!(seen.calls.len(), 20, "{name}: {seen:?}");
                restart_and_check(dir.path(), &seen, 1);
            });
        }
    });
}

#[test]
fn a_kill_during_recovery_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let seen = run_child(dir.path(), "write");
    run_child(dir.path(), "kill-at-replayed");
    restart_and_check(dir.path(), &seen, 0);
}
