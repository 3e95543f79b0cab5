use larkgate_store::{
    Approval, ApprovalCursor, ApprovalDetails, ApprovalFor, ApprovalQuery, ApprovalStatus,
    ApprovalStore, Asked, CallChain, PendingCapReached, Resolution, StoreError,
};

use crate::{Place, asked, on_both, pending_page};

/// A call made directly, not inside a script run.
fn direct() -> CallChain {
    CallChain::default()
}

/// A call `script:w` makes in a run `starter` started, of the script `author` wrote.
fn through(starter: &str, author: &str) -> CallChain {
    CallChain::default().then(starter, author)
}

async fn the_same_call_through_another_chain_is_another_approval(place: Place) {
    let store = place.open().await;
    let for_p1 = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "script:w",
                tool: "kv_set",
                args_hash: "h",
                chain: &through("p1", "ada"),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(for_p1.chain, through("p1", "ada"));
    assert!(for_p1.chain.involves("p1") && for_p1.chain.involves("ada"));
    assert!(!for_p1.chain.involves("p2"));
    let for_p2 = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "script:w",
                tool: "kv_set",
                args_hash: "h",
                chain: &through("p2", "ada"),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let direct_call = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "script:w",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_ne!(for_p1.id, for_p2.id);
    assert_ne!(for_p1.id, direct_call.id);
    store
        .resolve_approval(
            &for_p1.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 1,
                expires_at_ms: 99,
            },
        )
        .await
        .unwrap();
    let found = store
        .resolved_approval(ApprovalFor {
            principal: "script:w",
            tool: "kv_set",
            args_hash: "h",
            chain: &through("p1", "ada"),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, for_p1.id);
    for other in [
        through("p2", "ada"),
        direct(),
        through("p1", "ada").then("script:w", "bo"),
    ] {
        assert!(
            store
                .resolved_approval(ApprovalFor {
                    principal: "script:w",
                    tool: "kv_set",
                    args_hash: "h",
                    chain: &other
                })
                .await
                .unwrap()
                .is_none(),
            "{other:?} found p1's approval"
        );
    }
}

#[tokio::test]
async fn approvals_from_before_chains_read_as_direct_calls() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
        store
            .pending_approval(asked(
                ApprovalFor {
                    principal: "alice",
                    tool: "kv_set",
                    args_hash: "h",
                    chain: &direct(),
                },
                &Default::default(),
                0,
            ))
            .await
            .unwrap()
            .pending()
            .unwrap();
    }
    // Roll the database back to the schema before the chain columns, as an older larkgate
    // left it, and open it again: the migration adds them.
    let raw = rusqlite::Connection::open(dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    raw.execute_batch(
        "DROP INDEX approvals_by_call; DROP INDEX approvals_one_pending;
         ALTER TABLE approvals DROP COLUMN chain_through;
         ALTER TABLE approvals DROP COLUMN chain_authors;
         CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, status);
         CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash)
             WHERE status = 'pending';
         DROP TRIGGER upstreams_inserted; DROP TRIGGER upstreams_updated;
         DROP TRIGGER upstreams_deleted; DROP TRIGGER upstream_pins_inserted;
         DROP TRIGGER upstream_pins_updated; DROP TRIGGER upstream_pins_deleted;
         DROP TABLE upstream_revision; DROP TABLE upstream_status;
         DROP TABLE upstream_credentials;
         DROP INDEX runs_reviews; ALTER TABLE runs DROP COLUMN review;
         ALTER TABLE script_versions DROP COLUMN pins;
         DROP INDEX runs_by_start;
         DROP INDEX audit_by_replica; ALTER TABLE audit DROP COLUMN replica;
         ALTER TABLE audit DROP COLUMN local_seq; DROP TABLE sessions;
         ALTER TABLE principals DROP COLUMN issuer;
         DROP INDEX approvals_by_status;
         ALTER TABLE approvals DROP COLUMN arguments_bytes;
         PRAGMA user_version = 6;",
    )
    .unwrap();
    drop(raw);
    let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
    let pending = store.approvals(pending_page()).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].chain, direct());
    let again = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            1,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(again.id, pending[0].id);
}

