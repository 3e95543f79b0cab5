use larkgate_store::{AuditHead, AuditKind, AuditQuery, AuditRecord};

use crate::{Place, on_both};

pub(crate) fn record(seq: u64, principal: &str, tool: &str) -> AuditRecord {
    AuditRecord {
        seq,
        at_ms: seq as i64 * 10,
        kind: AuditKind::Intent,
        principal: principal.into(),
        run_id: None,
        run_kind: Some("direct".into()),
        session: Some("test".into()),
        tool: Some(tool.into()),
        args_hash: Some("ab".repeat(32)),
        args: None,
        code: None,
        intent_seq: None,
        duration_us: None,
        detail: None,
        prev_hash: format!("{:064x}", seq - 1),
        hash: format!("{seq:064x}"),
    }
}

async fn records_append_in_order_and_move_the_head(place: Place) {
    let store = place.open().await;
    assert_eq!(store.audit_head().await.unwrap(), None);
    store
        .append_audit((1..=3).map(|s| record(s, "alice", "kv_get")).collect())
        .await
        .unwrap();
    store
        .append_audit(vec![record(4, "bob", "kv_set")])
        .await
        .unwrap();
    assert_eq!(
        store.audit_head().await.unwrap(),
        Some(AuditHead {
            seq: 4,
            hash: format!("{:064x}", 4)
        })
    );
    let all = store.audit_records(AuditQuery::default()).await.unwrap();
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(all[0], record(1, "alice", "kv_get"));
}

async fn replaying_a_batch_changes_nothing(place: Place) {
    let store = place.open().await;
    let batch: Vec<AuditRecord> = (1..=3).map(|s| record(s, "alice", "t")).collect();
    store.append_audit(batch.clone()).await.unwrap();
    store.append_audit(batch[..2].to_vec()).await.unwrap();
    assert_eq!(
        store
            .audit_records(AuditQuery::default())
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        store.audit_head().await.unwrap().unwrap().seq,
        3,
        "the head never moves back"
    );
}

async fn queries_filter_and_take_the_newest_in_order(place: Place) {
    let store = place.open().await;
    let mut batch = Vec::new();
    for seq in 1..=10 {
        batch.push(record(
            seq,
            if seq % 2 == 0 { "alice" } else { "bob" },
            if seq <= 5 { "a" } else { "b" },
        ));
    }
    store.append_audit(batch).await.unwrap();
    let tail = store
        .audit_records(AuditQuery {
            limit: Some(3),
            newest: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tail.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9, 10]);
    let alice_b = store
        .audit_records(AuditQuery {
            principal: Some("alice".into()),
            tool: Some("b".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        alice_b.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [6, 8, 10]
    );
    let after = store
        .audit_records(AuditQuery {
            after_seq: Some(7),
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(after.iter().map(|r| r.seq).collect::<Vec<_>>(), [8, 9]);
}

async fn forwarded_entries_wait_in_order_until_a_batch_adopts_them(place: Place) {
    let store = place.open().await;
    let first = store.forward_audit(100, r#"{"principal":"ada"}"#).unwrap();
    let second = store.forward_audit(90, r#"{"principal":"bob"}"#).unwrap();
    assert!(second > first);
    // Another handle on the same store (another process) sees them, oldest first.
    let other = place.open().await;
    let waiting = other.forwarded_audit(10).await.unwrap();
    assert_eq!(
        waiting.iter().map(|f| (f.id, f.at_ms)).collect::<Vec<_>>(),
        [(first, 100), (second, 90)]
    );
    assert_eq!(waiting[1].entry, r#"{"principal":"bob"}"#);
    assert_eq!(other.forwarded_audit(1).await.unwrap().len(), 1);

    // Chaining the first deletes it in the same transaction as the record is stored.
    other
        .append_audit_adopting(vec![record(1, "ada", "t")], vec![first])
        .await
        .unwrap();
    let waiting = store.forwarded_audit(10).await.unwrap();
    assert_eq!(waiting.iter().map(|f| f.id).collect::<Vec<_>>(), [second]);
    assert_eq!(store.audit_head().await.unwrap().unwrap().seq, 1);
    // Adopting again (a replayed journal) changes nothing.
    store
        .append_audit_adopting(vec![record(1, "ada", "t")], vec![first])
        .await
        .unwrap();
    assert_eq!(store.forwarded_audit(10).await.unwrap().len(), 1);
    assert_eq!(
        store
            .audit_records(AuditQuery::default())
            .await
            .unwrap()
            .len(),
        1
    );
}

on_both!(
    records_append_in_order_and_move_the_head,
    replaying_a_batch_changes_nothing,
    queries_filter_and_take_the_newest_in_order,
    forwarded_entries_wait_in_order_until_a_batch_adopts_them,
);
