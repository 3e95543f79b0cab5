//! Signed checkpoints of the audit chain ([`larkgate_platform::audit::checkpoint`]) on a real
//! SQLite store and journal: made every N records, chained as records of their own, and each
//! way around them caught by `verify_trusting`: an edited record, a chain rewritten from the
//! middle with valid hashes, a checkpoint edited, and a rewrite re-signed with a key the
//! verifier does not hold.

use std::sync::Arc;
use std::time::Duration;

use larkgate_platform::audit::checkpoint::{Checkpoint, Checkpoints, Signer};
use larkgate_platform::audit::{
    AuditCode, AuditEntry, AuditLog, AuditOptions, AuditSink, EventKind, record_hash,
    verify_trusting,
};
use larkgate_store::{AuditKind, AuditQuery, AuditRecord, AuditStore, SqliteStore};

/// A log on `dir` that checkpoints every `every` records (and never by time), flushing only
/// when told.
async fn open(dir: &std::path::Path, every: u64) -> (Arc<SqliteStore>, Arc<AuditLog>, String) {
    let store = Arc::new(SqliteStore::open(dir).unwrap());
    let options = AuditOptions {
        flush_interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let log = AuditLog::open(dir, store.clone(), options).await.unwrap();
    let (signer, _) = Signer::generate().unwrap();
    let key = signer.public_key().to_owned();
    log.policy_in_force(&"ab".repeat(32));
    log.set_checkpoints(Checkpoints {
        signer,
        every_records: every,
        every: Duration::from_secs(3600),
    });
    (store, log, key)
}

/// `n` events, flushed one at a time, and a last flush that chains the checkpoint due.
async fn fill(log: &AuditLog, n: usize) {
    for i in 0..n {
        log.record_event(AuditEntry {
            kind: Some(AuditKind::Event),
            principal: "ada".into(),
            code: Some(AuditCode::Event(EventKind::Principal)),
            detail: Some(format!("event {i}")),
            ..AuditEntry::default()
        })
        .unwrap();
        log.flush().await.unwrap();
    }
    log.flush().await.unwrap();
}

async fn records(store: &SqliteStore) -> Vec<AuditRecord> {
    store.audit_records(AuditQuery::default()).await.unwrap()
}

fn checkpoints(records: &[AuditRecord]) -> Vec<(u64, Checkpoint)> {
    records
        .iter()
        .filter(|r| r.code.as_deref() == Some("checkpoint"))
        .map(|r| {
            (
                r.seq,
                serde_json::from_str(r.detail.as_deref().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// Writes `records` back over the chain from the first one whose detail `change` changes,
/// with every hash after it recomputed, and the head moved to match: what whoever holds the
/// database can do.
fn rewrite(
    dir: &std::path::Path,
    mut records: Vec<AuditRecord>,
    change: impl Fn(&mut AuditRecord),
) {
    let raw = rusqlite::Connection::open(dir.join(larkgate_store::DATABASE_FILE)).unwrap();
    let mut prev = larkgate_platform::audit::GENESIS_HASH.to_owned();
    for record in &mut records {
        change(record);
        record.prev_hash = prev.clone();
        record.hash = record_hash(record);
        raw.execute(
            "UPDATE audit SET detail = ?1, prev_hash = ?2, hash = ?3 WHERE seq = ?4",
            rusqlite::params![
                record.detail,
                record.prev_hash,
                record.hash,
                record.seq as i64
            ],
        )
        .unwrap();
        prev = record.hash.clone();
    }
    let last = records.last().unwrap();
    raw.execute(
        "UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1",
        rusqlite::params![last.seq as i64, last.hash],
    )
    .unwrap();
}

#[tokio::test]
async fn checkpoints_are_signed_every_n_records_and_verify_under_the_key_held() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 5).await;
    assert_eq!(log.signing_key().as_deref(), Some(key.as_str()));
    fill(&log, 12).await;
    let all = records(&store).await;
    let made = checkpoints(&all);
    assert_eq!(
        made.len(),
        2,
        "after records 5 and 11 (the first checkpoint not counted)"
    );
    for (at, checkpoint) in &made {
        checkpoint.verify().unwrap();
        assert_eq!(checkpoint.key, key);
        assert_eq!(checkpoint.policy, "ab".repeat(32));
        assert!(checkpoint.seq < *at);
        let signed = &all[checkpoint.seq as usize - 1];
        assert_eq!(
            signed.hash, checkpoint.hash,
            "it signs the head it followed"
        );
        let record = &all[*at as usize - 1];
        assert_eq!(record.principal, "larkgate");
        assert_eq!(record.replica.as_deref(), Some(checkpoint.replica.as_str()));
    }
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&key))
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.checkpoints, 2);
    assert_eq!(report.signing_keys, [key]);
    // Idle: no records, no checkpoint of a checkpoint.
    log.flush().await.unwrap();
    assert_eq!(checkpoints(&records(&store).await).len(), 2);
}

/// What a serving larkgate does as it stops: the records it chained since its last
/// checkpoint are signed then, though fewer than N came; with none since, nothing is signed.
#[tokio::test]
async fn flush_and_sign_signs_what_was_chained_since_the_last_checkpoint_and_only_that() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 1_000).await;
    fill(&log, 3).await;
    assert!(checkpoints(&records(&store).await).is_empty());
    log.flush_and_sign().await.unwrap();
    let all = records(&store).await;
    let made = checkpoints(&all);
    assert_eq!(made.len(), 1);
    let (at, checkpoint) = &made[0];
    assert_eq!(
        (*at, checkpoint.seq),
        (all.len() as u64, all.len() as u64 - 1)
    );
    assert_eq!(checkpoint.hash, all[all.len() - 2].hash);
    assert_eq!(checkpoint.key, key);
    // Nothing chained since: nothing to sign, however often it is asked.
    log.flush_and_sign().await.unwrap();
    log.flush_and_sign().await.unwrap();
    assert_eq!(records(&store).await.len(), all.len());
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&key))
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
}