async fn an_unreadable_chain_makes_the_approval_unreadable(place: Place) {
    let store = place.open().await;
    let pending = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "script:w",
                tool: "kv_set",
                args_hash: "h",
                chain: &through("p1", "ada"),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    place
        .execute(&format!(
            "UPDATE approvals SET chain_through = 'not json' WHERE id = '{}'",
            pending.id
        ))
        .await;
    assert!(store.approval(&pending.id).await.is_err());
}

async fn repeated_refused_calls_share_one_pending_record(place: Place) {
    let store = place.open().await;
    let a = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h1",
                chain: &direct(),
            },
            &Default::default(),
            1_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let b = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h1",
                chain: &direct(),
            },
            &Default::default(),
            2_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(a.id, b.id);
    assert_eq!(a.status, ApprovalStatus::Pending);
    let other_args = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h2",
                chain: &direct(),
            },
            &Default::default(),
            2_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let other_principal = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "bob",
                tool: "kv_set",
                args_hash: "h1",
                chain: &direct(),
            },
            &Default::default(),
            2_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_ne!(a.id, other_args.id);
    assert_ne!(a.id, other_principal.id);
    assert_eq!(store.approvals(pending_page()).await.unwrap().len(), 3);
}

async fn an_approval_is_consumed_exactly_once_and_only_before_it_expires(place: Place) {
    let store = place.open().await;
    let pending = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert!(
        !store.consume_approval(&pending.id, 1).await.unwrap(),
        "pending is not usable"
    );
    let approved = store
        .resolve_approval(
            &pending.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 10,
                expires_at_ms: 1_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    assert_eq!(approved.resolved_by.as_deref(), Some("carol"));
    let found = store
        .resolved_approval(ApprovalFor {
            principal: "alice",
            tool: "kv_set",
            args_hash: "h",
            chain: &direct(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, pending.id);
    assert!(store.consume_approval(&pending.id, 500).await.unwrap());
    assert!(
        !store.consume_approval(&pending.id, 501).await.unwrap(),
        "second use"
    );
    assert_eq!(
        store.approval(&pending.id).await.unwrap().unwrap().status,
        ApprovalStatus::Used
    );

    // A new refused call after use opens a new pending record.
    let again = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            600,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_ne!(again.id, pending.id);
    store
        .resolve_approval(
            &again.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 700,
                expires_at_ms: 800,
            },
        )
        .await
        .unwrap();
    assert!(
        !store.consume_approval(&again.id, 800).await.unwrap(),
        "expired at 800"
    );
}

async fn concurrent_consumers_get_one_success(place: Place) {
    let store = place.open().await;
    let pending = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    store
        .resolve_approval(
            &pending.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 1,
                expires_at_ms: i64::MAX,
            },
        )
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        let id = pending.id.clone();
        tasks.push(tokio::spawn(async move {
            store.consume_approval(&id, 2).await.unwrap()
        }));
    }
    let mut wins = 0;
    for task in tasks {
        wins += usize::from(task.await.unwrap());
    }
    assert_eq!(wins, 1);
}

