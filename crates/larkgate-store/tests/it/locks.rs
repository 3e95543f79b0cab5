//! SQLite: writes while another process holds SQLite's write lock: a write waits out a brief lock
//! (within the busy timeout) instead of failing at once. A deferred transaction that reads
//! first and then writes cannot wait (SQLite refuses its upgrade at once to avoid a
//! deadlock), so every transaction that writes begins immediate.

use std::time::{Duration, Instant};

use larkgate_store::{
    ApprovalStore, DATABASE_FILE, IssuerBinding, KvStore, PrincipalStore, Resolution, ScriptStore,
};

use crate::draft;

/// A SQLite store in a fresh temporary directory (kept alive by the returned guard).
fn fresh() -> (tempfile::TempDir, larkgate_store::SqliteStore) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = larkgate_store::SqliteStore::open(dir.path()).expect("store opens");
    (dir, store)
}

/// Holds the write lock of the database in `dir` from another connection (as another
/// process would) for `held`; answers once the lock is taken. The holder's thread ends with
/// the moment it let the lock go.
fn hold_write_lock(dir: &std::path::Path, held: Duration) -> std::thread::JoinHandle<Instant> {
    hold_write_lock_until(dir, move || std::thread::sleep(held))
}

/// Holds the write lock of the database in `dir` from another connection until `release`
/// returns; answers once the lock is taken. The holder's thread ends with the moment it let
/// the lock go (just before its commit: no other write can have happened earlier).
fn hold_write_lock_until(
    dir: &std::path::Path,
    release: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<Instant> {
    let path = dir.join(DATABASE_FILE);
    let (locked, taken) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked.send(()).unwrap();
        release();
        let released = Instant::now();
        connection.execute_batch("COMMIT").unwrap();
        released
    });
    taken.recv().unwrap();
    holder
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_wait_out_a_write_lock_held_for_a_second() {
    let (dir, store) = fresh();
    store.kv_set("k", "0").await.unwrap();
    store
        .save_draft(draft("d", "def main():\n    pass\n", "ada", 1))
        .await
        .unwrap();

    let holder = hold_write_lock(dir.path(), Duration::from_secs(1));
    store
        .kv_set("k", "1")
        .await
        .expect("kv_set waits for the lock");
    let written = Instant::now();
    let released = holder.join().unwrap();
    assert!(
        written > released,
        "kv_set returned before the lock was let go"
    );
    assert_eq!(store.kv_get("k").await.unwrap().as_deref(), Some("1"));

    let holder = hold_write_lock(dir.path(), Duration::from_secs(1));
    store
        .save_draft(draft("d", "def main():\n    return 1\n", "ada", 2))
        .await
        .expect("save_draft waits for the lock");
    let written = Instant::now();
    let released = holder.join().unwrap();
    assert!(
        written > released,
        "save_draft returned before the lock was let go"
    );
    assert_eq!(store.draft("d").await.unwrap().unwrap().updated_at_ms, 2);
}

/// The lock is held until the write has failed, so the write cannot outlast it however slow
/// the machine; the busy timeout is shortened so that the test does not wait out five seconds.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_held_past_the_busy_timeout_is_reported_busy() {
    let (dir, store) = fresh();
    store.kv_set("k", "0").await.unwrap();
    store.set_busy_timeout(Duration::from_millis(300)).unwrap();
    let (failed, release) = std::sync::mpsc::channel::<()>();
    let holder = hold_write_lock_until(dir.path(), move || release.recv().unwrap());
    let started = Instant::now();
    let error = store.kv_set("k", "1").await.unwrap_err();
    assert!(error.is_busy(), "{error}");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it waited out the busy timeout first: {:?}",
        started.elapsed()
    );
    failed.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(store.kv_get("k").await.unwrap().as_deref(), Some("0"));
    // Another failure is not "busy".
    let missing = store
        .resolve_approval(
            "nope",
            Resolution {
                approver: "x",
                approve: true,
                reason: None,
                now_ms: 0,
                expires_at_ms: 0,
            },
        )
        .await
        .unwrap_err();
    assert!(!missing.is_busy(), "{missing}");
}

/// A principal and a token of theirs, as every request reads them.
async fn with_token(store: &larkgate_store::SqliteStore) {
    use larkgate_store::{Principal, PrincipalKind, TokenRecord};
    store
        .add_principal(Principal {
            id: "ada".into(),
            kind: PrincipalKind::User,
            roles: vec!["author".into()],
            issuer: IssuerBinding::Local,
        })
        .await
        .unwrap();
    store
        .add_token(TokenRecord {
            id: "tok123456789".into(),
            principal: "ada".into(),
            secret_hash: "0".repeat(64),
            created_by: "admin".into(),
            created_at_ms: 1,
            expires_at_ms: None,
            revoked_at_ms: None,
        })
        .await
        .unwrap();
}

// A request's token and principal are read on the request's own thread, from a read-only
// connection that never waits for a lock: another writer's open transaction neither delays
// them nor shows them its uncommitted changes, and its commit is seen by the next read.
#[tokio::test(flavor = "multi_thread")]
async fn token_and_principal_reads_see_commits_and_never_wait_for_a_writer() {
    let (dir, store) = fresh();
    with_token(&store).await;

    // Another process revokes the token and changes the principal's roles, and keeps its
    // transaction open until the reads below are done (or 30 s, were they to wait for it).
    let path = dir.path().join(DATABASE_FILE);
    let (locked, taken) = std::sync::mpsc::channel();
    let (read, done) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection
            .execute_batch(
                "BEGIN IMMEDIATE;
                 UPDATE tokens SET revoked_at_ms = 5 WHERE id = 'tok123456789';
                 UPDATE principals SET roles = 'admin' WHERE id = 'ada';",
            )
            .unwrap();
        locked.send(()).unwrap();
        let reads_returned_first = done.recv_timeout(Duration::from_secs(30)).is_ok();
        connection.execute_batch("COMMIT").unwrap();
        reads_returned_first
    });
    taken.recv().unwrap();

    let token = store.token("tok123456789").await.unwrap().unwrap();
    let principal = store.principal("ada").await.unwrap().unwrap();
    read.send(()).unwrap();
    assert!(
        holder.join().unwrap(),
        "the reads waited for the writer's transaction to end"
    );
    assert_eq!(
        token.revoked_at_ms, None,
        "an uncommitted revocation was seen"
    );
    assert_eq!(principal.roles, ["author"], "uncommitted roles were seen");

    // Committed: the very next reads see it (nothing is cached).
    let token = store.token("tok123456789").await.unwrap().unwrap();
    assert_eq!(token.revoked_at_ms, Some(5));
    let principal = store.principal("ada").await.unwrap().unwrap();
    assert_eq!(principal.roles, ["admin"]);
    assert_eq!(store.token("nobody000000").await.unwrap(), None);
    assert_eq!(store.principal("nobody").await.unwrap(), None);
}
