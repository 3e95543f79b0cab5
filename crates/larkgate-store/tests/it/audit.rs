use std::collections::BTreeSet;

use larkgate_store::{
    AuditHead, AuditKind, AuditQuery, AuditRecord, GENESIS_HASH, JournaledAudit, record_hash,
};

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
        replica: None,
        local_seq: None,
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

/// A replica's journaled record, as the audit log writes it: numbered locally, not chained.
fn journaled(local: u64, kind: AuditKind, intent: Option<u64>) -> JournaledAudit {
    JournaledAudit {
        record: AuditRecord {
            seq: 0,
            kind,
            intent_seq: intent,
            local_seq: Some(local),
            prev_hash: String::new(),
            hash: String::new(),
            ..record(1, "ada", "kv_set")
        },
        adopted: None,
    }
}

/// A replica's calls `from..=to` as intent/outcome pairs (locals 2n-1, 2n).
fn calls(from: u64, to: u64) -> Vec<JournaledAudit> {
    (from..=to)
        .flat_map(|n| {
            [
                journaled(2 * n - 1, AuditKind::Intent, None),
                journaled(2 * n, AuditKind::Outcome, Some(2 * n - 1)),
            ]
        })
        .collect()
}

/// Checks the whole chain: sequences from 1, hashes, and that each outcome follows its own
/// intent (same replica, the local sequence it named). Returns the (replica, local) pairs.
async fn check_chain(store: &dyn larkgate_store::Store) -> Vec<(String, u64)> {
    let records = store.audit_records(AuditQuery::default()).await.unwrap();
    let mut prev = GENESIS_HASH.to_owned();
    let mut seen = Vec::new();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        assert_eq!(r.prev_hash, prev);
        assert_eq!(r.hash, record_hash(r));
        if r.kind == AuditKind::Outcome {
            let intent = &records[r.intent_seq.unwrap() as usize - 1];
            assert!(intent.seq < r.seq);
            assert_eq!(intent.kind, AuditKind::Intent);
            assert_eq!(intent.replica, r.replica);
            assert_eq!(intent.local_seq, Some(r.local_seq.unwrap() - 1));
        }
        prev = r.hash.clone();
        seen.push((r.replica.clone().unwrap(), r.local_seq.unwrap()));
    }
    let head = store.audit_head().await.unwrap();
    assert_eq!(
        head.map(|h| (h.seq, h.hash)),
        records.last().map(|r| (r.seq, r.hash.clone()))
    );
    seen
}

async fn replicas_chain_batches_at_once_into_one_chain(place: Place) {
    // Four handles (four processes), each chaining 20 batches of 5 calls as fast as it can.
    let mut tasks = Vec::new();
    for replica in ["r1", "r2", "r3", "r4"] {
        let store = place.open().await;
        tasks.push(tokio::spawn(async move {
            for batch in 0..20 {
                store
                    .chain_audit(replica, calls(batch * 5 + 1, batch * 5 + 5))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let store = place.open().await;
    let seen = check_chain(store.as_ref()).await;
    assert_eq!(seen.len(), 4 * 200);
    let unique: BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a record was chained twice");
    for replica in ["r1", "r2", "r3", "r4"] {
        assert_eq!(store.audit_local_head(replica).await.unwrap(), 200);
    }
    assert_eq!(store.audit_local_head("r5").await.unwrap(), 0);
}

async fn a_replayed_journal_is_chained_once(place: Place) {
    let store = place.open().await;
    store.chain_audit("r1", calls(1, 3)).await.unwrap();
    store.chain_audit("r2", calls(1, 1)).await.unwrap();
    // r1 restarts and replays its whole journal, which had more in it: only what is new is
    // chained, and its outcomes still find their intents (chained in the earlier batch).
    let mut replay = calls(1, 5);
    replay.remove(6); // intent 4 (local 7) was chained earlier...
    store
        .chain_audit("r1", calls(4, 4)[..1].to_vec())
        .await
        .unwrap();
    store.chain_audit("r1", replay).await.unwrap(); // ...its outcome comes in the replay.
    let seen = check_chain(store.as_ref()).await;
    assert_eq!(seen.len(), 12);
    assert_eq!(store.audit_local_head("r1").await.unwrap(), 10);
    // Nothing new: nothing changes.
    store.chain_audit("r1", calls(1, 5)).await.unwrap();
    assert_eq!(check_chain(store.as_ref()).await, seen);
}

async fn a_forwarded_entry_taken_by_two_replicas_is_chained_once(place: Place) {
    let store = place.open().await;
    let id = store.forward_audit(100, r#"{"principal":"ada"}"#).unwrap();
    let event = |local| JournaledAudit {
        adopted: Some(id),
        ..journaled(local, AuditKind::Event, None)
    };
    let other = place.open().await;
    let (a, b) = tokio::join!(
        store.chain_audit("r1", vec![event(1)]),
        other.chain_audit("r2", vec![event(1)]),
    );
    a.unwrap();
    b.unwrap();
    let seen = check_chain(store.as_ref()).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(store.forwarded_audit(10).await.unwrap().is_empty());
}

on_both!(
    replicas_chain_batches_at_once_into_one_chain,
    a_replayed_journal_is_chained_once,
    a_forwarded_entry_taken_by_two_replicas_is_chained_once,
    records_append_in_order_and_move_the_head,
    replaying_a_batch_changes_nothing,
    queries_filter_and_take_the_newest_in_order,
    forwarded_entries_wait_in_order_until_a_batch_adopts_them,
);