/// The same refused call made at once through two processes sharing the store, many times
/// over: one pending record.
async fn concurrent_requests_share_one_pending_record(place: Place) {
    let handles = [place.open().await, place.open().await];
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = handles[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            store
                .pending_approval(asked(
                    ApprovalFor {
                        principal: "alice",
                        tool: "kv_set",
                        args_hash: "h",
                        chain: &direct(),
                    },
                    &Default::default(),
                    5,
                ))
                .await
                .unwrap()
                .pending()
                .unwrap()
                .id
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let pending = handles[0].approvals(pending_page()).await.unwrap();
    assert_eq!(pending.len(), 1);
}

async fn only_a_pending_approval_can_be_resolved(place: Place) {
    let store = place.open().await;
    let pending = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "t",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let denied = store
        .resolve_approval(
            &pending.id,
            Resolution {
                approver: "carol",
                approve: false,
                reason: None,
                now_ms: 1,
                expires_at_ms: 99,
            },
        )
        .await
        .unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    assert_eq!(denied.expires_at_ms, None);
    let err = store
        .resolve_approval(
            &pending.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 2,
                expires_at_ms: 99,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref m) if m.contains("already denied")),
        "{err}"
    );
    assert!(matches!(
        store
            .resolve_approval(
                "nope",
                Resolution {
                    approver: "carol",
                    approve: true,
                    reason: None,
                    now_ms: 2,
                    expires_at_ms: 99
                }
            )
            .await,
        Err(StoreError::Missing(_))
    ));
    let found = store
        .resolved_approval(ApprovalFor {
            principal: "alice",
            tool: "t",
            args_hash: "h",
            chain: &direct(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.status, ApprovalStatus::Denied);
}

async fn an_approval_keeps_what_its_approver_is_shown_and_why_they_decided(place: Place) {
    let store = place.open().await;
    let details = larkgate_store::ApprovalDetails {
        arguments: Some(r#"{"key":"important","token":"<redacted>"}"#.into()),
        run_id: Some("r1".into()),
        script: Some("cleanup v2".into()),
        // A preview of 600 kB of arguments.
        arguments_bytes: Some(600_000),
    };
    let pending = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_delete",
                args_hash: "h",
                chain: &direct(),
            },
            &details,
            0,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(pending.details, details);
    assert!(!pending.details.arguments_whole());
    // The first refused call's details stand: the same call again does not rewrite them.
    let other = larkgate_store::ApprovalDetails {
        arguments: Some("{}".into()),
        ..Default::default()
    };
    let again = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_delete",
                args_hash: "h",
                chain: &direct(),
            },
            &other,
            5,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(
        (again.id.as_str(), &again.details),
        (pending.id.as_str(), &details)
    );
    let resolved = store
        .resolve_approval(
            &pending.id,
            Resolution {
                approver: "carol",
                approve: false,
                reason: Some("that key is in use"),
                now_ms: 10,
                expires_at_ms: 99,
            },
        )
        .await
        .unwrap();
    assert_eq!(resolved.reason.as_deref(), Some("that key is in use"));
    assert_eq!(
        store.approval(&pending.id).await.unwrap().unwrap(),
        resolved
    );
}