#[tokio::test]
async fn a_chain_rewritten_from_the_middle_with_valid_hashes_is_caught_by_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 5).await;
    fill(&log, 12).await;
    let all = records(&store).await;
    rewrite(dir.path(), all.clone(), |record| {
        if record.seq == 3 {
            record.detail = Some("nothing happened".into());
        }
    });
    let report = verify_trusting(store.as_ref(), None, &[]).await.unwrap();
    assert!(
        report.first_broken.is_none(),
        "the hashes are valid: {report:?}"
    );
    let (at, why) = report.bad_checkpoint.expect("caught");
    assert_eq!(
        at,
        checkpoints(&all)[0].0,
        "by the first checkpoint after it"
    );
    assert!(why.contains("rewritten at or before record 5"), "{why}");

    // Re-signed with the attacker's own key: consistent on its own, refused against the key
    // held.
    let (attacker, _) = Signer::generate().unwrap();
    let rewritten = records(&store).await;
    let mut signed_hashes: std::collections::BTreeMap<u64, String> = Default::default();
    let mut prev = larkgate_platform::audit::GENESIS_HASH.to_owned();
    let mut forged = rewritten.clone();
    for record in &mut forged {
        if record.code.as_deref() == Some("checkpoint") {
            let mut checkpoint: Checkpoint =
                serde_json::from_str(record.detail.as_deref().unwrap()).unwrap();
            checkpoint.hash = signed_hashes[&checkpoint.seq].clone();
            record.detail = Some(serde_json::to_string(&attacker.sign(checkpoint)).unwrap());
        }
        record.prev_hash = prev.clone();
        record.hash = record_hash(record);
        signed_hashes.insert(record.seq, record.hash.clone());
        prev = record.hash.clone();
    }
    rewrite(dir.path(), forged, |_| {});
    let report = verify_trusting(store.as_ref(), None, &[]).await.unwrap();
    assert!(
        report.intact(),
        "without a key held, a re-signed chain is consistent"
    );
    assert_eq!(report.signing_keys, [attacker.public_key().to_owned()]);
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&key))
        .await
        .unwrap();
    let (_, why) = report.bad_checkpoint.expect("an unknown key is caught");
    assert!(
        why.contains(attacker.public_key()) && why.contains("a key you did not give"),
        "{why}"
    );
}

