//! PostgreSQL's own mechanics: migrations several processes run at once, a schema newer or
//! older than larkgate, a database that goes away and comes back, a server that refuses the
//! role, row locks held past the busy timeout, the one owner of the audit chain, and
//! forwarding audit entries from any thread.

use std::time::Duration;

use larkgate_store::postgres::testing::{Relay, TestSchema};
use larkgate_store::postgres::{Migrated, SCHEMA_VERSION};
use larkgate_store::{
    AuditQuery, AuditStore, Change, IssuerBinding, KvStore, PostgresSettings, PostgresStore,
    PrincipalStore, Publication, ScriptStore, Store, StoreError,
};

use crate::audit::record;
use crate::draft;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_migrating_at_once_apply_each_step_once() {
    let schema = TestSchema::create().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let settings = schema.settings();
        tasks.push(tokio::spawn(async move {
            // A pool of its own each: as many processes would.
            let store = PostgresStore::connect(&settings).unwrap();
            store.migrate().await.unwrap()
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let first = Migrated {
        from: 0,
        to: SCHEMA_VERSION,
    };
    let done = Migrated {
        from: SCHEMA_VERSION,
        to: SCHEMA_VERSION,
    };
    assert_eq!(
        results.iter().filter(|m| **m == first).count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|m| **m == done).count(),
        7,
        "{results:?}"
    );
    let store = PostgresStore::open(&schema.settings()).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    // And again: nothing to do.
    assert_eq!(store.migrate().await.unwrap(), done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_larkgate_is_refused_and_left_alone() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::open(&schema.settings()).await.unwrap();
    store.kv_set("k", "v").await.unwrap();
    schema
        .execute("UPDATE larkgate_schema SET version = 99")
        .await;
    let error = PostgresStore::open(&schema.settings()).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("schema version 99, newer than this larkgate knows"),
        "{text}"
    );
    assert!(text.contains("run that version (or newer)"), "{text}");
    // Nothing was changed by the refusal.
    schema
        .execute("UPDATE larkgate_schema SET version = 2")
        .await;
    assert_eq!(store.kv_get("k").await.unwrap().as_deref(), Some("v"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_schema_is_brought_forward_with_its_data() {
    let schema = TestSchema::create().await;
    let older = PostgresStore::connect(&schema.settings()).unwrap();
    assert_eq!(
        older.migrate_to(1).await.unwrap(),
        Migrated { from: 0, to: 1 }
    );
    older.kv_set("kept", "yes").await.unwrap();
    // As a larkgate of that version wrote it: principals had no issuer then.
    schema
        .execute("INSERT INTO principals (id, kind, roles) VALUES ('ada', 'user', 'author')")
        .await;
    older
        .save_draft(draft("digest", "v1", "ada", 1))
        .await
        .unwrap();

    let store = PostgresStore::connect(&schema.settings()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        Migrated {
            from: 1,
            to: SCHEMA_VERSION
        }
    );
    assert_eq!(store.kv_get("kept").await.unwrap().as_deref(), Some("yes"));
    // Version 5: ada, who holds no token, is bound by her first sign-in.
    let ada = store.principal("ada").await.unwrap().unwrap();
    assert_eq!(
        (ada.roles, ada.issuer),
        (vec!["author".to_owned()], IssuerBinding::FirstSignIn)
    );

    // Version 2's notifications: a process listening hears a publish made through the store.
    let (listener, mut connection) = tokio_postgres::connect(
        &larkgate_store::postgres::testing::url(),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    let (heard, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        use futures::StreamExt;
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = heard.send((n.channel().to_owned(), n.payload().to_owned()));
            }
        }
    });
    listener
        .batch_execute("LISTEN larkgate_changes")
        .await
        .unwrap();
    store
        .publish(Publication {
            name: "digest",
            source: "v1",
            hash: "h1",
            publisher: "ada",
            pins: &[],
            now_ms: 2,
        })
        .await
        .unwrap();
    let (channel, payload) = tokio::time::timeout(Duration::from_secs(5), notifications.recv())
        .await
        .expect("a notification within 5 s")
        .unwrap();
    assert_eq!(channel, "larkgate_changes");
    assert_eq!(payload, format!("{}.script_versions", schema.name()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_away_is_unavailable_and_service_resumes_when_it_returns() {
    let schema = TestSchema::create().await;
    let relay = Relay::start().await;
    let settings = PostgresSettings {
        url: relay.url(),
        ..schema.settings()
    };
    let store = PostgresStore::open(&settings).await.unwrap();
    for i in 0..20 {
        store.kv_set(&format!("before{i}"), "v").await.unwrap();
    }

    relay.cut();
    let error = store.kv_set("during", "v").await.unwrap_err();
    assert!(error.is_unavailable(), "{error}");
    assert!(!error.is_busy(), "{error}");
    let error = store.ping().await.unwrap_err();
    assert!(error.is_unavailable(), "{error}");
    assert!(
        error.to_string().contains("unreachable") || error.to_string().contains("closed"),
        "{error}"
    );

    relay.restore();
    // The pool replaces the connections the server dropped: the next calls work.
    store.ping().await.unwrap();
    store.kv_set("after", "v").await.unwrap();
    // Every write acknowledged before the outage is there.
    for i in 0..20 {
        assert!(store.kv_get(&format!("before{i}")).await.unwrap().is_some());
    }
    assert_eq!(store.kv_get("after").await.unwrap().as_deref(), Some("v"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_not_there_at_open_is_a_clear_error() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let settings = PostgresSettings {
        connect_timeout: Duration::from_secs(2),
        ..PostgresSettings::new(format!("postgres://larkgate@127.0.0.1:{port}/larkgate"))
    };
    let error = PostgresStore::open(&settings).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_the_server_does_not_know_is_refused_with_the_servers_reason() {
    let schema = TestSchema::create().await;
    let url = larkgate_store::postgres::testing::url();
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.user("no_such_larkgate_role");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let settings = PostgresSettings {
        url: format!(
            "postgres://no_such_larkgate_role@{host}:{}/{}",
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_dbname().unwrap_or("test")
        ),
        password: Some("wrong-password".into()),
        ..schema.settings()
    };
    let error = PostgresStore::open(&settings).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("role \"no_such_larkgate_role\" does not exist")
            || text.contains("password authentication failed"),
        "{text}"
    );
    assert!(!text.contains("wrong-password"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_lock_held_briefly_is_waited_out_and_one_held_past_the_busy_timeout_is_busy() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::open(&schema.settings()).await.unwrap();
    store.kv_set("k", "0").await.unwrap();
    let other = schema.client().await;

    // Held for half a second: the write waits, then succeeds.
    other
        .batch_execute("BEGIN; SELECT * FROM kv WHERE key = 'k' FOR UPDATE")
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        other.batch_execute("COMMIT").await.unwrap();
        other
    });
    store.kv_set("k", "1").await.unwrap();
    let other = release.await.unwrap();

    // Held past the busy timeout (2 s in tests): busy, and nothing changed.
    other
        .batch_execute("BEGIN; SELECT * FROM kv WHERE key = 'k' FOR UPDATE")
        .await
        .unwrap();
    let error = store.kv_set("k", "2").await.unwrap_err();
    assert!(error.is_busy(), "{error}");
    assert!(!error.is_unavailable(), "{error}");
    other.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(store.kv_get("k").await.unwrap().as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_at_a_time_journals_under_a_replica_name() {
    let schema = TestSchema::create().await;
    let first = PostgresStore::open(&schema.settings()).await.unwrap();
    let second = PostgresStore::open(&schema.settings()).await.unwrap();
    let claim = first.claim_audit_replica("r1").await.unwrap();
    assert!(claim.is_some());
    assert!(second.claim_audit_replica("r1").await.unwrap().is_none());
    // Another name, or the same name in another schema, is free.
    assert!(second.claim_audit_replica("r2").await.unwrap().is_some());
    let elsewhere = TestSchema::create().await;
    let third = PostgresStore::open(&elsewhere.settings()).await.unwrap();
    assert!(third.claim_audit_replica("r1").await.unwrap().is_some());
    // Given up, it can be claimed (the lock goes with the connection, closed in the
    // background).
    drop(claim);
    let mut claimed = None;
    for _ in 0..50 {
        claimed = second.claim_audit_replica("r1").await.unwrap();
        if claimed.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(claimed.is_some(), "the name was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_would_fork_the_chain_is_refused_not_skipped() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::open(&schema.settings()).await.unwrap();
    store
        .append_audit((1..=3).map(|s| record(s, "ada", "kv_set")).collect())
        .await
        .unwrap();
    // The same records again (a replayed journal): nothing changes.
    store
        .append_audit((2..=4).map(|s| record(s, "ada", "kv_set")).collect())
        .await
        .unwrap();
    // Another record at sequence 3: two processes chained on one head.
    let mut forked = record(3, "mallory", "kv_set");
    forked.hash = "f".repeat(64);
    let error = store
        .append_audit(vec![forked, record(5, "mallory", "kv_set")])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("two larkgate processes"),
        "{error}"
    );
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(records.iter().all(|r| r.principal == "ada"));
    assert_eq!(store.audit_head().await.unwrap().unwrap().seq, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_entries_are_forwarded_from_any_thread() {
    let schema = TestSchema::create().await;
    let store = std::sync::Arc::new(PostgresStore::open(&schema.settings()).await.unwrap());
    // A worker of a multi-threaded runtime.
    let a = store.forward_audit(1, "from a runtime worker").unwrap();
    // A thread with no runtime.
    let plain = store.clone();
    let b = std::thread::spawn(move || plain.forward_audit(2, "from a plain thread").unwrap())
        .join()
        .unwrap();
    // A thread driving a single-threaded runtime of its own.
    let single = store.clone();
    let c = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move { single.forward_audit(3, "from a current-thread runtime") })
            .unwrap()
    })
    .join()
    .unwrap();
    let waiting = store.forwarded_audit(10).await.unwrap();
    assert_eq!(waiting.iter().map(|f| f.id).collect::<Vec<_>>(), [a, b, c]);
    assert_eq!(waiting[2].entry, "from a current-thread runtime");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_reports_how_full_it_is() {
    let schema = TestSchema::create().await;
    let settings = PostgresSettings {
        pool_size: 3,
        ..schema.settings()
    };
    let store = PostgresStore::open(&settings).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.kv_set(&format!("k{i}"), "v").await.unwrap()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let status = store.pool_status().unwrap();
    assert_eq!(status.max_size, 3);
    assert!((1..=3).contains(&status.size), "{status:?}");
    assert_eq!(status.waiting, 0);
    assert_eq!(status.available, status.size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_rights_on_its_schema_only_can_run_larkgate() {
    let schema = TestSchema::create().await;
    let role = format!("{}_role", schema.name());
    // A login role that may not create schemas in the database, owning larkgate's schema.
    schema
        .execute(&format!(
            "CREATE ROLE {role} LOGIN; ALTER SCHEMA {} OWNER TO {role}",
            schema.name()
        ))
        .await;
    let may_create: bool = schema
        .client()
        .await
        .query_one(
            "SELECT has_database_privilege($1, current_database(), 'CREATE')",
            &[&role],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!may_create, "the role must not be able to create schemas");
    let mut config: tokio_postgres::Config =
        larkgate_store::postgres::testing::url().parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    config.user(&role);
    let settings = PostgresSettings {
        url: format!(
            "postgres://{role}@{host}:{}/{}",
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_dbname().unwrap_or("test")
        ),
        ..schema.settings()
    };
    let result = async {
        let store = PostgresStore::open(&settings).await?;
        store.kv_set("k", "v").await?;
        store.kv_get("k").await
    }
    .await;
    // The role goes whatever happened (its schema goes with the test schema).
    schema
        .execute(&format!(
            "ALTER SCHEMA {} OWNER TO CURRENT_USER; DROP OWNED BY {role}; DROP ROLE {role}",
            schema.name()
        ))
        .await;
    assert_eq!(result.unwrap().as_deref(), Some("v"));
}

/// The next change told within `seconds`, if any.
async fn next_change(
    changes: &mut tokio::sync::broadcast::Receiver<Change>,
    seconds: u64,
) -> Option<Change> {
    tokio::time::timeout(Duration::from_secs(seconds), changes.recv())
        .await
        .ok()
        .map(|change| change.unwrap())
}

/// A pending approval decided, withdrawn or expired through any process is told to every
/// process as it commits (a replica holding a call that waits for it learns at once); asking,
/// and using an approval, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_on_a_pending_approval_is_told_and_nothing_else_about_approvals() {
    use larkgate_store::{ApprovalFor, ApprovalStore, CallChain, Resolution};
    let schema = TestSchema::create().await;
    let deciding = PostgresStore::open(&schema.settings()).await.unwrap();
    let watching = PostgresStore::open(&schema.settings()).await.unwrap();
    let mut changes = watching.watch_changes().unwrap();
    assert_eq!(
        next_change(&mut changes, 10).await,
        Some(Change::Everything)
    );
    let chain = CallChain::default();
    let details = Default::default();
    let ask = |args_hash: &'static str| {
        let (deciding, chain, details) = (&deciding, &chain, &details);
        async move {
            let call = ApprovalFor {
                principal: "alice",
                tool: "kv_delete",
                args_hash,
                chain,
            };
            deciding
                .pending_approval(crate::asked(call, details, 1_000))
                .await
                .unwrap()
                .pending()
                .unwrap()
                .id
        }
    };
    let resolution = |approve| Resolution {
        approver: "carol",
        approve,
        reason: None,
        now_ms: 2_000,
        expires_at_ms: 9_000,
    };
    let approved = ask("a").await;
    deciding
        .resolve_approval(&approved, resolution(true))
        .await
        .unwrap();
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Approvals));
    let denied = ask("d").await;
    deciding
        .resolve_approval(&denied, resolution(false))
        .await
        .unwrap();
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Approvals));
    let withdrawn = ask("w").await;
    assert!(
        deciding
            .withdraw_approval(&withdrawn, "alice", 3_000)
            .await
            .unwrap()
    );
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Approvals));
    ask("e").await;
    assert_eq!(deciding.expire_approvals(5_000).await.unwrap(), 1);
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Approvals));
    // Asking, and spending an approval, are nobody's decision: the next thing told is a
    // change made after them (notifications arrive in the order their changes committed).
    ask("x").await;
    assert!(deciding.consume_approval(&approved, 3_000).await.unwrap());
    schema.execute("DELETE FROM script_versions").await;
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Scripts));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_anywhere_are_told_and_a_reconnection_says_everything() {
    let schema = TestSchema::create().await;
    let relay = Relay::start().await;
    let settings = PostgresSettings {
        url: relay.url(),
        ..schema.settings()
    };
    let watching = PostgresStore::open(&settings).await.unwrap();
    let mut changes = watching.watch_changes().unwrap();
    // Listening starts by saying that anything may have changed.
    assert_eq!(
        next_change(&mut changes, 10).await,
        Some(Change::Everything)
    );
    // Another process's statements on the followed tables (even ones that change no row).
    schema.execute("DELETE FROM script_versions").await;
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Scripts));
    schema.execute("DELETE FROM upstream_pins").await;
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Upstreams));
    schema.execute("DELETE FROM servers").await;
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Servers));
    // Other tables, and another schema's changes, are not told.
    schema.execute("DELETE FROM kv").await;
    let elsewhere = TestSchema::create().await;
    PostgresStore::open(&elsewhere.settings()).await.unwrap();
    elsewhere.execute("DELETE FROM script_versions").await;
    assert_eq!(next_change(&mut changes, 1).await, None);
    // The connection breaks and comes back: what was missed meanwhile is covered by
    // "everything".
    relay.cut();
    schema.execute("DELETE FROM script_versions").await;
    relay.restore();
    assert_eq!(
        next_change(&mut changes, 20).await,
        Some(Change::Everything)
    );
    schema.execute("DELETE FROM upstreams").await;
    assert_eq!(next_change(&mut changes, 10).await, Some(Change::Upstreams));
}