async fn pending_approvals_expire_and_the_next_call_asks_anew(place: Place) {
    let store = place.open().await;
    let old = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_delete",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            1_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let young = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "bob",
                tool: "kv_delete",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            5_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(store.expire_approvals(2_000).await.unwrap(), 1);
    let status = |id: String| {
        let store = &store;
        async move { store.approval(&id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(old.id.clone()).await, ApprovalStatus::Expired);
    assert_eq!(status(young.id.clone()).await, ApprovalStatus::Pending);
    // An expired approval is never resolved, and the same call gets a new pending request.
    let error = store
        .resolve_approval(
            &old.id,
            Resolution {
                approver: "carol",
                approve: true,
                reason: None,
                now_ms: 6_000,
                expires_at_ms: 9_000,
            },
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("already expired"), "{error}");
    let renewed = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "alice",
                tool: "kv_delete",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            6_000,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_ne!(renewed.id, old.id);
    assert_eq!(
        store.expire_approvals(2_000).await.unwrap(),
        0,
        "nothing twice"
    );
}

#[tokio::test]
async fn approvals_from_before_details_survive_the_table_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let (old, resolved) = {
        let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
        let old = store
            .pending_approval(asked(
                ApprovalFor {
                    principal: "alice",
                    tool: "kv_set",
                    args_hash: "h",
                    chain: &through("p1", "ada"),
                },
                &Default::default(),
                0,
            ))
            .await
            .unwrap()
            .pending()
            .unwrap();
        let other = store
            .pending_approval(asked(
                ApprovalFor {
                    principal: "bob",
                    tool: "kv_set",
                    args_hash: "h",
                    chain: &direct(),
                },
                &Default::default(),
                0,
            ))
            .await
            .unwrap()
            .pending()
            .unwrap();
        let resolved = store
            .resolve_approval(
                &other.id,
                Resolution {
                    approver: "carol",
                    approve: true,
                    reason: None,
                    now_ms: 1,
                    expires_at_ms: 99,
                },
            )
            .await
            .unwrap();
        (old, resolved)
    };
    // The table as schema 9 had it: no details, no reason, no `expired`.
    let raw = rusqlite::Connection::open(dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    raw.execute_batch(
        "CREATE TABLE approvals_v9 (
            id TEXT PRIMARY KEY, principal TEXT NOT NULL, tool TEXT NOT NULL,
            args_hash TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
            created_at_ms INTEGER NOT NULL, resolved_by TEXT, resolved_at_ms INTEGER,
            expires_at_ms INTEGER, used_at_ms INTEGER,
            chain_through TEXT NOT NULL DEFAULT '[]', chain_authors TEXT NOT NULL DEFAULT '[]'
         ) STRICT;
         INSERT INTO approvals_v9 SELECT id, principal, tool, args_hash, status, created_at_ms,
             resolved_by, resolved_at_ms, expires_at_ms, used_at_ms, chain_through, chain_authors
             FROM approvals;
         DROP TABLE approvals;
         ALTER TABLE approvals_v9 RENAME TO approvals;
         CREATE INDEX approvals_by_call ON approvals (principal, tool, args_hash, chain_through, status);
         CREATE UNIQUE INDEX approvals_one_pending ON approvals (principal, tool, args_hash, chain_through)
             WHERE status = 'pending';
         DROP INDEX runs_reviews; ALTER TABLE runs DROP COLUMN review;
         ALTER TABLE script_versions DROP COLUMN pins;
         DROP INDEX runs_by_start;
         DROP INDEX audit_by_replica; ALTER TABLE audit DROP COLUMN replica;
         ALTER TABLE audit DROP COLUMN local_seq; DROP TABLE sessions;
         ALTER TABLE principals DROP COLUMN issuer;
         PRAGMA user_version = 9;",
    )
    .unwrap();
    drop(raw);
    let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
    let kept = store.approval(&old.id).await.unwrap().unwrap();
    assert_eq!(kept, old, "every column kept; no details");
    assert_eq!(
        store.approval(&resolved.id).await.unwrap().unwrap(),
        resolved
    );
    // The rebuilt table takes what the new schema allows, and still one pending per call.
    assert_eq!(store.expire_approvals(1).await.unwrap(), 1);
    assert_eq!(
        store.approval(&old.id).await.unwrap().unwrap().status,
        ApprovalStatus::Expired
    );
    let first = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "dee",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            5,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    let again = store
        .pending_approval(asked(
            ApprovalFor {
                principal: "dee",
                tool: "kv_set",
                args_hash: "h",
                chain: &direct(),
            },
            &Default::default(),
            6,
        ))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_eq!(first.id, again.id);
}

fn call<'a>(principal: &'a str, args_hash: &'a str, chain: &'a CallChain) -> ApprovalFor<'a> {
    ApprovalFor {
        principal,
        tool: "kv_delete",
        args_hash,
        chain,
    }
}

async fn pending_requests_are_capped_per_principal_and_in_total(place: Place) {
    let store = place.open().await;
    let details = ApprovalDetails::default();
    let chain = direct();
    let caps = larkgate_store::PendingCaps {
        per_principal: 2,
        total: 3,
    };
    let ask = |principal: &'static str, hash: &'static str, now_ms: i64| {
        let store = store.clone();
        let (chain, details) = (chain.clone(), details.clone());
        async move {
            store
                .pending_approval(larkgate_store::ApprovalRequest {
                    caps,
                    ..asked(call(principal, hash, &chain), &details, now_ms)
                })
                .await
                .unwrap()
        }
    };
    let first = ask("wes", "a", 1).await.pending().unwrap();
    ask("wes", "b", 2).await.pending().unwrap();
    assert_eq!(
        ask("wes", "c", 3).await,
        Asked::CapReached(PendingCapReached::PerPrincipal)
    );
    // The call that already waits is found, cap or not: repeating it costs nothing.
    assert_eq!(ask("wes", "a", 4).await.pending().unwrap().id, first.id);
    ask("eve", "a", 5).await.pending().unwrap();
    assert_eq!(
        ask("ada", "a", 6).await,
        Asked::CapReached(PendingCapReached::Total)
    );
    // A decided request no longer counts.
    store
        .resolve_approval(
            &first.id,
            Resolution {
                approver: "alice",
                approve: false,
                reason: None,
                now_ms: 7,
                expires_at_ms: 0,
            },
        )
        .await
        .unwrap();
    ask("ada", "a", 8).await.pending().unwrap();
    assert_eq!(store.approvals(pending_page()).await.unwrap().len(), 3);
}