#[tokio::test]
async fn an_edited_checkpoint_or_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 4).await;
    fill(&log, 6).await;
    let all = records(&store).await;
    let (at, _) = checkpoints(&all)[0].clone();
    // The checkpoint's signed position moved, the chain's hashes made valid again.
    rewrite(dir.path(), all.clone(), |record| {
        if record.seq == at {
            let mut checkpoint: Checkpoint =
                serde_json::from_str(record.detail.as_deref().unwrap()).unwrap();
            checkpoint.seq -= 1;
            record.detail = Some(serde_json::to_string(&checkpoint).unwrap());
        }
    });
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&key))
        .await
        .unwrap();
    let (seq, why) = report.bad_checkpoint.expect("caught");
    assert_eq!(seq, at);
    assert!(why.contains("does not verify"), "{why}");
    // A checkpoint that does not read.
    rewrite(dir.path(), all.clone(), |record| {
        if record.seq == at {
            record.detail = Some("{}".into());
        }
    });
    let report = verify_trusting(store.as_ref(), None, &[]).await.unwrap();
    assert!(
        report
            .bad_checkpoint
            .unwrap()
            .1
            .contains("does not read as a checkpoint")
    );
    // A byte changed in a record, hashes left alone: the chain itself breaks.
    let raw = rusqlite::Connection::open(dir.path().join(larkgate_store::DATABASE_FILE)).unwrap();
    raw.execute("UPDATE audit SET principal = 'eve' WHERE seq = 2", [])
        .unwrap();
    let report = verify_trusting(store.as_ref(), None, &[key]).await.unwrap();
    assert_eq!(report.first_broken.unwrap().0, 2);
}

/// Every checkpoint reaches a file anchor; the chain verifies against it; a database rolled
/// back to an earlier copy (a valid, signed, shorter chain) is caught, and so is one that was
/// rolled back and grew again (another record where an anchored one was).
#[tokio::test]
async fn an_anchor_file_catches_a_database_rolled_back_to_an_earlier_copy() {
    use larkgate_platform::audit::anchor::{AnchorSink, Anchors, FileAnchor};
    use larkgate_platform::audit::verify_anchored;
    let dir = tempfile::tempdir().unwrap();
    let anchor_file = dir.path().join("anchors.jsonl");
    let data = dir.path().join("data");
    let (store, log, key) = open(&data, 3).await;
    let sink: Arc<dyn AnchorSink> = Arc::new(FileAnchor::new(anchor_file.clone()));
    let anchors = Anchors::start(vec![sink], false);
    log.set_anchors(anchors.clone());
    fill(&log, 4).await;
    assert!(anchors.settle(Duration::from_secs(30)).await);
    // The operator's earlier backup: a copy of the database now.
    let backup = dir.path().join("backup.db");
    std::fs::copy(data.join(larkgate_store::DATABASE_FILE), &backup).unwrap();
    fill(&log, 6).await;
    assert!(anchors.settle(Duration::from_secs(30)).await);
    let read = |text: String| -> Vec<Checkpoint> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let anchored = read(std::fs::read_to_string(&anchor_file).unwrap());
    let chained: Vec<Checkpoint> = checkpoints(&records(&store).await)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    assert_eq!(anchored, chained, "each checkpoint anchored, in order");
    assert!(anchored.len() >= 3);
    let report = verify_anchored(store.as_ref(), None, std::slice::from_ref(&key), &anchored)
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.anchored, anchored.len() as u64);
    drop(log);
    drop(store);

    // Rolled back: the earlier copy put in place of the database.
    std::fs::copy(&backup, data.join(larkgate_store::DATABASE_FILE)).unwrap();
    let rolled_back = SqliteStore::open(&data).unwrap();
    let plain = verify_trusting(&rolled_back, None, std::slice::from_ref(&key))
        .await
        .unwrap();
    assert!(
        plain.intact(),
        "without anchors the copy verifies: {plain:?}"
    );
    let report = verify_anchored(&rolled_back, None, std::slice::from_ref(&key), &anchored)
        .await
        .unwrap();
    let (_, why) = report.bad_anchor.clone().expect("the rollback is caught");
    assert!(why.contains("shorter"), "{why}");
    assert!(!report.intact());
    drop(rolled_back);

    // Rolled back, then grown again past the anchored positions.
    let (store, log, _) = open(&data, 1000).await;
    fill(&log, 12).await;
    let report = verify_anchored(store.as_ref(), None, &[], &anchored)
        .await
        .unwrap();
    let (_, why) = report.bad_anchor.expect("the other records are caught");
    assert!(why.contains("differs"), "{why}");
}

