use larkgate_store::{ApprovalStatus, Store, StoreError};

use crate::fresh;

#[tokio::test]
async fn repeated_refused_calls_share_one_pending_record() {
    let (_dir, store) = fresh();
    let a = store
        .pending_approval("alice", "kv_set", "h1", 1_000)
        .await
        .unwrap();
    let b = store
        .pending_approval("alice", "kv_set", "h1", 2_000)
        .await
        .unwrap();
    assert_eq!(a.id, b.id);
    assert_eq!(a.status, ApprovalStatus::Pending);
    let other_args = store
        .pending_approval("alice", "kv_set", "h2", 2_000)
        .await
        .unwrap();
    let other_principal = store
        .pending_approval("bob", "kv_set", "h1", 2_000)
        .await
        .unwrap();
    assert_ne!(a.id, other_args.id);
    assert_ne!(a.id, other_principal.id);
    assert_eq!(
        store
            .approvals(Some(ApprovalStatus::Pending))
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn an_approval_is_consumed_exactly_once_and_only_before_it_expires() {
    let (_dir, store) = fresh();
    let pending = store
        .pending_approval("alice", "kv_set", "h", 0)
        .await
        .unwrap();
    assert!(
        !store.consume_approval(&pending.id, 1).await.unwrap(),
        "pending is not usable"
    );
    let approved = store
        .resolve_approval(&pending.id, "carol", true, 10, 1_000)
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    assert_eq!(approved.resolved_by.as_deref(), Some("carol"));
    let found = store
        .resolved_approval("alice", "kv_set", "h")
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
        .pending_approval("alice", "kv_set", "h", 600)
        .await
        .unwrap();
    assert_ne!(again.id, pending.id);
    store
        .resolve_approval(&again.id, "carol", true, 700, 800)
        .await
        .unwrap();
    assert!(
        !store.consume_approval(&again.id, 800).await.unwrap(),
        "expired at 800"
    );
}

#[tokio::test]
async fn concurrent_consumers_get_one_success() {
    let (_dir, store) = fresh();
    let pending = store
        .pending_approval("alice", "kv_set", "h", 0)
        .await
        .unwrap();
    store
        .resolve_approval(&pending.id, "carol", true, 1, i64::MAX)
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

#[tokio::test]
async fn only_a_pending_approval_can_be_resolved() {
    let (_dir, store) = fresh();
    let pending = store.pending_approval("alice", "t", "h", 0).await.unwrap();
    let denied = store
        .resolve_approval(&pending.id, "carol", false, 1, 99)
        .await
        .unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    assert_eq!(denied.expires_at_ms, None);
    let err = store
        .resolve_approval(&pending.id, "carol", true, 2, 99)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref m) if m.contains("already denied")),
        "{err}"
    );
    assert!(matches!(
        store.resolve_approval("nope", "carol", true, 2, 99).await,
        Err(StoreError::Missing(_))
    ));
    let found = store
        .resolved_approval("alice", "t", "h")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.status, ApprovalStatus::Denied);
}