async fn requests_from_many_processes_at_once_never_overshoot_the_cap(place: Place) {
    // Four processes, each asking for eight different calls at once, capped at ten.
    let handles: Vec<_> = futures::future::join_all((0..4).map(|_| place.open())).await;
    let caps = larkgate_store::PendingCaps {
        per_principal: 10,
        total: 10,
    };
    let asks = handles.iter().enumerate().flat_map(|(p, store)| {
        (0..8).map(move |i| {
            let store = store.clone();
            async move {
                let chain = direct();
                let details = ApprovalDetails::default();
                let hash = format!("h{p}-{i}");
                store
                    .pending_approval(larkgate_store::ApprovalRequest {
                        caps,
                        ..asked(call("wes", &hash, &chain), &details, 1)
                    })
                    .await
                    .unwrap()
            }
        })
    });
    let answers = futures::future::join_all(asks).await;
    let recorded = answers
        .iter()
        .filter(|a| matches!(a, Asked::Pending(_)))
        .count();
    assert_eq!(recorded, 10);
    assert_eq!(
        handles[0].approvals(pending_page()).await.unwrap().len(),
        10
    );
}

async fn approvals_are_listed_a_page_at_a_time_newest_first(place: Place) {
    let store = place.open().await;
    let chain = direct();
    let details = ApprovalDetails::default();
    // Nine requests, three to a millisecond.
    for i in 0..9 {
        let hash = format!("h{i}");
        store
            .pending_approval(asked(call("wes", &hash, &chain), &details, i / 3))
            .await
            .unwrap()
            .pending()
            .unwrap();
    }
    let mut seen: Vec<Approval> = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .approvals(ApprovalQuery {
                status: Some(ApprovalStatus::Pending),
                after: after.clone(),
                limit: 4,
            })
            .await
            .unwrap();
        assert!(page.len() <= 4);
        let Some(last) = page.last() else { break };
        after = Some(ApprovalCursor::after(last));
        // A cursor survives being handed to a caller and back.
        let encoded = after.as_ref().unwrap().encode();
        assert_eq!(ApprovalCursor::decode(&encoded), after);
        seen.extend(page);
    }
    assert_eq!(seen.len(), 9, "every approval once");
    let keys: Vec<(i64, String)> = seen
        .iter()
        .map(|a| (a.created_at_ms, a.id.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted, "newest first, then by id");
    // Another status lists none of them.
    let denied = store
        .approvals(ApprovalQuery {
            status: Some(ApprovalStatus::Denied),
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert!(denied.is_empty());
    for bad in ["", "12", "x.abc", "12.", "12.a b", "12.../../x"] {
        assert_eq!(ApprovalCursor::decode(bad), None, "{bad:?}");
    }
}

/// A caller that gave up on its waiting call withdraws its request: once, only while it is
/// pending; nobody decides it after; the same call asks anew.
async fn a_pending_request_is_withdrawn_once_and_the_call_asks_anew(place: Place) {
    let store = place.open().await;
    let chain = direct();
    let call = || ApprovalFor {
        principal: "alice",
        tool: "kv_delete",
        args_hash: "h",
        chain: &chain,
    };
    let details = ApprovalDetails::default();
    let first = store
        .pending_approval(asked(call(), &details, 1_000))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert!(
        store
            .withdraw_approval(&first.id, "alice", 2_000)
            .await
            .unwrap()
    );
    let withdrawn = store.approval(&first.id).await.unwrap().unwrap();
    assert_eq!(withdrawn.status, ApprovalStatus::Withdrawn);
    assert_eq!(withdrawn.resolved_by.as_deref(), Some("alice"));
    assert_eq!(withdrawn.resolved_at_ms, Some(2_000));
    assert!(
        !store
            .withdraw_approval(&first.id, "alice", 3_000)
            .await
            .unwrap(),
        "twice"
    );
    assert!(
        !store
            .withdraw_approval("nope", "alice", 3_000)
            .await
            .unwrap()
    );
    let approve = |now_ms| Resolution {
        approver: "carol",
        approve: true,
        reason: None,
        now_ms,
        expires_at_ms: 9_000,
    };
    let error = store
        .resolve_approval(&first.id, approve(3_000))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("already withdrawn"), "{error}");
    // It admits nothing, and the same call's next request is a new one.
    assert_eq!(store.resolved_approval(call()).await.unwrap(), None);
    let again = store
        .pending_approval(asked(call(), &details, 4_000))
        .await
        .unwrap()
        .pending()
        .unwrap();
    assert_ne!(again.id, first.id);
    // A decided approval is not withdrawn.
    store
        .resolve_approval(&again.id, approve(5_000))
        .await
        .unwrap();
    assert!(
        !store
            .withdraw_approval(&again.id, "alice", 6_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store.approval(&again.id).await.unwrap().unwrap().status,
        ApprovalStatus::Approved
    );
    let listed = store
        .approvals(ApprovalQuery {
            status: Some(ApprovalStatus::Withdrawn),
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|a| &a.id).collect::<Vec<_>>(),
        [&first.id]
    );
}

/// The SQLite table rebuild that admits `withdrawn` keeps every approval as it was.
#[tokio::test]
async fn approvals_survive_the_rebuild_that_admits_withdrawn() {
    let dir = tempfile::tempdir().unwrap();
    let chain = through("p1", "ada");
    let details = ApprovalDetails {
        arguments: Some(r#"{"key":"k"}"#.to_owned()),
        arguments_bytes: Some(11),
        run_id: Some("run-1".to_owned()),
        script: Some("tidy v2".to_owned()),
    };
    let before = {
        let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
        let pending = store
            .pending_approval(asked(
                ApprovalFor {
                    principal: "alice",
                    tool: "kv_delete",
                    args_hash: "h",
                    chain: &chain,
                },
                &details,
                1_000,
            ))
            .await
            .unwrap()
            .pending()
            .unwrap();
        store.approval(&pending.id).await.unwrap().unwrap()
    };
    // Back to the version before the rebuild, as a database written by the larkgate before.
    let connection =
        rusqlite::Connection::open(dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    connection.pragma_update(None, "user_version", 15).unwrap();
    drop(connection);
    let store = larkgate_store::SqliteStore::open(dir.path()).unwrap();
    assert_eq!(store.approval(&before.id).await.unwrap().unwrap(), before);
    assert!(
        store
            .withdraw_approval(&before.id, "alice", 2_000)
            .await
            .unwrap()
    );
}

on_both!(
    a_pending_request_is_withdrawn_once_and_the_call_asks_anew,
    pending_requests_are_capped_per_principal_and_in_total,
    requests_from_many_processes_at_once_never_overshoot_the_cap,
    approvals_are_listed_a_page_at_a_time_newest_first,
    concurrent_requests_share_one_pending_record,
    an_unreadable_chain_makes_the_approval_unreadable,
    the_same_call_through_another_chain_is_another_approval,
    repeated_refused_calls_share_one_pending_record,
    an_approval_is_consumed_exactly_once_and_only_before_it_expires,
    concurrent_consumers_get_one_success,
    only_a_pending_approval_can_be_resolved,
    an_approval_keeps_what_its_approver_is_shown_and_why_they_decided,
    pending_approvals_expire_and_the_next_call_asks_anew,
);