/// A rotation: the old key announces the new one in a checkpoint, later checkpoints are the
/// new key's, and a verifier holding only the old key accepts them; one holding only the new
/// key does not accept the old key's checkpoints.
#[tokio::test]
async fn a_rotated_key_is_announced_by_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, old) = open(dir.path(), 3).await;
    fill(&log, 4).await;
    let (next, _) = Signer::generate().unwrap();
    let new = next.public_key().to_owned();
    let announced = log.rotate_key(next).await.unwrap();
    assert_eq!(announced.key, old);
    assert_eq!(announced.next_key.as_deref(), Some(new.as_str()));
    assert_eq!(log.signing_key().as_deref(), Some(new.as_str()));
    fill(&log, 4).await;
    let made = checkpoints(&records(&store).await);
    assert_eq!(made.last().unwrap().1.key, new, "signed by the new key now");
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&old))
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.signing_keys, [old.clone(), new.clone()]);
    let report = verify_trusting(store.as_ref(), None, std::slice::from_ref(&new))
        .await
        .unwrap();
    let (_, why) = report
        .bad_checkpoint
        .expect("the old key is not the new one's");
    assert!(why.contains(&old), "{why}");
}

/// A bundle checks on its own with the key held; a byte changed, a record deleted, a range
/// rewritten with valid hashes, a bundle spliced from two ranges, a checkpoint re-signed by
/// another key and a bundle that does not join the one before it are each caught.
#[tokio::test]
async fn bundles_verify_alone_and_every_tampering_is_caught() {
    use larkgate_platform::audit::bundle::{Bound, export, verify_bundle};
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 4).await;
    fill(&log, 20).await;
    let keys = std::slice::from_ref(&key);
    let mut first = Vec::new();
    let exported = export(
        store.as_ref(),
        Bound::Seq(1),
        Some(Bound::Seq(6)),
        &mut first,
    )
    .await
    .unwrap();
    assert!(
        exported.to >= 6,
        "moved on to a signed position: {exported:?}"
    );
    let first = String::from_utf8(first).unwrap();
    let one = verify_bundle(&first, keys, None).unwrap();
    assert_eq!((one.from, one.to), (1, exported.to));
    let mut second = Vec::new();
    let next = export(store.as_ref(), Bound::Seq(one.to + 1), None, &mut second)
        .await
        .unwrap();
    let second = String::from_utf8(second).unwrap();
    let two = verify_bundle(&second, keys, Some(&one)).unwrap();
    assert_eq!(two.to, next.to);
    assert!(
        verify_bundle(&first, &[], None)
            .unwrap_err()
            .contains("--key")
    );

    let lines: Vec<&str> = first.lines().collect();
    let edit = |f: &dyn Fn(&mut Vec<String>)| {
        let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        f(&mut l);
        l.join("\n") + "\n"
    };
    let (other, _) = Signer::generate().unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a byte changed",
            edit(&|l| l[2] = l[2].replacen("event 1", "event 9", 1)),
            "edited",
        ),
        (
            "a record deleted",
            edit(&|l| {
                l.remove(3);
            }),
            "missing",
        ),
        (
            "rewritten with valid hashes",
            edit(&|l| {
                let mut prev = larkgate_platform::audit::GENESIS_HASH.to_owned();
                for line in l.iter_mut().skip(1) {
                    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) else {
                        continue;
                    };
                    let Some(r) = v.get_mut("record") else {
                        continue;
                    };
                    let mut record: AuditRecord = serde_json::from_value(r.clone()).unwrap();
                    if record.seq == 2 {
                        record.detail = Some("rewritten".into());
                    }
                    record.prev_hash = prev.clone();
                    record.hash = record_hash(&record);
                    prev = record.hash.clone();
                    *r = serde_json::to_value(&record).unwrap();
                    *line = v.to_string();
                }
            }),
            "",
        ),
        (
            "spliced from two ranges",
            {
                let theirs: Vec<&str> = second.lines().collect();
                let mut l: Vec<String> = lines[..3].iter().map(|s| s.to_string()).collect();
                l.extend(theirs[1..].iter().map(|s| s.to_string()));
                l.join("\n") + "\n"
            },
            "spliced",
        ),
        (
            "the last checkpoint re-signed by another key",
            edit(&|l| {
                let at = l.len() - 2;
                let v: serde_json::Value = serde_json::from_str(&l[at]).unwrap();
                let c: Checkpoint = serde_json::from_value(v["checkpoint"].clone()).unwrap();
                let c = other.sign(c);
                l[at] = serde_json::json!({ "checkpoint": c }).to_string();
            }),
            "a key you did not give",
        ),
    ];
    for (what, text, says) in cases {
        let refused = verify_bundle(&text, keys, None).unwrap_err();
        assert!(refused.contains(says), "{what}: {refused}");
    }
    // The second bundle does not join a bundle of another range before it.
    let refused = verify_bundle(&second, keys, Some(&two)).unwrap_err();
    assert!(refused.contains("do not join"), "{refused}");
}

/// Replicas sign as they chain, so a checkpoint may sign an earlier position than the one
/// chained before it (another replica read the head first). An export ends at the furthest
/// signed record all the same, and verifies.
#[tokio::test]
async fn a_bundle_ends_at_the_furthest_signed_record_when_a_later_checkpoint_signs_an_earlier_one()
{
    use larkgate_platform::audit::bundle::{Bound, export, verify_bundle};
    let dir = tempfile::tempdir().unwrap();
    let (store, log, key) = open(dir.path(), 4).await;
    fill(&log, 10).await;
    let all = records(&store).await;
    let furthest = checkpoints(&all).last().unwrap().1.seq;
    // Another replica's checkpoint, chained last, of record 2.
    let (other, _) = Signer::generate().unwrap();
    let late = other.sign(Checkpoint {
        seq: 2,
        hash: all[1].hash.clone(),
        at_ms: 1,
        replica: "other".into(),
        policy: "ab".repeat(32),
        key: String::new(),
        next_key: None,
        signature: String::new(),
    });
    let record = AuditRecord {
        seq: 0,
        at_ms: 1,
        kind: AuditKind::Event,
        principal: "larkgate".into(),
        run_id: None,
        run_kind: None,
        session: None,
        tool: None,
        args_hash: None,
        args: None,
        code: Some("checkpoint".into()),
        intent_seq: None,
        duration_us: None,
        detail: Some(serde_json::to_string(&late).unwrap()),
        replica: Some("other".into()),
        local_seq: Some(1),
        prev_hash: String::new(),
        hash: String::new(),
    };
    let entry = larkgate_store::JournaledAudit {
        record,
        adopted: None,
    };
    store.chain_audit("other", vec![entry]).await.unwrap();

    let mut bundle = Vec::new();
    let exported = export(store.as_ref(), Bound::Seq(1), None, &mut bundle)
        .await
        .unwrap();
    assert_eq!(exported.to, furthest);
    let keys = [key, other.public_key().to_owned()];
    let report = verify_bundle(&String::from_utf8(bundle).unwrap(), &keys, None).unwrap();
    assert_eq!(report.to, furthest);
}
